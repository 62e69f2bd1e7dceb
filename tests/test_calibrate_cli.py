"""`chipcal calibrate` / `chipcal report`: bad input exits 2 in one line; report lists runs."""

from __future__ import annotations

import json

import pytest
from recorded import report_document

from chipcal.calibrate import store
from chipcal.cli import calibrate as calibrate_cli
from chipcal.cli import report as report_cli


@pytest.mark.parametrize("argv,needle", [
    (["--device", "tpu"], "valid: cpu, cuda"),
    (["--device", "cuda"], "no CUDA device"),
    (["--models", "resnet51"], "did you mean resnet50"),
    (["--batch", "0"], "positive integer"),
    (["--batch", "x"], "not an integer"),
])
def test_calibrate_bad_input(cli, argv, needle):
    import torch

    if argv == ["--device", "cuda"] and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    rc, _, err = cli(calibrate_cli.main, argv)
    assert rc == 2 and needle in err and err.count("\n") == 1 and "Traceback" not in err


def test_report_lists_latest_run_per_machine(cli, tmp_path):
    for slug, created, median in (("a", "2026-01-01T00:00:00Z", 0.5), ("a", "2026-02-01T00:00:00Z", 0.1),
                                  ("b", "2026-01-05T00:00:00Z", 0.2)):
        store.write_run(tmp_path, slug, created.replace(":", ""), {"calibration.json": store.json_writer(report_document(slug, created, median))})
    rc, out, _ = cli(report_cli.main, [str(tmp_path), "--json"])
    rows = json.loads(out)
    assert rc == 0 and [(r["machine"], r["median_abs_error"]) for r in rows] == [("a", 0.1), ("b", 0.2)]
    assert rows[0]["peak_flop_per_s_fp32"] == 2e11 and rows[0]["flags"] == "measured_below_physics_peak"
    rc, out, _ = cli(report_cli.main, [str(tmp_path), "--all", "--json"])
    assert len(json.loads(out)) == 3
    rc, out, _ = cli(report_cli.main, [str(tmp_path)])
    assert rc == 0 and "fp32 200 GFLOP/s (60% physics)" in out


def test_report_skips_corrupt_runs_and_rejects_missing_dir(cli, tmp_path):
    bad = tmp_path / "m" / "T"
    bad.mkdir(parents=True)
    (bad / "calibration.json").write_text("{not json")
    rc, out, err = cli(report_cli.main, [str(tmp_path)])
    assert rc == 0 and "skipped" in err
    rc, _, err = cli(report_cli.main, [str(tmp_path / "nope")])
    assert rc == 2 and "not a directory" in err


def test_calibrate_bad_out_fails_at_start_up(cli, tmp_path, monkeypatch):
    from chipcal.calibrate import run as run_module

    def never(*a, **k):
        raise AssertionError("measured although --out is unusable")

    monkeypatch.setattr(run_module, "run_calibration", never)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    rc, _, err = cli(calibrate_cli.main, ["--out", str(blocker / "results")])
    assert rc == 2 and "cannot write results" in err and err.count("\n") == 1


def test_resume_from_a_directory_that_is_not_a_journal(cli, tmp_path):
    (tmp_path / "junk").mkdir()
    (tmp_path / "junk" / "config.json").write_text('{"step": "config", "data": {"schema": "other"}}')
    for target in (tmp_path / "missing", tmp_path / "junk"):
        rc, out, err = cli(calibrate_cli.main, ["--out", str(tmp_path / "out"), "--resume", str(target)])
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "not a calibration journal" in err


def test_calibrate_compares_its_models_with_the_previous_run_of_the_machine(cli, tmp_path, monkeypatch):
    """The run's held-out model timings against the last run stored for the machine in --out
    (calibrate.rerun): the summary line, the record's field, and the report's sentence."""
    import dataclasses

    from recorded import MACHINES

    from chipcal.calibrate import run as run_module
    from chipcal.calibrate.document import CalibrationDocument

    recorded = CalibrationDocument.from_dict(
        json.loads((MACHINES / "amd-epyc-zen5-2vcpu" / "calibration-quick-3.json").read_text()))
    earlier = dataclasses.replace(recorded, created_utc="2026-11-25T09:00:00Z")
    store.write_run(tmp_path, earlier.machine_slug, "20261125T090000Z",
                    {store.CALIBRATION_FILE: store.json_writer(earlier.to_dict())})
    monkeypatch.setattr(run_module, "run_calibration", lambda *a, **k: recorded)     # the same timings again
    rc, out, _ = cli(calibrate_cli.main, ["--quick", "--out", str(tmp_path)])
    assert rc == 0 and "since the previous run here (2026-11-25T09:00:00Z): the same 18 cases moved by median 0.0%" in out
    rc, out, _ = cli(calibrate_cli.main, ["--quick", "--out", str(tmp_path), "--json"])
    assert rc == 0 and json.loads(out)[0]["rerun_median_abs_change"] == 0.0
