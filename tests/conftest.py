"""Shared test configuration: `gpu` tests skip without CUDA; the timing tests, then the slow ones start first; under
pytest-xdist a `timing` test runs alone; models and micro-layers can be characterized once; the garbage collector
leaves the imported libraries alone."""

from __future__ import annotations

import gc
import os
import tempfile
import time
from pathlib import Path

import pytest


def pytest_collection_modifyitems(config, items):
    # pytest-xdist hands tests out in this order (--no-loadscope-reorder). The `timing` tests first:
    # one waits until the other worker's test has finished, and behind a 2-minute refit its worker
    # idled (60 s waits in a --durations run). Then the slow tests, those of a refit group (the
    # longest units) before the others: a long test started last would leave the other worker idle
    # at the end. The sort is stable: the order within each kind stays.
    items.sort(key=lambda item: ("timing" not in item.keywords, "slow" not in item.keywords,
                                 item.get_closest_marker("xdist_group") is None))
    gpu_items = [item for item in items if "gpu" in item.keywords]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in gpu_items:
        item.add_marker(skip)


SUITE_CPU_BUDGET_S = 300   # user + sys of the README's test command on the 2-vCPU Zen 4 VM (issue 50)
_MACHINE_BUSY_AT_START: list[float] = []


def _machine_busy_s() -> float | None:
    """Seconds the whole machine's CPUs have been busy since boot (user, nice, system, irq and
    softirq of /proc/stat's first line, in USER_HZ); None where there is no /proc/stat."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    except OSError:
        return None
    return sum(int(fields[i]) for i in (0, 1, 2, 5, 6)) / os.sysconf("SC_CLK_TCK")


# gc.set_threshold's allocations between young collections (CPython's default 700) and young collections between
# older ones (10, 10); see pytest_configure
GC_THRESHOLDS = (50_000, 20, 20)


def pytest_configure(config):
    """Fewer collections of the whole heap (GC_THRESHOLDS). A worker holds about a million objects: torch's,
    transformers' and the session's shared results (refits, characterized workloads). With CPython's defaults each
    worker ran 40-55 full collections at 0.3-0.5 s each, about 40 of the suite's 330 CPU-seconds (gc.callbacks,
    2-vCPU Zen 4 VM); with these and the freeze after collection, none but that freeze's own, and about 9 s spent in
    every generation together: the suite's CPU went from 325-356 s to 276-291 s."""
    gc.set_threshold(*GC_THRESHOLDS)
    if "PYTEST_XDIST_WORKER" not in os.environ and (busy := _machine_busy_s()) is not None:
        _MACHINE_BUSY_AT_START.append(busy)


def pytest_terminal_summary(terminalreporter):
    """The run's CPU seconds (user + sys of pytest and its finished children, the pytest-xdist
    workers among them) beside the budget: on a 2-core machine 2.5x slower per core, 300 s of CPU
    is 6 minutes of wall time. Then the whole machine's busy seconds over the run, which also count
    what ran outside pytest's processes: the Slurm test's calibrations run under slurmd. A
    contributor sees what a change costs, whatever the machine's speed; the figures are the
    machine's own, not a check."""
    import resource

    if "PYTEST_XDIST_WORKER" in os.environ:
        return
    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    user, system = sum(u.ru_utime for u in used), sum(u.ru_stime for u in used)
    line = (f"CPU: {user:.1f} s user + {system:.1f} s sys = {user + system:.1f} s "
            f"(the budget on the reference 2-vCPU Zen 4: {SUITE_CPU_BUDGET_S} s)")
    if _MACHINE_BUSY_AT_START and (busy := _machine_busy_s()) is not None:
        line += f"; the whole machine was busy {busy - _MACHINE_BUSY_AT_START[0]:.1f} CPU-s (Slurm's tasks included)"
    terminalreporter.write_line(line)


COLLECTION_WAIT_S = 300     # how long a timing test waits for the other workers to finish collecting


def _collected_marks() -> Path:
    """Where each pytest-xdist worker of this run says it has finished collecting (one file each)."""
    return Path(tempfile.gettempdir()) / f"chipcal-collected-{os.environ['PYTEST_XDIST_TESTRUNUID']}"


