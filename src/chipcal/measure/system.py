"""Environment fingerprint: what a measurement ran on and a stable machine slug (registry match:
src/chipcal/measure/match.py).

`local_chip` reads /proc and /sys only (measure.cpu; no torch import) so physics-only tools
can use it. `fingerprint` adds torch's view (threads, CUDA device) and NVML's (clocks, power
limit). Anything unreadable is None, with the reason in `Fingerprint.notes`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
import re
import time
from dataclasses import dataclass
from pathlib import Path

from chipcal.measure.cpu import (
    FEATURE_FLAGS,
    _cpuinfo,
    _flags,
    cpu_clocks,
    cpu_precision_support,
    detect_cpu,
)
from chipcal.measure.device import CPU, Device
from chipcal.measure.nvml import NvmlUnavailable, cuda_uuid, device_handle, open_nvml, text
from chipcal.model.chip import Chip
from chipcal.model.local import CpuSpec, chip_from_cpu


def local_chip(memory_bandwidth_bytes_per_s: float | None = None, llc_bytes: int | None = None,
               measured_by: str = "", support: dict[str, str] | None = None, cpu: CpuSpec | None = None) -> Chip:
    """The local CPU as a Chip (physics peaks; no vendor spec).

    `cpu` is the CPU as already detected (Fingerprint.cpu), so a calibration reads /proc and /sys
    once; None: detected now.

    `support` (Fingerprint.cpu_precisions, which asks torch) keeps engines for native precisions
    only; without it the feature flags decide, and no torch is imported.
    Measured figures replace assumptions when given: the sustained DRAM bandwidth replaces the
    assumed per-core share, and a cache knee (`llc_bytes`) caps the last-level cache (in a VM
    the OS reports the host's whole L3, not the slice this guest's working sets keep).
    `measured_by` names the measurement for the chip's source strings.
    """
    spec = cpu or detect_cpu()
    if support is not None:
        spec = dataclasses.replace(spec, native_precisions=frozenset(p for p, s in support.items() if s == "native"))
    if memory_bandwidth_bytes_per_s:
        spec = dataclasses.replace(spec, memory_bandwidth_bytes_per_s=memory_bandwidth_bytes_per_s,
                                   memory_bandwidth_source=f"measured: sustained bandwidth ({measured_by})")
    if llc_bytes and (not spec.l3_bytes or llc_bytes < spec.l3_bytes):
        spec = dataclasses.replace(spec, l3_bytes=int(llc_bytes), l3_source=(
            f"measured: cache knee at {llc_bytes / 2**20:.0f} MiB working set ({measured_by}); "
            f"the OS reports {spec.l3_bytes / 2**20:.0f} MiB"))
    return chip_from_cpu(spec)


@dataclass(frozen=True)
class Fingerprint:
    """What a measurement ran on. GPU fields are None without a CUDA device; `notes` says why."""

    cpu_model: str
    cpu_vendor: str
    arch: str
    physical_cores: int
    logical_cores: int
    torch_threads: int | None
    cpu_features: tuple[str, ...]
    cpu_clock_hz: float | None
    cpu_clock_source: str
    cpu_max_clock_hz: float | None
    cpu_max_clock_source: str
    memory_bytes: int
    l3_bytes: int
    gpu_count: int
    gpu_index: int | None
    gpu_name: str | None
    gpu_sm_count: int | None
    gpu_memory_bytes: int | None
    gpu_compute_capability: str | None
    gpu_sm_clock_hz: float | None
    gpu_mem_clock_hz: float | None
    gpu_max_sm_clock_hz: float | None
    gpu_power_limit_w: float | None
    gpu_default_power_limit_w: float | None
    driver_version: str | None
    cuda_driver_version: str | None
    cuda_runtime_version: str | None
    torch_version: str | None
    torchvision_version: str | None
    python_version: str
    slug: str
    notes: tuple[str, ...] = ()
    aten_cpu_capability: str | None = None     # torch.backends.cpu.get_cpu_capability(): AVX512, AVX2, ...
    mkldnn_bf16: bool | None = None            # torch: oneDNN has native bf16 kernels on this CPU
    mkldnn_fp16: bool | None = None            # torch: oneDNN has native fp16 kernels on this CPU
    isa_env: tuple[tuple[str, str], ...] = ()  # the ISA_ENV switches that are set
    cpu_affinity: tuple[int, ...] = ()         # CPUs this process may run on
    gpu_pci_device_id: str | None = None       # "10de:2330" (vendor:device, NVML pciDeviceId)
    # the detected CPU the fields above come from (measure.cpu.detect_cpu), so nothing detects it
    # again; not written by to_dict, so None in a fingerprint read back from a document
    cpu: CpuSpec | None = dataclasses.field(default=None, compare=False, repr=False)

    @property
    def host_identity(self) -> dict:
        """This machine's CPU-side identity (see `host_identity`)."""
        return host_identity(self.cpu_model, self.physical_cores, self.logical_cores, self.memory_bytes,
                             self.cpu_features)

    @property
    def cpu_precisions(self) -> dict[str, str]:
        """Precision -> "native" (a hardware unit torch uses) or "emulated" on this CPU (see
        `cpu_precision_support`)."""
        env = dict(self.isa_env)
        cap = env.get("ONEDNN_MAX_CPU_ISA") or env.get("DNNL_MAX_CPU_ISA")
        return cpu_precision_support(set(self.cpu_features), self.arch, self.mkldnn_bf16, self.mkldnn_fp16, cap)

    def summary(self) -> dict[str, str]:
        """The fields a report shows, as display strings."""
        out = {
            "CPU": f"{self.cpu_model} ({self.physical_cores} physical / {self.logical_cores} logical cores, "
                   f"{self.torch_threads} torch threads)",
            "CPU clock": (f"{self.cpu_clock_hz / 1e9:.2f} GHz ({self.cpu_clock_source})" if self.cpu_clock_hz
                          else "unreadable"),
            "CPU features": ", ".join(f for f in self.cpu_features
                                      if f.startswith(("avx", "amx", "fma", "neon", "sve"))),
            "memory": f"{self.memory_bytes / 2**30:.1f} GiB",
            "torch / torchvision": f"{self.torch_version} / {self.torchvision_version}",
            "python": self.python_version,
        }
        if self.gpu_name:
            out["GPU"] = (f"{self.gpu_name}, {self.gpu_sm_count} SMs, {(self.gpu_memory_bytes or 0) / 2**30:.0f} GiB, "
                          f"power limit {self.gpu_power_limit_w} W")
            out["driver / CUDA"] = f"{self.driver_version} / {self.cuda_runtime_version}"
        return out

    def to_dict(self) -> dict:
        return {f.name: (list(v) if isinstance(v := getattr(self, f.name), tuple) else v)
                for f in dataclasses.fields(self) if f.name != "cpu"}

    def cache_key(self, device: Device) -> dict:
        """Fields that, when changed, make a cached peak/bandwidth measurement stale."""
        key = {"slug": self.slug, "device": str(device), "torch_version": self.torch_version,
               "torch_threads": self.torch_threads, "aten_cpu_capability": self.aten_cpu_capability,
               "isa_env": [list(kv) for kv in self.isa_env], "cpu_affinity": list(self.cpu_affinity)}
        if device.is_cuda:
            key |= {"gpu_index": self.gpu_index, "driver_version": self.driver_version,
                    "cuda_runtime_version": self.cuda_runtime_version,
                    "gpu_power_limit_w": self.gpu_power_limit_w}
        return key


