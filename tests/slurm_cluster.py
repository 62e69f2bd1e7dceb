"""A real single-host Slurm cluster on localhost for tests: its own munged, slurmctld and slurmd,
each in the foreground under this process, with every key, socket, spool, state and log file in one
work folder and free TCP ports, so two pytest-xdist workers (or the host's own Slurm) never meet.

A test module uses it with `from slurm_cluster import slurm_cluster  # noqa: F401` and asks for the
`slurm_cluster` fixture (a test taking it as an argument needs `# noqa: F811` for ruff). Where Slurm cannot start here (no packages, not root, a daemon that dies)
the test skips with the reason; on CI (env CI=true) it fails instead, since CI installs Slurm
(.ci/run) and a skip there would hide a broken fixture.

Debian: `apt-get update && apt-get install -y slurm-wlm munge` (Slurm 22.05 on Debian 12)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import pytest

START_TIMEOUT_S = 60    # how long the daemons get to come up and the node to be idle
STOP_TIMEOUT_S = 10     # how long cancelled jobs get to leave, then each daemon to exit on SIGTERM
POLL_S = 0.2            # between two looks at sinfo or squeue
PARTITION = "debug"
DAEMONS = ("munged", "slurmctld", "slurmd")


class SlurmUnavailable(Exception):
    """Slurm cannot run here; the message is one line a test can skip (or fail) with."""


@dataclass
class SlurmCluster:
    """A running cluster: `env` for the clients (sbatch, squeue, scontrol, sinfo: os.environ with
    SLURM_CONF), the slurm.conf path `conf`, the one node's name `node`, the default `partition`,
    the work folder `workdir` (keys, logs, state), and `stop()`."""

    workdir: Path
    conf: Path
    node: str
    env: dict[str, str]
    partition: str = PARTITION
    _daemons: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)

    def run(self, *args: str, timeout: float = 30) -> str:
        """A Slurm client command's stdout, run against this cluster (raises if it fails)."""
        return subprocess.run(args, env=self.env, check=True, capture_output=True, text=True,
                              timeout=timeout).stdout

    def queued(self) -> list[str]:
        """The job ids in the queue (pending, running or completing); an array job once for each
        of its tasks."""
        return self.run("squeue", "-h", "-o", "%F").split()

    def wait(self, job_id: str, timeout: float = 60) -> None:
        """Poll squeue every POLL_S until job `job_id` (all its array tasks) has left the queue;
        TimeoutError after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while job_id in self.queued():
            if time.monotonic() > deadline:
                raise TimeoutError(f"Slurm job {job_id} still queued after {timeout} s")
            time.sleep(POLL_S)

    def stop(self) -> None:
        """Cancel every job and wait (bounded) until the queue is empty, then stop slurmd,
        slurmctld and munged, in that order (each a client of the next), and wait for each: a job
        left running would outlive the test and its slurmd."""
        # a slurmctld that does not answer (a failed start) has no jobs to drain
        with contextlib.suppress(subprocess.SubprocessError):
            self.run("scancel", f"--partition={self.partition}")
            deadline = time.monotonic() + STOP_TIMEOUT_S
            while self.queued() and time.monotonic() < deadline:
                time.sleep(POLL_S)
        for name in reversed(DAEMONS):
            process = self._daemons.pop(name, None)
            if process is None or process.poll() is not None:
                continue
            process.terminate()
            try:
                process.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def _log_tail(path: Path, lines: int = 3) -> str:
    """The last lines of a daemon's log joined on one line, for a skip reason."""
    if not path.exists():
        return f"(no {path.name})"
    return " | ".join(path.read_text(errors="replace").strip().splitlines()[-lines:])


