"""`chipcal fleet run --scheduler slurm` on a real Slurm (tests/slurm_cluster.py: munged, slurmctld
and slurmd on this host): two array tasks each run a real `chipcal calibrate --smoke` into the
store, in the layout a fleet of one run here has (tests/test_calibrate_run.py), which `fleet
status` and `fleet report` read back."""

from __future__ import annotations

import json
import time

import pytest
from slurm_cluster import slurm_cluster  # noqa: F401

from chipcal.calibrate import store as runs
from chipcal.cli import fleet as fleet_cli

WAIT_S = 600          # two smoke calibrations one after the other, on a slow 2-core host
RUN_FILES = {"calibration.json", "report.md", "report.html", "gemm_efficiency.png", "predicted_vs_measured.png",
             "roofline.png"}


def _status(cli, store) -> list[dict]:
    rc, out, err = cli(fleet_cli.main, ["status", str(store), "--json"])
    assert rc == 0, err
    return json.loads(out)


def _wait_done(cli, store, count: int) -> list[dict]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        rows = _status(cli, store)
        if len(rows) == count and all(r["state"] in ("done", "failed", "lost") for r in rows):
            return rows
        time.sleep(1.0)
    pytest.fail(f"the fleet's tasks did not end in {WAIT_S} s: {_status(cli, store)}")


@pytest.mark.slow
def test_a_fleet_runs_through_slurm_into_one_store(slurm_cluster, cli, tmp_path, monkeypatch):  # noqa: F811
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    monkeypatch.delenv("CHIPCAL_NODE", raising=False)
    # sbatch passes the environment on: each task's calibration runs one torch thread beside the
    # suite's two workers on a 2-core host (a smoke run alone: 35 CPU-s on two threads, 25 on one;
    # beside the workers, its second thread waits for a core they hold); what is checked here is
    # the fleet, not the figures
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    store = tmp_path / "store"
    rc, out, err = cli(fleet_cli.main, ["run", "--scheduler", "slurm", "--store", str(store), "--nodes", "2",
                                        "--partition", slurm_cluster.partition, "--", "--smoke"])
    assert rc == 0, err
    assert "2 task(s), slurm job " in out
    rows = _wait_done(cli, store, 2)
    assert [r["state"] for r in rows] == ["done", "done"], rows
    slurm_runs = sorted(store / r["run"] for r in rows)
    assert [r.parent.name for r in slurm_runs] == [slurm_cluster.node] * 2     # STORE/<node>/<timestamp>/
    for run in slurm_runs:
        assert {p.name for p in run.iterdir()} == RUN_FILES
        doc = runs.load(run)
        assert (doc.node.name, doc.node.source, doc.smoke) == (slurm_cluster.node, "SLURMD_NODENAME", True)
    sub = next((store / ".fleet").iterdir())
    assert "#SBATCH --exclusive" in (sub / "task.sbatch").read_text()

    rc, out, err = cli(fleet_cli.main, ["report", str(store), "--json"])
    assert rc == 0, err
    records = json.loads(out)
    assert {r["node"] for r in records} == {slurm_cluster.node}
    assert {r["runs"] for r in records} == {2}
    assert {r["figure"] for r in records} >= {"gemm_fp32", "bandwidth", "dispatch", "latency resnet18/1"}
    rc, out, err = cli(fleet_cli.main, ["report", str(store)])
    assert rc == 0 and slurm_cluster.node in out and "not judged: 0 peers" in out


def test_status_reads_slurm_s_queue_for_tasks_that_wait_or_leave(slurm_cluster, cli, tmp_path, monkeypatch):  # noqa: F811
    """With the partition down, the fleet's tasks wait in the queue (`waiting`, Slurm's PENDING);
    cancelled before they start, they leave it without a word from the task (`lost`). No
    calibration runs."""
    monkeypatch.setenv("SLURM_CONF", str(slurm_cluster.conf))
    store = tmp_path / "store"
    part = f"PartitionName={slurm_cluster.partition}"
    slurm_cluster.run("scontrol", "update", part, "State=DOWN")
    try:
        rc, _, err = cli(fleet_cli.main, ["run", "--scheduler", "slurm", "--store", str(store), "--nodes", "2",
                                          "--partition", slurm_cluster.partition, "--", "--smoke"])
        assert rc == 0, err
        rows = _status(cli, store)
        assert [(r["state"], r["detail"]) for r in rows] == [("waiting", "Slurm: PENDING")] * 2
        (sub,) = (store / ".fleet").iterdir()
        (job,) = json.loads((sub / "submission.json").read_text())["job_ids"]
        slurm_cluster.run("scancel", job)
        slurm_cluster.wait(job, timeout=30)
        assert [r["state"] for r in _status(cli, store)] == ["lost", "lost"]
    finally:
        slurm_cluster.run("scontrol", "update", part, "State=UP")
