"""The local CPU as a registry `Chip`, built from what the OS reports (`CpuSpec`).

Pure: no I/O, no torch. `chipcal.measure.system.detect_cpu()` reads the machine and builds the
`CpuSpec`; `chip_from_cpu` turns it into a validated Chip named "local-cpu".

Peak arithmetic per core and clock (x86, AVX-512 unless noted):

    fp64/fp32 FMA:       fma_units × simd_bits / (64|32) MAC/clk      (VFMADD*PD / *PS)
    bf16 (AVX512_BF16):  fma_units × simd_bits / 16 MAC/clk           (VDPBF16PS: 2 bf16 pairs per fp32 lane)
    fp16 (AVX512_FP16):  fma_units × simd_bits / 16 MAC/clk           (VFMADD*PH)
    int8 (VNNI):         fma_units × simd_bits / 8 MAC/clk            (VPDPBUSD: 4 u8×s8 per int32 lane)
    AMX (TMUL):          512 bf16 MAC/clk, 1024 int8 MAC/clk
        Intel states "1024 BF16 / 2048 INT8 operations per cycle per core", counting multiply and
        add separately: one TDPBF16PS is 16×16×32 = 8192 MAC and issues every 16 cycles = 512 MAC/clk.

What the OS cannot say (FMA ports per core, process node, a VM slice's TDP and memory) comes from
a reference part of the same feature class; every such number is marked "assumed: …" or
"derived: …" in the Chip's sources.
"""

from __future__ import annotations

from dataclasses import dataclass

from chipcal.model.chip import Chip
from chipcal.model.registry import chip_from_dict

LOCAL_CHIP_NAME = "local-cpu"

# TMUL peak per core per clock, in MAC (Intel's 1024 bf16 / 2048 int8 "ops"/cycle halved).
AMX_BF16_MACS_PER_CLOCK = 512
AMX_INT8_MACS_PER_CLOCK = 1024


@dataclass(frozen=True)
class CpuSpec:
    """What the OS reports about the local CPU (bytes, hertz), plus stated assumptions."""

    model_name: str
    cores: int                     # physical cores visible to this OS
    threads_per_core: int
    clock_hz: float
    clock_source: str              # where clock_hz came from
    simd_bits: int                 # widest SIMD register: 512 AVX-512, 256 AVX2, 128 SSE/NEON
    fma_units_per_core: int        # SIMD FMA pipes per core: not readable from the OS
    has_avx512_bf16: bool
    has_vnni: bool
    has_amx: bool
    l1d_bytes_per_core: int
    l2_bytes_per_core: int
    l3_bytes: int                  # 0 when there is no L3
    memory_bytes: int
    memory_bandwidth_bytes_per_s: float | None = None
    vendor: str = ""               # cpuinfo vendor_id: GenuineIntel, AuthenticAMD, or "" (ARM)
    arch: str = "x86_64"           # platform.machine()
    has_avx512_fp16: bool = False
    fma_source: str = ""           # why fma_units_per_core has its value
    memory_bandwidth_source: str = ""
    l3_source: str = ""            # set when l3_bytes is not the OS report
    # Precisions torch runs on a hardware unit here (measure.system.cpu_precision_support); None =
    # trust the feature flags above. A precision outside it gets no engine: it is emulated.
    native_precisions: frozenset[str] | None = None
    cpu_family: int | None = None  # x86 cpuinfo "cpu family" (AMD 25 = Zen 3/4, 26 = Zen 5)


@dataclass(frozen=True)
class CpuClass:
    """A reference part standing in for what a CPU of this feature class cannot report."""

    key: str
    description: str
    process_nm: float
    reference_part: str
    reference_cores: int
    reference_tdp_w: float
    memory_type: str
    reference_bandwidth_bytes_per_s: float
    fma_units_per_core: int
    source: str


