"""How far the held-out models' timings moved since the previous run on this machine.

A run's own noise figure is the spread between its interleaved rounds: it sees minutes. A shared
host also drifts between runs: on the 2-vCPU Zen 5 VM of 2026-11-25, MobileNet-V2 at batch 1 took
9.4 ms in one `--quick` run and 11.5 ms in the main job 15 minutes later, while each run's rounds
agreed within 1-4 %. The previous calibration of the same machine in the same results directory
timed the same (model, batch) cases the same way, so the change of their medians between the two
runs is the reproducibility that one run cannot report. A calibrated error below that change is
within the host's drift (flag `run_to_run_drift`).
"""

from __future__ import annotations

import dataclasses
import statistics
from pathlib import Path

from chipcal.calibrate import store
from chipcal.calibrate.document import CalibrationDocument, RerunSection
from chipcal.calibrate.flags import run_to_run_drift
from chipcal.model.mapping.params import CalibrationError


def compare(current: CalibrationDocument, previous: CalibrationDocument) -> RerunSection | None:
    """The change of each (model, batch) median timed in both runs; None when none is shared."""
    before = {(r.model, r.batch): r.median_s for r in previous.observations.models}
    changes = [abs(r.median_s / before[(r.model, r.batch)] - 1)
               for r in current.observations.models if (r.model, r.batch) in before]
    if not changes:
        return None
    same = (current.fingerprint.torch_version == previous.fingerprint.torch_version
            and current.environment_summary.get("allocator") == previous.environment_summary.get("allocator"))
    return RerunSection(previous_run=previous.created_utc, previous_command=previous.command, n=len(changes),
                        median_abs_change=statistics.median(changes), max_abs_change=max(changes),
                        same_software=same)


def previous_run(results_root: Path, current: CalibrationDocument, folder: str | None = None
                 ) -> CalibrationDocument | None:
    """The latest run under results_root/<folder> (default: this machine's slug; a fleet's store
    has a folder per node) created before `current`, of the same machine on the same device at
    the same precision; runs that cannot be read (older schemas) are passed over."""
    folder = Path(results_root) / (folder or current.machine_slug)
    if not folder.is_dir():
        return None
    for directory in reversed(store.find_runs(folder)):
        try:
            doc = store.load(directory)
        except CalibrationError:
            continue
        if (doc.created_utc < current.created_utc and doc.device == current.device
                and doc.precision == current.precision and doc.machine_slug == current.machine_slug):
            return doc
    return None


def with_rerun(current: CalibrationDocument, results_root: Path, folder: str | None = None) -> CalibrationDocument:
    """`current` with its rerun section, and the flag when the calibrated median error is within
    the drift; unchanged when no earlier run of this machine (in `folder`) shares a model with it."""
    previous = previous_run(results_root, current, folder)
    section = compare(current, previous) if previous else None
    if section is None:
        return current
    flag = run_to_run_drift(section.median_abs_change, section.max_abs_change, section.n, section.previous_run,
                            current.validation.median_abs_error)
    flags = current.flags + ((flag,) if flag else ())
    return dataclasses.replace(current, rerun=section, flags=flags)
