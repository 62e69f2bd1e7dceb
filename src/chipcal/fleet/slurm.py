"""Fleet tasks through Slurm: a batch script per submission, `sbatch` to submit it, `squeue` for
the tasks still queued or running.

Plain `sbatch` rather than submitit: the task is a command line (`chipcal fleet task`), not a
pickled function, so the script is what a cluster's operator reads, and nothing is added to
chipcal's dependencies.

`--nodes N`: one job array of N tasks, each with a node to itself (`--exclusive`, one node), and
`--requeue`, so that a task Slurm requeues (node failure, preemption) continues its run. Slurm
spreads the tasks over idle nodes; it does not promise N distinct nodes: a task that finds its
node already done runs again there (a second run of that node). `--nodelist A,B`: an array
cannot pin each task to a node, so it is one job per node, pinned with `--nodelist`.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from chipcal.fleet.store import FleetError, Submission, submission_dir

SBATCH_TIMEOUT_S = 60.0
JOB_NAME = "chipcal-fleet"


def _task_command(store: Path, sub: Submission, index: str) -> str:
    """The line each task runs: this Python's chipcal, so that the nodes run the code that submitted."""
    return shlex.join([sys.executable, "-m", "chipcal.cli.main", "fleet", "task", "--store", str(Path(store).resolve()),
                       "--submission", sub.id, "--index"]) + f" {index}"


def script(store: Path, sub: Submission, node: str | None = None, index: int | None = None) -> str:
    """The batch script of the submission's array (`node` None), or of task `index` pinned to `node`."""
    logs = submission_dir(store, sub.id).resolve()
    lines = ["#!/bin/bash", f"#SBATCH --job-name={JOB_NAME}", "#SBATCH --nodes=1", "#SBATCH --ntasks=1",
             "#SBATCH --exclusive", "#SBATCH --requeue"]
    if node is None:
        lines += [f"#SBATCH --array=0-{sub.tasks - 1}", f"#SBATCH --output={logs}/slurm-%A_%a.out"]
        index_text = '"$SLURM_ARRAY_TASK_ID"'
    else:
        lines += [f"#SBATCH --nodelist={node}", f"#SBATCH --output={logs}/slurm-%j.out"]
        index_text = str(index)
    if sub.partition:
        lines.append(f"#SBATCH --partition={sub.partition}")
    lines += ["set -eu", f"exec {_task_command(store, sub, index_text)}", ""]
    return "\n".join(lines)


def _sbatch(path: Path) -> str:
    """Submit the script at `path`; the job id."""
    try:
        done = subprocess.run(["sbatch", "--parsable", str(path)], capture_output=True, text=True,
                              timeout=SBATCH_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise FleetError("sbatch is not installed here: run `chipcal fleet run` on a Slurm login node, "
                         "or use --scheduler local") from None
    except subprocess.TimeoutExpired:
        raise FleetError(f"sbatch did not answer in {SBATCH_TIMEOUT_S:.0f} s (is slurmctld up?)") from None
    if done.returncode != 0:
        said = done.stderr.strip().splitlines()
        raise FleetError(f"sbatch refused {path.name}: {said[-1] if said else f'exit {done.returncode}'}")
    return done.stdout.strip().split(";")[0]


def submit(store: Path, sub: Submission) -> tuple[str, ...]:
    """Write the submission's script(s) into its folder and submit them; the job ids."""
    where = submission_dir(store, sub.id)
    if not sub.nodelist:
        path = where / "task.sbatch"
        path.write_text(script(store, sub))
        return (_sbatch(path),)
    ids: list[str] = []
    for index, node in enumerate(sub.nodelist):
        path = where / f"task-{index}.sbatch"
        path.write_text(script(store, sub, node, index))
        try:
            ids.append(_sbatch(path))
        except FleetError as exc:
            if not ids:
                raise
            raise PartlySubmitted(f"{exc}; jobs {','.join(ids)} (nodes {','.join(sub.nodelist[:len(ids)])}) were "
                                  f"submitted: `scancel {' '.join(ids)}` to cancel them", tuple(ids)) from None
    return tuple(ids)


class PartlySubmitted(FleetError):
    """Some of a --nodelist submission's jobs were submitted before sbatch refused one."""

    def __init__(self, message: str, job_ids: tuple[str, ...]):
        super().__init__(message)
        self.job_ids = job_ids


def queued(job_ids: Sequence[str]) -> dict[int, str] | None:
    """{task index: Slurm state (PENDING, RUNNING, ...)} of the submission's tasks still in the
    queue; None where squeue cannot be asked (not installed, no controller)."""
    if not job_ids:
        return {}
    try:
        done = subprocess.run(["squeue", "-h", "-r", "-j", ",".join(job_ids), "-o", "%F|%K|%T"],
                              capture_output=True, text=True, timeout=SBATCH_TIMEOUT_S, check=False)
    except (FileNotFoundError, subprocess.TimeoutExpired):
        return None
    if done.returncode != 0:
        # a job that has left the queue entirely makes squeue say "Invalid job id"
        return {} if "Invalid job id" in done.stderr else None
    states = {}
    for line in done.stdout.splitlines():
        job, array_task, state = line.split("|")
        if array_task.isdigit():
            states[int(array_task)] = state
        elif job in job_ids:
            states[list(job_ids).index(job)] = state
    return states