def _slugify(value: str, limit: int = 32) -> str:
    value = re.sub(r"\((r|tm|c)\)|\bcpu\b|@.*$", " ", value.lower())
    return re.sub(r"[^a-z0-9]+", "-", value).strip("-")[:limit].strip("-") or "unknown"


def machine_slug(cpu_model: str, cores: int, logical: int, memory_bytes: int, features: tuple[str, ...],
                 gpu_name: str | None = None, gpu_memory_bytes: int | None = None,
                 gpu_sm_count: int | None = None) -> str:
    """A stable, path-safe machine name: readable part plus a hash of the hardware identity.

    Software versions and clocks are not in it: they go into the cache key instead.
    """
    identity = [cpu_model, cores, logical, round(memory_bytes / 2**30), sorted(features),
                gpu_name, None if gpu_memory_bytes is None else round(gpu_memory_bytes / 2**30), gpu_sm_count]
    digest = hashlib.sha1(json.dumps(identity).encode()).hexdigest()[:8]
    parts = [_slugify(cpu_model), f"{cores}c"]
    if gpu_name:
        parts.append(_slugify(gpu_name))
    return "-".join([*parts, digest])


def host_identity(cpu_model: str, physical_cores: int, logical_cores: int, memory_bytes: int,
                  cpu_features: tuple[str, ...]) -> dict:
    """The CPU side of the machine identity `machine_slug` hashes (no GPU, no software): what a
    CPU measurement belongs to, and what can be read without torch (`local_host_identity`)."""
    return {"cpu_model": cpu_model, "physical_cores": physical_cores, "logical_cores": logical_cores,
            "memory_gib": round(memory_bytes / 2**30), "cpu_features": sorted(cpu_features)}


