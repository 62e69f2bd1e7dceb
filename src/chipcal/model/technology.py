"""Energy per operation by process node, circuit type and precision; memory energy per byte.

One table, one place. Every constant says where it comes from:

* Arithmetic at 45 nm: Horowitz, "Computing's energy problem (and what we can do about it)",
  ISSCC 2014, Fig. 1.1.9 (the issue's anchors: fp32 mult 3.7 pJ, add 0.9 pJ; fp16 mult 1.1, add 0.4;
  int8 mult 0.2, add 0.03; int32 mult 3.1, add 0.1).
* 7 nm: Jouppi et al., "Ten Lessons From Three Generations Shaped Google's TPUv4i", ISCA 2021,
  Table 2 (Horowitz's table updated to 7 nm: fp32 mult 1.31 pJ, add 0.38 pJ; bf16 mult 0.21,
  add 0.11; fp16 mult 0.34, add 0.16; SRAM 8 KB / 32 KB / 1 MB: 7.5 / 8.5 / 14 pJ per 64-bit
  access; DDR3/4 1300 pJ, HBM2 250-450 pJ, GDDR6 350-480 pJ per 64-bit access).

Node scaling (explicit interpolation): energy per op follows a power law in the node,

    E(node) = E(45 nm) * (node / 45) ** ALPHA,   ALPHA = ln(E45/E7) / ln(45/7),

fitted to the fp32 MAC anchors (4.6 pJ at 45 nm, 1.69 pJ at 7 nm) -> ALPHA ~ 0.538. Nodes
between 45 and 7 nm are interpolations; nodes below 7 nm (5, 4, 3) are extrapolations and
`node_scale` says so. Marketing node names (TSMC 4N, Samsung 8N) are taken at face value.

Precision scaling uses one baseline: the fp32 MAC. scale(p) = MAC45(p) / MAC45(fp32), with
MAC = multiply at the operand precision + add at the accumulator's (ACCUMULATOR: tensor cores,
MXUs and AVX-512/AMX dot products multiply bf16/fp16/fp8/tf32 operands and accumulate in fp32,
integer products in int32; Jouppi et al. ISCA 2021 price TPUv4i's bf16 MAC the same way), so the
Horowitz ratios hold exactly at every node.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from chipcal.model.errors import lookup
from chipcal.model.precision import check_precision

PJ = 1e-12

# --- arithmetic at 45 nm (pJ) -------------------------------------------------------------

# Mantissa bits incl. the hidden bit, used only to derive formats Horowitz does not list.
_MANTISSA_BITS = {"fp64": 53, "fp32": 24, "tf32": 11, "bf16": 8, "fp16": 11, "fp8": 4, "fp4": 2}

# Multiplier energy vs mantissa width: fitted power law through Horowitz's fp16 and fp32
# multipliers (1.1 pJ @ 11 bits, 3.7 pJ @ 24 bits) -> exponent ln(3.7/1.1)/ln(24/11) ~ 1.55.
_FP_MULT_EXP = math.log(3.7 / 1.1) / math.log(24 / 11)
# Adder energy vs mantissa width through fp16/fp32 adders (0.4, 0.9 pJ) -> exponent ~ 1.04.
_FP_ADD_EXP = math.log(0.9 / 0.4) / math.log(24 / 11)
# Integer multiplier vs width through int8/int32 (0.2, 3.1 pJ) -> exponent ~ 1.98 (quadratic).
_INT_MULT_EXP = math.log(3.1 / 0.2) / math.log(32 / 8)
# The int8 multiplier as a tensor core spends it, measured (ARITHMETIC_45NM's note), in 45 nm pJ.
INT8_MULT_45NM_PJ = 0.70


@dataclass(frozen=True)
class OpEnergy:
    """Energy of one multiply and one add at 45 nm, and where the figures come from."""

    mult_pj: float
    add_pj: float
    source: str

    @property
    def mac_pj(self) -> float:
        return self.mult_pj + self.add_pj


ARITHMETIC_45NM: dict[str, OpEnergy] = {
    "fp32": OpEnergy(3.7, 0.9, "Horowitz ISSCC 2014"),
    "fp16": OpEnergy(1.1, 0.4, "Horowitz ISSCC 2014"),
    # int8: Horowitz lists 0.2 pJ for a standalone 8-bit multiplier; an int8 GEMM held on lent H200s
    # (torch._int_mm, 8192^3, four holds on two machines) needs 0.59-0.84 pJ, median 0.70, for the
    # power model (fitted constants as shipped) to meet its measured power at its own clock and
    # kernel efficiency, where fp8 and bf16 held at the same shape meet it within 4 % unchanged
    # (docs/findings/2026-11-30-h200-int8-energy-measured.md; tests/test_int8_energy.py).
    "int8": OpEnergy(INT8_MULT_45NM_PJ, 0.03, "measured: int8 GEMM holds on lent H200s solved through the power "
                     "model (median of 4, 8192^3); adder Horowitz ISSCC 2014"),
    # bf16 is absent at 45 nm; Jouppi 2021 gives bf16/fp16 at 7 nm (mult 0.21/0.34, add 0.11/0.16):
    "bf16": OpEnergy(1.1 * 0.21 / 0.34, 0.4 * 0.11 / 0.16,
                     "derived: Horowitz fp16 x Jouppi 2021 7 nm bf16/fp16 ratios"),
    # tf32: fp16-width mantissa multiplier, fp32 accumulate.
    "tf32": OpEnergy(1.1, 0.9, "derived: fp16 multiplier (11-bit mantissa) + fp32 adder (its accumulator)"),
    "fp64": OpEnergy(3.7 * (53 / 24) ** _FP_MULT_EXP, 0.9 * (53 / 24) ** _FP_ADD_EXP,
                     "derived: Horowitz fp32 scaled to a 53-bit mantissa by the fp16/fp32 power laws"),
    # fp8 (e4m3): 4-bit mantissa multiplier; accumulation at fp16 width.
    "fp8": OpEnergy(1.1 * (4 / 11) ** _FP_MULT_EXP, 0.4,
                    "derived: Horowitz fp16 multiplier scaled to a 4-bit mantissa; fp16 adder (a MAC adds at "
                    "its fp32 accumulator: ACCUMULATOR)"),
    # fp4 (e2m1): 2-bit mantissa multiplier, fp32 accumulation (ACCUMULATOR); the block scale is
    # applied once per block of 16 products, not counted.
    "fp4": OpEnergy(1.1 * (2 / 11) ** _FP_MULT_EXP, 0.4,
                    "derived: Horowitz fp16 multiplier scaled to a 2-bit mantissa; fp16 adder (a MAC adds at "
                    "its fp32 accumulator: ACCUMULATOR)"),
    "int4": OpEnergy(INT8_MULT_45NM_PJ * (4 / 8) ** _INT_MULT_EXP, 0.03 * 4 / 8,
                     "derived: the measured int8 multiplier x (4/8)^1.98, adder linear in width"),
}

# The add of a MAC runs at the accumulator's width: fp32 for every narrower float (PTX mma/wgmma
# .f32 accumulators; AMX TDPBF16PS; AVX-512 VDPBF16PS), int32 for integer products (IMMA, VPDPBUSD,
# AMX TDPBUSD), fp64 for fp64. Horowitz 2014: 32-bit int add 0.1 pJ at 45 nm.
ACCUMULATOR = {"fp64": "fp64", "fp32": "fp32", "tf32": "fp32", "bf16": "fp32", "fp16": "fp32", "fp8": "fp32",
               "fp4": "fp32", "int8": "int32", "int4": "int32"}
ADD_45NM_PJ = {"fp64": None, "fp32": 0.9, "int32": 0.1}   # fp64: its own table entry's adder


def mac_45nm_pj(precision: str) -> float:
    """One MAC at 45 nm: the multiplier of `precision` + the adder of its accumulator (pJ)."""
    p = check_precision(precision)
    acc = ACCUMULATOR[p]
    add = ARITHMETIC_45NM[p].add_pj if ADD_45NM_PJ[acc] is None else ADD_45NM_PJ[acc]
    return ARITHMETIC_45NM[p].mult_pj + add


# --- process nodes ------------------------------------------------------------------------

ANCHOR_FP32_MAC_PJ = {45.0: 3.7 + 0.9, 7.0: 1.31 + 0.38}  # Horowitz 2014; Jouppi 2021 Table 2
ALPHA = math.log(ANCHOR_FP32_MAC_PJ[45.0] / ANCHOR_FP32_MAC_PJ[7.0]) / math.log(45.0 / 7.0)

PROCESS_NODES_NM: tuple[float, ...] = (3, 4, 5, 7, 8, 10, 12, 16, 22, 28, 40, 45)
_MIN_NODE, _MAX_NODE = 3.0, 45.0


def check_process(process_nm: float) -> float:
    """Validate a node in nanometres; the model covers 3-45 nm (outside it is refused)."""
    if not isinstance(process_nm, int | float) or not math.isfinite(process_nm) or process_nm <= 0:
        raise ValueError(f"process node must be a positive number of nm, got {process_nm!r}")
    if not _MIN_NODE <= process_nm <= _MAX_NODE:
        raise ValueError(f"process node {process_nm:g} nm is outside the modelled range "
                         f"{_MIN_NODE:g}-{_MAX_NODE:g} nm; known nodes: "
                         + ", ".join(f"{n:g}" for n in PROCESS_NODES_NM))
    return float(process_nm)


def node_scale(process_nm: float) -> float:
    """Energy at `process_nm` relative to 45 nm: (node/45)**ALPHA (extrapolated below 7 nm)."""
    return (check_process(process_nm) / 45.0) ** ALPHA


def is_extrapolated(process_nm: float) -> bool:
    return check_process(process_nm) < 7.0


def precision_scale(precision: str) -> float:
    """MAC energy of `precision` (multiply + accumulator add) relative to fp32, from the 45 nm
    table (one baseline)."""
    return mac_45nm_pj(precision) / mac_45nm_pj("fp32")


def arithmetic_energy_per_mac_j(process_nm: float, precision: str) -> float:
    """Bare multiply+add energy (no circuit or delivery overhead), joules."""
    return ANCHOR_FP32_MAC_PJ[45.0] * node_scale(process_nm) * precision_scale(precision) * PJ


# --- circuits -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Circuit:
    """How a microarchitecture spends energy around the bare arithmetic.

    arith_factor: energy of its MAC datapath relative to Horowitz's separate mult + add
      (fused, array-shared normalisation makes it < 1).
    delivery: operand-delivery and control energy (instruction fetch/decode/schedule, register
      file reads, operand buffers) as a multiple of the datapath energy.
    """

    name: str
    arith_factor: float
    delivery: float
    source: str


CIRCUITS_TABLE: dict[str, Circuit] = {
    c.name: c
    for c in (
        Circuit("x86_performance", 1.0, 1.5,
                "derived: Horowitz 2014 ~70 pJ of out-of-order overhead per instruction at 45 nm, "
                "over a 16-lane AVX-512 FMA = 4.4 pJ/MAC (0.95x a 4.6 pJ fp32 MAC), plus three "
                "register-file operand reads and bypass (~0.5x, assumed) -> 1.5"),
        Circuit("arm_core", 1.0, 1.2,
                "assumed: narrower 128-bit NEON (4 fp32 lanes) amortises a cheaper in-order/small "
                "out-of-order front end (~1/4 of Horowitz's 70 pJ) -> ~0.95x, plus RF reads -> 1.2"),
        Circuit("cuda_core", 0.95, 1.0,
                "assumed: SIMT fetch/decode amortised over a 32-thread warp; per-lane reads of "
                "three operands from the banked register file cost about as much as the FMA"),
        Circuit("tensor_core", 0.85, 0.22,
                "Dally (NVIDIA), 'Hardware for Deep Learning' keynotes: an HMMA instruction's "
                "fetch/decode/operand overhead is ~22% of its math energy (IMMA ~16%); fused "
                "dot-product trees share alignment/normalisation (0.85, assumed)"),
        Circuit("systolic_mac", 0.8, 0.1,
                "assumed: operands move neighbour to neighbour and weights stay resident "
                "(Jouppi et al. ISCA 2017, TPUv1), so delivery is amortised over the array depth"),
        Circuit("domain_flow", 0.8, 0.1,
                "hypothetical: KPU tile/domain-flow design study, same operand-reuse argument as "
                "a systolic array"),
    )
}
CIRCUITS: tuple[str, ...] = tuple(CIRCUITS_TABLE)


def check_circuit(name: str) -> Circuit:
    return lookup(CIRCUITS_TABLE, name, "circuit")


@dataclass(frozen=True)
class MacEnergy:
    """Energy of one MAC split the way the TDP breakdown reports it (joules)."""

    compute_j: float
    delivery_j: float

    @property
    def total_j(self) -> float:
        return self.compute_j + self.delivery_j


def mac_energy(process_nm: float, circuit: str, precision: str) -> MacEnergy:
    """E_MAC = E_arith(node, p) x arith_factor x (1 + delivery), split into its two parts."""
    c = check_circuit(circuit)
    compute = arithmetic_energy_per_mac_j(process_nm, precision) * c.arith_factor
    return MacEnergy(compute_j=compute, delivery_j=compute * c.delivery)


def energy_per_mac_j(process_nm: float, circuit: str, precision: str) -> float:
    """The floor model's energy per MAC: datapath x (1 + the circuit's lumped delivery factor),
    joules, at the nominal voltage. The all-in energy a GEMM spends (operand traffic, network,
    clock/control, and its voltage) is src/chipcal/model/power.py's."""
    return mac_energy(process_nm, circuit, precision).total_j


