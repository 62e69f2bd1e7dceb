"""`chipcal fleet run`: a submission made and started, by Slurm or here.

Both schedulers run the same per-node function (fleet.task.run_task) into the same store layout:
Slurm starts it as one array task per node; `local` calls it once, in this process, on this
machine (a fleet of one node).
"""

from __future__ import annotations

import dataclasses
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from chipcal.calibrate.run import now_utc
from chipcal.fleet import slurm, store
from chipcal.fleet.task import run_task


@dataclasses.dataclass(frozen=True)
class Request:
    """What `chipcal fleet run` was asked for."""

    store: Path
    scheduler: str = "local"
    nodes: int = 1
    nodelist: tuple[str, ...] = ()
    partition: str | None = None
    calibrate_args: tuple[str, ...] = ()


def _new_id(store_dir: Path, scheduler: str) -> str:
    """A submission id no other has: its UTC time, its scheduler, and a count where two share a second."""
    stamp = store.new_stamp()
    root = store.fleet_dir(store_dir)
    root.mkdir(parents=True, exist_ok=True)
    for n in range(1000):
        name = f"{stamp}-{scheduler}" + (f"-{n}" if n else "")
        try:
            (root / name).mkdir()
            return name
        except FileExistsError:
            continue
    raise store.FleetError(f"{root}: cannot make a new submission folder")


def start(request: Request, calibrate: Callable[[list[str]], int]) -> tuple[store.Submission, list[store.TaskState]]:
    """Make the submission and start it: Slurm's job ids recorded (its tasks run later, on the
    nodes), or the local task run now through `calibrate`; returns it and the states of tasks run here."""
    if request.scheduler not in store.SCHEDULERS:
        raise store.FleetError(f"unknown scheduler {request.scheduler!r} (one of {', '.join(store.SCHEDULERS)})")
    store_dir = Path(request.store)
    store_dir.mkdir(parents=True, exist_ok=True)
    local = request.scheduler == "local"
    tasks = 1 if local else (len(request.nodelist) or request.nodes)
    sub = store.Submission(id=_new_id(store_dir, request.scheduler), scheduler=request.scheduler,
                           created_utc=now_utc(), tasks=tasks,
                           calibrate_args=tuple(request.calibrate_args), nodelist=tuple(request.nodelist),
                           partition=request.partition)
    store.save_submission(store_dir, sub)
    if local:
        return sub, [run_task(store_dir, sub.id, 0, calibrate)]
    try:
        job_ids = slurm.submit(store_dir, sub)
    except slurm.PartlySubmitted as exc:          # the jobs that were submitted stay on record
        store.save_submission(store_dir, dataclasses.replace(sub, job_ids=exc.job_ids))
        raise
    except store.FleetError:                      # nothing was submitted: nothing is left behind
        shutil.rmtree(store.submission_dir(store_dir, sub.id), ignore_errors=True)
        raise
    sub = dataclasses.replace(sub, job_ids=job_ids)
    store.save_submission(store_dir, sub)
    return sub, []


def check_calibrate_args(args: Sequence[str]) -> None:
    """Refuse the calibrate arguments a fleet decides itself (where each run goes)."""
    for arg in args:
        if arg.split("=")[0] in ("--out", "--resume", "--refit", "--by-node"):
            raise store.FleetError(f"`{arg}` after `--`: the fleet sets where each node's run goes "
                                   "(STORE/<node>/) and resumes interrupted runs itself")
