"""Peak device memory from tensor liveness, and what checkpointing / int8 weights would save.

Subgraphs execute in index order (the workload's stages are ascending in index). Weights are
resident for the whole run. A subgraph's output is allocated when it runs and freed after the last
subgraph that reads it (`depends_on`); outputs nobody reads are the model's outputs and stay to
the end. The graph input is live until the last subgraph without producers has run.

    live(i) = weights + graph input (while needed) + Σ outputs produced at or before i still read at or after i
    peak    = max_i live(i)

No workspace is added: every mapper lowers convolution as an implicit GEMM (cuDNN implicit-GEMM,
oneDNN direct convolution, XLA native convolution, dataflow streaming), which needs no im2col
buffer, and the intermediates of a fused subgraph live in registers/shared memory, not in DRAM.

Training view (for the checkpointing opportunity): backward needs every subgraph output kept,
Σ outputs; with √N checkpointing (Chen et al. 2016, "Training Deep Nets with Sublinear Memory
Cost") the run is cut into segments of ceil(√N) subgraphs, only segment-boundary outputs are kept
and one segment is recomputed at a time: Σ boundary outputs + the largest segment's Σ outputs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from chipcal.model.memo import recent


@dataclass(frozen=True)
class MemoryPoint:
    index: int
    name: str
    live_bytes: float          # weights + live activations after this subgraph's output is allocated


@dataclass(frozen=True)
class MemoryProfile:
    weight_bytes: float
    input_bytes: float
    peak_bytes: float
    peak_activation_bytes: float
    peak_index: int
    timeline: tuple[MemoryPoint, ...]
    training_activation_bytes: float       # Σ all outputs (kept for backward)
    checkpointed_activation_bytes: float   # √N segment checkpointing


def _checkpointed(outputs: list[float]) -> float:
    n = len(outputs)
    if n == 0:
        return 0.0
    seg = math.ceil(math.sqrt(n))
    segments = [outputs[i:i + seg] for i in range(0, n, seg)]
    boundaries = sum(s[-1] for s in segments)
    return boundaries + max(sum(s) for s in segments)


@recent(maxsize=256)     # holds its workloads: fewer entries than the mappings
def memory_profile(workload, bytes_scale: float, weight_scale: float | None = None) -> MemoryProfile:
    """Liveness walk over `workload.subgraphs` with byte counts × `bytes_scale` (weights ×
    `weight_scale` when given, e.g. to price int8 weights with fp32 activations)."""
    subgraphs = sorted(workload.subgraphs, key=lambda s: s.index)
    wscale = bytes_scale if weight_scale is None else weight_scale
    weights = sum(s.weight_bytes for s in subgraphs) * wscale
    last_use: dict[int, int] = {}
    for s in subgraphs:
        for d in s.depends_on:
            last_use[d] = max(last_use.get(d, -1), s.index)
    roots = [s for s in subgraphs if not s.depends_on]
    graph_input = max((s.input_bytes for s in roots), default=0) * bytes_scale
    input_until = max((s.index for s in roots), default=-1)

    live: dict[int, float] = {}
    timeline, peak, peak_index = [], weights, -1
    for s in subgraphs:
        live[s.index] = s.output_bytes * bytes_scale
        acts = sum(live.values()) + (graph_input if s.index <= input_until else 0.0)
        total = weights + acts
        timeline.append(MemoryPoint(s.index, s.name, total))
        if total > peak:
            peak, peak_index = total, s.index
        for j in [j for j in live if j in last_use and last_use[j] <= s.index]:
            del live[j]
    outputs = [s.output_bytes * bytes_scale for s in subgraphs]
    return MemoryProfile(
        weight_bytes=weights, input_bytes=graph_input, peak_bytes=peak,
        peak_activation_bytes=peak - weights, peak_index=peak_index, timeline=tuple(timeline),
        training_activation_bytes=sum(outputs), checkpointed_activation_bytes=_checkpointed(outputs),
    )