# --- memory -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryEnergy:
    """Off-chip DRAM access energy (pJ per bit) with the range the sources give."""

    name: str
    pj_per_bit: float
    low_pj_per_bit: float
    high_pj_per_bit: float
    source: str


_DDR4 = 1300 / 64  # Horowitz 2014 / Jouppi 2021: 1300 pJ per 64-bit DDR3/4 access

MEMORY_TABLE: dict[str, MemoryEnergy] = {
    m.name: m
    for m in (
        MemoryEnergy("ddr4", _DDR4, 1300 / 64, 2600 / 64,
                     "Horowitz 2014 (1.3-2.6 nJ per 64 bit); Jouppi 2021 keeps 1300 pJ at 7 nm"),
        MemoryEnergy("ddr5", _DDR4 * (1.1 / 1.2) ** 2, _DDR4 * 0.7, _DDR4,
                     "derived: DDR4 x (1.1 V / 1.2 V)^2 supply scaling (JESD79-5 VDD 1.1 V)"),
        MemoryEnergy("hbm2", 350 / 64, 250 / 64, 450 / 64,
                     "Jouppi 2021 Table 2: 250-450 pJ per 64-bit access (midpoint)"),
        MemoryEnergy("hbm2e", 350 / 64, 250 / 64, 450 / 64,
                     "derived: same 1.2 V core supply as HBM2 -> HBM2 figure"),
        MemoryEnergy("hbm3", 350 / 64 * (1.1 / 1.2) ** 2, 250 / 64 * 0.8, 450 / 64,
                     "derived: HBM2 x (1.1 V / 1.2 V)^2 (JESD238 VDD 1.1 V, VDDQ 0.4 V)"),
        MemoryEnergy("hbm3e", 350 / 64 * (1.1 / 1.2) ** 2, 250 / 64 * 0.8, 450 / 64,
                     "derived: same supplies as HBM3 -> HBM3 figure"),
        MemoryEnergy("gddr6", 415 / 64, 350 / 64, 480 / 64,
                     "Jouppi 2021 Table 2: 350-480 pJ per 64-bit access (midpoint)"),
        MemoryEnergy("gddr6x", 415 / 64, 350 / 64, 480 / 64,
                     "derived: PAM4 signalling at the GDDR6 1.35 V supply -> GDDR6 figure"),
        MemoryEnergy("lpddr4", _DDR4 * (1.1 / 1.2) ** 2, _DDR4 * 0.5, _DDR4,
                     "derived: DDR4 x (1.1 V / 1.2 V)^2 (JESD209-4 VDD2 1.1 V)"),
        MemoryEnergy("lpddr4x", _DDR4 * (1.1 / 1.2) ** 2 * 0.8, _DDR4 * 0.4, _DDR4,
                     "derived: LPDDR4 with VDDQ 0.6 V instead of 1.1 V; I/O ~40% of access "
                     "energy (assumed) -> x0.8"),
        MemoryEnergy("lpddr5", _DDR4 * (1.05 / 1.2) ** 2 * 0.8, _DDR4 * 0.35, _DDR4,
                     "derived: DDR4 x (1.05 V / 1.2 V)^2 (JESD209-5 VDD2H 1.05 V), low-swing I/O x0.8"),
        MemoryEnergy("lpddr5x", _DDR4 * (1.05 / 1.2) ** 2 * 0.8, _DDR4 * 0.35, _DDR4,
                     "derived: same supplies as LPDDR5 -> LPDDR5 figure"),
    )
}
MEMORY_TYPES: tuple[str, ...] = tuple(MEMORY_TABLE)


