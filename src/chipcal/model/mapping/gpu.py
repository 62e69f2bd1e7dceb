"""GPU mapper (CUDA model): threads → warps → thread blocks (CTAs) → SMs, in waves.

Two kernel shapes, as cuBLAS/cuDNN and PyTorch's elementwise kernels launch them:

* Tiled GEMM (conv as implicit GEMM, linear, matmul, attention): one 256-thread CTA per
  tile_m × tile_n output tile, one CTA per SM per wave (NVIDIA "Matrix Multiplication Background"
  user guide: waves = tiles ÷ SMs). Tile quantization pads M and N to the tile; tensor cores also
  pad K to their 32-byte MMA depth (m16n8k16 fp16, m16n8k32 int8, m16n8k8 tf32). Like cuBLAS's
  heuristics, the mapper tries tiles from 128×128 down to 16×64 and keeps the one with the most
  available throughput: small tiles fill skinny GEMMs and more SMs, but feed fewer MACs per byte
  read from shared memory (`smem_factor`). Tensor cores are eligible when their engine runs the
  precision and the op is a dense GEMM (not depthwise).
* Thread per output element (elementwise, norm, pool, data movement, depthwise conv on CUDA
  cores): 256-thread blocks, max_threads_per_sm / 256 blocks resident per SM.

Only CUDA-core and tensor-core engines are used (a Jetson's DLAs are separate accelerators that
CUDA kernels do not reach). Occupancy (resident threads ÷ max_threads_per_sm on a busy SM) is
reported; it does not scale time: tiled GEMMs reach peak at low occupancy through ILP, and the
memory-bound kernels it would slow are charged by bandwidth_efficiency.
"""

from __future__ import annotations

from chipcal.model.chip import Chip, Engine
from chipcal.model.mapping.base import (
    Allocation,
    Traffic,
    UnsupportedPrecision,
    allocation,
    best,
    bytes_per_element,
    ceil_div,
    is_mac_work,
    mac_engines,
    round_up,
    vector_engine,
    wave_schedule,
)

BLOCK_THREADS = 256
GEMM_TILES = tuple((m, n) for m in (128, 64, 32, 16) for n in (128, 64))   # CTA tiles, largest first
SMEM_BYTES_PER_CLOCK = 128   # shared memory: 32 banks × 4 bytes per clock per SM (CUDA guide)
MMA_K_BYTES = 32         # tensor-core MMA reduction depth in bytes
GPU_CIRCUITS = ("cuda_core", "tensor_core")


def smem_factor(chip: Chip, engine: Engine, precision: str, tile_m: int, tile_n: int) -> float:
    """Fraction of an SM's MAC rate a tile_m × tile_n CTA tile can feed from shared memory.

    Per K step a CTA reads (tile_m + tile_n) operand elements for tile_m · tile_n MACs; shared
    memory delivers SMEM_BYTES_PER_CLOCK per SM, so the tile sustains at most
    SMEM_BYTES_PER_CLOCK · tile_m · tile_n / ((tile_m + tile_n) · b) MACs per clock.
    """
    per_sm = engine.units * engine.macs_per_unit_per_clock[precision] / int(chip.microarch["sm_count"])
    feed = SMEM_BYTES_PER_CLOCK * tile_m * tile_n / ((tile_m + tile_n) * bytes_per_element(precision))
    return min(1.0, feed / per_sm)


def _tiled(subgraph, chip: Chip, engine: Engine, precision: str, moved: Traffic, tensor: bool,
           tile_m: int, tile_n: int) -> Allocation:
    sms = int(chip.microarch["sm_count"])
    g = subgraph.gemm
    tiles_m, tiles_n = ceil_div(g.m, tile_m), ceil_div(g.n, tile_n)
    blocks = tiles_m * tiles_n * g.count
    schedule = waves, busy, _ = wave_schedule(blocks, sms, 1)
    fill = (g.m * g.n) / (tiles_m * tile_m * tiles_n * tile_n)
    k_note = ""
    k_step = 1
    if tensor:
        k_step = max(1, int(MMA_K_BYTES / bytes_per_element(precision)))
        fill *= g.k / round_up(g.k, k_step)
        k_note = f", K {g.k} padded to {round_up(g.k, k_step)}"
    feed = smem_factor(chip, engine, precision, tile_m, tile_n)
    occupancy = BLOCK_THREADS / int(chip.microarch["max_threads_per_sm"])
    k_bytes = round_up(g.k, k_step) * bytes_per_element(precision)
    detail = (f"{blocks} CTAs of {tile_m}x{tile_n} tiles on {engine.name} ({precision}) → "
              f"{waves} wave(s) over {sms} SMs, {busy} SMs busy; tile fill {fill:.0%}{k_note}"
              + (f", shared-memory feed {feed:.0%}" if feed < 1 else "")
              + f"; K loop {k_bytes:.0f} B per CTA")
    return allocation("gpu", "SM", sms, engine, precision, schedule, fill * feed, moved, detail, occupancy,
                      serial_k_bytes=k_bytes)


def _threaded(subgraph, chip: Chip, engine: Engine, precision: str, moved: Traffic) -> Allocation:
    sms = int(chip.microarch["sm_count"])
    max_threads = int(chip.microarch["max_threads_per_sm"])
    per_sm = max(1, max_threads // BLOCK_THREADS)
    threads = int(subgraph.threads)
    blocks = ceil_div(threads, BLOCK_THREADS)
    schedule = waves, busy, _ = wave_schedule(blocks, sms, per_sm)
    fill = threads / (blocks * BLOCK_THREADS) if blocks else 1.0
    resident_blocks = min(per_sm, ceil_div(min(blocks, sms * per_sm), busy)) if busy else 0
    occupancy = resident_blocks * BLOCK_THREADS / max_threads
    warps = ceil_div(threads, 32)
    detail = (f"{threads} threads = {warps} warps in {blocks} blocks of {BLOCK_THREADS} on {engine.name} "
              f"({precision}) → {waves} wave(s), {busy}/{sms} SMs busy, occupancy {occupancy:.0%}")
    return allocation("gpu", "SM", sms, engine, precision, schedule, fill, moved, detail, occupancy)


def onchip_capacity(chip: Chip) -> float:
    """The L2 (bytes): what can hold activations/weights between kernels."""
    return float(chip.microarch["l2_bytes"])


blocking_capacity = onchip_capacity   # GEMM blocks use the whole on-chip level


def allocate(subgraph, chip: Chip, precision: str, moved: Traffic) -> Allocation:
    if not is_mac_work(subgraph):
        found = vector_engine(chip, precision)
        if found is None:
            raise UnsupportedPrecision(f"{chip.name}: no CUDA-core engine for {precision} {subgraph.op_class} work")
        return _threaded(subgraph, chip, found[0], found[1], moved)
    candidates = []
    dense = subgraph.gemm is not None and subgraph.op_class != "depthwise"
    for engine, p in mac_engines(chip, precision):
        if engine.circuit not in GPU_CIRCUITS:
            continue  # e.g. Jetson DLAs: separate accelerators, not fed by CUDA kernels
        tensor = engine.circuit == "tensor_core"
        if dense:
            candidates += [_tiled(subgraph, chip, engine, p, moved, tensor, tm, tn) for tm, tn in GEMM_TILES]
        elif not tensor:
            candidates.append(_threaded(subgraph, chip, engine, p, moved))
    if not candidates:
        raise UnsupportedPrecision(f"{chip.name}: no CUDA-core or tensor-core engine runs {precision} "
                                   f"{subgraph.op_class} work")
    return best(candidates)
