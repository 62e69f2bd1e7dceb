"""Concurrency of a subgraph DAG: execution stages and the critical path.

- stage(s) = 0 for a subgraph with no dependencies, else 1 + max stage of what it depends on
  (as-soon-as-possible levels); subgraphs in one stage are independent and may run in parallel.
- critical path = the dependency chain with the most FLOP (ties: more subgraphs, then earlier
  indices), the work no amount of parallel hardware can overlap.
Subgraph indices must be in topological order (every dependency has a smaller index).
"""

from __future__ import annotations

from collections.abc import Sequence


def stages(depends_on: Sequence[Sequence[int]]) -> tuple[list[int], tuple[tuple[int, ...], ...]]:
    """Stage of each subgraph, and the subgraph indices in each stage."""
    level: list[int] = []
    for i, deps in enumerate(depends_on):
        if any(d >= i for d in deps):
            raise ValueError(f"subgraph {i} depends on a later subgraph: {sorted(deps)}")
        level.append(1 + max((level[d] for d in deps), default=-1))
    by_stage: list[list[int]] = [[] for _ in range(max(level, default=-1) + 1)]
    for i, s in enumerate(level):
        by_stage[s].append(i)
    return level, tuple(tuple(s) for s in by_stage)


def critical_path(depends_on: Sequence[Sequence[int]], flop: Sequence[int]) -> tuple[int, ...]:
    """Subgraph indices of the maximum-FLOP dependency chain, first to last."""
    if not flop:
        return ()
    best: list[tuple[int, int]] = []       # (FLOP, length) of the best chain ending here
    previous: list[int | None] = []
    for i, deps in enumerate(depends_on):
        choice = max(deps, key=lambda d: (best[d], -d), default=None)
        head = best[choice] if choice is not None else (0, 0)
        best.append((head[0] + flop[i], head[1] + 1))
        previous.append(choice)
    end = max(range(len(best)), key=lambda i: (best[i], -i))
    path = [end]
    while previous[path[-1]] is not None:
        path.append(previous[path[-1]])
    return tuple(reversed(path))
