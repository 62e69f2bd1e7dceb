"""Atomic calibration directories: crash leaves nothing, reruns never overwrite."""

from __future__ import annotations

import errno
import json
import tempfile
import threading

import pytest

from chipcal.calibrate import store
from chipcal.calibrate.fits import FitResult
from chipcal.calibrate.sustain import EnergyPoint, fit_energy
from chipcal.model.errors import ResultsWriteError


def _doc(n: int) -> dict:
    return {"schema": store.SCHEMA, "n": n}


def _written(run) -> dict:
    """The JSON a run directory's calibration.json holds (these tests write toy documents)."""
    return json.loads((run / store.CALIBRATION_FILE).read_text())


def test_write_and_load(tmp_path):
    run = store.write_run(tmp_path, "box", "20260101T000000Z",
                          {"calibration.json": store.json_writer(_doc(1)), "report.md": store.text_writer("# r\n")})
    assert run == tmp_path / "box" / "20260101T000000Z"
    assert _written(run)["n"] == 1
    assert (run / "report.md").read_text() == "# r\n"
    assert store.find_runs(tmp_path) == [run]


def test_rerun_never_overwrites(tmp_path):
    a = store.write_run(tmp_path, "box", "T", {"calibration.json": store.json_writer(_doc(1))})
    b = store.write_run(tmp_path, "box", "T", {"calibration.json": store.json_writer(_doc(2))})
    assert a != b and b.name == "T-2"
    assert _written(a)["n"] == 1 and _written(b)["n"] == 2


def test_simulated_crash_leaves_no_half_written_report(tmp_path):
    def crash(path):
        path.write_text("half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        store.write_run(tmp_path, "box", "T", {"calibration.json": store.json_writer(_doc(1)), "report.md": crash})
    assert list((tmp_path / "box").iterdir()) == []     # neither the run nor its staging dir
    assert store.find_runs(tmp_path) == []


def test_staging_dirs_are_not_runs(tmp_path):
    hidden = tmp_path / "box" / ".staging-T-1"
    hidden.mkdir(parents=True)
    (hidden / "calibration.json").write_text(json.dumps(_doc(0)))
    assert store.find_runs(tmp_path) == []


def test_load_rejects_foreign_json(tmp_path):
    (tmp_path / "calibration.json").write_text('{"schema": "other"}')
    with pytest.raises(ValueError, match="schema"):
        store.load(tmp_path)
    with pytest.raises(ValueError):
        store.load(tmp_path / "missing")


def test_constant_power_readings_are_written_with_null_r2_and_a_reason(tmp_path):
    """A frozen power counter (every reading 42 W) has no variance: R² is undefined, not an error."""
    points = [EnergyPoint("idle", None, 42.0, 0.0, 0.0, None, "hold")] + [
        EnergyPoint("gemm", "fp32", 42.0, f, 1e8, None, "hold") for f in (1e9, 2e9, 3e9, 4e9)]
    fit = fit_energy(points, None).fit
    doc = {**_doc(1), "fits": {"power": fit.to_dict()}, "other": [1.0, float("inf")]}
    run = store.write_run(tmp_path, "box", "T", {"calibration.json": store.json_writer(doc)})
    text = (run / "calibration.json").read_text()
    assert "NaN" not in text and "Infinity" not in text
    loaded = _written(run)
    assert loaded["fits"]["power"]["r2"] is None and "constant" in loaded["fits"]["power"]["r2_note"]
    assert loaded["other"] == [1.0, None]
    assert loaded["non_finite_values"]["paths"] == ["other[1] (inf)"]
    assert FitResult.from_dict(loaded["fits"]["power"]).parameters["static_w"] == pytest.approx(42.0)


def test_two_runs_finishing_in_the_same_second_get_two_directories(tmp_path):
    """Both runs pick their directory before either renames into place (a barrier forces it)."""
    barrier = threading.Barrier(2, timeout=10)
    results, errors = [], []

    def writer(n):
        def write(path):
            barrier.wait()
            path.write_text(json.dumps(_doc(n)))
        return write

    def one(n):
        try:
            results.append(store.write_run(tmp_path, "box", "T", {"calibration.json": writer(n)}))
        except Exception as exc:  # noqa: BLE001 - collected and asserted below
            errors.append(exc)

    threads = [threading.Thread(target=one, args=(n,)) for n in (1, 2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert sorted(p.name for p in results) == ["T", "T-2"]
    assert sorted(_written(p)["n"] for p in results) == [1, 2]


def test_failed_write_saves_the_document_to_a_named_fallback(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()

    def disk_full(path):
        raise OSError(errno.ENOSPC, "No space left on device")

    with pytest.raises(ResultsWriteError, match="No space left on device") as info:
        store.write_run(tmp_path / "res", "box", "T", {"calibration.json": store.json_writer(_doc(7)),
                                                       "report.md": disk_full}, fallback=_doc(7))
    saved = [p for p in (tmp_path / "tmp").iterdir() if p.name.startswith("chipcal-calibration-")]
    assert len(saved) == 1 and str(saved[0]) in str(info.value)
    assert json.loads(saved[0].read_text())["n"] == 7
    assert list((tmp_path / "res" / "box").iterdir()) == []     # claim released, staging removed


def test_unwritable_results_root_is_found_before_measuring(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(ResultsWriteError, match="cannot write results"):
        store.check_writable(blocker / "results")
    store.check_writable(tmp_path / "new" / "results")
    assert list((tmp_path / "new" / "results").iterdir()) == []


@pytest.mark.parametrize("text", ["[1, 2]", "null", '"calibration"', "\udcff"])
def test_load_rejects_non_object_json(tmp_path, text):
    (tmp_path / "calibration.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(ValueError, match="calibration"):
        store.load(tmp_path)
