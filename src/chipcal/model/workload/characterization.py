"""characterize(module, inputs) -> Workload: capture, count, split into ops, fuse, schedule.

Capture paths are tried in order: fx (symbolic trace + shape propagation), then dispatch (the
module runs as is); each first with meta tensors (no arithmetic), then for real. The path that
produced the graph is Workload.capture / .execution; why earlier ones failed is in .capture_notes.
"""

from __future__ import annotations

import torch

from chipcal.model.errors import ChipcalError
from chipcal.model.workload import concurrency
from chipcal.model.workload.capture import Capture, run_dispatch, run_fx, trace_fx
from chipcal.model.workload.dataflow import Dataflow, boundary, build_dataflow
from chipcal.model.workload.fusion import partition, pattern
from chipcal.model.workload.ops import Draft, build_ops, draft_ops
from chipcal.model.workload.subnormal import merge_splits
from chipcal.model.workload.tensors import dtype_name, tensors_in
from chipcal.model.workload.types import Op, Subgraph, Workload

CAPTURE_CHOICES = ("auto", "fx", "dispatch")
EXECUTION_CHOICES = ("auto", "meta", "real")


class CaptureError(ChipcalError, RuntimeError):
    """No capture path could run the module on the example inputs; says why for each."""

    def __init__(self, reasons: list[str]):
        super().__init__("; ".join(reasons))
        self.reasons = tuple(reasons)


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0] if text else ''}".rstrip(": ")


def _capture(module: torch.nn.Module, inputs: tuple, capture: str, execution: str) -> tuple[Capture, list[str]]:
    if capture not in CAPTURE_CHOICES:
        raise ValueError(f"capture must be one of {', '.join(CAPTURE_CHOICES)}, got {capture!r}")
    if execution not in EXECUTION_CHOICES:
        raise ValueError(f"execution must be one of {', '.join(EXECUTION_CHOICES)}, got {execution!r}")
    executions = ("meta", "real") if execution == "auto" else (execution,)
    notes: list[str] = []
    attempts = []
    if capture in ("auto", "fx"):
        try:
            gm = trace_fx(module)
        except Exception as exc:  # any model code may fail to trace symbolically
            notes.append(f"fx: symbolic trace failed: {_reason(exc)}")
        else:
            attempts += [(f"fx/{ex}", lambda ex=ex: run_fx(gm, inputs, ex)) for ex in executions]
    if capture in ("auto", "dispatch"):
        attempts += [(f"dispatch/{ex}", lambda ex=ex: run_dispatch(module, inputs, ex)) for ex in executions]
    last: BaseException | None = None
    for label, attempt in attempts:
        try:
            return attempt(), notes
        except Exception as exc:  # the module's own code decides what fails on meta/real tensors
            notes.append(f"{label}: {_reason(exc)}")
            last = exc
    raise CaptureError(notes) from last


def _dominant(ops: list[Op]) -> Op:
    if any(op.macs for op in ops):
        return max(ops, key=lambda op: op.macs)
    return next((op for op in ops if op.terms), ops[0])


def _subgraphs(df: Dataflow, ops: tuple[Op, ...], drafts: list[Draft], op_of: list[int],
               groups: list[list[int]]) -> tuple[Subgraph, ...]:
    sg_of_op = [0] * len(ops)
    for g, members in enumerate(groups):
        for m in members:
            sg_of_op[m] = g
    sg_of_event = [sg_of_op[op_of[e]] for e in range(len(df.events))]
    depends_on = [sorted({sg_of_op[p] for m in members for p in drafts[m].producers} - {g})
                  for g, members in enumerate(groups)]
    flop = [sum(ops[m].flop for m in members) for members in groups]
    level, _ = concurrency.stages(depends_on)
    result = []
    for g, members in enumerate(groups):
        members_ops = [ops[m] for m in members]
        b = boundary(df, [e for m in members for e in drafts[m].events], sg_of_event, g)
        dom = _dominant(members_ops)
        kind = pattern(members_ops)
        unfused = sum(op.bytes_read + op.bytes_written for op in members_ops)
        result.append(Subgraph(
            index=g, name=dom.name, pattern=kind, op_class="attention" if kind == "attention" else dom.op_class,
            op_indices=tuple(members), macs=sum(op.macs for op in members_ops), flop=flop[g],
            input_bytes=b.input_bytes, weight_bytes=b.weight_bytes, output_bytes=b.output_bytes,
            bytes_saved_by_fusion=unfused - (b.input_bytes + b.weight_bytes + b.output_bytes),
            parallelism=dom.parallelism, gemm=dom.gemm, depends_on=tuple(depends_on[g]), stage=level[g],
            threads=dom.threads, subnormal_ops=sum(op.subnormal_ops for op in members_ops),
            subnormal_split=merge_splits((op.subnormal_ops, op.subnormal_split) for op in members_ops)))
    return tuple(result)


def characterize(module: torch.nn.Module, example_inputs, model_name: str = "custom", *,
                 capture: str = "auto", execution: str = "auto", fuse: bool = True,
                 codegen: bool = False) -> Workload:
    """Count, fuse and schedule `module` on `example_inputs` (a tensor or a tuple of arguments).

    The module is used in the mode it is in (call .eval() for inference counts); it is not modified.
    `fuse=False` partitions for an eager runtime: one kernel per op (views excepted);
    `codegen=True` for the kernels TorchInductor generates (fusion.py).
    """
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    cap, notes = _capture(module, inputs, capture, execution)
    df = build_dataflow(cap, codegen=fuse and codegen)
    drafts, op_of = draft_ops(df)
    ops = build_ops(df, drafts, op_of, cap.owners)
    groups = partition(ops, [d.producers for d in drafts], [d.users for d in drafts], fuse=fuse,
                       codegen=codegen)
    subgraphs = _subgraphs(df, ops, drafts, op_of, groups)
    depends_on = [s.depends_on for s in subgraphs]
    _, stages = concurrency.stages(depends_on)
    first = next(iter(tensors_in(inputs)), None)
    shape = tuple(first.shape) if first is not None else ()
    return Workload(
        model=model_name, batch=shape[0] if shape else 1, input_shape=shape,
        dtype=dtype_name(first.dtype) if first is not None else "", capture=cap.capture, ops=ops,
        subgraphs=subgraphs, stages=stages,
        critical_path=concurrency.critical_path(depends_on, [s.flop for s in subgraphs]),
        params=sum(p.numel() for p in module.parameters()), execution=cap.execution,
        capture_notes=tuple(notes), fused=fuse, codegen=fuse and codegen)
