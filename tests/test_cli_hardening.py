"""Bad inputs end as one line and exit 2 (Ctrl-C: 130), checked before any work; never a traceback,
never a silent nan; one bad calibration run does not hide the others from `chipcal report`."""

from __future__ import annotations

import errno
import json

import pytest
from recorded import report_document

from chipcal.calibrate import store
from chipcal.cli import common
from chipcal.cli import estimate_tdp as estimate_tdp_cli
from chipcal.cli import predict as predict_cli
from chipcal.cli import report as report_cli


def one_line_exit_2(rc: int, out: str, err: str) -> None:
    assert rc == 2, (rc, err)
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert out == ""                       # refused before any table was printed


@pytest.mark.parametrize("argv, says", [
    (["--plot", "/nonexistent/x.png"], "folder /nonexistent does not exist"),
    (["--frequency", "1e308"], "up to 100"),
    (["--frequency", "inf"], "up to 100"),
    (["--alus", "1" + "0" * 30], "positive integer up to"),
    (["--memory-bandwidth", "1e300", "--memory-type", "hbm3"], "positive number up to"),
])
def test_estimate_tdp_refuses_before_printing(cli, argv, says):
    rc, out, err = cli(estimate_tdp_cli.main, argv)
    one_line_exit_2(rc, out, err)
    assert says in err


@pytest.mark.parametrize("argv, says", [
    (["--csv", "{tmp}"], "is a directory"),
    (["--csv", "{tmp}/missing/rows.csv"], "does not exist"),
    (["--plot", "{tmp}/missing/r.png"], "does not exist"),
    (["--batch", "100000000"], "up to 1,048,576"),
    (["--batch", "1e20"], "not an integer"),
    (["--target-utilization", "50"], "up to 1"),             # a fraction of the units
])
def test_predict_refuses_bad_outputs_and_batches_before_work(cli, tmp_path, argv, says):
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    rc, out, err = cli(lambda a: predict_cli.main(a, prog="chipcal predict"),
                       ["--model", "resnet18", "--hardware", "t4", *argv])
    one_line_exit_2(rc, out, err)
    assert says in err


@pytest.mark.parametrize("raised, rc_wanted, says", [
    (KeyboardInterrupt(), 130, "interrupted"),
    (OSError(errno.ENOSPC, "No space left on device", "/data/out.csv"), 2, "No space left on device: /data/out.csv"),
    (PermissionError(errno.EACCES, "Permission denied"), 2, "Permission denied"),
])
def test_run_turns_interrupts_and_os_errors_into_one_line(capsys, raised, rc_wanted, says):
    def body(args):
        raise raised

    rc = common.run(body, common.Parser(prog="chipcal x"), [])
    err = capsys.readouterr().err
    assert rc == rc_wanted and err == f"chipcal x: {'error: ' if rc == 2 else ''}{says}\n"


@pytest.mark.parametrize("changes, field", [
    ({"peaks": 5}, "peaks"),
    ({"peaks": [{"precision": "fp32", "measured_flop_per_s": "fast"}]}, "peaks.0.measured_flop_per_s"),
    ({"bandwidth": {"measured_bytes_per_s": [1]}}, "bandwidth.measured_bytes_per_s"),
    ({"flags": [1]}, "flags.0.code"),
    ({"chip": "cpu"}, "chip.name"),
    ({"validation": {**report_document("x")["validation"], "n": True}}, "validation.n"),
])
def test_one_malformed_run_does_not_hide_the_others(cli, tmp_path, changes, field):
    store.write_run(tmp_path, "good", "T", {"calibration.json": store.json_writer(report_document("good"))})
    store.write_run(tmp_path, "bad", "T", {"calibration.json": store.json_writer(report_document("bad", **changes))})
    for argv in ([str(tmp_path)], [str(tmp_path), "--json"]):
        rc, out, err = cli(report_cli.main, argv)
        assert rc == 0 and "Traceback" not in err
        assert err.count("warning: skipped") == 1 and field in err and "bad" in err
    assert [r["machine"] for r in json.loads(out)] == ["good"]


def test_report_shows_a_null_bandwidth_as_a_dash(cli, tmp_path):
    store.write_run(tmp_path, "m", "T", {"calibration.json": store.json_writer(
        report_document("m", bandwidth={**report_document("m")["bandwidth"], "measured_bytes_per_s": float("nan")}))})
    rc, out, err = cli(report_cli.main, [str(tmp_path)])
    assert rc == 0 and err == "" and "nan" not in out


@pytest.mark.parametrize("argv, says", [
    (["--batch", "1000000000000000"], "up to 1,048,576"),        # once: "Storage size calculation overflowed"
    (["--input-size", "100000000"], "up to 65,536"),
])
def test_workload_bounds_batch_and_input_size(cli, argv, says):
    from chipcal.cli import workload as workload_cli

    rc, out, err = cli(workload_cli.main, ["--model", "resnet18", *argv])
    one_line_exit_2(rc, out, err)
    assert says in err
