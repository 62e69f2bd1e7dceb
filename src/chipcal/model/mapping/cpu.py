"""CPU mapper: work split over cores, SIMD lane fill, matrix engines (AMX), cache fit.

* SIMD GEMM (conv as implicit GEMM, linear, matmul, attention): BLAS/oneDNN micro-kernels keep
  an MR × NR block of C in vector registers, MR = 8 rows × NR = 2 vectors; cores take micro-tiles
  (items = ceil(M/8) · ceil(N/NR) · count). Vectorized along N: lane fill = N / round_up(N, lanes),
  lanes = simd_bits / 32 accumulators (64 for fp64; bf16/int8 dot-product instructions accumulate
  into 32-bit lanes).
* Matrix engine (an engine with circuit systolic_mac on a CPU, i.e. Intel AMX TMUL): 16 × 16 tiles
  of 32-bit accumulators, K consumed 64 bytes at a time (Intel Optimization Reference Manual, AMX);
  fill = M/round_up(M,16) · N/round_up(N,16) · K/round_up(K, 64/b).
* Everything else (elementwise, norm, pool, copies, depthwise): PyTorch's at::parallel_for does
  not split below GRAIN_SIZE = 32768 elements per thread (aten/src/ATen/Parallel.h), so
  cores used = min(cores, ceil(outputs / 32768)); lane fill from the vectorizable dimension.
  Depthwise conv (oneDNN vectorizes over channels) takes one SIMD vector of outputs per item.
* Cache fit: activations stay on chip when input + output fit in L3 + the cores' L2s.
* Subnormal operands (fp32): a core that takes a microcode assist for a SIMD instruction with a
  subnormal input or result (microarch subnormal_assist_cycles: Intel; absent on AMD and Arm)
  spends assist_cycles = its share of subnormal_ops / lanes × subnormal_assist_cycles on them,
  serial with the kernel's work (subnormal_ops: workload/subnormal.py; the assist flushes the
  pipeline, nothing overlaps it). The kernel gives each busy core a contiguous range of ceil(n/busy)
  of its n matrices (at::parallel_for, MKL's batched GEMM): where the workload knows the
  operations by matrix (subnormal_split) the busiest range is the share, else 1/busy.

Cores are the units; SMT threads share a core's FMA pipes and add none.
"""

from __future__ import annotations

from dataclasses import replace

from chipcal.model.chip import Chip, Engine
from chipcal.model.mapping.base import (
    Allocation,
    Traffic,
    best,
    bytes_per_element,
    ceil_div,
    is_mac_work,
    mac_engines,
    round_up,
    spread,
    vector_engine,
)

MICRO_ROWS = 8           # MR of the SIMD micro-kernel
GRAIN_SIZE = 32768       # at::internal::GRAIN_SIZE
AMX_TILE = 16            # AMX tile rows / 32-bit accumulator columns
AMX_K_BYTES = 64         # AMX tile row width in bytes


