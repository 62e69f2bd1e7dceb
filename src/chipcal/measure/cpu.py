"""The local CPU read from /proc and /sys (no torch): model, topology, caches, clocks, feature
flags, and which GEMM precisions have a hardware unit. Roots are injectable for tests (recorded
CPUs in tests/machines); `detect_cpu` returns the `CpuSpec` that model.local builds a Chip from.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path

from chipcal.model.local import CpuSpec, cpu_class

# Feature flags worth recording (x86 /proc/cpuinfo "flags", Arm "Features").
FEATURE_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_fp16", "avx512_vnni", "avx_vnni",
                 "amx_tile", "amx_bf16", "amx_int8", "amx_fp16", "asimd", "asimdhp", "asimddp", "i8mm",
                 "bf16", "sve", "sve2")


def _read(path: Path) -> str | None:
    try:
        return path.read_text()
    except OSError:
        return None


def _cpuinfo(proc: Path) -> list[dict[str, str]]:
    """/proc/cpuinfo as one dict per processor block."""
    blocks, current = [], {}
    for line in (_read(proc / "cpuinfo") or "").splitlines():
        if not line.strip():
            if current:
                blocks.append(current)
            current = {}
            continue
        key, _, value = line.partition(":")
        current[key.strip()] = value.strip()
    if current:
        blocks.append(current)
    return blocks


def _size_bytes(text_: str) -> int:
    """sysfs cache size '48K' / '2048K' / '32M' -> bytes."""
    m = re.fullmatch(r"\s*(\d+)\s*([KMG]?)\s*", text_ or "")
    if not m:
        return 0
    return int(m.group(1)) * {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}[m.group(2)]


def _cpu_dirs(sys: Path) -> list[Path]:
    base = sys / "devices/system/cpu"
    dirs = sorted((p for p in base.glob("cpu[0-9]*") if p.name[3:].isdigit()), key=lambda p: int(p.name[3:]))
    online = []
    for d in dirs:
        flag = _read(d / "online")
        if flag is None or flag.strip() == "1":
            online.append(d)
    return online


def _topology(sys: Path) -> tuple[int, int]:
    """(physical cores, logical CPUs) from sysfs topology; psutil when sysfs has none."""
    cores: set[tuple[str, str]] = set()
    dirs = _cpu_dirs(sys)
    for d in dirs:
        pkg = _read(d / "topology/physical_package_id")
        core = _read(d / "topology/core_id")
        if pkg is not None and core is not None:
            cores.add((pkg.strip(), core.strip()))
    if cores:
        return len(cores), len(dirs)
    import psutil

    logical = psutil.cpu_count(logical=True) or 1
    return psutil.cpu_count(logical=False) or logical, logical


def _caches(sys: Path) -> tuple[int, int, int]:
    """(L1d bytes per core, L2 bytes per core, total L3 bytes) from sysfs cache indexes."""
    l1d = l2 = 0
    l3_instances: dict[str, int] = {}
    for n, d in enumerate(_cpu_dirs(sys)):
        for idx in sorted((d / "cache").glob("index*")):
            level = (_read(idx / "level") or "").strip()
            kind = (_read(idx / "type") or "").strip()
            size = _size_bytes((_read(idx / "size") or "").strip())
            shared = (_read(idx / "shared_cpu_list") or str(n)).strip()
            if n == 0 and level == "1" and kind in ("Data", "Unified"):
                l1d = size
            elif n == 0 and level == "2":
                l2 = size
            elif level == "3":
                l3_instances[shared] = size
    return l1d, l2, sum(l3_instances.values())


def _mhz(value: str | None) -> float | None:
    try:
        return float(value) * 1e6 if value else None
    except ValueError:
        return None


def cpufreq_current_hz(sys: Path = Path("/sys")) -> float | None:
    """Mean cpufreq scaling_cur_freq over the CPUs in Hz; None without cpufreq (in most VMs)."""
    cur = [_read(d / "cpufreq/scaling_cur_freq") for d in _cpu_dirs(sys)]
    khz = [int(c) for c in cur if c and c.strip().isdigit()]
    return sum(khz) / len(khz) * 1e3 if khz else None


def cpu_clocks(proc: Path = Path("/proc"), sys: Path = Path("/sys")) -> dict[str, tuple[float | None, str]]:
    """Current and maximum CPU clock in Hz, each with where it was read.

    Order of preference — max: cpufreq cpuinfo_max_freq, then the '@ x.xxGHz' in the model name;
    current: cpufreq scaling_cur_freq (mean over CPUs), then /proc/cpuinfo 'cpu MHz'. Under a
    hypervisor without cpufreq, 'cpu MHz' is the TSC rate the host exposes, not the running clock.
    """
    cpufreq = sys / "devices/system/cpu/cpu0/cpufreq"
    max_khz = _read(cpufreq / "cpuinfo_max_freq")
    blocks = _cpuinfo(proc)
    model = blocks[0].get("model name", "") if blocks else ""
    if max_khz and max_khz.strip().isdigit():
        maximum = (int(max_khz) * 1e3, "sysfs cpufreq/cpuinfo_max_freq")
    elif m := re.search(r"@\s*([\d.]+)\s*GHz", model):
        maximum = (float(m.group(1)) * 1e9, "model name '@ GHz' (nominal base clock)")
    else:
        maximum = (None, "not readable: no cpufreq and no clock in the model name")

    cpufreq_hz = cpufreq_current_hz(sys)
    mhz = [v for v in (_mhz(b.get("cpu MHz")) for b in blocks) if v]
    if cpufreq_hz:
        current = (cpufreq_hz, "sysfs cpufreq/scaling_cur_freq (mean over CPUs)")
    elif mhz:
        hyper = "hypervisor" in (blocks[0].get("flags", "") if blocks else "")
        current = (sum(mhz) / len(mhz), "/proc/cpuinfo 'cpu MHz'" +
                   (" (under a hypervisor: the TSC rate, not the running clock)" if hyper else ""))
    else:
        current = (None, "not readable: no cpufreq and no 'cpu MHz'")
    return {"current": current, "max": maximum}


# CPU feature flags that mean a hardware unit for a precision (x86 /proc/cpuinfo "flags", Arm
# "Features"). fp32/fp64 FMA is in every CPU chipcal models.
NATIVE_FLAGS = {
    "x86": {"bf16": ("avx512_bf16", "amx_bf16"), "fp16": ("avx512_fp16", "amx_fp16"),
            "int8": ("avx512_vnni", "avx_vnni", "amx_int8")},
    "arm": {"bf16": ("bf16",), "fp16": ("asimdhp",), "int8": ("asimddp", "i8mm")},
}
CPU_SWEEP_PRECISIONS = ("fp32", "bf16", "fp16", "int8")


# ONEDNN_MAX_CPU_ISA values (oneDNN "CPU dispatcher control") at which oneDNN may use VNNI
ONEDNN_VNNI_ISAS = {"AVX2_VNNI", "AVX2_VNNI_2", "AVX512_CORE_VNNI", "AVX512_CORE_BF16", "AVX10_1_512",
                    "AVX512_CORE_FP16", "AVX10_1_512_AMX", "AVX512_CORE_AMX", "AVX10_1_512_AMX_FP16",
                    "AVX512_CORE_AMX_FP16", "DEFAULT", "ALL"}


def cpu_precision_support(features: set[str], arch: str, mkldnn_bf16: bool | None = None,
                          mkldnn_fp16: bool | None = None, onednn_max_isa: str | None = None) -> dict[str, str]:
    """Which GEMM precisions have a hardware unit on this CPU: "native" or "emulated".

    Native when a feature flag names the unit (NATIVE_FLAGS) and, for bf16/fp16, torch's oneDNN
    agrees (`mkldnn_bf16`/`mkldnn_fp16`; None = not asked): with the flag but without oneDNN's
    kernels (ONEDNN_MAX_CPU_ISA, an old torch) torch takes its slow reference path, which is
    emulation as far as a measurement is concerned. torch has no such query for int8: an
    `onednn_max_isa` cap below the VNNI ISAs (ONEDNN_VNNI_ISAS) keeps oneDNN off the int8 unit.
    fp32 is always native.
    """
    family = "x86" if arch.lower().startswith(("x86", "amd64", "i686")) else "arm"
    int8_allowed = None if onednn_max_isa is None else onednn_max_isa.strip().upper() in ONEDNN_VNNI_ISAS
    torch_says = {"bf16": mkldnn_bf16, "fp16": mkldnn_fp16, "int8": int8_allowed}
    support = {"fp32": "native"}
    for precision, flags in NATIVE_FLAGS[family].items():
        hardware = any(f in features for f in flags)
        support[precision] = "native" if hardware and torch_says[precision] is not False else "emulated"
    return support


def _flags(blocks: list[dict[str, str]]) -> set[str]:
    if not blocks:
        return set()
    return set((blocks[0].get("flags") or blocks[0].get("Features") or "").split())


def detect_cpu(proc: Path | str = "/proc", sys: Path | str = "/sys", arch: str | None = None) -> CpuSpec:
    """The local CPU as a CpuSpec, read from /proc and /sys (roots injectable for tests)."""
    proc, sys = Path(proc), Path(sys)
    arch = arch or platform.machine()
    blocks = _cpuinfo(proc)
    first = blocks[0] if blocks else {}
    flags = _flags(blocks)
    vendor = first.get("vendor_id", "")
    model = (first.get("model name") or first.get("Hardware") or
             (f"Arm implementer {first['CPU implementer']} part {first.get('CPU part', '?')}"
              if "CPU implementer" in first else platform.processor() or "unknown CPU"))
    cores, logical = _topology(sys)
    l1d, l2, l3 = _caches(sys)

    is_x86 = arch.lower().startswith(("x86", "amd64", "i686"))
    if is_x86:
        simd = 512 if "avx512f" in flags else 256 if "avx2" in flags else 128
        bf16, fp16 = "avx512_bf16" in flags, "avx512_fp16" in flags
        vnni = "avx512_vnni" in flags or "avx_vnni" in flags
    else:
        simd = 128
        if "sve" in flags:
            sve_bytes = _read(proc / "sys/abi/sve_default_vector_length")
            if sve_bytes and sve_bytes.strip().isdigit():
                simd = max(simd, int(sve_bytes) * 8)
        bf16, fp16, vnni = "bf16" in flags, "asimdhp" in flags, "asimddp" in flags
    amx = {"amx_tile", "amx_bf16", "amx_int8"} <= flags

    clocks = cpu_clocks(proc, sys)
    clock_hz, clock_source = clocks["max"]
    if clock_hz is None:
        clock_hz, clock_source = clocks["current"]
    if clock_hz is None:
        clock_hz, clock_source = 2.0e9, "assumed: 2.0 GHz, no clock readable"

    family = int(first["cpu family"]) if first.get("cpu family", "").strip().isdigit() else None
    cls = cpu_class(vendor, arch, simd, amx, family)
    mem_kb = re.search(r"MemTotal:\s*(\d+)\s*kB", _read(proc / "meminfo") or "")
    if mem_kb:
        memory = int(mem_kb.group(1)) * 1024
    else:
        import psutil

        memory = int(psutil.virtual_memory().total)
    return CpuSpec(
        model_name=model,
        cores=cores,
        threads_per_core=max(1, logical // cores),
        clock_hz=clock_hz,
        clock_source=clock_source,
        simd_bits=simd,
        fma_units_per_core=cls.fma_units_per_core,
        has_avx512_bf16=bf16,
        has_vnni=vnni,
        has_amx=amx,
        l1d_bytes_per_core=l1d,
        l2_bytes_per_core=l2,
        l3_bytes=l3,
        memory_bytes=memory,
        vendor=vendor,
        arch=arch,
        has_avx512_fp16=fp16,
        cpu_family=family,
        fma_source=(f"assumed: {cls.fma_units_per_core} FMA units per core — the OS cannot report "
                    f"FMA ports; value of the '{cls.description}' reference ({cls.source})"),
    )
