"""The held-out models against the previous run on the same machine (calibrate.rerun)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from recorded import MACHINES

from chipcal.calibrate import store
from chipcal.calibrate.document import CalibrationDocument
from chipcal.calibrate.rerun import compare, previous_run, with_rerun
from chipcal.measure.device import Device
from chipcal.report.calibration import render_markdown

ZEN5 = MACHINES / "amd-epyc-zen5-2vcpu"


def _doc(name: str) -> CalibrationDocument:
    return CalibrationDocument.from_dict(json.loads((ZEN5 / name).read_text()))


def _scaled(doc: CalibrationDocument, created: str, factors: dict[tuple[str, int], float]) -> CalibrationDocument:
    """`doc` as a later run whose model medians are the given multiples of doc's."""
    rows = tuple(dataclasses.replace(r, median_s=r.median_s * factors.get((r.model, r.batch), 1.0))
                 for r in doc.observations.models)
    return dataclasses.replace(doc, created_utc=created,
                               observations=dataclasses.replace(doc.observations, models=rows))


def _store(root, doc: CalibrationDocument) -> None:
    stamp = doc.created_utc.replace("-", "").replace(":", "")
    store.write_run(root, doc.machine_slug, stamp, {store.CALIBRATION_FILE: store.json_writer(doc.to_dict())})


def test_change_of_each_shared_case_between_two_runs():
    before = _doc("calibration-quick-3.json")     # 18 cases: 9 models x batch 1, 8
    after = _scaled(before, "2026-11-25T11:00:00Z",
                    {("resnet50", 1): 1.10, ("mobilenet_v2", 8): 0.80, ("swin_t", 8): 1.02})
    r = compare(after, before)
    # 18 cases: 15 unchanged, +10 %, -20 %, +2 %: sorted |change| 0 x 15, 0.02, 0.10, 0.20 -> median 0, max 0.20
    assert r.n == 18 and r.median_abs_change == pytest.approx(0.0, abs=1e-12)
    assert r.max_abs_change == pytest.approx(0.20)
    assert r.same_software and r.previous_run == before.created_utc


def test_median_change_of_two_recorded_runs_of_the_zen5_vm():
    """Runs 2 and 3 of 2026-11-25 (10 minutes apart): resnet50 batch 8 227.4 -> 237.8 ms (+4.6 %),
    mobilenet_v2 batch 8 42.4 -> 49.0 ms (+15.5 %), vit_b_16 batch 8 1451 -> 1448 ms (-0.2 %)."""
    two, three = _doc("calibration-quick-2.json"), _doc("calibration-quick-3.json")
    r = compare(three, two)
    by_case = {(m.model, m.batch): m.median_s for m in two.observations.models}
    assert three.observations.models[3].median_s / by_case[("resnet50", 8)] - 1 == pytest.approx(0.046, abs=0.002)
    assert r.n == 18 and 0.02 < r.median_abs_change < r.max_abs_change
    assert r.max_abs_change >= 0.155


def test_the_previous_run_is_the_latest_earlier_one_of_this_machine_and_device(tmp_path):
    base = _doc("calibration-quick-3.json")
    older = _scaled(base, "2026-11-25T08:00:00Z", {})
    previous = _scaled(base, "2026-11-25T09:00:00Z", {})
    later = _scaled(base, "2026-11-25T12:00:00Z", {})
    other_device = dataclasses.replace(_scaled(base, "2026-11-25T09:30:00Z", {}), device=Device("cuda", 0))
    for d in (older, previous, later, other_device):
        _store(tmp_path, d)
    current = _scaled(base, "2026-11-25T10:00:00Z", {("resnet50", 1): 1.5})
    assert previous_run(tmp_path, current).created_utc == "2026-11-25T09:00:00Z"
    assert previous_run(tmp_path / "elsewhere", current) is None


def test_with_rerun_flags_an_error_within_the_drift_and_reports_it(tmp_path):
    base = _doc("calibration-quick-3.json")                    # calibrated median |error| 6.9 %
    _store(tmp_path, _scaled(base, "2026-11-25T09:00:00Z", {}))
    # every case 25 % slower than in the previous run: the drift (25 %) exceeds the 6.9 % error
    slower = {(r.model, r.batch): 1.25 for r in base.observations.models}
    doc = with_rerun(_scaled(base, "2026-11-25T10:00:00Z", slower), tmp_path)
    assert doc.rerun.median_abs_change == pytest.approx(0.25) and doc.rerun.n == 18
    assert [f.code for f in doc.flags if f.code == "run_to_run_drift"] == ["run_to_run_drift"]
    assert "moved by median 25.0%" in render_markdown(doc)
    # the same timings again: no drift, no flag, and the section survives a write and a read
    same = with_rerun(_scaled(base, "2026-11-25T11:00:00Z", {}), tmp_path)
    assert same.rerun.median_abs_change == pytest.approx(0.0, abs=1e-12)
    assert "run_to_run_drift" not in {f.code for f in same.flags}
    assert CalibrationDocument.from_dict(json.loads(store.dumps(doc.to_dict()))).rerun == doc.rerun


def test_a_first_run_has_no_rerun_section(tmp_path):
    doc = _doc("calibration-quick-3.json")
    assert with_rerun(doc, tmp_path) is doc