# Reference parts (vendor product pages): cores, TDP, memory channels × rate × 8 bytes.
CPU_CLASSES: dict[str, CpuClass] = {
    c.key: c for c in (
        CpuClass("intel-amx", "Intel Xeon with AMX (Sapphire Rapids class)", 10.0,
                 "Xeon Platinum 8480+", 56, 350.0, "ddr5", 8 * 4800e6 * 8, 2,
                 "Intel ARK Xeon Platinum 8480+: 56 cores, 350 W, 8ch DDR5-4800; Intel 7 (10 nm class); "
                 "2 AVX-512 FMA units per core on Xeon Scalable Gold 6xxx/Platinum"),
        CpuClass("intel-avx512", "Intel Xeon with AVX-512, no AMX (Ice Lake-SP class)", 10.0,
                 "Xeon Platinum 8380", 40, 270.0, "ddr4", 8 * 3200e6 * 8, 2,
                 "Intel ARK Xeon Platinum 8380: 40 cores, 270 W, 8ch DDR4-3200; 10 nm; "
                 "2 AVX-512 FMA units per core on Platinum parts"),
        CpuClass("amd-avx512", "AMD EPYC with AVX-512 (Zen 4 class)", 5.0,
                 "EPYC 9654", 96, 360.0, "ddr5", 12 * 4800e6 * 8, 1,
                 "AMD EPYC 9654 product page: 96 cores, 360 W, 12ch DDR5-4800; TSMC 5 nm; "
                 "Zen 4 executes 512-bit FMAs on 2×256-bit pipes = 1 512-bit FMA per clock"),
        CpuClass("amd-zen5", "AMD EPYC with full-width AVX-512 (Zen 5 class)", 4.0,
                 "EPYC 9755", 128, 500.0, "ddr5", 12 * 6400e6 * 8, 2,
                 "AMD EPYC 9755 product page: 128 cores, 500 W, 12ch DDR5-6400; Zen 5 CCDs on TSMC N4P; "
                 "Zen 5 executes AVX-512 on full 512-bit datapaths with 2 FMA pipes (A. J. Yee, 'Zen5's AVX512 "
                 "Teardown', numberworld.org, 2024-08-07; the mobile Strix Point parts are 256-bit)"),
        CpuClass("x86-avx2", "x86 with AVX2 only (Zen 3 class)", 7.0,
                 "EPYC 7763", 64, 280.0, "ddr4", 8 * 3200e6 * 8, 2,
                 "AMD EPYC 7763 product page: 64 cores, 280 W, 8ch DDR4-3200; TSMC 7 nm; "
                 "2 256-bit FMA pipes per core"),
        CpuClass("arm", "Arm server core (Neoverse N1 class)", 7.0,
                 "Ampere Altra Q80-30", 80, 210.0, "ddr4", 8 * 3200e6 * 8, 2,
                 "Ampere Altra Q80-30 datasheet: 80 cores, 210 W, 8ch DDR4-3200; TSMC 7 nm; "
                 "Neoverse N1: 2 128-bit FP/ASIMD FMA pipes"),
    )
}


# Cycles of one microcode assist: Intel cores run a SIMD floating-point instruction with a
# subnormal input or result through one (Intel oneMKL developer guide, "Operating on Denormals";
# "over 160 cycles on Sandybridge-family", P. Cordes, stackoverflow.com/a/60970819). Measured here:
# 44 ns per assisted 16-lane FMA at the 2.1 GHz nominal clock of the 2-vCPU Sapphire Rapids VM
# (bmm with half of one operand subnormal, N = 16-128, thread CPU time; src/chipcal/model/workload/subnormal.py).
# AMD Zen and Arm Neoverse cores handle subnormals in hardware: no assist (the recorded Zen 4/5 runs
# time swin_t, whose attention takes subnormals, within 5-19 % of the model without one).
INTEL_SUBNORMAL_ASSIST_CYCLES = 92
SUBNORMAL_SOURCE = ("measured: 44 ns per assisted 16-lane FMA at 2.1 GHz on a Sapphire Rapids VM "
                    "(src/chipcal/model/workload/subnormal.py); Intel cores take a microcode assist for subnormal "
                    "operands (oneMKL developer guide, 'Operating on Denormals')")


def subnormal_assist_cycles(vendor: str) -> int | None:
    """Cycles a core of `vendor` loses per SIMD instruction with a subnormal operand (None: no assist)."""
    return INTEL_SUBNORMAL_ASSIST_CYCLES if vendor == "GenuineIntel" else None


def cpu_class(vendor: str, arch: str, simd_bits: int, has_amx: bool, family: int | None = None) -> CpuClass:
    """The reference class for a CPU with these features (see CPU_CLASSES); AMD family 26 (0x1A)
    with AVX-512 is Zen 5."""
    if arch.lower() in ("aarch64", "arm64") or not arch.lower().startswith(("x86", "amd64", "i686")):
        return CPU_CLASSES["arm"]
    if has_amx:
        return CPU_CLASSES["intel-amx"]
    if simd_bits >= 512 and vendor == "AuthenticAMD":
        return CPU_CLASSES["amd-zen5" if (family or 0) >= 26 else "amd-avx512"]
    if simd_bits >= 512:
        return CPU_CLASSES["intel-avx512"]
    return CPU_CLASSES["x86-avx2"]


