"""Workloads as the flat records of `chipcal workload --json`: one per model (totals), per op
(`--by-op`) or per fused subgraph (`--by-subgraph`), in SI units (MACs, FLOP, bytes)."""

from __future__ import annotations

from collections.abc import Sequence

from chipcal.model.workload.types import GemmShape, Op, Parallelism, Subgraph, TensorSpec, Workload


def shapes_text(specs: Sequence[TensorSpec]) -> str:
    """Tensor shapes as text: 1x3x224x224;64x3x7x7."""
    return ";".join("x".join(map(str, s.shape)) for s in specs)


def _gemm(gemm: GemmShape | None) -> dict:
    return {f"gemm_{k}": (getattr(gemm, k) if gemm else None) for k in ("m", "n", "k", "count")}


def _parallelism(p: Parallelism) -> dict:
    return {"par_batch": p.batch, "par_channels": p.channels, "par_spatial": p.spatial,
            "output_elements": p.output_elements, "depthwise": p.depthwise, "grouped": p.grouped,
            "groups": p.groups, "vector_dim": p.vector_dim}


def totals_record(w: Workload) -> dict:
    """The model's totals: counts, bytes before and after fusion, graph shape, what went unclassified."""
    return {
        "model": w.model, "batch": w.batch, "input_shape": "x".join(map(str, w.input_shape)), "dtype": w.dtype,
        "capture": w.capture, "execution": w.execution, "macs": w.macs, "flop": w.flop, "params": w.params,
        "bytes_read": w.bytes_read, "bytes_written": w.bytes_written,
        "arithmetic_intensity": w.arithmetic_intensity, "fused_bytes_read": w.fused_bytes_read,
        "fused_bytes_written": w.fused_bytes_written, "bytes_saved_by_fusion": w.bytes_saved_by_fusion,
        "ops": len(w.ops), "subgraphs": len(w.subgraphs), "stages": len(w.stages),
        "max_parallel_subgraphs": w.max_parallel_subgraphs, "critical_path_subgraphs": len(w.critical_path),
        "critical_path_flop": w.critical_path_flop, "unclassified_ops": len(w.unclassified_ops),
        "unclassified_op_names": ",".join(w.unclassified_ops),
    }


def op_record(w: Workload, op: Op) -> dict:
    """One op of `w`: counts, shapes, GEMM view and parallelism."""
    return {
        "model": w.model, "batch": w.batch, "index": op.index, "name": op.name, "target": op.target,
        "kind": op.kind, "op_class": op.op_class, "macs": op.macs, "flop": op.flop,
        "bytes_read": op.bytes_read, "bytes_written": op.bytes_written,
        "arithmetic_intensity": op.arithmetic_intensity, "input_shapes": shapes_text(op.inputs),
        "weight_shapes": shapes_text(op.weights), "output_shapes": shapes_text(op.outputs),
        **_gemm(op.gemm), **_parallelism(op.parallelism), "classified": op.classified,
    }


def subgraph_record(w: Workload, s: Subgraph) -> dict:
    """One fused subgraph (kernel) of `w`: its ops, counts, bytes, dependencies and stage."""
    return {
        "model": w.model, "batch": w.batch, "index": s.index, "name": s.name, "pattern": s.pattern,
        "op_class": s.op_class, "ops": len(s.op_indices), "op_indices": ",".join(map(str, s.op_indices)),
        "macs": s.macs, "flop": s.flop, "input_bytes": s.input_bytes, "weight_bytes": s.weight_bytes,
        "output_bytes": s.output_bytes, "bytes_saved_by_fusion": s.bytes_saved_by_fusion,
        "arithmetic_intensity": s.arithmetic_intensity, "depends_on": ",".join(map(str, s.depends_on)),
        "stage": s.stage, "threads": s.threads, **_gemm(s.gemm), **_parallelism(s.parallelism),
    }
