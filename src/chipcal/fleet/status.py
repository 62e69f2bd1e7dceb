"""Which tasks of a fleet's submissions ran, failed or wait (`chipcal fleet status STORE`).

A task writes its own state (fleet.store.TaskState) when it starts and when it ends; Slurm's
queue says what the files cannot: a task not yet started (PENDING), and a task that started and
left the queue without writing its end (killed at its time limit, out of memory, its node lost),
which is reported as `lost`. A requeued task is back in the queue with its state still `running`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from chipcal.fleet import slurm, store

STATES = ("done", "failed", "lost", "running", "waiting", "unknown")


@dataclass(frozen=True)
class TaskStatus:
    submission: str
    scheduler: str
    index: int
    state: str                    # STATES
    node: str | None
    run: str | None               # the run it wrote, relative to the store
    detail: str                   # the scheduler's word, an exit code, the journal it resumed


def _state(saved: store.TaskState | None, queue: dict[int, str] | None, index: int, sub: store.Submission
           ) -> tuple[str, str]:
    in_queue = None if queue is None else queue.get(index)
    if saved is not None and saved.state in ("done", "failed"):
        detail = f"exit {saved.exit_code}" if saved.exit_code is not None else "stopped by an error"
        return saved.state, detail + (f", resumed {saved.resumed}" if saved.resumed else "")
    if sub.scheduler == "local":
        return ("running", "local: started, not ended") if saved else ("waiting", "local: not started")
    if queue is None:
        return "unknown", "squeue cannot be asked here"
    if in_queue is not None:
        return ("running" if in_queue == "RUNNING" else "waiting"), f"Slurm: {in_queue}"
    if saved is not None:
        return "lost", "left Slurm's queue without ending (time limit, memory, node failure?)"
    return "lost", "left Slurm's queue without starting (cancelled?)"


def fleet_status(store_dir: Path) -> list[TaskStatus]:
    """Every task of every submission in the store, in submission order."""
    store_dir = store.check_store(store_dir)
    out = []
    for sub in store.submissions(store_dir):
        queue = slurm.queued(sub.job_ids) if sub.scheduler == "slurm" else None
        for index in range(sub.tasks):
            saved = store.load_task(store_dir, sub.id, index)
            state, detail = _state(saved, queue, index, sub)
            out.append(TaskStatus(sub.id, sub.scheduler, index, state, saved.node if saved else None,
                                  saved.run if saved else None, detail))
    return out
