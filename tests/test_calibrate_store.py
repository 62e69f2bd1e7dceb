"""Atomic calibration directories: crash leaves nothing, reruns never overwrite."""

from __future__ import annotations

import json

import pytest

from chipcal.calibrate import store


def _doc(n: int) -> dict:
    return {"schema": store.SCHEMA, "n": n}


def test_write_and_load(tmp_path):
    run = store.write_run(tmp_path, "box", "20260101T000000Z",
                          {"calibration.json": store.json_writer(_doc(1)), "report.md": store.text_writer("# r\n")})
    assert run == tmp_path / "box" / "20260101T000000Z"
    assert store.load(run)["n"] == 1
    assert (run / "report.md").read_text() == "# r\n"
    assert store.find_runs(tmp_path) == [run]


def test_rerun_never_overwrites(tmp_path):
    a = store.write_run(tmp_path, "box", "T", {"calibration.json": store.json_writer(_doc(1))})
    b = store.write_run(tmp_path, "box", "T", {"calibration.json": store.json_writer(_doc(2))})
    assert a != b and b.name == "T-2"
    assert store.load(a)["n"] == 1 and store.load(b)["n"] == 2


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


def test_nan_is_refused_not_written(tmp_path):
    with pytest.raises(ValueError):
        store.write_run(tmp_path, "box", "T", {"calibration.json": store.json_writer({"x": float("nan")})})
    assert store.find_runs(tmp_path) == []
