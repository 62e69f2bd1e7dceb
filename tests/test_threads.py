"""The thread-scaling check (measure.threads, calibrate.threads, the flag and the report line)."""

from __future__ import annotations

import dataclasses
import json

import pytest
from recorded import MACHINES

from chipcal.calibrate import flags as gap
from chipcal.calibrate.document import CalibrationDocument, ThreadsSection
from chipcal.calibrate.journal import NoJournal
from chipcal.calibrate.threads import thread_section
from chipcal.measure.threads import probe_thread_scaling
from chipcal.measure.timing import fixed_threads
from chipcal.report.calibration import render_markdown


def test_two_threads_that_do_one_cores_work_are_flagged():
    # the Zen 5 VM, 2026-11-25 10:00-10:06: 1024^3 fp32 in 20.6 ms with 1 thread and 20.2 ms with 2
    flag = gap.threads_not_scaling(2, 20.6 / 20.2)
    assert flag.code == "threads_not_scaling" and "about 1.0 cores' worth of 2" in flag.message
    # 11:05 the same VM: 20.1 ms and 10.5 ms, 1.91x: no flag; the bound is 0.75 x 2 = 1.5
    assert gap.threads_not_scaling(2, 20.1 / 10.5) is None
    assert gap.threads_not_scaling(2, 1.49) is not None and gap.threads_not_scaling(2, 1.5) is None


@pytest.mark.timing
def test_probe_times_one_thread_and_all(monkeypatch):
    with fixed_threads(2):
        probe = probe_thread_scaling(max_time_s=0.1, min_samples=3)
    assert probe.threads == 2
    assert probe.one_thread.threads == 1 and probe.all_threads.threads == 2
    # whatever the host: two threads are neither slower than a third of one nor faster than 2.5x
    assert 0.33 < probe.speedup < 2.5
    assert probe.speedup == pytest.approx(probe.one_thread.median_s / probe.all_threads.median_s)
    with fixed_threads(1):
        assert probe_thread_scaling(max_time_s=0.1) is None


def test_section_comes_from_the_journal_when_recorded_and_reaches_the_report():
    class Recorded(NoJournal):
        def get(self, step):
            return {"threads": 2, "speedup": 1.02, "one_thread_s": 0.0206, "all_threads_s": 0.0202,
                    "method": "recorded"} if step == "threads" else None

    section = thread_section(Recorded())
    assert section == ThreadsSection(threads=2, speedup=1.02, one_thread_s=0.0206, all_threads_s=0.0202,
                                     method="recorded")
    doc = CalibrationDocument.from_dict(
        json.loads((MACHINES / "amd-epyc-zen5-2vcpu" / "calibration-quick-3.json").read_text()))
    assert doc.threads is None                          # recorded before the check existed
    doc = dataclasses.replace(doc, threads=section)
    assert "2 torch threads ran a GEMM 1.02x as fast as one (20.6 ms → 20.2 ms; ideal 2x)" in render_markdown(doc)
    assert CalibrationDocument.from_dict(doc.to_dict()).threads == section
