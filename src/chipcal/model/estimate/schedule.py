"""Concurrency-aware total latency: stages in order, subgraphs of a stage sharing the chip.

Subgraphs of one stage (no dependencies among them) may run concurrently (streams, a dataflow
runtime; mapping.params.CONCURRENT_RUNTIMES). They share the chip this way:

    stage time = max( max_i (max(compute_i, memory_i)),      each needs at least its own time
                      Σ_i memory_i,                          DRAM bandwidth is shared
                      Σ_i compute_i × utilization_i )        the units are shared (unit-seconds / units)
                 + Σ_i overhead_i                            launches/dispatches are issued serially
    latency    = Σ_stages stage time

One subgraph alone gives max(compute, memory) + overhead, the per-subgraph roofline. Stages are
separated by a barrier (a lower bound on overlap that list scheduling could add). Also reported:
the serial latency (Σ per-subgraph latencies: one stream, eager execution) and the critical-path
latency (Σ along the workload's critical path: unlimited units and bandwidth). A runtime that runs
one kernel at a time (PyTorch's, torch.compile included) takes the serial latency: each subgraph is
a stage of its own.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class StageEstimate:
    stage: int
    subgraphs: tuple[int, ...]
    latency_s: float
    limit: str          # which term set the stage time: subgraph | bandwidth | units


@dataclass(frozen=True)
class Schedule:
    latency_s: float
    serial_latency_s: float
    critical_path_latency_s: float
    stages: tuple[StageEstimate, ...]


def stage_time(estimates: Sequence) -> tuple[float, str]:
    """Time of one stage of concurrently runnable subgraph estimates, and its limiting term."""
    if len(estimates) == 1:     # the per-subgraph roofline (module docstring): its own time bounds both sums
        (e,) = estimates
        return max(e.compute_time_s, e.memory_time_s) + e.overhead_s, "subgraph"
    terms = {
        "subgraph": max(max(e.compute_time_s, e.memory_time_s) for e in estimates),
        "bandwidth": sum(e.memory_time_s for e in estimates),
        "units": sum(e.compute_time_s * e.utilization for e in estimates),
    }
    limit = max(terms, key=terms.get)
    return terms[limit] + sum(e.overhead_s for e in estimates), limit


def schedule(estimates: Sequence, stages: Sequence[Sequence[int]], critical_path: Sequence[int],
             concurrent: bool = True) -> Schedule:
    """Total latency of `estimates` (by subgraph index) executed stage by stage; not `concurrent`,
    one kernel at a time in program order: each its own stage, taking its own latency."""
    by_index = {e.index: e for e in estimates}
    serial = sum(e.latency_s for e in estimates)
    critical = sum(by_index[i].latency_s for i in critical_path if i in by_index)
    if not concurrent:
        alone = tuple(StageEstimate(stage=n, subgraphs=(e.index,), latency_s=e.latency_s, limit="subgraph")
                      for n, e in enumerate(estimates))
        return Schedule(latency_s=serial, serial_latency_s=serial, critical_path_latency_s=critical, stages=alone)
    groups = [tuple(i for i in stage if i in by_index) for stage in stages] if stages else []
    covered = {i for g in groups for i in g}
    groups += [(e.index,) for e in estimates if e.index not in covered]  # no stage info: serial
    out = []
    for n, group in enumerate(g for g in groups if g):
        t, limit = stage_time([by_index[i] for i in group])
        out.append(StageEstimate(stage=n, subgraphs=group, latency_s=t, limit=limit))
    return Schedule(latency_s=sum(s.latency_s for s in out), serial_latency_s=serial, critical_path_latency_s=critical,
                    stages=tuple(out))