def _check_host() -> None:
    """Raise SlurmUnavailable unless the daemons and clients are installed and we are root (the
    conf runs everything as SlurmUser=root, and munged's key must be root's)."""
    missing = [tool for tool in (*DAEMONS, "sbatch", "squeue", "sinfo", "scontrol", "scancel")
               if shutil.which(tool) is None]
    if missing:
        raise SlurmUnavailable(f"Slurm or munge not installed (no {', '.join(missing)}); "
                               "apt-get install slurm-wlm munge")
    if os.geteuid() != 0:
        raise SlurmUnavailable("a test Slurm cluster needs root (SlurmUser=root, munged's key)")


def _free_ports(count: int) -> list[int]:
    """`count` distinct TCP ports the kernel has free now: all held open together, so they differ,
    then released for the daemons to bind (another process taking one in between is unlikely)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _node_line() -> tuple[str, str]:
    """(this host's NodeName, its slurm.conf node line) from what `slurmd -C` reports: the CPUs and
    their layout (boards, sockets, cores, threads) must match what slurmd finds, or slurmctld
    drains the node or slurmd logs a reconfigured layout. RealMemory is lowered by 5%: a node
    registering with less memory than configured is drained, and what slurmd sees drifts."""
    result = subprocess.run(["slurmd", "-C"], capture_output=True, text=True, timeout=30)
    if result.returncode:
        raise SlurmUnavailable(f"slurmd -C failed: {result.stderr.strip()}")
    fields = dict(word.split("=", 1) for word in result.stdout.splitlines()[0].split())
    fields["RealMemory"] = str(int(int(fields["RealMemory"]) * 0.95))
    line = " ".join(f"{key}={value}" for key, value in fields.items())
    return fields["NodeName"], f"{line} State=UNKNOWN"


def _write_munge_key(path: Path) -> None:
    """A fresh 1024-byte random munge key, mode 0400 from its creation (munged refuses a key others
    can read)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o400)
    try:
        os.write(fd, os.urandom(1024))
    finally:
        os.close(fd)


def _write_conf(workdir: Path, node: str, node_line: str, munge_socket: Path) -> Path:
    """slurm.conf for one node that is also the controller: our munged (AuthInfo socket), no
    cgroups (proctrack/linuxproc, task/none), no accounting, no mail (Debian has no /bin/mail),
    every file under `workdir`. batch_sched_delay=0: batch jobs are scheduled on slurmctld's next
    1-second tick, not after the default 3 s (a 4-task array on 2 CPUs: 3 s, not 5). No log files: the daemons run in the foreground and log to
    stderr (_start); with a log file too they write each line twice."""
    controller_port, node_port = _free_ports(2)
    for folder in ("state", "spool"):
        (workdir / folder).mkdir()
    lines = [
        "ClusterName=chipcal-test",
        f"SlurmctldHost={node}",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={controller_port}",
        f"SlurmdPort={node_port}",
        "AuthType=auth/munge",
        "CredType=cred/munge",
        f"AuthInfo=socket={munge_socket}",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "JobAcctGatherType=jobacct_gather/none",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/backfill",
        "SchedulerParameters=batch_sched_delay=0",
        "MpiDefault=none",
        "ReturnToService=2",
        "AccountingStorageType=accounting_storage/none",
        "JobCompType=jobcomp/none",
        f"StateSaveLocation={workdir / 'state'}",
        f"SlurmdSpoolDir={workdir / 'spool'}",
        f"SlurmctldPidFile={workdir / 'slurmctld.pid'}",
        f"SlurmdPidFile={workdir / 'slurmd.pid'}",
        "MailProg=/bin/true",
        node_line,
        f"PartitionName={PARTITION} Nodes=ALL Default=YES MaxTime=INFINITE State=UP",
    ]
    conf = workdir / "slurm.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _start(cluster: SlurmCluster, name: str, args: list[str]) -> None:
    """Start one daemon in the foreground, its stdout and stderr (its log) into <name>.log in the
    work folder, in its own session so a ^C to pytest reaches only pytest and the fixture's
    finalizer stops it."""
    with open(cluster.workdir / f"{name}.log", "ab") as log:
        cluster._daemons[name] = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=cluster.env,
            start_new_session=True)


