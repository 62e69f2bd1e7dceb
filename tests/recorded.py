"""Fake /proc and /sys trees built from the recorded CPUs in tests/machines/ (see its README)."""

from __future__ import annotations

import json
import re
from pathlib import Path

MACHINES = Path(__file__).parent / "machines"
# The reference calibration document of the loader, report and predict tests: a fixture named here,
# never looked up under results/ (generated runs, which a copy of the project may leave out or add
# to: the first run found there once decided which document the tests read, and none in a copy
# without results/ stopped the collection)
REFERENCE_RUN = MACHINES / "amd-epyc-zen4-2vcpu" / "calibration-full.json"


def reference_document() -> dict:
    """The reference calibration document, parsed (a fresh copy each call)."""
    return json.loads(REFERENCE_RUN.read_text())


def reference_run_dir(directory: Path) -> Path:
    """`directory` made a run directory holding the reference document as its calibration.json."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "calibration.json").write_bytes(REFERENCE_RUN.read_bytes())
    return directory


def report_document(slug: str, created: str = "2026-01-01T00:00:00Z", median: float = 0.1, **changes) -> dict:
    """A calibration document for the `chipcal report` tests: the reference run as local-cpu with
    one fp32 peak of 200 GFLOP/s at 60 % of physics, 20 GB/s, 14 held-out runs with the given
    median error, no power source and one flag; top-level `changes` replace sections."""
    ref = reference_document()
    fp32 = next(p for p in ref["peaks"] if p["precision"] == "fp32")
    return {**ref, "machine_slug": slug, "created_utc": created, "quick": False,
            "chip": {**ref["chip"], "name": "local-cpu"},
            "peaks": [{**fp32, "measured_flop_per_s": 2e11, "fraction_of_physics": 0.6, "fraction_of_spec": None}],
            "bandwidth": {**ref["bandwidth"], "measured_bytes_per_s": 2e10},
            "validation": {**ref["validation"], "n": 14, "median_abs_error": median, "p90_abs_error": 0.2,
                           "max_abs_error": 0.3},
            "power": {"available": False, "source": "unavailable", "reason": "no powercap"},
            "flags": [{"code": "measured_below_physics_peak", "severity": "warning", "message": "below",
                       "values": {}}],
            **changes}


def machine_tree(tmp_path: Path, name: str, memory_kb: int = 24684084) -> tuple[Path, Path]:
    """(proc, sys) roots for detect_cpu: the recorded cpuinfo, one core per processor block
    (or its 'core id'), and the recorded cache indexes on every CPU."""
    folder = MACHINES / name
    cpuinfo = (folder / "cpuinfo.txt").read_text()
    proc, sys_ = tmp_path / name / "proc", tmp_path / name / "sys"
    proc.mkdir(parents=True)
    (proc / "cpuinfo").write_text(cpuinfo)
    (proc / "meminfo").write_text(f"MemTotal:       {memory_kb} kB\n")
    blocks = [b for b in cpuinfo.split("\n\n") if b.strip().startswith("processor")]
    caches = [dict(re.findall(r"(\w+)=(\S+)", line)) for line in (folder / "cache.txt").read_text().splitlines()]
    for i, block in enumerate(blocks):
        core = re.search(r"^core id\s*:\s*(\d+)", block, re.M)
        cpu = sys_ / f"devices/system/cpu/cpu{i}"
        (cpu / "topology").mkdir(parents=True)
        (cpu / "topology/physical_package_id").write_text("0\n")
        (cpu / "topology/core_id").write_text(f"{core.group(1) if core else i}\n")
        for n, cache in enumerate(caches):
            index = cpu / f"cache/index{n}"
            index.mkdir(parents=True)
            shared = cache["shared_cpu_list"] if cache["level"] == "3" else str(i)
            for key, value in (("level", cache["level"]), ("type", cache["type"]), ("size", cache["size"]),
                               ("shared_cpu_list", shared)):
                (index / key).write_text(f"{value}\n")
    return proc, sys_


def recorded_chip(tmp_path, name: str, doc):
    """The recorded CPU as a calibration models it: its cores, SIMD and clock from the recorded
    cpuinfo, its DRAM bandwidth and last-level cache from the run's recorded bandwidth probe as
    today's code reads it (calibrate.run does the same with a fresh probe)."""
    from chipcal.calibrate.refit import recorded_bandwidth
    from chipcal.measure import system
    from chipcal.measure.bandwidth import local_overrides

    proc, sys_ = machine_tree(tmp_path, name)
    spec = system.detect_cpu(proc, sys_, arch="x86_64")
    return system.local_chip(**local_overrides(recorded_bandwidth(doc), spec), cpu=spec)


def recorded_fingerprint(tmp_path: Path, name: str, arch: str = "x86_64", **torch_fields):
    """(CpuSpec, Fingerprint) of a recorded CPU; torch's answers (mkldnn_bf16=…, aten_cpu_capability=…)
    are given explicitly, never read from the host."""
    import dataclasses

    from chipcal.measure import cpu, system

    proc, sys_ = machine_tree(tmp_path, name)
    spec = cpu.detect_cpu(proc, sys_, arch=arch)
    features = tuple(sorted(f for f in cpu._flags(cpu._cpuinfo(proc)) if f in cpu.FEATURE_FLAGS))
    fields = dict.fromkeys(f.name for f in dataclasses.fields(system.Fingerprint))
    fields.update(cpu_model=spec.model_name, cpu_vendor=spec.vendor, arch=arch, physical_cores=spec.cores,
                  logical_cores=spec.cores * spec.threads_per_core, torch_threads=spec.cores,
                  cpu_features=features, cpu_clock_hz=spec.clock_hz, cpu_clock_source=spec.clock_source,
                  cpu_max_clock_source="", memory_bytes=spec.memory_bytes, l3_bytes=spec.l3_bytes, gpu_count=0,
                  python_version="3.11", slug=f"recorded-{name}", notes=(), isa_env=(), cpu_affinity=(),
                  torch_version="recorded", torchvision_version="recorded", cpu=spec)
    fields.update(torch_fields)
    return spec, system.Fingerprint(**fields)