def _cpu_features(blocks: list[dict[str, str]]) -> tuple[str, ...]:
    return tuple(sorted(f for f in _flags(blocks) if f in FEATURE_FLAGS))


def local_host_identity(spec: CpuSpec) -> dict:
    """`Fingerprint.host_identity` of this machine (its CPU `spec` as detect_cpu read it), read
    from /proc and /sys only (no torch)."""
    return host_identity(spec.model_name, spec.cores, spec.cores * spec.threads_per_core, spec.memory_bytes,
                         _cpu_features(_cpuinfo(Path("/proc"))))


def host_differences(recorded: dict, spec: CpuSpec) -> list[str]:
    """Where the CPU identity `recorded` (a `host_identity`) differs from this machine's (CPU
    `spec` as detect_cpu read it), as 'field: recorded (here: this machine's)'; empty: the same
    machine as far as the OS tells, without torch."""
    here = local_host_identity(spec)
    return [f"{k}: {recorded.get(k)!r} (here: {v!r})" for k, v in here.items() if recorded.get(k) != v]


def matches_host_key(key: dict, device: Device = CPU) -> bool:
    """Whether a `Fingerprint.cache_key(device)` agrees with this process on what is known without
    importing torch: the device, the torch release (package metadata has no local build tag:
    '2.14.1' for torch.__version__ '2.14.1+cu130'), the ISA overrides and the CPU affinity.
    torch's thread count and ATen ISA need torch itself."""
    from importlib import metadata

    try:
        release = metadata.version("torch").split("+")[0]
    except metadata.PackageNotFoundError:
        return False
    env = _env_fields()
    return (key.get("device") == str(device) and str(key.get("torch_version")).split("+")[0] == release
            and key.get("isa_env") == [list(kv) for kv in env["isa_env"]]
            and key.get("cpu_affinity") == list(env["cpu_affinity"]))