def check_memory_type(name: str) -> MemoryEnergy:
    return lookup(MEMORY_TABLE, name, "memory type")


def dram_energy_per_byte_j(memory_type: str) -> float:
    """Off-chip DRAM energy per byte moved, joules."""
    return check_memory_type(memory_type).pj_per_bit * 8 * PJ


# On-chip SRAM per 64-bit access (pJ) at the two anchor nodes (Horowitz 2014; Jouppi 2021).
# register_file ~ 8 KB array, l1 ~ 32 KB, l2 ~ 1 MB; a multi-MB l3 has no anchor and is assumed.
SRAM_64BIT_PJ: dict[str, tuple[float, float, str]] = {
    "register_file": (10.0, 7.5, "8 KB SRAM: Horowitz 2014 / Jouppi 2021"),
    "l1": (20.0, 8.5, "32 KB SRAM: Horowitz 2014 / Jouppi 2021"),
    "l2": (100.0, 14.0, "1 MB SRAM: Horowitz 2014 / Jouppi 2021"),
    "l3": (200.0, 28.0, "assumed: 2x the 1 MB figure for a multi-MB last-level cache"),
}
SRAM_LEVELS: tuple[str, ...] = tuple(SRAM_64BIT_PJ)


def sram_energy_per_byte_j(process_nm: float, level: str = "l2") -> float:
    """On-chip SRAM energy per byte, log-log interpolated between the 45 and 7 nm anchors."""
    if level not in SRAM_64BIT_PJ:
        raise ValueError(f"unknown SRAM level {level!r}; valid: {', '.join(SRAM_LEVELS)}")
    e45, e7, _ = SRAM_64BIT_PJ[level]
    node = check_process(process_nm)
    slope = math.log(e45 / e7) / math.log(45.0 / 7.0)
    return e45 * (node / 45.0) ** slope / 8 * PJ


