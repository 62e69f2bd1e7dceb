"""A fleet's store: one shared directory that every node writes its own runs into.

    STORE/<node>/<UTC timestamp>/      a run (`chipcal calibrate --by-node --out STORE`): each node
                                       writes only its own folder
    STORE/<node>/.incomplete/<stamp>/  an interrupted run's journal (calibrate.journal), which a
                                       requeued task continues with --resume
    STORE/.fleet/<submission>/         one `chipcal fleet run`: submission.json (what was asked),
                                       task-<i>.json (what task i did, written by the task), and
                                       the scheduler's script and logs
    STORE/.chipcal-index.sqlite        the index of the runs (report.run_index)

The run directories are the source of truth; the rest is bookkeeping beside them. Each file is
written whole (temp file and rename), so a reader on another node never sees half of one.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from chipcal.measure.cache import write_json_atomic
from chipcal.model.errors import ChipcalError

FLEET_DIR = ".fleet"
SUBMISSION_FILE = "submission.json"
SCHEDULERS = ("local", "slurm", "k8s")    # k8s: made by its first pod (fleet.k8s), not by `fleet run`


class FleetError(ChipcalError):
    """A fleet store or submission that cannot be used; the message says why."""


@dataclass(frozen=True)
class Submission:
    """One `chipcal fleet run`: its scheduler, how many tasks, the calibrate arguments each runs,
    and the scheduler's job ids once submitted."""

    id: str                           # its directory under STORE/.fleet
    scheduler: str                    # SCHEDULERS
    created_utc: str
    tasks: int
    calibrate_args: tuple[str, ...]
    job_ids: tuple[str, ...] = ()     # Slurm: the array job's id, or one per node with --nodelist
    nodelist: tuple[str, ...] = ()
    partition: str | None = None

    @classmethod
    def from_fields(cls, data: dict) -> Submission:
        return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in data.items()})


@dataclass(frozen=True)
class TaskState:
    """What task `index` of a submission did, as the task itself wrote it."""

    index: int
    state: str                        # running, done, failed
    node: str
    started_utc: str
    ended_utc: str | None = None
    run: str | None = None            # the run it wrote, relative to the store
    exit_code: int | None = None
    resumed: str | None = None        # the journal it continued, relative to the store
    scheduler_id: str | None = None   # Slurm: JOBID_TASKID (or JOBID)

    @classmethod
    def from_fields(cls, data: dict) -> TaskState:
        return cls(**data)


def new_stamp() -> str:
    """Now as a submission id begins: the UTC time as a run directory is named (20261129T125502Z)."""
    from chipcal.calibrate.run import now_utc

    return now_utc().replace("-", "").replace(":", "")


def fleet_dir(store: Path) -> Path:
    return Path(store) / FLEET_DIR


def submission_dir(store: Path, submission_id: str) -> Path:
    return fleet_dir(store) / submission_id


def save_submission(store: Path, sub: Submission) -> Path:
    """Write `sub` into its directory (made if new); returns the directory."""
    where = submission_dir(store, sub.id)
    where.mkdir(parents=True, exist_ok=True)
    write_json_atomic(where / SUBMISSION_FILE, dataclasses.asdict(sub))
    return where


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise FleetError(f"{path}: cannot be read ({exc})") from None
    if not isinstance(data, dict):
        raise FleetError(f"{path}: not a JSON object")
    return data


def load_submission(store: Path, submission_id: str) -> Submission:
    path = submission_dir(store, submission_id) / SUBMISSION_FILE
    try:
        return Submission.from_fields(_read(path))
    except TypeError as exc:
        raise FleetError(f"{path}: not a fleet submission ({exc})") from None


def submission_or_new(store: Path, sub: Submission) -> Submission:
    """The store's submission of `sub.id`, or `sub` saved as it where there is none yet (a
    Kubernetes Job's pods: the first to start records it; each writes the same)."""
    if (submission_dir(store, sub.id) / SUBMISSION_FILE).is_file():
        return load_submission(store, sub.id)
    save_submission(store, sub)
    return sub


def submissions(store: Path) -> list[Submission]:
    """Every submission in the store, oldest first (their ids begin with a UTC timestamp)."""
    root = fleet_dir(store)
    if not root.is_dir():
        return []
    return [load_submission(store, d.name) for d in sorted(root.iterdir()) if (d / SUBMISSION_FILE).is_file()]


def task_path(store: Path, submission_id: str, index: int) -> Path:
    return submission_dir(store, submission_id) / f"task-{index}.json"


def save_task(store: Path, submission_id: str, state: TaskState) -> None:
    write_json_atomic(task_path(store, submission_id, state.index), dataclasses.asdict(state))


def load_task(store: Path, submission_id: str, index: int) -> TaskState | None:
    """Task `index`'s state, or None where it has not started (no file yet)."""
    path = task_path(store, submission_id, index)
    if not path.is_file():
        return None
    try:
        return TaskState.from_fields(_read(path))
    except TypeError as exc:
        raise FleetError(f"{path}: not a task state ({exc})") from None


def check_store(store: Path) -> Path:
    """The store as an existing directory; FleetError otherwise."""
    store = Path(store)
    if not store.is_dir():
        raise FleetError(f"{store}: no such fleet store (a directory `chipcal fleet run --store` wrote)")
    return store
