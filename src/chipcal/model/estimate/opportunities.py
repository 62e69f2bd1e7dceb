"""Quantified opportunities: each one re-runs the estimator on a changed workload or setting.

* batch       the smallest batch (doubling, up to `max_batch`) whose compute utilization reaches
              the target, with its latency and throughput; stops at the first batch that does not
              fit in device memory
* precision   every lower precision the chip runs: latency, energy and peak memory at it
* fusion      the same model with every op launched as its own kernel (unfused) vs the fused
              subgraphs: time and DRAM traffic fusion saves (serial latencies)
* int8 weights  peak memory with weights stored in int8 and activations unchanged
* checkpointing training view: activations kept for backward, all vs √N checkpointing
                (memory.py); recomputation costs one extra forward ≈ +1/3 of a training step's
                compute (backward ≈ 2 × forward FLOP)
Energy breakdown helpers: `top_consumers`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from chipcal.model.chip import Chip
from chipcal.model.estimate.memory import memory_profile
from chipcal.model.estimate.placement import trace_bytes_per_element
from chipcal.model.estimate.prediction import Prediction, predict
from chipcal.model.estimate.roofline import SubgraphEstimate
from chipcal.model.mapping.params import FamilyParams
from chipcal.model.precision import BYTES_PER_ELEMENT
from chipcal.model.workload.types import Subgraph

LOWER_PRECISIONS = ("tf32", "bf16", "fp16", "fp8", "fp4", "int8", "int4")
MB = 1e6


@dataclass(frozen=True)
class Opportunity:
    kind: str                     # batch | precision | fusion | int8_weights | checkpointing
    summary: str                  # one line, with the numbers
    metrics: Mapping[str, object]  # the numbers, SI units, for JSON/CSV


def _ms(t: float) -> str:
    return f"{t * 1e3:.3f} ms"


def _again(pred: Prediction, workload, chip: Chip, precision: str, params: FamilyParams) -> Prediction:
    """`workload` predicted as `pred` was: same runtime, same host cost per op, same autocast."""
    return predict(workload, chip, precision, params, runtime=pred.runtime, host_overhead_s=pred.host_per_op_s,
                   autocast=pred.autocast)


def batch_opportunity(pred: Prediction, chip: Chip, params: FamilyParams,
                      workload_at: Callable[[int], object], target: float, max_batch: int) -> Opportunity:
    if pred.compute_utilization >= target:
        return Opportunity("batch", f"batch {pred.batch} already keeps {pred.compute_utilization:.0%} of the "
                           f"{pred.unit_name}s busy (target {target:.0%})",
                           {"batch": pred.batch, "utilization": pred.compute_utilization})
    best, b = None, pred.batch * 2
    while b <= max_batch:
        p = _again(pred, workload_at(b), chip, pred.precision, params)
        if not p.fits_in_memory:
            break
        best = p
        if p.compute_utilization >= target:
            break
        b *= 2
    if best is None:
        return Opportunity("batch", f"batch {pred.batch * 2} does not fit in device memory; no larger batch helps",
                           {"batch": pred.batch, "utilization": pred.compute_utilization})
    reached = best.compute_utilization >= target
    head = (f"batch {best.batch} reaches {best.compute_utilization:.0%} utilization" if reached else
            f"utilization reaches only {best.compute_utilization:.0%} by batch {best.batch}"
            + (" (next batch does not fit in memory)" if best.batch * 2 <= max_batch else f" (searched to {max_batch})"))
    return Opportunity(
        "batch",
        f"{head}: {_ms(best.latency_s)} per batch, {best.throughput_per_s:,.0f}/s "
        f"({best.throughput_per_s / pred.throughput_per_s:.1f}x batch {pred.batch}'s throughput)",
        {"batch": best.batch, "utilization": best.compute_utilization, "latency_s": best.latency_s,
         "throughput_per_s": best.throughput_per_s, "reached_target": reached})


def precision_opportunities(pred: Prediction, workload, chip: Chip, params: FamilyParams) -> list[Opportunity]:
    out = []
    here = BYTES_PER_ELEMENT[pred.precision]
    for p in LOWER_PRECISIONS:
        lower = BYTES_PER_ELEMENT[p] < here or (p == "tf32" and pred.precision == "fp32")
        if p == pred.precision or not lower or not chip.supports(p):
            continue
        q = _again(pred, workload, chip, p, params)
        out.append(Opportunity(
            "precision",
            f"{p}: {_ms(q.latency_s)} ({pred.latency_s / q.latency_s:.2f}x faster), energy "
            f"{q.energy_j / pred.energy_j:.2f}x, peak memory {q.peak_memory_bytes / MB:.1f} MB "
            f"(vs {pred.peak_memory_bytes / MB:.1f} MB)",
            {"precision": p, "latency_s": q.latency_s, "speedup": pred.latency_s / q.latency_s,
             "energy_j": q.energy_j, "peak_memory_bytes": q.peak_memory_bytes}))
    return out


def unfused(workload):
    """The workload with every op as its own kernel (no fusion), executed serially."""
    first_of = {s.op_indices[0]: s for s in workload.subgraphs if s.op_indices}
    subs = []
    for i, op in enumerate(workload.ops):
        owner = first_of.get(op.index)
        has_producer = bool(owner.depends_on) if owner is not None else True
        subs.append(Subgraph(
            index=i, name=op.name, pattern="single", op_class=op.op_class, op_indices=(op.index,),
            macs=op.macs, flop=op.flop, input_bytes=sum(t.nbytes for t in op.inputs),
            weight_bytes=sum(t.nbytes for t in op.weights), output_bytes=sum(t.nbytes for t in op.outputs),
            bytes_saved_by_fusion=0, parallelism=op.parallelism, gemm=op.gemm,
            depends_on=(i - 1,) if has_producer and i > 0 else (), stage=i,
            threads=op.threads))
    return dataclasses.replace(workload, subgraphs=tuple(subs), stages=tuple((i,) for i in range(len(subs))),
                               critical_path=tuple(range(len(subs))))


def fusion_opportunity(pred: Prediction, workload, chip: Chip, params: FamilyParams) -> Opportunity:
    u = predict(unfused(workload), chip, pred.precision, params)
    saved_s = u.serial_latency_s - pred.serial_latency_s
    saved_b = u.dram_bytes - pred.dram_bytes
    kernels = sum(1 for e in pred.subgraphs if e.bottleneck != "none")
    unfused_kernels = sum(1 for e in u.subgraphs if e.bottleneck != "none")
    return Opportunity(
        "fusion",
        f"fusion (assumed above) runs {kernels} kernels instead of {unfused_kernels}: saves {_ms(saved_s)} "
        f"({saved_s / u.serial_latency_s:.0%} of the unfused serial time) and {saved_b / MB:.1f} MB of DRAM traffic",
        {"kernels": kernels, "unfused_kernels": unfused_kernels, "saved_s": saved_s, "saved_dram_bytes": saved_b,
         "unfused_latency_s": u.serial_latency_s})


def memory_opportunities(pred: Prediction, workload) -> list[Opportunity]:
    out = []
    trace = trace_bytes_per_element(workload)
    scale = BYTES_PER_ELEMENT[pred.precision] / trace
    if BYTES_PER_ELEMENT[pred.precision] > BYTES_PER_ELEMENT["int8"]:
        m = memory_profile(workload, scale, weight_scale=BYTES_PER_ELEMENT["int8"] / trace)
        saved = pred.peak_memory_bytes - m.peak_bytes
        out.append(Opportunity(
            "int8_weights",
            f"int8 weights: peak memory {m.peak_bytes / MB:.1f} MB instead of {pred.peak_memory_bytes / MB:.1f} MB "
            f"(saves {saved / MB:.1f} MB; weights {m.weight_bytes / MB:.1f} MB)",
            {"peak_memory_bytes": m.peak_bytes, "saved_bytes": saved}))
    mem = pred.memory
    saved = mem.training_activation_bytes - mem.checkpointed_activation_bytes
    out.append(Opportunity(
        "checkpointing",
        f"training: backward keeps {mem.training_activation_bytes / MB:.1f} MB of activations; sqrt(N) "
        f"checkpointing keeps {mem.checkpointed_activation_bytes / MB:.1f} MB (saves {saved / MB:.1f} MB) "
        "for one extra forward pass (~+33% training compute)",
        {"activation_bytes": mem.training_activation_bytes,
         "checkpointed_bytes": mem.checkpointed_activation_bytes, "saved_bytes": saved}))
    return out


def opportunities(pred: Prediction, workload, chip: Chip, params: FamilyParams,
                  workload_at: Callable[[int], object] | None = None, target_utilization: float = 0.8,
                  max_batch: int = 256) -> tuple[Opportunity, ...]:
    """Every opportunity for a supported prediction (the batch one only when `workload_at` can
    characterize the model at another batch size)."""
    if not pred.supported:
        return ()
    found = []
    if workload_at is not None:
        found.append(batch_opportunity(pred, chip, params, workload_at, target_utilization, max_batch))
    found += precision_opportunities(pred, workload, chip, params)
    if workload.ops and workload.fused:     # an eager workload already runs each op as its own kernel
        found.append(fusion_opportunity(pred, workload, chip, params))
    found += memory_opportunities(pred, workload)
    return tuple(found)


def top_consumers(pred: Prediction, n: int = 5) -> list[SubgraphEstimate]:
    """The n subgraphs with the most energy (ties by index)."""
    return sorted(pred.subgraphs, key=lambda e: (-e.energy_j, e.index))[:n]