# --- all-in energy: operand delivery, on-chip network, clock/control, static, DVFS ---------
#
# The arithmetic above is only part of what a GEMM spends. The all-in model (src/chipcal/model/power.py)
# adds operand delivery derived from each datapath's reuse, the on-chip network, clock
# distribution/control, leakage at operating temperature and DRAM at the traffic the GEMM needs.
# Each uncertain constant is a `Band`: nominal, optimistic (low power) and pessimistic ends.


@dataclass(frozen=True)
class Band:
    """An uncertain constant: nominal value and the range its sources allow (low = less power)."""

    nominal: float
    low: float
    high: float
    source: str

    def __post_init__(self):
        if not self.low <= self.nominal <= self.high:
            raise ValueError(f"band must satisfy low <= nominal <= high: {self}")


# On-chip wire energy per bit per mm. Borkar & Chien, "The Future of Microprocessors", CACM 54(5),
# May 2011, Fig. 11 (measured on-die network energy, 45 nm: ~0.1 pJ/bit/mm for repeated full-swing
# wires); low end: Park et al., "40.4fJ/bit/mm Low-Swing On-Chip Signaling with Self-Resetting
# Logic Repeaters Embedded within a Mesh NoC in 45nm SOI CMOS", DATE 2013. High end: 2x nominal
# for router/crossbar energy on top of the wire (assumed).
NOC_PJ_PER_BIT_MM = Band(0.1, 0.04, 0.2, "Borkar & Chien CACM 2011 Fig. 11; Park et al. DATE 2013 (low-swing)")
# Mean distance an operand travels between the last-level SRAM slice and the compute unit:
# half the edge of a 300-800 mm^2 die (9-14 mm) -> 10 mm, band 5-15 mm (assumed geometry).
NOC_DISTANCE_MM = Band(10.0, 5.0, 15.0, "assumed: half the edge of a 300-800 mm^2 die")

