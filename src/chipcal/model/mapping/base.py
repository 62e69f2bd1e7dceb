"""What a mapper returns (`Allocation`) and the rules all mappers share.

Two quantities are kept apart (seed 000's lesson):

* utilization: the time-averaged fraction of the chip's units (SMs, cores, MXUs, tiles) that
  have work. A kernel whose grid covers every SM has utilization 1 even when its threads stall
  on memory.
* efficiency: achieved FLOP/s ÷ peak FLOP/s. It is *computed* by the roofline (compute vs memory
  time), never assumed equal to utilization.

Between them sits *lane fill*: the fraction of a busy unit's datapath holding real data (tile
padding, SIMD lanes past the vector length, systolic-array rows/columns left empty, pipeline
fill). Compute time uses peak × utilization × lane_fill × efficiency[op_class] × size curve.

Shared rules:

    waves        = ceil(items / (units × items_per_unit))
    utilization  = ((waves − 1) × units + min(units, items in the last wave)) / (waves × units)
                   (work is spread over units breadth-first; every wave lasts as long as a full one)
    DRAM bytes   = weights + activations not held on chip (see `traffic`)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import NamedTuple

from chipcal.model.chip import Chip, Engine
from chipcal.model.errors import UnsupportedPrecision
from chipcal.model.precision import BYTES_PER_ELEMENT, FLOP_PER_MAC

# Op classes whose work is multiply-accumulate (run on a matrix/FMA engine); the rest run on the
# chip's vector engine. The convolutions among them are the ones a runtime may reorder (traffic).
CONV_CLASSES = ("conv", "conv1x1", "depthwise")
MAC_CLASSES = (*CONV_CLASSES, "matmul", "attention")
# Programmable circuits that can run any elementwise op (and any precision, promoted to fp32).
GENERAL_CIRCUITS = ("x86_performance", "arm_core", "cuda_core")
# Storage precisions narrower than fp32 that a general-purpose engine computes by promoting to fp32.
PROMOTABLE = ("tf32", "bf16", "fp16", "fp8", "fp4", "int8", "int4")


@dataclass(frozen=True)
class Allocation:
    """How one fused subgraph occupies a chip (the mapper's answer; no timing yet).

    peak_flop_per_s is the chosen engine's peak at `compute_precision` (2 FLOP per MAC).
    dram_bytes / onchip_bytes are already rescaled to the run's precision.
    """

    family: str
    engine: str
    circuit: str
    compute_precision: str
    peak_flop_per_s: float
    unit_name: str
    units_total: int
    units_allocated: int
    waves: int
    utilization: float
    lane_fill: float
    occupancy: float | None
    dram_bytes: float
    onchip_bytes: float
    activations_on_chip: bool
    detail: str
    # bytes of its reduction a unit's work item walks one tile after another (tiled GPU GEMMs: one
    # CTA's K, padded to the MMA depth, x bytes per element); 0 where no such loop is modelled
    serial_k_bytes: float = 0.0
    # cycles each busy unit spends in microcode assists, serial with its work (a CPU's SIMD
    # instructions on subnormal operands: mapping/cpu.py); 0 where none are modelled
    assist_cycles: float = 0.0

    @property
    def available_flop_per_s(self) -> float:
        """Peak × utilization × lane fill: the throughput the mapping leaves within reach."""
        return self.peak_flop_per_s * self.utilization * self.lane_fill


def ceil_div(a: float, b: float) -> int:
    return int(math.ceil(a / b)) if a > 0 else 0


def round_up(a: float, b: float) -> int:
    return ceil_div(a, b) * int(b)


def wave_schedule(items: int, units: int, items_per_unit: int = 1) -> tuple[int, int, float]:
    """(waves, units busy in the first wave, time-averaged utilization) for `items` work items."""
    if items <= 0:
        return 0, 0, 0.0
    slots = units * items_per_unit
    waves = ceil_div(items, slots)
    last = items - (waves - 1) * slots
    busy_last = min(units, last)
    utilization = ((waves - 1) * units + busy_last) / (waves * units)
    return waves, min(units, items), utilization


def allocation(family: str, unit_name: str, units: int, engine: Engine, precision: str,
               schedule: tuple[int, int, float], fill: float, moved: Traffic, detail: str,
               occupancy: float | None = None, serial_k_bytes: float = 0.0) -> Allocation:
    """The Allocation of work scheduled over `units` (`schedule` = wave_schedule's answer) on
    `engine` at `precision`: every mapper's answer is built here."""
    waves, busy, util = schedule
    return Allocation(
        family=family, engine=engine.name, circuit=engine.circuit, compute_precision=precision,
        peak_flop_per_s=engine_peak_flop_per_s(engine, precision), unit_name=unit_name, units_total=units,
        units_allocated=busy, waves=waves, utilization=util, lane_fill=fill, occupancy=occupancy,
        **moved._asdict(), detail=detail, serial_k_bytes=serial_k_bytes)


def spread(family: str, unit_name: str, units: int, engine: Engine, precision: str, items: int, fill: float,
           moved: Traffic, what: str) -> Allocation:
    """`items` equal work items, one per unit at a time, over `units` (CPU cores, TPU MXUs, KPU
    tiles) in waves; `what` says what the items are."""
    schedule = waves, busy, _ = wave_schedule(items, units, 1)
    return allocation(family, unit_name, units, engine, precision, schedule, fill, moved,
                      f"{what}: {items} work items over {units} {unit_name}s → "
                      f"{busy} busy, {waves} wave(s); lane fill {fill:.0%}")


def is_mac_work(subgraph) -> bool:
    return subgraph.macs > 0 and subgraph.op_class in MAC_CLASSES


def engine_precision(engine: Engine, precision: str) -> str | None:
    """The precision `engine` computes `precision` in: natively, or promoted to fp32 on a
    general-purpose engine (e.g. int8 elementwise on CUDA cores); None if it cannot."""
    if precision in engine.macs_per_unit_per_clock:
        return precision
    if engine.circuit in GENERAL_CIRCUITS and precision in PROMOTABLE and "fp32" in engine.macs_per_unit_per_clock:
        return "fp32"
    return None


def mac_engines(chip: Chip, precision: str) -> list[tuple[Engine, str]]:
    """Every engine that can run MAC work at `precision`, with the precision it computes in."""
    out = []
    for engine in chip.engines:
        p = engine_precision(engine, precision)
        if p is not None:
            out.append((engine, p))
    if not out:
        raise UnsupportedPrecision(f"{chip.name} has no engine for {precision}; it runs "
                                   f"{', '.join(chip.precisions)}")
    return out


def vector_engine(chip: Chip, precision: str) -> tuple[Engine, str] | None:
    """The fastest general-purpose engine for non-MAC work at `precision` (None if the chip has none)."""
    best, best_rate = None, 0.0
    for engine in chip.engines:
        if engine.circuit not in GENERAL_CIRCUITS:
            continue
        p = engine_precision(engine, precision)
        if p is None:
            continue
        rate = engine.peak_macs_per_s(p)
        if rate > best_rate:
            best, best_rate = (engine, p), rate
    return best


def engine_peak_flop_per_s(engine: Engine, precision: str) -> float:
    return FLOP_PER_MAC * engine.peak_macs_per_s(precision)


def bytes_per_element(precision: str) -> float:
    return BYTES_PER_ELEMENT[precision]


class Traffic(NamedTuple):
    """The bytes one subgraph moves; the field names are `Allocation`'s."""

    dram_bytes: float           # to/from DRAM
    onchip_bytes: float         # through the on-chip level (every byte passes it once)
    activations_on_chip: bool   # input/output held in the last-level cache/SRAM


def traffic(subgraph, bytes_scale: float, resident_capacity: float, blocking_capacity: float,
            precision: str, weights_on_chip: bool, layout_passes: float = 0.0,
            producer_layout_bytes: float = 0.0, scales: tuple[float, float, float] | None = None) -> Traffic:
    """The DRAM bytes, on-chip bytes and whether activations stay on chip, for one subgraph.

    Weights come from DRAM unless `weights_on_chip` (the caller decided that the whole model's
    weights stay in on-chip memory across repeated inferences). Activations stay on chip when the
    subgraph's input + output fit in `resident_capacity` (the producer left its output in the
    last-level cache/SRAM and this subgraph leaves its own there); a subgraph with no producer
    reads the graph input from DRAM, unless the whole model stays on chip (`weights_on_chip`):
    steady-state inference reuses its input buffer as it reuses its weights, so an input that
    fits beside them is as hot as they are. A GEMM whose operands exceed `blocking_capacity` re-reads
    operands: blocked-GEMM traffic ≥ 2·M·N·K·count·b / sqrt(capacity / b) (Hong & Kung 1981's
    I/O lower bound for matrix multiply, b = bytes per element); the excess over the compulsory
    bytes goes to DRAM unless the activations are on chip. Every byte also passes the on-chip level
    once (on-chip bytes), and the subgraph's `onchip_reread_bytes` pass it again (no DRAM: a
    beam's reads of the prompt its request's other beams read from DRAM, estimate/serving.py).

    `layout_passes` (FamilyParams; PyTorch eager on a CPU: oneDNN's reorders) adds, for a
    convolution, 2 × passes × (input + output) bytes: each pass reads one layout and writes the
    other. The reordered copies are live beside the originals, so the activations stay on chip
    only when (1 + passes) × (input + output) fit. `producer_layout_bytes` (traced bytes, like the
    subgraph's): what a convolution producer's last layout pass read while writing this
    subgraph's input (its channel-blocked output, as large as that input), which sits in the cache
    beside the input when this subgraph starts and counts toward the input's residency too.
    `scales` (input, weight, output) replaces `bytes_scale` where the three are stored in different
    dtypes (autocast: estimate.numerics).
    """
    s_in, s_w, s_out = scales if scales is not None else (bytes_scale,) * 3
    a_in = subgraph.input_bytes * s_in
    w = subgraph.weight_bytes * s_w
    out = subgraph.output_bytes * s_out
    passes = layout_passes if subgraph.op_class in CONV_CLASSES else 0.0
    layout = 2.0 * passes * (a_in + out)
    compulsory = a_in + w + out
    held = producer_layout_bytes * s_in
    resident = resident_capacity > 0 and (1.0 + passes) * (a_in + out) + held <= resident_capacity
    dram = (0.0 if weights_on_chip else w) + (0.0 if resident and (subgraph.depends_on or weights_on_chip) else a_in) \
        + (0.0 if resident else out + layout)
    extra = 0.0
    g = subgraph.gemm
    if g is not None and subgraph.macs > 0 and blocking_capacity > 0 and compulsory > blocking_capacity:
        b = bytes_per_element(precision)
        bound = 2.0 * g.m * g.n * g.k * g.count * b / math.sqrt(blocking_capacity / b)
        extra = max(0.0, bound - compulsory)
    onchip = compulsory + layout + extra + subgraph.onchip_reread_bytes * s_in
    if resident:
        return Traffic(dram, onchip, True)
    return Traffic(dram + extra, onchip, False)


def best(candidates: list[Allocation]) -> Allocation:
    """The candidate with the highest available throughput (ties: the first, i.e. registry order)."""
    return max(candidates, key=lambda a: a.available_flop_per_s)