def _simd_rates(spec: CpuSpec) -> dict[str, float]:
    """MAC per core per clock of the SIMD FMA engine, by precision (module docstring)."""
    fma, bits = spec.fma_units_per_core, spec.simd_bits
    rates = {"fp64": fma * bits / 64, "fp32": fma * bits / 32}
    if spec.has_avx512_bf16:
        rates["bf16"] = fma * bits / 16
    if spec.has_avx512_fp16:
        rates["fp16"] = fma * bits / 16
    if spec.has_vnni:
        rates["int8"] = fma * bits / 8
    return _native_only(spec, rates)


def _native_only(spec: CpuSpec, rates: dict[str, float]) -> dict[str, float]:
    """`rates` without the sub-fp32 precisions torch does not run natively (fp64/fp32 stay)."""
    if spec.native_precisions is None:
        return rates
    return {p: r for p, r in rates.items() if p in ("fp64", "fp32") or p in spec.native_precisions}


def _simd_engine(spec: CpuSpec, is_arm: bool, fma_note: str) -> dict:
    """The registry table of the SIMD FMA engine: one unit per core at the reported clock, MAC
    rates by precision from _simd_rates."""
    return {
        "name": "simd_fma",
        "circuit": "arm_core" if is_arm else "x86_performance",
        "units": spec.cores,
        "clock_hz": spec.clock_hz,
        "macs_per_unit_per_clock": _simd_rates(spec),
        "source": (f"derived: {spec.cores} cores × {spec.simd_bits}-bit SIMD × {spec.fma_units_per_core} "
                   f"FMA units at {spec.clock_hz / 1e9:.3f} GHz ({spec.clock_source}); {fma_note}"),
    }


def _amx_engine(spec: CpuSpec) -> dict | None:
    """The registry table of the AMX engine (one TMUL per core, module docstring), or None when
    the CPU has no AMX or torch runs none of its precisions natively."""
    amx_rates = _native_only(spec, {"bf16": AMX_BF16_MACS_PER_CLOCK, "int8": AMX_INT8_MACS_PER_CLOCK})
    if not (spec.has_amx and amx_rates):
        return None
    return {
        "name": "amx",
        "circuit": "systolic_mac",
        "units": spec.cores,
        "clock_hz": spec.clock_hz,
        "macs_per_unit_per_clock": amx_rates,
        "source": ("derived: one AMX TMUL per core, 512 bf16 / 1024 int8 MAC per clock (Intel: 1024 "
                   "BF16 / 2048 INT8 ops/cycle/core, 2 ops per MAC; TDPBF16PS = 8192 MAC per 16 "
                   "cycles); circuit systolic_mac: TMUL is a 2-D FMA grid; clock "
                   f"{spec.clock_source}"),
    }


def _memory_table(spec: CpuSpec, cls: CpuClass, share: float) -> dict:
    """The registry [memory] table: the measured bandwidth when the spec has one, else this
    slice's per-core share of the reference socket's; the class's memory type; the OS total."""
    if spec.memory_bandwidth_bytes_per_s is not None:
        bandwidth = spec.memory_bandwidth_bytes_per_s
        bw_source = spec.memory_bandwidth_source or "measured: memory_bandwidth_bytes_per_s given in CpuSpec"
    else:
        bandwidth = cls.reference_bandwidth_bytes_per_s * share
        bw_source = (f"assumed: per-core share of the {cls.reference_part} socket bandwidth "
                     f"({cls.reference_bandwidth_bytes_per_s / 1e9:.1f} GB/s × {spec.cores}/{cls.reference_cores}); "
                     "run measure_bandwidth for the real figure")
    memory_type_note = (f"derived: {cls.memory_type} is the only memory {cls.description} supports"
                        if cls.key in ("intel-amx", "amd-avx512", "amd-zen5") else
                        f"assumed: {cls.memory_type} like the {cls.reference_part}")
    return {
        "type": cls.memory_type,
        "bandwidth_bytes_per_s": bandwidth,
        "capacity_bytes": spec.memory_bytes,
        "source": f"{bw_source}; type {memory_type_note}; capacity measured: OS total memory",
    }


