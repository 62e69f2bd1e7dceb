"""Dataflow of a capture: counted events, which event's data each read sees, and the memory
traffic crossing the boundary of any group of events (an op, or a fused subgraph).

Memory model: a view aliases the buffer ("root") of its base and moves no data; an in-place op
writes a new version of its root. An event reads the latest version of each root it touches.
For a group of events:
- bytes read = footprints of the tensors its events take from outside the group (seen through
  views made inside the group, so an op's input is what the op was handed), each tensor once;
- bytes written = footprints of the buffers it writes whose version is read outside the group or
  returned by the model, each buffer once. Outputs nobody reads (max-pool indices, saved norm
  statistics) are not traffic: an inference kernel does not produce them.
Weights are parameters and buffers, and tensors computed from nothing but weights; a weight read
through a view counts the bytes the view spans (one expert of a stacked expert tensor), once per
group at the largest view read.
Unclassified events take part in the dataflow but contribute no bytes (counted as zero).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

import torch

from chipcal.model.workload.attention import COMPOSITES
from chipcal.model.workload.capture import Capture
from chipcal.model.workload.counts import count_aten
from chipcal.model.workload.inductor_layout import WEIGHT_LAYOUT, with_weight_copies
from chipcal.model.workload.parts import Part
from chipcal.model.workload.tensors import spec_of, tensors_in
from chipcal.model.workload.types import TensorSpec


@dataclass(eq=False)
class Event:
    index: int
    owner: int
    part: Part
    read_from: tuple[int | None, ...]   # per read: event that wrote the version read (None: weight/input)
    obj_from: tuple[int | None, ...]    # per read: event that produced the tensor object
    subnormal_ops: float = 0.0          # the call's operations on subnormal operands (first part)
    subnormal_split: tuple[float, ...] = ()   # the same by matrix, where known


@dataclass(eq=False)
class Dataflow:
    events: list[Event] = field(default_factory=list)
    tensors: dict[int, torch.Tensor] = field(default_factory=dict)
    root: dict[int, int] = field(default_factory=dict)
    weight_ids: set[int] = field(default_factory=set)
    data_readers: dict[tuple[int, int], list[int]] = field(default_factory=lambda: defaultdict(list))
    obj_readers: dict[int, list[int]] = field(default_factory=lambda: defaultdict(list))
    obj_producer: dict[int, int] = field(default_factory=dict)
    final_writer: dict[int, int] = field(default_factory=dict)
    output_ids: set[int] = field(default_factory=set)
    output_roots: set[int] = field(default_factory=set)

    def root_of(self, t: torch.Tensor) -> int:
        return self.root.get(id(t), id(t))


@dataclass(frozen=True)
class Boundary:
    inputs: tuple[TensorSpec, ...]
    weights: tuple[TensorSpec, ...]
    outputs: tuple[TensorSpec, ...]
    input_bytes: int
    weight_bytes: int
    output_bytes: int


def _parts(call, is_weight, codegen: bool) -> list[Part]:
    if call.composite:
        return COMPOSITES[call.func](call.args, call.kwargs, call.out, codegen)
    parts = count_aten(call.func, call.args, call.kwargs, call.out, is_weight)
    return with_weight_copies(parts, is_weight) if codegen else parts


def build_dataflow(capture: Capture, codegen: bool = False) -> Dataflow:
    """The capture's calls as parts and the tensors between them; `codegen`: as TorchInductor runs
    them (a composite's parts, attention.COMPOSITES; a convolution's weight copy, inductor_layout)."""
    df = Dataflow()
    df.weight_ids.update(capture.weights)
    df.tensors.update(capture.weights)
    writer: dict[int, int] = {}
    is_weight = df.weight_ids.__contains__

    def weight_check(t: torch.Tensor) -> bool:
        return is_weight(id(t))

    for call in capture.calls:
        for n, part in enumerate(_parts(call, weight_check, codegen)):
            if part.label == WEIGHT_LAYOUT:            # a weight's copy is the weight its consumer reads
                df.weight_ids.update(id(t) for t in part.writes)
            index = len(df.events)
            read_from, obj_from = [], []
            for t in part.reads:
                df.tensors[id(t)] = t
                source = writer.get(df.root_of(t))
                read_from.append(source)
                obj_from.append(df.obj_producer.get(id(t)))
                if source is not None:
                    df.data_readers[(source, df.root_of(t))].append(index)
                df.obj_readers[id(t)].append(index)
            derived = bool(part.reads) and all(is_weight(id(t)) for t in part.reads)
            base = part.reads[0] if part.reads else None
            for t in part.writes:
                seen = id(t) in df.tensors      # an existing tensor written in place
                df.tensors[id(t)] = t
                if not part.moves_data:
                    if base is not None and t is not base:
                        df.root[id(t)] = df.root_of(base)
                elif seen:
                    writer[df.root_of(t)] = index
                else:
                    df.root[id(t)] = id(t)
                    writer[id(t)] = index
                df.obj_producer[id(t)] = index
                if derived:
                    df.weight_ids.add(id(t))
            df.events.append(Event(index, call.owner, part, tuple(read_from), tuple(obj_from),
                                   *((call.subnormal_ops, call.subnormal_split) if n == 0 else (0.0, ()))))
    df.final_writer = writer
    outputs = tensors_in(capture.output)
    df.output_ids = {id(t) for t in outputs}
    df.output_roots = {df.root_of(t) for t in outputs}
    return df


def _keep(table: dict[int, TensorSpec], key: int, spec: TensorSpec) -> None:
    """Record `spec` under `key`; a tensor touched twice counts once, at the larger access."""
    if key not in table or spec.nbytes > table[key].nbytes:
        table[key] = spec


def boundary(df: Dataflow, members: list[int], group_of: list[int], group: int) -> Boundary:
    """Traffic across the boundary of the events `members` (all with group_of[e] == group).
    A part that touches less than a whole tensor (Part.touched) counts what it touches."""
    inside = group_of.__getitem__
    inputs: dict[int, TensorSpec] = {}
    weights: dict[int, TensorSpec] = {}
    written: dict[int, TensorSpec] = {}
    outputs: dict[int, torch.Tensor] = {}
    for e in members:
        event = df.events[e]
        part = event.part
        touched = part.touched or {}
        counted = part.moves_data and part.classified
        if counted:
            for t, src, obj in zip(part.reads, event.read_from, event.obj_from, strict=True):
                if src is not None and inside(src) == group:
                    continue
                partial = touched.get(id(t))
                while obj is not None and inside(obj) == group and not df.events[obj].part.moves_data \
                        and df.events[obj].part.reads:
                    view = df.events[obj]
                    t, obj = view.part.reads[0], view.obj_from[0]
                if id(t) in df.weight_ids:     # a view of a weight reads what it spans (one expert of a stack)
                    _keep(weights, df.root_of(t), partial or spec_of(t))
                else:
                    _keep(inputs, id(t), partial or spec_of(t))
        for t in part.writes:
            root = df.root_of(t)
            if counted and root not in written:
                readers = df.data_readers.get((e, root), ())
                if any(inside(r) != group for r in readers) or (
                        root in df.output_roots and df.final_writer.get(root) == e):
                    written[root] = touched.get(id(t)) or spec_of(df.tensors.get(root, t))
            if id(t) not in outputs and (id(t) in df.output_ids
                                         or any(inside(r) != group for r in df.obj_readers.get(id(t), ()))):
                outputs[id(t)] = t
    in_specs = tuple(inputs.values())
    w_specs = tuple(weights.values())
    return Boundary(in_specs, w_specs, tuple(spec_of(t) for t in outputs.values()),
                    sum(s.nbytes for s in in_specs), sum(s.nbytes for s in w_specs),
                    sum(s.nbytes for s in written.values()))
