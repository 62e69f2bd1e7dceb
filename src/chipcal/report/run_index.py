"""An incremental index of the runs under a results directory, in SQLite (the standard library's
sqlite3): what `chipcal report DIR` lists, without parsing every calibration document again.

The run directories stay the source of truth; the index only remembers, per run, the size and
modification time of its calibration.json and the RunSummary read from it. An update stats every
document (a directory walk) and parses only those that are new or changed, and forgets the runs
that are gone. A document that does not read is kept with its reason, and read again once it
changes. Every summary was worked out by one version of chipcal's code: the index records a hash
of the package's source, and a different one empties it, so that a change to how a summary is
made never shows a stale one.

The index lives in DIR/.chipcal-index.sqlite (a dot-file: store.find_runs and git's results tree
skip it). Where DIR is not writable, it is built in memory for the one call. SQLite's own locking
makes concurrent updates safe (one writer at a time, `LOCK_TIMEOUT_S`). Designed for 10,000 runs:
tests/test_run_index.py has the benchmark.
"""

from __future__ import annotations

import dataclasses
import json
import os
import sqlite3
from dataclasses import dataclass
from functools import cache
from pathlib import Path

from chipcal.calibrate import store
from chipcal.measure.cache import source_digest
from chipcal.model.mapping.params import CalibrationError
from chipcal.report.index import RunSummary

INDEX_FILE = ".chipcal-index.sqlite"
LOCK_TIMEOUT_S = 60.0       # how long an update waits for another process's write to finish
_TABLE = """CREATE TABLE IF NOT EXISTS runs (
    run TEXT PRIMARY KEY,      -- the run directory, relative to the indexed directory
    mtime_ns INTEGER NOT NULL, -- of its calibration.json when it was read
    size INTEGER NOT NULL,
    summary TEXT,              -- the RunSummary as JSON, or NULL where the document did not read
    error TEXT                 -- why it did not read
)"""


@cache
def code_key() -> str:
    """Hash of every module of the chipcal package: a summary is worked out by this code."""
    return source_digest("chipcal").hexdigest()[:16]


@dataclass(frozen=True)
class IndexUpdate:
    """What one update did."""

    read: int           # documents parsed: new or changed since the last update
    kept: int           # unchanged: not read again
    removed: int        # runs gone from the directory


def _target(directory: Path) -> str:
    """Where the directory's index lives: its INDEX_FILE, or memory where that is not writable."""
    path = directory / INDEX_FILE
    writable = os.access(directory, os.W_OK) and (not path.exists() or os.access(path, os.W_OK))
    return str(path) if writable else ":memory:"


def _connect(target: str) -> sqlite3.Connection:
    """The index at `target`, its tables created where missing and emptied when another version
    of the code wrote it; the write lock held (one writer at a time until the update commits)."""
    db = sqlite3.connect(target, timeout=LOCK_TIMEOUT_S, isolation_level=None)
    try:
        db.execute("BEGIN IMMEDIATE")
        db.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        db.execute(_TABLE)
        row = db.execute("SELECT value FROM meta WHERE key = 'code'").fetchone()
        if row is None or row[0] != code_key():
            db.execute("DELETE FROM runs")
            db.execute("INSERT OR REPLACE INTO meta VALUES ('code', ?)", (code_key(),))
    except sqlite3.Error:
        db.close()
        raise
    return db


def _summary_json(summary: RunSummary) -> str:
    return json.dumps(dataclasses.asdict(summary), allow_nan=False)


def _summary(text: str) -> RunSummary:
    return RunSummary.from_fields(json.loads(text))


def _update(db: sqlite3.Connection, directory: Path) -> IndexUpdate:
    known = {run: (mtime, size) for run, mtime, size in db.execute("SELECT run, mtime_ns, size FROM runs")}
    present, read = set(), 0
    for run_dir in store.find_runs(directory):
        run = run_dir.relative_to(directory).as_posix()
        st = (run_dir / store.CALIBRATION_FILE).stat()
        present.add(run)
        if known.get(run) == (st.st_mtime_ns, st.st_size):
            continue
        try:
            summary, error = _summary_json(RunSummary.of(store.load(run_dir), run_dir.name,
                                                          folder=run_dir.parent.name)), None
        except CalibrationError as exc:
            summary, error = None, f"{run_dir}: {exc}"
        db.execute("INSERT OR REPLACE INTO runs VALUES (?, ?, ?, ?, ?)", (run, st.st_mtime_ns, st.st_size, summary, error))
        read += 1
    gone = set(known) - present
    db.executemany("DELETE FROM runs WHERE run = ?", [(run,) for run in gone])
    return IndexUpdate(read=read, kept=len(present) - read, removed=len(gone))


def indexed_runs(directory: Path) -> tuple[list[RunSummary], list[str], IndexUpdate]:
    """The index of `directory` brought up to date: (RunSummary of every readable run in
    store.find_runs's order, 'path: why' for each other one, what the update did)."""
    directory = Path(directory)
    if not directory.is_dir():
        return [], [], IndexUpdate(read=0, kept=0, removed=0)
    try:
        db = _connect(_target(directory))
    except sqlite3.DatabaseError:      # not an index (a stray or damaged file): this call's own, in memory
        db = _connect(":memory:")
    try:
        update = _update(db, directory)
        db.execute("COMMIT")
        rows = db.execute("SELECT run, summary, error FROM runs").fetchall()
    finally:
        db.close()
    rows.sort(key=lambda r: Path(r[0]))
    return ([_summary(s) for _, s, _ in rows if s is not None], [e for _, s, e in rows if s is None], update)