@dataclass(frozen=True)
class _Caches:
    """L2 per core and the last-level cache, with what was assumed about them (a source note)."""

    l2_bytes_per_core: int
    l3_bytes: int
    note: str


def _caches(spec: CpuSpec) -> _Caches:
    """The OS's L2 and L3, filled in where it reported none: 1 MiB of L2 per core, and without an
    L3 the total L2 as the last-level cache."""
    l2, l3 = spec.l2_bytes_per_core, spec.l3_bytes
    cache_note = f"; l3_bytes {spec.l3_source}" if spec.l3_source else ""
    if l2 <= 0:
        l2, cache_note = 2**20, "; assumed: 1 MiB L2 per core (the OS reported none)"
    if l3 <= 0:  # no L3: the last-level cache is the L2 of all cores
        l3 = l2 * spec.cores
        cache_note += "; no L3 reported: l3_bytes = total L2 (the last-level cache)"
    return _Caches(l2_bytes_per_core=l2, l3_bytes=l3, note=cache_note)


def _microarch_table(spec: CpuSpec, fma_note: str) -> dict:
    """The registry [microarch] table: topology, SIMD width, caches, the matrix engine and the
    subnormal assist cost where there is one."""
    caches = _caches(spec)
    return {
        "cores": spec.cores,
        "threads_per_core": spec.threads_per_core,
        "simd_bits": spec.simd_bits,
        "fma_units_per_core": spec.fma_units_per_core,
        "l1d_bytes_per_core": spec.l1d_bytes_per_core,
        "l2_bytes_per_core": caches.l2_bytes_per_core,
        "l3_bytes": caches.l3_bytes,
        **({"matrix_engine": "amx"} if spec.has_amx else {}),
        **({"subnormal_assist_cycles": assist} if (assist := subnormal_assist_cycles(spec.vendor)) else {}),
        "source": (f"measured: OS cache and topology report; {fma_note}{caches.note}"
                   + (f"; subnormal_assist_cycles {SUBNORMAL_SOURCE}" if assist else "")),
    }


def chip_from_cpu(spec: CpuSpec) -> Chip:
    """The local CPU as a Chip: a SIMD FMA engine (+ AMX engine), peaks derived per core and clock;
    process node, TDP and memory type from its feature class's reference part (cpu_class), the
    TDP and (unmeasured) bandwidth as this slice's per-core share of the reference socket's."""
    cls = cpu_class(spec.vendor, spec.arch, spec.simd_bits, spec.has_amx, spec.cpu_family)
    share = spec.cores / cls.reference_cores
    fma_note = spec.fma_source or f"assumed: {spec.fma_units_per_core} FMA units per core ({cls.source})"
    amx = _amx_engine(spec)
    data = {
        "name": LOCAL_CHIP_NAME,
        "display_name": f"{spec.model_name} ({spec.cores} cores, local)",
        "vendor": {"GenuineIntel": "Intel", "AuthenticAMD": "AMD"}.get(spec.vendor, spec.vendor or "unknown"),
        "kind": "cpu",
        "process_nm": cls.process_nm,
        "hypothetical": False,
        "sources": [
            f"measured: local CPU as reported by the OS ({spec.model_name}, {spec.cores} cores, "
            f"{spec.threads_per_core} threads/core, clock from {spec.clock_source})",
            f"assumed: process node {cls.process_nm:g} nm, TDP and memory type of the feature class "
            f"'{cls.description}' ({cls.source})",
        ],
        "power": {
            "tdp_w": cls.reference_tdp_w * share,
            "source": (f"assumed: per-core share of the {cls.reference_part} TDP "
                       f"({cls.reference_tdp_w:g} W × {spec.cores}/{cls.reference_cores}); "
                       "a VM or core slice has no TDP of its own"),
            # the engine clock is the one measured here, already what the host's governor allows;
            # an assumed share of a TDP cannot lower it further
            "limits_clock": False,
        },
        "memory": _memory_table(spec, cls, share),
        "engines": [_simd_engine(spec, cls.key == "arm", fma_note), *((amx,) if amx is not None else ())],
        "microarch": _microarch_table(spec, fma_note),
        "notes": ("Built from the local machine; in a VM the reported L3 and clock are the host's "
                  "(the clock is often the TSC rate, not the sustained AVX-512/AMX clock)."),
    }
    return chip_from_dict(data, file="<local cpu>")
