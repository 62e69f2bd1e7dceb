"""Fusion partitioning: group ops into the kernels an inference runtime would launch.

Greedy, in execution order: a subgraph starts at an op and absorbs the op its last op hands its
result to while there is exactly one such op, it is allowed after the chain so far, and
absorbing it creates no cycle between subgraphs. Views of a member's result always join
(they launch nothing), however many ops use them. Allowed chains (cuDNN/oneDNN epilogues, loop fusion):
- conv / linear / matmul, then an optional batch norm (folded), then elementwise ops and
  activations over the same output elements (bias, residual add, ReLU, GELU, …);
- layer/group norm or softmax followed by same-sized elementwise ops;
- elementwise ops and activations chained with each other over the same output elements;
- an attention block: Q·K^T → scale/mask/bias → softmax → ·V (ops of class "attention"),
  or one SDPA / multi-head-attention core;
- views (reshape, permute, …) join whichever subgraph they follow, since they move nothing.
A GEMM never joins a subgraph that already has work (no prologue fusion, one GEMM per kernel);
pooling, copies (cat, pad, contiguous) and unclassified ops stay alone.

Generated code (`codegen=True`, TorchInductor under torch.compile): GEMMs, convolutions and
attention are library calls (cuBLAS, cuDNN, SDPA), one kernel each with nothing fused into them
(Inductor's default, without max-autotune templates); every other op is generated code, and
Inductor fuses producers into their consumers (vertical fusion) into one kernel: a subgraph starts
at a generated op and absorbs, nearest first, every generated op connected to it through data
(a consumer of a member, or a producer of such a consumer) while that creates no cycle between
subgraphs. A decoder layer's RMSNorm (pow, mean, add, rsqrt, mul, mul) is one kernel, the
rotary embedding of its queries another, that of its keys with the KV-cache write a third.
Siblings that only share an input are not merged (no horizontal fusion); unclassified ops stay
alone.
"""

from __future__ import annotations

import heapq

from chipcal.model.workload.types import Op

_EPILOGUE_AFTER = ("gemm", "bn", "norm", "elementwise", "softmax")

# How a runtime groups ops into kernels (module docstring): one kernel per op (eager), a vendor
# compiler's fused subgraphs (fused: TensorRT, XLA, oneDNN graph), TorchInductor's (codegen)
PARTITIONS = ("eager", "fused", "codegen")


def partition_options(name: str) -> dict[str, bool]:
    """characterize's `fuse` and `codegen` for partition `name` (PARTITIONS)."""
    if name not in PARTITIONS:
        raise ValueError(f"partition must be one of {', '.join(PARTITIONS)}, got {name!r}")
    return {"fuse": name != "eager", "codegen": name == "codegen"}


def role(op: Op) -> str:
    if not op.terms:
        return "view"
    if op.op_class == "attention":
        return "attention"
    if op.kind in ("conv", "linear", "matmul"):
        return "gemm"
    if op.kind == "norm":
        return "bn" if any("batch_norm" in t.target for t in op.terms) else "norm"
    if op.kind in ("elementwise", "activation"):
        return "elementwise"
    if op.kind == "softmax":
        return "softmax"
    return "alone"


def _attention_complete(members: list[Op]) -> bool:
    return (any(op.kind == "attention" for op in members)
            or sum(op.kind == "matmul" for op in members) >= 2)


def _allowed(members: list[Op], tail: Op, op: Op) -> bool:
    r = role(op)
    if r == "view":
        return True
    work = [m for m in members if role(m) != "view"]
    if not work:
        return True
    roles = [role(m) for m in work]
    if r == "attention" or roles[-1] == "attention":
        return r == "attention" and all(x == "attention" for x in roles) and not _attention_complete(work)
    if op.parallelism.output_elements != tail.parallelism.output_elements:
        return False
    if r == "bn":
        return roles[-1] == "gemm" and op.kind == "norm" and work[-1].kind in ("conv", "linear")
    return r == "elementwise" and roles[-1] in _EPILOGUE_AFTER


def _reaches(start: int, targets: set[int], producers: list[set[int]], floor: int) -> bool:
    """Whether op `start` depends (transitively) on any op in `targets`; ops below `floor` cannot."""
    stack, seen = [start], {start}
    while stack:
        i = stack.pop()
        if i in targets:
            return True
        for p in producers[i]:
            if p >= floor and p not in seen:
                seen.add(p)
                stack.append(p)
    return False


def _generated(op: Op) -> bool:
    """An op TorchInductor writes code for (module docstring), not a library call or a view."""
    return role(op) not in ("gemm", "attention", "view") and op.classified


