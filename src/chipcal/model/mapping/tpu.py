"""TPU mapper: weight-stationary systolic arrays (MXUs) and a vector unit for everything else.

A GEMM's weights (K × N) are cut into R × C tiles (R = array_rows along K, C = array_cols along N)
and loaded into an MXU; the M activation rows stream through (Jouppi et al., ISCA 2017, TPUv1).

    weight tiles  T = ceil(count / G) · ceil(K / R) · ceil(N / C)
                  (G = groups packed block-diagonally into one tile: min(R // K, C // N) for a
                  depthwise/grouped conv with small per-group K and N, else 1)
    M split       s = max(1, min(M // R, ceil(mxu_count / T)))   (replicate weights when T < MXUs)
    items         T · s over mxu_count MXUs, in waves (base.wave_schedule)
    spatial fill  K · N · count / (T · R · C)
    temporal fill waves · m / (waves · max(m, R) + R + C),  m = M / s
                  (a tile streams m rows; loading the next R-row weight tile is hidden only behind
                  ≥ R rows; R + C cycles of pipeline fill/drain per kernel)
    lane fill     spatial · temporal

Small M (batch-1 linear layers) therefore fills the array poorly — the batch dependence.
Non-MAC ops run on the vector unit, assumed one array row wide per MXU (C lanes, i.e. 1/R of the
MXU MAC rate; the registry lists no separate vector engine for TPUs). Depthwise convolutions take
the faster of the array (block-diagonal packing) and the vector unit. Activations stay on chip when input + output fit in sram_bytes.
"""

from __future__ import annotations

from chipcal.model.chip import Chip, Engine
from chipcal.model.mapping.base import (
    Allocation,
    Traffic,
    best,
    ceil_div,
    is_mac_work,
    mac_engines,
    spread,
)


def _geometry(chip: Chip) -> tuple[int, int, int]:
    ma = chip.microarch
    return int(ma["mxu_count"]), int(ma["array_rows"]), int(ma["array_cols"])


def _alloc(chip: Chip, engine: Engine, precision: str, items: int, fill: float, moved: Traffic,
           what: str) -> Allocation:
    return spread("tpu", "MXU", _geometry(chip)[0], engine, precision, items, fill, moved, what)


def _systolic(subgraph, chip: Chip, engine: Engine, precision: str, moved: Traffic) -> Allocation:
    mxus, rows, cols = _geometry(chip)
    g = subgraph.gemm
    groups_per_tile = 1
    if subgraph.op_class == "depthwise" or (g.count > 1 and subgraph.op_class in ("conv", "conv1x1")):
        groups_per_tile = max(1, min(rows // max(1, g.k), cols // max(1, g.n)))
    tiles = ceil_div(g.count, groups_per_tile) * ceil_div(g.k, rows) * ceil_div(g.n, cols)
    split = max(1, min(g.m // rows, ceil_div(mxus, tiles)))
    items = tiles * split
    waves = ceil_div(items, mxus)
    m = g.m / split
    spatial = g.k * g.n * g.count / (tiles * rows * cols)
    temporal = waves * m / (waves * max(m, rows) + rows + cols)
    what = (f"{tiles} weight tiles of {rows}x{cols} (K={g.k}, N={g.n}, count={g.count}, "
            f"{groups_per_tile} group(s)/tile) x {split} M-split on {engine.name} ({precision}); spatial "
            f"fill {spatial:.0%}, temporal fill {temporal:.0%} (M={g.m} rows streamed)")
    return _alloc(chip, engine, precision, items, spatial * temporal, moved, what)


def _vector(subgraph, chip: Chip, moved: Traffic, precision: str) -> Allocation:
    _, rows, cols = _geometry(chip)
    engine, p = mac_engines(chip, precision)[0]
    threads = int(subgraph.threads)
    items = ceil_div(threads, cols)
    fill = threads / (items * cols) if items else 1.0
    what = (f"{threads} outputs on the vector unit beside {engine.name} ({p}): {cols} lanes per MXU, "
            f"1/{rows} of the array rate")
    return _alloc(chip, engine, p, items, fill / rows, moved, what)


def onchip_capacity(chip: Chip) -> float:
    """On-chip SRAM (bytes): what can hold activations/weights between kernels."""
    return float(chip.microarch["sram_bytes"])


blocking_capacity = onchip_capacity   # GEMM blocks use the whole on-chip level


def allocate(subgraph, chip: Chip, precision: str, moved: Traffic) -> Allocation:
    if not is_mac_work(subgraph) or subgraph.gemm is None:
        return _vector(subgraph, chip, moved, precision)
    candidates = [_systolic(subgraph, chip, e, p, moved)
                  for e, p in mac_engines(chip, precision) if e.circuit == "systolic_mac"]
    candidates.append(_vector(subgraph, chip, moved, precision))
    return best(candidates)
