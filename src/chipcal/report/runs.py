"""The calibration runs under a results directory, read back: every readable run with its
directory (the unreadable ones said apart, one line each), the latest per machine and device,
and the texts that may cite a run by name (`chipcal report --uncited`).

Light on imports (no numpy, no scipy): `chipcal report DIR` reads runs with it; the index's
summaries of the runs are index_runs.py's."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from chipcal.calibrate import store
from chipcal.calibrate.document import CalibrationDocument
from chipcal.model.errors import ChipcalError

CITING_SUFFIXES = (".md", ".py", ".txt", ".toml")     # the files that may cite a run directory


class MissingPath(ChipcalError, FileNotFoundError):
    """A file or folder to read does not exist."""


@dataclass(frozen=True)
class Run:
    """One run's document and the directory it was read from."""

    document: CalibrationDocument
    path: Path


def read_runs(directory: Path) -> tuple[list[Run], list[str]]:
    """Every run under `directory` whose document reads, in directory order, and 'path: why' for
    each that does not."""
    runs, bad = [], []
    for run_dir in store.find_runs(directory):
        try:
            runs.append(Run(store.load(run_dir), run_dir))
        except ValueError as exc:
            bad.append(f"{run_dir}: {exc}")
    return runs, bad


def latest_runs(runs: Iterable[Run]) -> list[Run]:
    """The newest run of each (machine, device), by machine and device (a tie keeps the first)."""
    latest: dict[tuple, Run] = {}
    for r in runs:
        key = (r.document.machine_slug, r.document.device)
        if key not in latest or r.document.created_utc > latest[key].document.created_utc:
            latest[key] = r
    return [latest[key] for key in sorted(latest)]


def citing_texts(paths: Sequence[str]) -> list[str]:
    """The text of every file among `paths` and under the folders among them whose suffix is one
    of CITING_SUFFIXES (undecodable bytes replaced). MissingPath for a path that does not exist."""
    texts = []
    for name in paths:
        path = Path(name)
        if not path.exists():
            raise MissingPath(f"{name} does not exist")
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        texts += [f.read_text(errors="replace") for f in files if f.suffix in CITING_SUFFIXES]
    return texts


def summary_record(doc: CalibrationDocument, path: Path) -> dict:
    """One flat record of a calibration run (`chipcal report --json`, `chipcal calibrate --json`):
    its peaks, bandwidth, held-out error, drift, power source and flags, SI units."""
    row = {"machine": doc.machine_slug, "device": str(doc.device), "chip": doc.chip.name,
           "created_utc": doc.created_utc, "quick": doc.quick}
    for p in doc.peaks:
        row |= {f"peak_flop_per_s_{p.precision}": p.measured_flop_per_s,
                f"fraction_of_physics_{p.precision}": p.fraction_of_physics,
                f"fraction_of_spec_{p.precision}": p.fraction_of_spec}
    val = doc.validation
    row.update({"bandwidth_bytes_per_s": doc.bandwidth.measured_bytes_per_s, "models_validated": val.n,
                "median_abs_error": val.median_abs_error, "p90_abs_error": val.p90_abs_error,
                "max_abs_error": val.max_abs_error, "noise_between_rounds": val.noise_rel,
                "rerun_median_abs_change": doc.rerun.median_abs_change if doc.rerun else None,
                "power_source": doc.power.source if doc.power.available else None,
                "refit_of": doc.refit.source_run if doc.refit else None,
                "flags": ", ".join(dict.fromkeys(f.code for f in doc.flags)) or None,
                "path": str(path)})
    return row