def _gpu_fields(index: int, notes: list[str]) -> dict:
    """GPU fields of the fingerprint from torch (name, SMs, capability) and NVML (clocks, power)."""
    import torch

    fields: dict = {"gpu_count": 0, "gpu_index": None, "gpu_name": None, "gpu_sm_count": None,
                    "gpu_memory_bytes": None, "gpu_compute_capability": None, "gpu_sm_clock_hz": None,
                    "gpu_mem_clock_hz": None, "gpu_max_sm_clock_hz": None, "gpu_power_limit_w": None,
                    "gpu_default_power_limit_w": None, "driver_version": None, "cuda_driver_version": None,
                    "gpu_pci_device_id": None,
                    "cuda_runtime_version": torch.version.cuda}
    if not torch.cuda.is_available():
        notes.append("no CUDA device visible to torch" +
                     ("" if torch.version.cuda else " (torch is a CPU-only build)"))
        return fields
    fields["gpu_count"] = torch.cuda.device_count()
    props = torch.cuda.get_device_properties(index)
    fields |= {"gpu_index": index, "gpu_name": props.name, "gpu_sm_count": props.multi_processor_count,
               "gpu_memory_bytes": int(props.total_memory),
               "gpu_compute_capability": f"{props.major}.{props.minor}"}
    try:
        nv = open_nvml()
        handle = device_handle(nv, index, cuda_uuid(index))
    except NvmlUnavailable as exc:
        notes.append(f"NVML: {exc}")
        return fields

    def query(name: str, call):
        try:
            return call()
        except Exception as exc:  # NVMLError_NotSupported, NoPermission, ...
            notes.append(f"NVML {name}: {exc}")
            return None

    fields["gpu_name"] = query("name", lambda: text(nv.nvmlDeviceGetName(handle))) or fields["gpu_name"]
    mem = query("memory", lambda: nv.nvmlDeviceGetMemoryInfo(handle).total)
    fields["gpu_memory_bytes"] = int(mem) if mem else fields["gpu_memory_bytes"]
    fields["driver_version"] = query("driver version", lambda: text(nv.nvmlSystemGetDriverVersion()))
    pci = query("PCI info", lambda: nv.nvmlDeviceGetPciInfo(handle).pciDeviceId)
    # pciDeviceId packs the device ID in its upper 16 bits and the vendor ID in its lower 16 (nvml.h)
    fields["gpu_pci_device_id"] = None if pci is None else f"{int(pci) & 0xFFFF:04x}:{int(pci) >> 16 & 0xFFFF:04x}"
    cuda_drv = query("CUDA driver version", nv.nvmlSystemGetCudaDriverVersion)
    fields["cuda_driver_version"] = None if cuda_drv is None else f"{cuda_drv // 1000}.{cuda_drv % 1000 // 10}"
    for field, getter, clock in (("gpu_sm_clock_hz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_SM"),
                                 ("gpu_mem_clock_hz", "nvmlDeviceGetClockInfo", "NVML_CLOCK_MEM"),
                                 ("gpu_max_sm_clock_hz", "nvmlDeviceGetMaxClockInfo", "NVML_CLOCK_SM")):
        mhz = query(field, lambda g=getter, c=clock: getattr(nv, g)(handle, getattr(nv, c)))
        fields[field] = None if mhz is None else float(mhz) * 1e6
    for field, getter in (("gpu_power_limit_w", "nvmlDeviceGetEnforcedPowerLimit"),
                          ("gpu_default_power_limit_w", "nvmlDeviceGetPowerManagementDefaultLimit")):
        mw = query(field, lambda g=getter: getattr(nv, g)(handle))
        fields[field] = None if mw is None else float(mw) / 1e3
    return fields