# SRAM/RF energies (SRAM_64BIT_PJ) are 64-bit reads of a plain array. A register file with
# operand collectors/crossbars and a multi-banked shared memory cost more per bit; tiled-GEMM
# operand traffic is multiplied by this factor. Band 0.5-3: the Horowitz/Jouppi anchors at
# 1x, AccelWattch (Kandiah et al., MICRO 2021) attributes ~15-25% of V100 dynamic power to the
# register file and shared memory under compute-bound kernels, which the 1x anchors undershoot.
DELIVERY_SCALE = Band(1.0, 0.5, 3.0, "Horowitz 2014 / Jouppi 2021 SRAM anchors; AccelWattch MICRO 2021 (upper end)")

# Clock distribution, pipeline registers, instruction issue and control, as a fraction of the
# datapath + operand-delivery dynamic energy. Clock networks alone are commonly 30-40% of a
# high-performance processor's dynamic power (Tiwari et al., "Reducing power in high-performance
# microprocessors", DAC 1998); nominal 0.5 of the rest (= 33% of the total), band 0.25-1.0.
CLOCK_CONTROL_FRACTION = Band(0.5, 0.25, 1.0, "Tiwari et al. DAC 1998 (clock 30-40% of dynamic power)")

# Leakage and always-on power at operating temperature, as a fraction of TDP, where a chip has
# no sourced idle_w. Datacenter GPUs idle at ~8-15% of TDP in nvidia-smi at room temperature;
# leakage roughly doubles from 40 to 85 C junction (assumed), so under load 8-25%.
STATIC_FRACTION_BAND = Band(0.15, 0.08, 0.25, "assumed: idle 8-15% of TDP (nvidia-smi), leakage x~2 hot")

