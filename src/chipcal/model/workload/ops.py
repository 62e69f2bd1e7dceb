"""Operations: a graph node's counted events, split where the node does more than one kind of work.

An fx node (or leaf-module call) usually runs one kind of work: Conv2d → one convolution. Nodes
that run several (nn.MultiheadAttention: projection, attention, projection; a traced helper
function) are split into runs of one kind with at most one multiply-accumulate event each,
named "node.label". Views join the run they follow.

Attention written out by hand (Q·K^T, scale/mask/bias, softmax, ·V, as in Swin and MaxViT) is
re-classed "attention", the class SDPA and nn.MultiheadAttention's core carry, when a softmax has
an activation-by-activation matmul within four elementwise/view ops on each side.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from chipcal.model.workload.capture import Owner
from chipcal.model.workload.dataflow import Dataflow, boundary
from chipcal.model.workload.parts import Part
from chipcal.model.workload.subnormal import merge_splits
from chipcal.model.workload.types import Op, Term

_ATTENTION_HOPS = 4
_BETWEEN = ("elementwise", "reshape")


@dataclass(eq=False)
class Draft:
    events: list[int]
    owner: int
    dominant: Part
    op_class: str
    label: str
    producers: set[int] = field(default_factory=set)   # ops whose data or tensors it reads
    consumers: set[int] = field(default_factory=set)   # ops reading its data or tensors
    users: set[int] = field(default_factory=set)       # ops handed the tensor objects it made


def _dominant(parts: list[Part]) -> Part:
    return max(parts, key=lambda p: (p.macs, p.flop, p.moves_data and p.classified))


def _segments(df: Dataflow, events: list[int]) -> list[list[int]]:
    segments: list[list[int]] = []
    current: list[int] = []
    kind, has_macs = None, False
    for e in events:
        part = df.events[e].part
        if not part.moves_data:
            current.append(e)
            continue
        if kind is not None and (part.kind != kind or (has_macs and part.macs)):
            segments.append(current)
            current, has_macs = [], False
        current.append(e)
        kind, has_macs = part.kind, has_macs or part.macs > 0
    segments.append(current)
    return segments


def draft_ops(df: Dataflow) -> tuple[list[Draft], list[int]]:
    """Ops in execution order, and the op index of every event."""
    by_owner: dict[int, list[int]] = {}
    for event in df.events:
        by_owner.setdefault(event.owner, []).append(event.index)
    drafts: list[Draft] = []
    for owner, events in by_owner.items():
        for segment in _segments(df, events):
            dominant = _dominant([df.events[e].part for e in segment])
            drafts.append(Draft(segment, owner, dominant, dominant.op_class, dominant.label))
    op_of = [0] * len(df.events)
    for i, draft in enumerate(drafts):
        for e in draft.events:
            op_of[e] = i
    for i, draft in enumerate(drafts):
        for e in draft.events:
            event = df.events[e]
            for src in (*event.read_from, *event.obj_from):
                if src is not None and op_of[src] != i:
                    draft.producers.add(op_of[src])
                    drafts[op_of[src]].consumers.add(i)
            for src in event.obj_from:
                if src is not None and op_of[src] != i:
                    drafts[op_of[src]].users.add(i)
    _mark_attention(drafts)
    return drafts, op_of


def _search(drafts: list[Draft], start: int, forward: bool) -> list[int] | None:
    """Ops from `start` to the nearest activation·activation matmul, through elementwise/views."""
    parent = {start: None}
    queue = deque([(start, 0)])
    while queue:
        i, hops = queue.popleft()
        for j in sorted(drafts[i].consumers if forward else drafts[i].producers):
            if j in parent:
                continue
            parent[j] = i
            kind = drafts[j].dominant.kind
            if kind == "matmul":
                path = [j]
                while parent[path[-1]] is not None:
                    path.append(parent[path[-1]])
                return path
            if kind in _BETWEEN and hops + 1 < _ATTENTION_HOPS:
                queue.append((j, hops + 1))
    return None


def _mark_attention(drafts: list[Draft]) -> None:
    for i, draft in enumerate(drafts):
        if draft.dominant.kind != "softmax":
            continue
        before, after = _search(drafts, i, forward=False), _search(drafts, i, forward=True)
        if before and after:
            for j in {*before, *after}:
                if drafts[j].dominant.moves_data:
                    drafts[j].op_class = "attention"


def _names(drafts: list[Draft], owners: list[Owner]) -> list[tuple[str, str]]:
    per_owner: dict[int, int] = {}
    for d in drafts:
        per_owner[d.owner] = per_owner.get(d.owner, 0) + 1
    used: set[str] = set()
    names = []
    for d in drafts:
        owner = owners[d.owner]
        if per_owner[d.owner] == 1:
            name, target = owner.name, owner.target
        else:
            name, target = f"{owner.name}.{d.label}", f"{owner.target}:{d.label}"
        unique, k = name, 1
        while unique in used:
            unique, k = f"{name}_{k}", k + 1
        used.add(unique)
        names.append((unique, target))
    return names


def build_ops(df: Dataflow, drafts: list[Draft], op_of: list[int], owners: list[Owner]) -> tuple[Op, ...]:
    ops = []
    for i, (d, (name, target)) in enumerate(zip(drafts, _names(drafts, owners), strict=True)):
        parts = [df.events[e].part for e in d.events]
        b = boundary(df, d.events, op_of, i)
        terms = tuple(Term(p.target, p.kind, p.family, p.macs, p.flop, p.classified)
                      for p in parts if p.moves_data or not p.classified)
        ops.append(Op(
            index=i, name=name, target=target, kind=d.dominant.kind, op_class=d.op_class,
            inputs=b.inputs, weights=b.weights, outputs=b.outputs,
            macs=sum(p.macs for p in parts), flop=sum(p.flop for p in parts),
            bytes_read=b.input_bytes + b.weight_bytes, bytes_written=b.output_bytes,
            parallelism=d.dominant.parallelism, gemm=d.dominant.gemm,
            classified=all(p.classified for p in parts), terms=terms,
            subnormal_ops=sum(df.events[e].subnormal_ops for e in d.events),
            subnormal_split=merge_splits((df.events[e].subnormal_ops, df.events[e].subnormal_split) for e in d.events)))
    return tuple(ops)
