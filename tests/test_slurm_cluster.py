"""The test Slurm cluster (tests/slurm_cluster.py) runs a job array: every task on this host."""

from __future__ import annotations

import socket

from slurm_cluster import slurm_cluster  # noqa: F401


def test_job_array_runs_every_task(slurm_cluster, tmp_path):  # noqa: F811
    """sbatch --array=0-3: each task writes its task id and host to its own file."""
    job_id = slurm_cluster.run(
        "sbatch", "--parsable", "--array=0-3", f"--chdir={tmp_path}", "--output=/dev/null",
        "--wrap", f"echo $SLURM_ARRAY_TASK_ID $(hostname -s) > {tmp_path}/out-$SLURM_ARRAY_TASK_ID",
    ).strip()
    slurm_cluster.wait(job_id, timeout=60)
    host = socket.gethostname().split(".")[0]
    assert {path.name: path.read_text().split() for path in tmp_path.glob("out-*")} == {
        f"out-{task}": [str(task), host] for task in range(4)}