# DVFS: supply voltage relative to the boost voltage. V sits at a floor up to a knee clock and
# rises linearly to 1.0 at the boost clock. GPUs run ~0.65-0.75 V at their lowest P-state clocks
# and ~1.0-1.1 V at max boost (the floor ratio, band 0.6-0.8); the knee, where V starts to rise,
# is at 35-65% of the boost clock (assumed, typical published V-f curves of GPUs and CPUs).
V_FLOOR = Band(0.70, 0.60, 0.80, "assumed: ~0.7 V floor vs ~1.05 V at boost on recent GPUs")
V_KNEE = Band(0.5, 0.35, 0.65, "assumed: V starts to rise above 35-65% of the boost clock")

# Switching activity of the data: dynamic energy of the datapath and of the operands it moves is
# charged at a = floor + (1 - floor) x activity, activity 1 for random operands (what trained weights
# and activations look like, the default) and 0 for all-zero operands; clock/control, issue and
# static power do not depend on the data. An all-zero bf16 GEMM on an H100 SXM5 drew 448 W at
# 1650 MHz against 698 W at 1365 MHz with random data (shared/machines/nvidia-h100-sxm5,
# sustained-power.json, 2026-11-26); an A100 ran the same 8192^3 GEMM at 295 TFLOPS on zeros and
# 257 on randn under its 400 W cap (H. He, "Strangely, Matrix Multiplications on GPUs Run Faster
# When Given 'Predictable' Data!", thonking.ai, 2024). The band is what a floor can be; the value
# the model uses is fitted on the H100 pair (src/chipcal/calibrate/evidence.py).
ACTIVITY_FLOOR = Band(0.1, 0.0, 0.5, "fitted: H100 SXM5 zeros vs random bf16 GEMM power (2026-11-26); "
                      "band: a floor between none and half of the random-data switching (assumed)")
