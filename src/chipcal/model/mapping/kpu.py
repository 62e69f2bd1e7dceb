"""KPU mapper (tile/dataflow design study): output blocks on tiles of PE arrays, scratchpad limits.

Each tile is an R × C array of processing elements (R = pe_rows, C = pe_cols) with a private
scratchpad. A GEMM is cut into output-stationary R × C blocks; the K reduction streams through
the array as a wavefront, so each block pays R + C cycles of fill/drain per pass over K.

    blocks        ceil(M / R) · ceil(N / C) · count over `tiles`, in waves (base.wave_schedule)
                  (depthwise: channels along the columns, N' = count · N, count' = 1)
    spatial fill  M · N / (ceil(M/R)·R · ceil(N/C)·C)
    scratchpad    a block needs (R + C) · K · b bytes of operand panels + R · C · 4 of accumulators;
                  when that exceeds the tile's scratchpad, K is processed in chunks
                  kc = floor((S − 4RC) / ((R + C) · b)), each chunk paying the fill/drain again
    temporal fill K / (K + chunks · (R + C))
    lane fill     spatial · temporal

Operand re-reads beyond the compulsory bytes follow the blocked-GEMM bound with the *tile*
scratchpad as the fast memory (base.traffic) — the scratchpad capacity limit on traffic.
Activations stay on chip when input + output fit in the tiles' scratchpads together (+ l2_bytes if
the chip lists a shared level). Non-MAC ops run on the PEs as ALUs, R · C outputs per tile pass.
"""

from __future__ import annotations

import math

from chipcal.model.chip import Chip, Engine
from chipcal.model.mapping.base import (
    Allocation,
    Traffic,
    bytes_per_element,
    ceil_div,
    is_mac_work,
    mac_engines,
    spread,
    vector_engine,
)

ACCUMULATOR_BYTES = 4


def _geometry(chip: Chip) -> tuple[int, int, int, float]:
    ma = chip.microarch
    return int(ma["tiles"]), int(ma["pe_rows"]), int(ma["pe_cols"]), float(ma["scratchpad_bytes_per_tile"])


def _alloc(chip: Chip, engine: Engine, precision: str, items: int, fill: float, moved: Traffic,
           what: str) -> Allocation:
    return spread("kpu", "tile", _geometry(chip)[0], engine, precision, items, fill, moved, what)


def k_chunks(k: int, rows: int, cols: int, scratchpad: float, precision: str) -> int:
    """How many passes over K one output block needs to fit the tile scratchpad."""
    b = bytes_per_element(precision)
    room = scratchpad - ACCUMULATOR_BYTES * rows * cols
    if room <= 0:
        raise ValueError(f"scratchpad of {scratchpad:g} B cannot hold a {rows}x{cols} accumulator block")
    kc = max(1, math.floor(room / ((rows + cols) * b)))
    return ceil_div(k, kc)


def _blocks(subgraph, chip: Chip, engine: Engine, precision: str, moved: Traffic) -> Allocation:
    _, rows, cols, spad = _geometry(chip)
    g = subgraph.gemm
    m, n, k, count = g.m, g.n, g.k, g.count
    if subgraph.op_class == "depthwise":
        n, count = n * count, 1
    bm, bn = ceil_div(m, rows), ceil_div(n, cols)
    items = bm * bn * count
    spatial = (m * n) / (bm * rows * bn * cols)
    chunks = k_chunks(k, rows, cols, spad, precision)
    temporal = k / (k + chunks * (rows + cols))
    what = (f"{rows}x{cols} output blocks on {engine.name} ({precision}), K={k} in {chunks} scratchpad "
            f"pass(es); spatial fill {spatial:.0%}, temporal fill {temporal:.0%}")
    return _alloc(chip, engine, precision, items, spatial * temporal, moved, what)


def _elementwise(subgraph, chip: Chip, moved: Traffic, precision: str) -> Allocation:
    _, rows, cols, _ = _geometry(chip)
    engine, p = vector_engine(chip, precision) or mac_engines(chip, precision)[0]
    threads = int(subgraph.threads)
    per_pass = rows * cols
    items = ceil_div(threads, per_pass)
    fill = threads / (items * per_pass) if items else 1.0
    return _alloc(chip, engine, p, items, fill, moved,
                  f"{threads} outputs on the PEs of {engine.name} ({p}), {per_pass} per tile pass")


def onchip_capacity(chip: Chip) -> float:
    """All tiles' scratchpads (+ a shared l2_bytes level if listed), bytes."""
    tiles, _, _, spad = _geometry(chip)
    return tiles * spad + float(chip.microarch.get("l2_bytes", 0) or 0)


def blocking_capacity(chip: Chip) -> float:
    """One tile's scratchpad (bytes): what a GEMM block must fit in (tiles block independently)."""
    return _geometry(chip)[3]


def allocate(subgraph, chip: Chip, precision: str, moved: Traffic) -> Allocation:
    if not is_mac_work(subgraph) or subgraph.gemm is None:
        return _elementwise(subgraph, chip, moved, precision)
    native = chip.engine_for(precision)
    engine, p = (native, precision) if native is not None else mac_engines(chip, precision)[0]
    return _blocks(subgraph, chip, engine, p, moved)