def _died(cluster: SlurmCluster) -> str | None:
    """If a daemon has exited: which, how, and the tail of its log; else None."""
    for name, process in cluster._daemons.items():
        if process.poll() is not None:
            log = cluster.workdir / f"{name}.log"
            return f"{name} exited with {process.returncode}: {_log_tail(log)}"
    return None


def _wait_until(cluster: SlurmCluster, ready, what: str, deadline: float) -> None:
    """Poll `ready()` every POLL_S until it is true; raise SlurmUnavailable if a daemon dies or the
    deadline passes first."""
    while not ready():
        reason = _died(cluster)
        if reason:
            raise SlurmUnavailable(f"{what}: {reason}")
        if time.monotonic() > deadline:
            logs = "; ".join(f"{name}: {_log_tail(cluster.workdir / f'{name}.log')}"
                             for name in cluster._daemons)
            raise SlurmUnavailable(f"{what}: not within {START_TIMEOUT_S} s ({logs})")
        time.sleep(POLL_S)


def _node_idle(cluster: SlurmCluster) -> bool:
    """Whether sinfo shows the node idle; a node down or drained (a stale registration) is resumed."""
    result = subprocess.run(["sinfo", "-h", "-o", "%T", "-n", cluster.node], env=cluster.env,
                            capture_output=True, text=True, timeout=30)
    state = result.stdout.strip()
    if state.startswith(("down", "drain")) and not state.endswith("*"):
        subprocess.run(["scontrol", "update", f"nodename={cluster.node}", "state=resume"],
                       env=cluster.env, capture_output=True, timeout=30)
    return state == "idle"


def start_cluster(workdir: Path) -> SlurmCluster:
    """Start munged, slurmctld and slurmd with everything under `workdir` (which must exist and be
    empty) and wait until the node is idle; raise SlurmUnavailable with a one-line reason if Slurm
    cannot run here, after stopping whatever had started."""
    _check_host()
    node, node_line = _node_line()
    if node != socket.gethostname().split(".")[0]:
        raise SlurmUnavailable(f"slurmd -C names this host {node}, not {socket.gethostname()}")
    key, munge_socket = workdir / "munge.key", workdir / "munge.socket"
    _write_munge_key(key)
    conf = _write_conf(workdir, node, node_line, munge_socket)
    cluster = SlurmCluster(workdir=workdir, conf=conf, node=node,
                           env={**os.environ, "SLURM_CONF": str(conf)})
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        # -f: munged wants its socket's folder (and those above) open to all, ours is root's only;
        # -F: in the foreground it logs to stderr (munged.log), not to a --log-file
        _start(cluster, "munged", ["munged", "-F", "-f", f"--key-file={key}",
                                   f"--socket={munge_socket}", f"--pid-file={workdir / 'munged.pid'}",
                                   f"--seed-file={workdir / 'munged.seed'}"])
        _wait_until(cluster, munge_socket.exists, "munged", deadline)
        _start(cluster, "slurmctld", ["slurmctld", "-D", "-f", str(conf)])
        _start(cluster, "slurmd", ["slurmd", "-D", "-f", str(conf)])
        _wait_until(cluster, lambda: _node_idle(cluster), f"node {node} idle", deadline)
    except BaseException:
        cluster.stop()
        raise
    return cluster


@pytest.fixture(scope="module")
def slurm_cluster(tmp_path_factory):
    """A running SlurmCluster for this module's tests, in a work folder of this pytest-xdist worker,
    stopped when the module is done (whatever its tests did). Skips where Slurm cannot run, fails
    instead on CI (env CI=true)."""
    try:
        cluster = start_cluster(tmp_path_factory.mktemp("slurm"))
    except SlurmUnavailable as why:
        if os.environ.get("CI") == "true":
            pytest.fail(f"test Slurm cluster did not start on CI: {why}")
        pytest.skip(f"no test Slurm cluster: {why}")
    yield cluster
    cluster.stop()