RANDOM_DATA, ZERO_DATA = 1.0, 0.0    # activity of random-normal and of all-zero operands

# The constants fitted (within their bands) on sustained measurements; see src/chipcal/calibrate/evidence.py.
# static_fraction is not among them: every chip with sustained evidence has a measured idle power.
FITTABLE = ("delivery_scale", "clock_control_fraction", "v_floor", "v_knee", "activity_floor")


# Fraction of the clock-implied peak (MACs/clock x the clock it runs at) that a large, tuned dense
# GEMM attains on a circuit: tile edges, K-loop prologue/epilogue, waves and stalls that no power
# limit explains. Sustained throughput = 2 x MACs/clock x sustained clock x efficiency.
GEMM_EFFICIENCY: dict[str, Band] = {
    "tensor_core": Band(0.90, 0.86, 0.95,
                        "sustained large GEMMs as a fraction of 2 x MACs/clock x the SM clock measured with "
                        "them: H100 SXM5 n = 8192 0.91-0.94 (shared/machines/nvidia-h100-sxm5, 2026-11-26); "
                        "H200 SXM bf16 0.89, fp8 0.87; B200 bf16 0.90, fp8 0.87 (Bekman, ml-engineering "
                        "MSMF table, 2026-08-10); A100 SXM4 cuBLAS bf16 8192^3 on zeros 295 TFLOPS >= 0.946 "
                        "of 312 (H. He, thonking.ai, 2024)"),
    "cuda_core": Band(0.78, 0.70, 0.90,
                      "H100 SXM5 cuBLAS SGEMM n = 8192 held 6 s: 51.6 TFLOPS at 1965 MHz = 0.777 of "
                      "2 x 16896 x 1.965 GHz (shared/machines/nvidia-h100-sxm5, 2026-11-26)"),
    "x86_performance": Band(0.85, 0.70, 0.95,
                            "assumed: oneMKL/oneDNN large SGEMM at 80-90% of SIMD peak (this project's "
                            "CPU GEMM sweeps, docs/measurement.md)"),
    "arm_core": Band(0.85, 0.70, 0.95, "assumed: same as x86 BLAS on NEON/SVE"),
    "systolic_mac": Band(0.90, 0.80, 0.95,
                         "assumed: a large matmul fills a 128x128 MXU except at its tile edges"),
    "domain_flow": Band(0.90, 0.80, 0.95, "hypothetical: same reuse argument as a systolic array"),
}


def gemm_efficiency(circuit: str) -> Band:
    """The large-GEMM efficiency band of `circuit` (GEMM_EFFICIENCY, nominal = the sourced value)."""
    return GEMM_EFFICIENCY[check_circuit(circuit).name]


@dataclass(frozen=True)
class Reuse:
    """Per-MAC overheads of a datapath: instruction issue, and operands moved at each level.

    issue: instruction fetch/decode/schedule energy per MAC as a fraction of the datapath energy
      (operand reads excluded: they are the byte terms);
    rf: innermost operand storage (register file / PE registers) per MAC, in units of the
      operand width, plus accumulator bytes (read + write) per MAC;
    l1: shared memory / L1 / local buffer, per MAC in operand widths;
    l2: last-level SRAM through the on-chip network, per MAC in operand widths.
    """

    issue: float
    rf_operands: float
    rf_accumulator: float
    l1: float
    l2: float
    source: str


def mma_reuse(m: int, n: int, k: int) -> tuple[float, float]:
    """(operand elements, accumulator elements read+written) per MAC of an m x n x k MMA:
    A (m x k) and B (k x n) are read, C (m x n) read and D written, for m n k MACs."""
    return (m * k + k * n) / (m * n * k), 2 * m * n / (m * n * k)