def _grow_generated(ops: tuple[Op, ...], producers: list[set[int]], consumers: list[set[int]],
                    users: list[set[int]], members: list[int], group_of: list[int], g: int) -> None:
    """Grow a generated-code subgraph over the generated ops connected to it (consumers of its
    members, and unassigned producers of those), nearest first in program order, each unless it
    would create a cycle between subgraphs: a path from the subgraph to the op, or from the op to
    the subgraph, through an op outside both. Views of members join as they appear."""
    start = members[0]
    _absorb_views(ops, users, members, group_of, g)

    def neighbours(i: int) -> set[int]:
        return {j for j in consumers[i] | producers[i] if group_of[j] < 0 and _generated(ops[j])}

    def outside(ids: set[int], joined: set[int]) -> set[int]:
        """Ops of `ids` not in `joined`, less views of `joined` (they join with their base)."""
        return {p for p in ids - joined if not (role(ops[p]) == "view" and producers[p] <= joined)}

    frontier = set().union(*(neighbours(m) for m in members))
    while frontier:
        nxt = min(frontier)
        frontier.discard(nxt)
        inside = set(members)
        joined = inside | {nxt}
        if any(_reaches(p, inside, producers, start) for p in outside(producers[nxt], joined)) or any(
                _reaches(p, {nxt}, producers, nxt) for m in members for p in outside(producers[m], joined)):
            continue
        added = len(members)
        members.append(nxt)
        group_of[nxt] = g
        _absorb_views(ops, users, members, group_of, g)
        for m in members[added:]:
            frontier |= neighbours(m)


def partition(ops: tuple[Op, ...], producers: list[set[int]], users: list[set[int]],
              fuse: bool = True, codegen: bool = False) -> list[list[int]]:
    """Op indices per subgraph, subgraphs in a topological order (ties: earliest op first).

    `producers[i]`: ops whose data op i reads; `users[i]`: ops handed the tensors op i made.
    With `fuse=False` every op is its own kernel (an eager runtime such as PyTorch eager mode);
    views still join their producer, since they move no data. `codegen=True` (with fuse)
    partitions as TorchInductor does (module docstring).
    """
    group_of = [-1] * len(ops)
    groups: list[list[int]] = []
    consumers: list[set[int]] = [set() for _ in ops]
    if fuse and codegen:
        for i, ps in enumerate(producers):
            for p in ps:
                consumers[p].add(i)
    for start in range(len(ops)):
        if group_of[start] >= 0:
            continue
        g = len(groups)
        members, tail = [start], start
        group_of[start] = g
        if fuse and codegen:
            if _generated(ops[start]):
                _grow_generated(ops, producers, consumers, users, members, group_of, g)
            else:
                _absorb_views(ops, users, members, group_of, g)
            groups.append(members)
            continue
        while fuse and len(users[tail]) == 1:
            (nxt,) = users[tail]
            if group_of[nxt] >= 0 or not _allowed([ops[m] for m in members], ops[tail], ops[nxt]):
                break
            others = producers[nxt] - set(members)
            if any(_reaches(p, set(members), producers, start) for p in others):
                break
            members.append(nxt)
            group_of[nxt] = g
            tail = nxt
        _absorb_views(ops, users, members, group_of, g)
        groups.append(members)
    return _topological(groups, group_of, producers)


def _absorb_views(ops: tuple[Op, ...], users: list[set[int]], members: list[int], group_of: list[int],
                  g: int) -> None:
    """Add views (and views of views) of members' results: they depend on nothing else."""
    stack = list(members)
    while stack:
        for u in sorted(users[stack.pop()]):
            if group_of[u] < 0 and role(ops[u]) == "view":
                group_of[u] = g
                members.append(u)
                stack.append(u)


def _topological(groups: list[list[int]], group_of: list[int], producers: list[set[int]]) -> list[list[int]]:
    deps = [{group_of[p] for m in members for p in producers[m]} - {g} for g, members in enumerate(groups)]
    waiting = [len(d) for d in deps]
    dependents: list[list[int]] = [[] for _ in groups]
    for g, d in enumerate(deps):
        for p in d:
            dependents[p].append(g)
    ready = [(groups[g][0], g) for g in range(len(groups)) if not waiting[g]]
    heapq.heapify(ready)
    order = []
    while ready:
        _, g = heapq.heappop(ready)
        order.append(g)
        for d in dependents[g]:
            waiting[d] -= 1
            if not waiting[d]:
                heapq.heappush(ready, (groups[d][0], d))
    if len(order) != len(groups):
        raise RuntimeError("fusion produced a cyclic subgraph graph")
    return [sorted(groups[g]) for g in order]


def _short(op: Op) -> str:
    if op.kind in ("conv", "linear", "matmul", "softmax", "pool"):
        return op.kind
    if op.kind == "norm":
        target = op.terms[0].target
        return ("bn" if "batch_norm" in target else "ln" if "layer_norm" in target
                else "gn" if "group_norm" in target else "norm")
    main = max(op.terms, key=lambda t: t.flop)
    return main.target.rsplit(".", 1)[-1].rsplit(":", 1)[-1].rstrip("_")


def pattern(ops: list[Op]) -> str:
    work = [op for op in ops if op.terms]
    if any(op.op_class == "attention" for op in work):
        return "attention"
    if len(work) <= 1:
        return "single"
    return "_".join(_short(op) for op in work)