# Environment switches that change which CPU kernels torch runs: ATen's vector ISA, oneDNN's
# (convolutions, bf16/int8 GEMMs) and oneMKL's (torch's fp32 BLAS on x86, BLAS_INFO=mkl; oneMKL
# honours MKL_ENABLE_INSTRUCTIONS on Intel processors). A cached peak measured under other
# switches is stale (Fingerprint.cache_key).
ISA_ENV = ("ATEN_CPU_CAPABILITY", "ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "MKL_ENABLE_INSTRUCTIONS")


def torch_cpu_fields() -> dict:
    """torch's view of the CPU: ATen's vector ISA and whether oneDNN has bf16/fp16 kernels here.

    `torch.ops.mkldnn._is_mkldnn_*_supported` are private (present in torch 2.1-2.15); where one
    is missing the answer is None (not asked) rather than a guess.
    """
    import torch

    def ask(name: str) -> bool | None:
        op = getattr(torch.ops.mkldnn, name, None)
        try:
            return None if op is None else bool(op())
        except (RuntimeError, AttributeError):
            return None

    return {"aten_cpu_capability": torch.backends.cpu.get_cpu_capability(),
            "mkldnn_bf16": ask("_is_mkldnn_bf16_supported"), "mkldnn_fp16": ask("_is_mkldnn_fp16_supported"),
            **_env_fields()}


def _env_fields() -> dict:
    """The ISA overrides set in the environment and the CPUs this process may run on (no torch)."""
    return {"isa_env": tuple((k, os.environ[k]) for k in ISA_ENV if k in os.environ),
            "cpu_affinity": tuple(sorted(os.sched_getaffinity(0))) if hasattr(os, "sched_getaffinity") else ()}


def fingerprint(gpu_index: int = 0) -> Fingerprint:
    """Fingerprint of this machine (GPU fields for CUDA device `gpu_index` when there is one)."""
    import torch
    import torchvision

    notes: list[str] = []
    spec = detect_cpu()
    blocks = _cpuinfo(Path("/proc"))
    features = _cpu_features(blocks)
    clocks = cpu_clocks()
    gpu = _gpu_fields(gpu_index, notes)
    logical = spec.cores * spec.threads_per_core
    slug = machine_slug(spec.model_name, spec.cores, logical, spec.memory_bytes, features,
                        gpu["gpu_name"], gpu["gpu_memory_bytes"], gpu["gpu_sm_count"])
    return Fingerprint(
        cpu_model=spec.model_name, cpu_vendor=spec.vendor, arch=spec.arch,
        physical_cores=spec.cores, logical_cores=logical, torch_threads=torch.get_num_threads(),
        cpu_features=features,
        cpu_clock_hz=clocks["current"][0], cpu_clock_source=clocks["current"][1],
        cpu_max_clock_hz=clocks["max"][0], cpu_max_clock_source=clocks["max"][1],
        memory_bytes=spec.memory_bytes, l3_bytes=spec.l3_bytes,
        torch_version=torch.__version__, torchvision_version=torchvision.__version__,
        python_version=platform.python_version(), slug=slug, notes=tuple(notes), **gpu, **torch_cpu_fields(),
        cpu=spec,
    )


class OtherLoad:
    """CPUs used by other processes, plus hypervisor steal, on average while the block ran.

        with OtherLoad() as load: ...
        load.cpus   # e.g. 0.9: other work kept almost one CPU busy during the measurement

    From psutil: Δ(system busy time, steal included) − Δ(this process's CPU time), over wall time.
    The 1-min load average cannot tell this: it counts this process's own threads.
    """

    def __enter__(self) -> OtherLoad:
        import psutil

        self._process = psutil.Process()
        self._start = (time.monotonic(), self._system_busy(), self._own())
        self.cpus: float | None = None
        return self

    def __exit__(self, *exc) -> None:
        t0, busy0, own0 = self._start
        wall = time.monotonic() - t0
        if wall > 0:
            self.cpus = max(0.0, (self._system_busy() - busy0 - (self._own() - own0)) / wall)

    @staticmethod
    def _system_busy() -> float:
        import psutil

        t = psutil.cpu_times()
        # guest time is already inside user/nice on Linux; idle and iowait are not busy
        not_busy = ("idle", "iowait", "guest", "guest_nice")
        return sum(getattr(t, f) for f in t._fields if f not in not_busy)

    def _own(self) -> float:
        t = self._process.cpu_times()
        return t.user + t.system


def busy_note(other_cpus: float | None, logical_cores: int) -> str | None:
    """A warning when other work used ≥ 1/4 of the CPUs during a measurement."""
    if other_cpus is None or other_cpus < 0.25 * logical_cores:
        return None
    return (f"machine busy while measuring: other processes (and hypervisor steal) used {other_cpus:.1f} of "
            f"{logical_cores} CPUs on average; timings include their interference")
