"""`chipcal fleet` without a scheduler's queue: usage errors, the Kubernetes manifest, a requeued
task continuing its run, and the task states `fleet status` reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from chipcal.cli import fleet as fleet_cli
from chipcal.fleet import store
from chipcal.fleet.status import fleet_status
from chipcal.fleet.task import calibrate_argv, run_task


@pytest.mark.parametrize("argv, needle", [
    (["run", "--store", "S", "--scheduler", "pbs"], "invalid choice: 'pbs'"),
    (["run", "--store", "S", "--nodes", "4"], "--nodes, --nodelist and --partition are Slurm's"),
    (["run", "--store", "S", "--", "--out", "elsewhere"], "`--out` after `--`"),
    (["run", "--store", "S", "--", "--resume=x"], "`--resume=x` after `--`"),
    (["run", "--store", "S", "--", "--no-such-flag"], "unrecognized arguments: --no-such-flag"),
    (["run", "--store", "S", "--nodes", "0"], "--nodes"),
    (["report", "no/such/store"], "no such fleet store"),
    (["status", "no/such/store"], "no such fleet store"),
    (["manifest", "--k8s", "--nodes", "2", "--image", "i"], "--claim"),
])
def test_usage_errors_are_one_line_and_exit_2(cli, tmp_path, monkeypatch, argv, needle):
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(fleet_cli.main, argv)
    assert rc == 2, (out, err)
    assert needle in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "S").exists() or not store.submissions(tmp_path / "S")


def test_a_submission_slurm_refuses_leaves_nothing_behind(cli, tmp_path, monkeypatch):
    """No Slurm to ask (sbatch missing, or an empty configuration, which sbatch refuses at once; a
    missing one it retries for a minute): one line, exit 2, and no submission on record whose
    tasks `fleet status` would call lost."""
    (tmp_path / "slurm.conf").write_text("")
    monkeypatch.setenv("SLURM_CONF", str(tmp_path / "slurm.conf"))
    rc, _, err = cli(fleet_cli.main, ["run", "--scheduler", "slurm", "--store", str(tmp_path / "S"), "--nodes", "2",
                                      "--", "--smoke"])
    assert rc == 2 and len(err.strip().splitlines()) == 1 and "sbatch" in err, err
    assert store.submissions(tmp_path / "S") == []


def test_the_k8s_manifest_is_an_indexed_job_one_pod_per_gpu_node(cli, tmp_path):
    out = tmp_path / "job.yaml"
    rc, _, err = cli(fleet_cli.main, ["manifest", "--k8s", "--nodes", "16", "--image", "reg/chipcal:1", "--claim",
                                      "fleet-store", "--submission", "S1", "--quick", "--", "--device", "cuda"])
    assert rc == 0, err
    rc, text, err = cli(fleet_cli.main, ["manifest", "--k8s", "--nodes", "16", "--image", "reg/chipcal:1", "--claim",
                                         "fleet-store", "--submission", "S1", "--out", str(out), "--quick", "--",
                                         "--device", "cuda"])
    job = yaml.safe_load(out.read_text())
    assert (job["apiVersion"], job["kind"]) == ("batch/v1", "Job")
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 16, 16)
    pod = spec["template"]["spec"]
    (term,) = pod["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["topologyKey"] == "kubernetes.io/hostname"
    assert term["labelSelector"]["matchLabels"].items() <= spec["template"]["metadata"]["labels"].items()
    (container,) = pod["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert container["command"][:3] == ["chipcal", "fleet", "task"]
    assert container["command"][container["command"].index("--") + 1:] == ["--quick", "--remeasure", "--device", "cuda"]
    env = {e["name"]: e for e in container["env"]}
    assert env["CHIPCAL_NODE"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
    (mount,) = container["volumeMounts"]
    (volume,) = pod["volumes"]
    assert volume["name"] == mount["name"] and volume["persistentVolumeClaim"]["claimName"] == "fleet-store"
    assert container["command"][container["command"].index("--store") + 1] == mount["mountPath"]
    assert pod["restartPolicy"] == "OnFailure"


def _submission(tmp_path: Path, tasks: int = 1) -> Path:
    store.save_submission(tmp_path, store.Submission("20261129T000000Z-local", "local", "2026-11-29T00:00:00Z", tasks,
                                                     ("--smoke",)))
    return tmp_path


def test_a_requeued_task_continues_its_node_s_interrupted_run(tmp_path, monkeypatch):
    """The node's folder holds an interrupted run's journal: the task resumes it instead of
    starting again (what a Slurm requeue after a node failure needs)."""
    monkeypatch.setenv("CHIPCAL_NODE", "gpu-07")
    root = _submission(tmp_path)
    journal = root / "gpu-07" / ".incomplete" / "20261129T010000Z-123"
    journal.mkdir(parents=True)
    (journal / "config.json").write_text("{}")
    calls = []

    def calibrate(argv):
        calls.append(argv)
        run = root / "gpu-07" / "20261129T010500Z"
        run.mkdir()
        (run / "calibration.json").write_text("{}")
        return 0

    state = run_task(root, "20261129T000000Z-local", 0, calibrate)
    assert calls == [["--out", str(root), "--resume", str(journal)]]
    assert (state.state, state.node, state.run, state.resumed) == ("done", "gpu-07", "gpu-07/20261129T010500Z",
                                                                   "gpu-07/.incomplete/20261129T010000Z-123")
    assert calibrate_argv(root, ("--smoke",), None) == ["--smoke", "--by-node", "--out", str(root)]


def test_a_task_that_fails_or_writes_no_run_is_failed(tmp_path, monkeypatch):
    monkeypatch.setenv("CHIPCAL_NODE", "n1")
    root = _submission(tmp_path)
    assert run_task(root, "20261129T000000Z-local", 0, lambda argv: 0).state == "failed"      # exit 0, no run
    with pytest.raises(RuntimeError):
        run_task(root, "20261129T000000Z-local", 0, lambda argv: (_ for _ in ()).throw(RuntimeError("boom")))
    assert json.loads(store.task_path(root, "20261129T000000Z-local", 0).read_text())["state"] == "failed"
    (status,) = fleet_status(root)
    assert (status.state, status.node) == ("failed", "n1")


def test_status_of_tasks_not_started(tmp_path):
    root = _submission(tmp_path, tasks=1)
    (status,) = fleet_status(root)
    assert status.state == "waiting"
