"""Predictions as the flat records of `chipcal predict --json / --csv`: one per prediction with its
opportunities flattened into columns, or one per subgraph (`--by-layer`). SI units throughout."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from chipcal.model.estimate.opportunities import Opportunity
from chipcal.model.estimate.prediction import Prediction
from chipcal.model.estimate.roofline import SubgraphEstimate

# the SubgraphEstimate fields a per-subgraph record carries, in its column order
LAYER_FIELDS = (
    "index", "name", "pattern", "op_class", "stage", "engine", "compute_precision", "flop", "units_allocated",
    "units_total", "waves", "utilization", "lane_fill", "occupancy", "class_efficiency", "compute_time_s",
    "memory_time_s", "overhead_s", "latency_s", "bottleneck", "dram_bytes", "onchip_bytes",
    "attained_flop_per_s", "compute_efficiency", "bandwidth_utilization", "arithmetic_intensity", "energy_j",
    "compute_energy_j", "clock_energy_j", "memory_energy_j", "static_energy_j", "wasted_energy_j", "explanation",
)


def opportunity_fields(found: Sequence[Opportunity]) -> dict:
    """Opportunities flattened into one record: opportunity_<kind>[_<precision>]_<metric>."""
    out = {}
    for o in found:
        prefix = o.kind if o.kind != "precision" else f"precision_{o.metrics['precision']}"
        for k, v in o.metrics.items():
            if k != "precision":
                out[f"opportunity_{prefix}_{k}"] = v
    return out


def layer_record(p: Prediction, e: SubgraphEstimate) -> dict:
    """One subgraph of prediction `p`, keyed by the prediction it belongs to."""
    return {"model": p.model, "chip": p.chip, "batch": p.batch, "precision": p.precision,
            **{name: getattr(e, name) for name in LAYER_FIELDS}}


def prediction_records(preds: Sequence[Prediction], found: Mapping[int, Sequence[Opportunity]],
                       by_layer: bool = False) -> list[dict]:
    """Every prediction's record with the opportunities found for it (`found`: by its index in
    `preds`), or with `by_layer` every subgraph's record."""
    if by_layer:
        return [layer_record(p, e) for p in preds for e in p.subgraphs]
    return [{**p.record(), **opportunity_fields(found.get(i, ()))} for i, p in enumerate(preds)]
