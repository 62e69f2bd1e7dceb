"""Which chip is best for a model at a precision: the choice behind `chipcal predict`'s
recommendations (their text: report/predictions.py).

Per (model, precision) with at least two chips, among the predictions that run and fit: the best
latency at the smallest batch, the least energy per sample and the most samples per second over
the batches, each with its runner-up. Hypothetical designs (registry `hypothetical`) are kept
apart from the products, each with the rank it would take among them; with no product among the
chips the designs are ranked themselves.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from chipcal.model.estimate.prediction import Prediction


@dataclass(frozen=True)
class Leader:
    """The best prediction by one measure, and the next one (None when it stands alone)."""

    best: Prediction
    runner_up: Prediction | None


@dataclass(frozen=True)
class DesignStanding:
    """A hypothetical design's best figures and the rank (1-based) each would take among the
    products: latency at the smallest batch (inf: not predicted there), least energy per sample,
    most samples per second."""

    chip: str
    latency_s: float
    energy_per_sample_j: float
    throughput_per_s: float
    ranks: tuple[int, int, int]


@dataclass(frozen=True)
class Ranking:
    """The choice for one (model, precision). `batch`: the smallest batch of the ranked
    predictions, where latency is compared; `designs_only`: no product among the chips, so the
    leaders are designs. `designs`: the designs set apart from the `products` product chips, best
    first, their latency compared at `design_batch` (the smallest batch of both)."""

    model: str
    precision: str
    designs_only: bool
    batch: int
    latency: Leader
    energy: Leader
    throughput: Leader
    designs: tuple[DesignStanding, ...]
    products: int
    design_batch: int


def _leader(ordered: Sequence[Prediction]) -> Leader:
    return Leader(ordered[0], ordered[1] if len(ordered) > 1 else None)


def _bests(rows: Sequence[Prediction], small: int) -> dict[str, tuple[float, float, float]]:
    """{chip: (latency at batch `small`, least energy per sample, -most samples per second)}:
    smaller is better in each."""
    out = {}
    for chip in dict.fromkeys(p.chip for p in rows):
        mine = [p for p in rows if p.chip == chip]
        latency = min((p.latency_s for p in mine if p.batch == small), default=math.inf)
        out[chip] = (latency, min(p.energy_per_sample_j for p in mine), -max(p.throughput_per_s for p in mine))
    return out


def _standings(designs: Sequence[Prediction], products: Sequence[Prediction],
               small: int) -> tuple[DesignStanding, ...]:
    """Each design's figures and the rank each would take among the products (latency at batch
    `small`), best design first."""
    theirs = _bests(products, small)
    return tuple(DesignStanding(chip, mine[0], mine[1], -mine[2],
                                tuple(1 + sum(other[i] < mine[i] for other in theirs.values()) for i in range(3)))
                 for chip, mine in sorted(_bests(designs, small).items(), key=lambda kv: (kv[1], kv[0])))


def _ranking(model: str, precision: str, group: Sequence[Prediction]) -> Ranking:
    products = [p for p in group if not p.hypothetical]
    designs = [p for p in group if p.hypothetical] if products else []
    ranked = products or group
    small, design_batch = min(p.batch for p in ranked), min(p.batch for p in group)
    return Ranking(
        model, precision, designs_only=not products, batch=small,
        latency=_leader(sorted((p for p in ranked if p.batch == small), key=lambda p: (p.latency_s, p.chip))),
        energy=_leader(sorted(ranked, key=lambda p: (p.energy_per_sample_j, p.chip))),
        throughput=_leader(sorted(ranked, key=lambda p: (-p.throughput_per_s, p.chip))),
        designs=_standings(designs, products, design_batch) if designs else (),
        products=len(dict.fromkeys(p.chip for p in products)), design_batch=design_batch)


def rankings(preds: Sequence[Prediction]) -> list[Ranking]:
    """One Ranking per (model, precision) with at least two chips among the predictions that run
    and fit in memory, in the order the predictions first name them."""
    groups: dict[tuple[str, str], list[Prediction]] = {}
    for p in preds:
        if p.supported and p.fits_in_memory:
            groups.setdefault((p.model, p.precision), []).append(p)
    return [_ranking(model, precision, group) for (model, precision), group in groups.items()
            if len({p.chip for p in group}) >= 2]
