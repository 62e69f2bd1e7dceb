"""Where a calibration's time goes (calibrate.phases): phases timed by hand-set clocks, kept in the
document and shown in the report."""

from __future__ import annotations

import dataclasses

from recorded import reference_document

from chipcal.calibrate.document import CalibrationDocument
from chipcal.calibrate.phases import PhaseClock, PhaseTime
from chipcal.report.calibration import render_markdown


def test_a_phase_named_again_adds_to_its_time():
    # wall / CPU readings at each call: start a (0, 0), start b (2, 1), start a again (5, 1.5), times (6, 2)
    wall, cpu = iter([0.0, 2.0, 2.0, 5.0, 5.0, 6.0]), iter([0.0, 1.0, 1.0, 1.5, 1.5, 2.0])
    clock = PhaseClock(wall=lambda: next(wall), cpu=lambda: next(cpu))
    clock.start("a")
    clock.start("b")
    clock.start("a")
    # a: 2 + 1 = 3 s of wall, 1 + 0.5 = 1.5 s of CPU; b: 3 s and 0.5 s; in the order first named
    assert clock.times() == (PhaseTime(phase="a", wall_s=3.0, cpu_s=1.5), PhaseTime(phase="b", wall_s=3.0, cpu_s=0.5))


def test_phases_round_trip_and_reach_the_report():
    doc = CalibrationDocument.from_dict(reference_document())
    assert doc.phases is None                      # recorded before phases were: no section
    assert "Where the time went" not in render_markdown(doc)
    timed = dataclasses.replace(doc, phases=(PhaseTime(phase="GEMM sweep", wall_s=30.0, cpu_s=55.0),
                                             PhaseTime(phase="fits and cross-validation", wall_s=90.0, cpu_s=89.0)))
    assert CalibrationDocument.from_dict(timed.to_dict()).phases == timed.phases
    text = render_markdown(timed)
    assert "## Where the time went" in text
    # shares by hand: 30 / 120 = 25 %, 90 / 120 = 75 %; totals 120 s wall and 144 s CPU
    assert "| GEMM sweep | 30.0 s | 55.0 s | 25.0% |" in text
    assert "| fits and cross-validation | 90.0 s | 89.0 s | 75.0% |" in text
    assert "| total | 120.0 s | 144.0 s | 100% |" in text