def accumulator_lanes(chip: Chip, precision: str) -> int:
    return max(1, int(chip.microarch["simd_bits"]) // (64 if precision == "fp64" else 32))


def storage_lanes(chip: Chip, precision: str) -> int:
    return max(1, int(int(chip.microarch["simd_bits"]) / (8 * bytes_per_element(precision))))


def _alloc(chip: Chip, engine: Engine, precision: str, items: int, fill: float, moved: Traffic,
           what: str) -> Allocation:
    return spread("cpu", "core", int(chip.microarch["cores"]), engine, precision, items, fill, moved,
                  f"{what} on {engine.name} ({precision})")


def _simd_gemm(subgraph, chip: Chip, engine: Engine, precision: str, moved: Traffic) -> Allocation:
    g = subgraph.gemm
    lanes = accumulator_lanes(chip, precision)
    nr = 2 * lanes
    items = ceil_div(g.m, MICRO_ROWS) * ceil_div(g.n, nr) * g.count
    fill = g.n / round_up(g.n, lanes)
    return _alloc(chip, engine, precision, items, fill, moved,
                  f"SIMD GEMM {MICRO_ROWS}x{nr} micro-tiles, N={g.n} over {lanes} lanes")


def _amx_gemm(subgraph, chip: Chip, engine: Engine, precision: str, moved: Traffic) -> Allocation:
    g = subgraph.gemm
    k_step = max(1, int(AMX_K_BYTES / bytes_per_element(precision)))
    items = ceil_div(g.m, AMX_TILE) * ceil_div(g.n, AMX_TILE) * g.count
    fill = (g.m / round_up(g.m, AMX_TILE)) * (g.n / round_up(g.n, AMX_TILE)) * (g.k / round_up(g.k, k_step))
    return _alloc(chip, engine, precision, items, fill, moved,
                  f"matrix-engine {AMX_TILE}x{AMX_TILE} tiles, K step {k_step}")


def _vector(subgraph, chip: Chip, engine: Engine, precision: str, moved: Traffic, grain: int) -> Allocation:
    lanes = storage_lanes(chip, precision)
    threads = int(subgraph.threads)
    items = ceil_div(threads, grain)
    vd = max(1, int(subgraph.parallelism.vector_dim))
    fill = vd / round_up(vd, lanes)
    return _alloc(chip, engine, precision, items, fill, moved,
                  f"{threads} outputs in chunks of {grain}, vector dim {vd} over {lanes} lanes")


def onchip_capacity(chip: Chip) -> float:
    """L3 + every core's L2 (bytes): what can hold activations/weights between kernels."""
    ma = chip.microarch
    return float(ma["l3_bytes"]) + int(ma["cores"]) * float(ma["l2_bytes_per_core"])


blocking_capacity = onchip_capacity   # GEMM blocks use the whole on-chip level


SUBNORMAL_PRECISIONS = ("fp32",)   # subnormal_ops are counted on fp32 values (workload/subnormal.py)


def busiest_share(split: tuple[float, ...], units_busy: int) -> float:
    """The largest part of sum(split) that one of `units_busy` cores gets when each takes a
    contiguous range of ceil(n / units_busy) of the n entries; 1/units_busy when the split is
    unknown (empty) or has fewer entries than cores (the kernel then splits inside a matrix)."""
    busy = max(units_busy, 1)
    total = sum(split)
    if len(split) < busy or total <= 0:
        return 1.0 / busy
    chunk = ceil_div(len(split), busy)
    return max(sum(split[i:i + chunk]) for i in range(0, len(split), chunk)) / total


def assist_cycles(subgraph, chip: Chip, precision: str, units_busy: int) -> float:
    """Cycles the busiest core spends in subnormal assists (module docstring); 0 where none."""
    ops = getattr(subgraph, "subnormal_ops", 0.0)
    cycles = float(chip.microarch.get("subnormal_assist_cycles", 0) or 0)
    if not ops or not cycles or precision not in SUBNORMAL_PRECISIONS:
        return 0.0
    share = busiest_share(tuple(getattr(subgraph, "subnormal_split", ())), units_busy)
    return ops * share / storage_lanes(chip, precision) * cycles


def allocate(subgraph, chip: Chip, precision: str, moved: Traffic) -> Allocation:
    alloc = _allocate(subgraph, chip, precision, moved)
    cycles = assist_cycles(subgraph, chip, precision, alloc.units_allocated)
    return replace(alloc, assist_cycles=cycles) if cycles else alloc


def _allocate(subgraph, chip: Chip, precision: str, moved: Traffic) -> Allocation:
    if not is_mac_work(subgraph):
        found = vector_engine(chip, precision) or mac_engines(chip, precision)[0]
        return _vector(subgraph, chip, found[0], found[1], moved, GRAIN_SIZE)
    dense = subgraph.gemm is not None and subgraph.op_class != "depthwise"
    candidates = []
    for engine, p in mac_engines(chip, precision):
        if engine.circuit == "systolic_mac":
            if dense:
                candidates.append(_amx_gemm(subgraph, chip, engine, p, moved))
        elif dense:
            candidates.append(_simd_gemm(subgraph, chip, engine, p, moved))
        else:
            candidates.append(_vector(subgraph, chip, engine, p, moved, accumulator_lanes(chip, p)))
    if not candidates:  # depthwise at a precision only the matrix engine runs
        engine, p = mac_engines(chip, precision)[0]
        candidates.append(_vector(subgraph, chip, engine, p, moved, accumulator_lanes(chip, p)))
    return best(candidates)