_MMA = mma_reuse(16, 8, 16)    # mma.sync m16n8k16: 0.1875 operands, 0.125 accumulators per MAC
REUSE_TABLE: dict[str, Reuse] = {
    # Issue: Horowitz 2014's ~70 pJ per out-of-order instruction at 45 nm over the lanes one
    # instruction drives, relative to a 4.6 pJ fp32 MAC: 16 AVX-512 lanes -> 0.95; a 32-thread
    # warp -> 0.48 (an upper bound: GPU issue is in order); NEON: a front end ~1/4 of Horowitz's
    # over 4 lanes -> 0.95; tensor cores: Dally (NVIDIA) keynotes, HMMA overhead ~22% of its math;
    # systolic/domain-flow: 0.1 (instruction amortised over the array, neighbour hops in
    # pipeline registers; Jouppi et al. ISCA 2017).
    # SIMD FMA (CUDA core, AVX-512, NEON): 3 register reads + 1 write per lane-FMA; a register-
    # blocked SGEMM micro-kernel (8x8 per thread on GPUs, 6x32 on AVX-512) loads (1/8 + 1/8)
    # operands per MAC from L1/shared memory; a 128x128 block tile (1/128 + 1/128) from L2.
    "cuda_core": Reuse(70 / 32 / 4.6, 3.0, 1.0, 1 / 8 + 1 / 8, 2 / 128,
                       "derived: FMA reads 3 / writes 1 register; 8x8 thread tile; 128x128 CTA tile (CUTLASS SGEMM)"),
    "x86_performance": Reuse(70 / 16 / 4.6, 3.0, 1.0, 1 / 6 + 1 / 32, 2 / 256,
                             "derived: FMA reads 3 / writes 1 register; 6x32 AVX-512 micro-kernel (BLIS/oneDNN); 256x256 L2 block"),
    "arm_core": Reuse(70 / 4 / 4 / 4.6, 3.0, 1.0, 1 / 8 + 1 / 12, 2 / 256,
                      "derived: FMA reads 3 / writes 1 register; 8x12 NEON micro-kernel (BLIS); 256x256 L2 block"),
    # Tensor cores: mma.sync m16n8k16 (the shape cuBLAS/CUTLASS kernels issue on Turing..Ada,
    # NVIDIA PTX ISA) reads A, B from registers and reads+writes the fp32 C fragment; 64x64 warp
    # tile from shared memory (1/64 + 1/64); 128x128 CTA tile from L2 (1/128 + 1/128).
    "tensor_core": Reuse(0.22, _MMA[0], _MMA[1], 2 / 64, 2 / 128,
                         "derived: mma.sync m16n8k16 (PTX ISA); 64x64 warp tile; 128x128 CTA tile (CUTLASS)"),
    # Systolic arrays (weight stationary, Jouppi et al. ISCA 2017): each MAC forwards its input
    # and partial sum to a neighbour through pipeline registers (in `issue`, no SRAM); the
    # array edge loads 1/128 operands and drains 1/128 accumulators per MAC from the local buffer;
    # the buffer is filled from the large SRAM over the chip at 2/128 operands per MAC.
    "systolic_mac": Reuse(0.1, 0.0, 0.0, 2 / 128, 2 / 128,
                          "derived: 128x128 weight-stationary array (TPUv1, Jouppi 2017): neighbour hops, edge loads"),
    "domain_flow": Reuse(0.1, 0.0, 0.0, 2 / 128, 2 / 128,
                         "hypothetical: KPU tile, same neighbour-forwarding argument as a systolic array"),
}

ACCUMULATOR_BYTES = {"fp64": 8.0, "fp32": 4.0, "tf32": 4.0, "bf16": 4.0, "fp16": 4.0, "fp8": 4.0,
                     "fp4": 4.0, "int8": 4.0, "int4": 4.0}   # fp32/int32 accumulation except fp64


def check_reuse(circuit: str) -> Reuse:
    return REUSE_TABLE[check_circuit(circuit).name]
