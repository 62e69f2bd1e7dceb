"""The calibration journal: observations written as they are measured, so that an interrupted
run keeps its data and `chipcal calibrate --resume DIR` continues it.

A journal is a directory (`<out>/.incomplete/<stamp>-<pid>/`) holding `config.json` (the run's
CalibrationConfig, `to_fields`) and one JSON file per finished step, each written whole through a
temp file, fsync and rename. The steps, by phase (calibrate.run): identify `machine.json`; sweep
`gemm.json`; bandwidth `bandwidth.json`; power `power.json`; host probes `first_touch.json`,
`layout.json`, `gemv.json`, `dispatch.json`, `threads.json`; layers and models `round-<r>.json`, one per timing
round. A resumed run reads back every step its journal holds and measures from the first one it
does not (calibrate.context.RunContext.journaled); fit, validate and write measure nothing and are
worked out again. Only data goes in (measurements as their `to_dict` forms): no pickle, nothing
that runs on load. A finished run removes its journal.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shutil
from pathlib import Path

from chipcal.measure.cache import write_json_atomic
from chipcal.model.errors import ChipcalError

CONFIG_FILE = "config.json"
JOURNAL_SCHEMA = "chipcal-journal-1"


class JournalError(ChipcalError, ValueError):
    """A --resume directory is not a chipcal journal, or it cannot be read; the message says which."""


class Journal:
    """Step results of one run, on disk as they are measured."""

    def __init__(self, directory: Path):
        self.directory = Path(directory)

    @classmethod
    def create(cls, out: Path, config) -> Journal:
        stamp = _dt.datetime.now(_dt.UTC).strftime("%Y%m%dT%H%M%SZ")
        directory = Path(out) / ".incomplete" / f"{stamp}-{os.getpid()}"
        directory.mkdir(parents=True)
        journal = cls(directory)
        journal.put("config", {"schema": JOURNAL_SCHEMA, "config": config.to_fields()})
        return journal

    @classmethod
    def open(cls, directory: Path) -> tuple[Journal, dict]:
        """(journal, the CalibrationConfig fields it was started with)."""
        if not (Path(directory) / CONFIG_FILE).is_file():
            raise JournalError(f"--resume {directory}: not a calibration journal (no {CONFIG_FILE})")
        head = cls(directory).get("config")
        if not isinstance(head, dict) or head.get("schema") != JOURNAL_SCHEMA or not isinstance(head.get("config"), dict):
            raise JournalError(f"--resume {directory}: not a calibration journal (schema {JOURNAL_SCHEMA} expected)")
        return cls(directory), head["config"]

    def get(self, step: str):
        """The recorded result of `step`, None when the step has not finished (or its file is damaged)."""
        try:
            return json.loads((self.directory / f"{step}.json").read_text())["data"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def put(self, step: str, data) -> None:
        # NaN allowed: a frozen power counter's reading is data too; json.loads reads it back
        write_json_atomic(self.directory / f"{step}.json", {"step": step, "data": data}, allow_nan=True)

    def remove(self) -> None:
        shutil.rmtree(self.directory, ignore_errors=True)
        with contextlib.suppress(OSError):
            self.directory.parent.rmdir()       # .incomplete/, when it is empty


def same_machine(journal, slug: str, torch_version: str) -> None:
    """Record which machine and torch a journal's timings come from, or, resuming, check that this
    is the same: a resumed run pools its rounds with the journal's, and a journal on a shared
    filesystem can be resumed from another machine (JournalError, one line)."""
    here = {"slug": slug, "torch_version": torch_version}
    recorded = journal.get("machine")
    if recorded is None:
        journal.put("machine", here)
    elif recorded != here:
        raise JournalError(f"--resume {journal.directory}: started on {recorded.get('slug')} with torch "
                           f"{recorded.get('torch_version')}, this is {slug} with torch {torch_version}; its "
                           "timings cannot be pooled with this machine's: start a new run")


class NoJournal:
    """A run that keeps nothing (library use, tests)."""

    def get(self, step: str):
        return None

    def put(self, step: str, data) -> None:
        pass
