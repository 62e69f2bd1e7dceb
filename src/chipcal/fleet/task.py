"""What one fleet task does on its node, whichever scheduler started it (`chipcal fleet task`).

It runs the same `chipcal calibrate --by-node --out STORE` as every other task, so that each
node writes only STORE/<node>/. Where the node's folder holds the journal of an interrupted run
(a task that Slurm requeued after a node failure or preemption), it continues that run with
`--resume` instead of starting again. Before and after, it writes its state into the
submission's folder (fleet.store.TaskState), which `chipcal fleet status` reads.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence
from pathlib import Path

from chipcal.calibrate import store as runs
from chipcal.calibrate.run import now_utc
from chipcal.fleet import store
from chipcal.measure.node import this_node

INCOMPLETE = ".incomplete"      # calibrate.journal's folder of interrupted runs


def scheduler_id() -> str | None:
    """Slurm's id of this task (JOBID_TASKID for an array task), or None outside Slurm."""
    job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if job and task:
        return f"{job}_{task}"
    return os.environ.get("SLURM_JOB_ID")


def interrupted_journal(node_folder: Path) -> Path | None:
    """The newest journal of an interrupted run in the node's folder, or None."""
    journals = sorted((node_folder / INCOMPLETE).glob("*/config.json")) if node_folder.is_dir() else []
    return journals[-1].parent if journals else None


def calibrate_argv(store_dir: Path, calibrate_args: Sequence[str], journal: Path | None) -> list[str]:
    """The `chipcal calibrate` arguments of a task: the submission's, into the store by node, or
    the interrupted run continued (its journal keeps the run's own options)."""
    if journal is not None:
        return ["--out", str(store_dir), "--resume", str(journal)]
    return [*calibrate_args, "--by-node", "--out", str(store_dir)]


def run_task(store_dir: Path, submission_id: str, index: int,
             calibrate: Callable[[list[str]], int]) -> store.TaskState:
    """Run task `index` of the submission on this node through `calibrate` (the CLI's main: a
    list of arguments in, an exit code out); returns the state it wrote last."""
    store_dir = Path(store_dir)
    sub = store.load_submission(store_dir, submission_id)
    node = this_node()
    folder = store_dir / node.folder
    journal = interrupted_journal(folder)
    before = set(runs.find_runs(folder)) if folder.is_dir() else set()
    state = store.TaskState(index=index, state="running", node=node.name, started_utc=now_utc(),
                            resumed=journal.relative_to(store_dir).as_posix() if journal else None,
                            scheduler_id=scheduler_id())
    store.save_task(store_dir, submission_id, state)
    try:
        code = calibrate(calibrate_argv(store_dir, sub.calibrate_args, journal))
    except BaseException:
        store.save_task(store_dir, submission_id, dataclasses.replace(state, state="failed", ended_utc=now_utc()))
        raise
    new = sorted(set(runs.find_runs(folder)) - before) if folder.is_dir() else []
    state = dataclasses.replace(state, state="done" if code == 0 and new else "failed", ended_utc=now_utc(),
                                exit_code=code, run=new[-1].relative_to(store_dir).as_posix() if new else None)
    store.save_task(store_dir, submission_id, state)
    return state