def pytest_collection_finish(session):
    """The objects alive once the tests are collected (the imported modules, about 490,000) are never garbage:
    frozen, no collection scans them again, pytest's five at the end of the session included (gc.freeze)."""
    gc.collect()
    gc.freeze()
    if "PYTEST_XDIST_TESTRUNUID" in os.environ:
        marks = _collected_marks()
        marks.mkdir(exist_ok=True)
        (marks / os.environ["PYTEST_XDIST_WORKER"]).touch()


def _wait_for_every_worker_to_collect() -> None:
    """Until every worker has collected: a worker still importing torch, torchvision and
    transformers for its collection is a load no lock covers. In a fresh clone's CI the first
    timing tests ran beside it, and torch's Timer read a Linear 1.5-2.4x slower than the hooks
    timed it a moment before (0.42-0.66 where 1 is right)."""
    workers = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    deadline = time.monotonic() + COLLECTION_WAIT_S
    while len(list(_collected_marks().glob("gw*"))) < workers and time.monotonic() < deadline:
        time.sleep(0.1)


@pytest.fixture(autouse=True)
def _timing_tests_run_alone(request, tmp_path_factory):
    """Under pytest-xdist, a `timing` test runs with no other test beside it: the other worker's
    load would be timed with the code. It waits until every worker has collected, shuts a gate to
    tests not yet started, waits until the running ones have left the room and holds it alone; any
    other test passes the gate and shares the room. (flock on two files in the directory the workers
    share; without xdist, nothing.)"""
    if "PYTEST_XDIST_WORKER" not in os.environ:
        yield
        return
    import fcntl

    shared = tmp_path_factory.getbasetemp().parent
    with open(shared / "timing-gate.lock", "a") as gate, open(shared / "timing-room.lock", "a") as room:
        if "timing" in request.keywords:
            _wait_for_every_worker_to_collect()
            fcntl.flock(gate, fcntl.LOCK_EX)
            fcntl.flock(room, fcntl.LOCK_EX)
        else:
            fcntl.flock(gate, fcntl.LOCK_SH)
            fcntl.flock(room, fcntl.LOCK_SH)
            fcntl.flock(gate, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(room, fcntl.LOCK_UN)
            fcntl.flock(gate, fcntl.LOCK_UN)


@pytest.fixture(autouse=True)
def _one_torch_thread_beside_another_worker(request):
    """Under pytest-xdist, a test that is not `timing` runs torch on one thread: two workers with
    torch's default intra-op threads each oversubscribe the cores, and the spinning of the idle
    OpenMP threads costs CPU for nothing (tests/test_workload_models.py and test_workload_crosscheck.py
    under two workers: 64 CPU seconds with the default threads, 47 with one). A `timing` test, alone
    in the room, keeps torch's default; code that fixes its own threads (measure.timing.fixed_threads)
    still does. Without xdist, nothing."""
    if "PYTEST_XDIST_WORKER" not in os.environ or "timing" in request.keywords:
        yield
        return
    import torch

    default = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(default)


def _shared_folder(tmp_path_factory, name: str):
    """A folder every pytest-xdist worker of this pytest run sees (the workers' common parent), or
    this process's own without xdist; new for each run."""
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / name
    shared.mkdir(exist_ok=True)
    return shared


@pytest.fixture(scope="session")
def once_per_run(tmp_path_factory):
    """once_per_run(key, build) -> build(), computed once per pytest run whichever worker asks
    first, whatever tests the scheduler hands to which worker: the first asker builds it under a
    lock on the key and leaves it pickled in the shared folder; an asker on another worker waits on
    the lock and reads it back, one on the same worker gets the same object. For results that cost
    tens of seconds (a refit of a recorded run), asserted on by several tests."""
    import fcntl
    import hashlib
    import pickle

    shared = _shared_folder(tmp_path_factory, "once")
    here: dict[str, object] = {}

    def get(key: str, build):
        if key not in here:
            path = shared / f"{hashlib.sha256(key.encode()).hexdigest()[:24]}.pickle"
            with open(path.with_suffix(".lock"), "a") as lock:
                fcntl.flock(lock, fcntl.LOCK_EX)
                if path.exists():
                    here[key] = pickle.loads(path.read_bytes())
                else:
                    here[key] = build()
                    partial = path.with_suffix(f".{os.getpid()}.tmp")
                    partial.write_bytes(pickle.dumps(here[key]))
                    partial.replace(path)
        return here[key]

    return get


@pytest.fixture(scope="session")
def _workloads(tmp_path_factory):
    """(this process's workloads by key, the folder where every pytest-xdist worker of the session
    leaves the workloads it characterized, as JSON)."""
    return {}, _shared_folder(tmp_path_factory, "characterized")


@pytest.fixture(scope="module")
def characterize_once(_workloads):
    """For a test module: each torchvision model (by name, batch, input size, partition) and each
    micro-layer or chain of measure.layers (by label and partition) is characterized once per
    session, by whichever pytest-xdist worker needs it first (the other reads it back:
    src/chipcal/model/workload/serialize.py round-trips a Workload to an equal one). A Workload is a frozen
    record and characterizing the same module again gives an equal one; the tests of
    characterization itself do not use this."""
    import hashlib
    import json

    from chipcal.measure import layers
    from chipcal.measure.layers import default_cases, default_chains
    from chipcal.model.workload import characterization, models
    from chipcal.model.workload.serialize import workload_from_dict, workload_to_dict

    known, shared = _workloads
    cases = {c.label for c in default_cases("cpu") + default_cases("cuda") + default_chains()}
    real_model, real_characterize = models.characterize_model, characterization.characterize

    def once(key, build):
        if key not in known:
            path = shared / f"{hashlib.sha256(repr(key).encode()).hexdigest()[:24]}.json"
            if path.exists():
                known[key] = workload_from_dict(json.loads(path.read_text()))
            else:
                known[key] = build()
                partial = path.with_suffix(f".{os.getpid()}.tmp")
                partial.write_text(json.dumps(workload_to_dict(known[key])))
                partial.replace(path)      # whole or absent for the other worker
        return known[key]

    def characterize_model(name, batch=1, input_size=None, partition="fused"):
        return once(("model", name, batch, input_size, partition),
                    lambda: real_model(name, batch, input_size, partition))

    def characterize(module, example_inputs, model_name="custom", **options):
        if model_name not in cases or set(options) - {"fuse", "codegen"} or options.get("codegen"):
            return real_characterize(module, example_inputs, model_name, **options)
        return once(("case", model_name, options.get("fuse", True)),
                    lambda: real_characterize(module, example_inputs, model_name, **options))

    def case_workload(case, fuse=False, built=None):     # a case read back is not built (its random weights)
        def build():
            module, inputs = built if built is not None else case.build()
            return real_characterize(module, inputs, case.label, fuse=fuse)
        return once(("case", case.label, fuse), build)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(models, "characterize_model", characterize_model)
        mp.setattr(characterization, "characterize", characterize)
        mp.setattr(layers, "case_workload", case_workload)
        yield


@pytest.fixture
def cli(capsys):
    """Run a CLI `main(argv)` in-process: returns (exit status, stdout, stderr)."""

    def call(main, argv):
        try:
            rc = main(list(argv))
        except SystemExit as exc:
            rc = exc.code
        out, err = capsys.readouterr()
        return rc, out, err

    return call


@pytest.fixture(scope="session")
def llm_cache_dir(tmp_path_factory):
    """The directory of `source`'s cache, one per test session (per worker)."""
    return tmp_path_factory.mktemp("llm-cache")


@pytest.fixture(scope="module")
def source(llm_cache_dir):
    """An LLM workload cache of the session's own (tests/test_llm*.py, test_serving.py,
    test_mlperf_llm.py, ...): each forward is characterized once per worker and read back from
    the file in the other modules."""
    from chipcal.measure.workloads import WorkloadSource

    mp = pytest.MonkeyPatch()
    mp.setenv("CHIPCAL_CACHE_DIR", str(llm_cache_dir))
    yield WorkloadSource()
    mp.undo()
