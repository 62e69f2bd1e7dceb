"""The runs the results index and each machine's HISTORY.md list (report/index.py's RunSummary):
those in the results tree, and those dropped from it, read back from git as the commit that added
each one holds it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from chipcal.calibrate import store
from chipcal.calibrate.document import CalibrationDocument
from chipcal.model.mapping.params import CalibrationError
from chipcal.report.index import RunSummary


def run_summaries(directory: Path) -> tuple[list[RunSummary], list[str]]:
    """RunSummary of every readable run under `directory`, and 'path: why' for each other one,
    through the directory's index (report.run_index: only new or changed documents are read)."""
    from chipcal.report.run_index import indexed_runs

    runs, skipped, _ = indexed_runs(directory)
    return runs, skipped


def _git(directory: Path, *args: str) -> str | None:
    """git's output run in `directory`; None where git is missing, fails or hangs."""
    try:
        done = subprocess.run(["git", "-C", str(directory), *args], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def dropped_runs(directory: Path, present: set[str]) -> tuple[list[RunSummary], list[str]]:
    """RunSummary of the runs git holds under `directory` that are no longer in the tree (not in
    `present`), each read from the commit that added it, and 'run at commit: why' for each that
    does not read. None found (not a git work tree, a shallow clone): ([], [])."""
    prefix = _git(directory, "rev-parse", "--show-prefix")
    # --no-renames: a commit that drops one run and adds the next shows the new document as a
    # rename of the old one (the files are alike), which --diff-filter=A would not list
    log = _git(directory, "log", "--format=%x00%H", "--no-renames", "--diff-filter=A", "--name-only", "--relative",
               "--", ".")
    if prefix is None or not log:
        return [], []
    added: dict[str, str] = {}                    # run directory -> the latest commit that added its document
    for entry in log.split("\0")[1:]:
        commit, *names = entry.strip().splitlines()
        for name in names:
            run_dir = name.removesuffix(f"/{store.CALIBRATION_FILE}")
            if name.endswith(f"/{store.CALIBRATION_FILE}") and run_dir.count("/") == 1 and run_dir not in present:
                added.setdefault(run_dir, commit)
    out, skipped = [], []
    for run_dir, commit in sorted(added.items()):
        text = _git(directory, "show", f"{commit}:{prefix.strip()}{run_dir}/{store.CALIBRATION_FILE}")
        try:
            doc = CalibrationDocument.from_dict(json.loads(text or ""))
        except (ValueError, CalibrationError) as exc:
            skipped.append(f"{run_dir} at {commit[:12]}: {str(exc)[:80]}")
            continue
        folder, run = run_dir.split("/")
        out.append(RunSummary.of(doc, run, git_ref=f"{commit[:12]}:{prefix.strip()}{run_dir}", folder=folder))
    return out, skipped
