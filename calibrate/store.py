"""Calibration directories: written atomically, never overwritten, listed side by side.

A run is staged in a hidden sibling directory and renamed into place only when every file is
written and flushed, so an interrupted run leaves no half-written report; a rerun in the same
second gets a suffixed directory instead of replacing an earlier one.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

CALIBRATION_FILE = "calibration.json"
SCHEMA = "chipcal.calibration/1"


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def final_run_dir(results_root: Path, slug: str, timestamp: str) -> Path:
    """results_root/slug/timestamp, or timestamp-2, -3… if that exists already."""
    base = Path(results_root) / slug
    candidate, n = base / timestamp, 1
    while candidate.exists():
        n += 1
        candidate = base / f"{timestamp}-{n}"
    return candidate


def write_run(results_root: Path, slug: str, timestamp: str,
              writers: dict[str, Callable[[Path], None]]) -> Path:
    """Call each writer(path) into a staging dir, then rename the whole dir into place.

    On any exception (KeyboardInterrupt included) the staging dir is removed and nothing
    appears under results_root/slug except what was there before.
    """
    final = final_run_dir(results_root, slug, timestamp)
    final.parent.mkdir(parents=True, exist_ok=True)
    staging = final.parent / f".staging-{final.name}-{os.getpid()}"
    staging.mkdir()
    try:
        for name, write in writers.items():
            path = staging / name
            write(path)
            with open(path, "rb") as fh:
                os.fsync(fh.fileno())
        _fsync_dir(staging)
        os.rename(staging, final)
        _fsync_dir(final.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final


def json_writer(document: dict) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_text(json.dumps(document, indent=2, allow_nan=False) + "\n")

    return write


def text_writer(text: str) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        path.write_text(text)

    return write


def load(directory: Path) -> dict:
    """A calibration document; ValueError if it is not one."""
    path = Path(directory) / CALIBRATION_FILE
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{path}: not a readable calibration ({exc})") from None
    if doc.get("schema") != SCHEMA:
        raise ValueError(f"{path}: schema {doc.get('schema')!r}, expected {SCHEMA!r}")
    return doc


def find_runs(results_root: Path) -> list[Path]:
    """Every completed calibration directory under results_root (staging dirs skipped)."""
    root = Path(results_root)
    runs = [p.parent for p in root.rglob(CALIBRATION_FILE)
            if not any(part.startswith(".") for part in p.relative_to(root).parts)]
    return sorted(runs)
