"""The serial passes a CPU runtime adds around a kernel, each priced at a rate a calibration
measures (FamilyParams; None: not charged): the first touch of a freshly mapped output, a
matrix-vector product's weight stream, a few-row GEMM's read and pack of off-chip weights, and
the per-call reorder or pack of a kernel's weights. The formulas and their evidence are in
estimate/roofline.py's docstring, which adds these terms to a kernel's latency."""

from __future__ import annotations

from chipcal.model.mapping.base import CONV_CLASSES
from chipcal.model.mapping.params import FamilyParams

POINTWISE_CLASSES = ("conv1x1", "matmul")     # their weights take weight_layout's pointwise rate


def is_gemv(subgraph) -> bool:
    """A matrix-vector product: a GEMM with one row (an LLM's decode at batch 1)."""
    return subgraph.gemm is not None and subgraph.gemm.m <= 1


def first_touch_s(output_bytes: float, params: FamilyParams) -> float:
    """Page-fault time of a freshly mapped output buffer (roofline's docstring), 0 below the threshold."""
    rate = params.first_touch_bytes_per_s
    if not rate or output_bytes < params.fresh_allocation_bytes:
        return 0.0
    return output_bytes / rate


def gemv_stream_s(subgraph, weight_bytes: float, weights_on_chip: bool, params: FamilyParams) -> float:
    """Time a matrix-vector product (a GEMM with one row) takes to stream its weights (roofline's
    docstring): weight bytes / gemv_bytes_per_s + output elements (n × count) × gemv_row_s, or for
    a k-major weight weight bytes / gemv_k_major_bytes_per_s where that is measured; 0 for other
    kernels, a product without weights, weights held on chip, and where the parameters have no
    rate (the DRAM stream prices it)."""
    if not is_gemv(subgraph) or not weight_bytes or weights_on_chip or not params.gemv_bytes_per_s:
        return 0.0
    if subgraph.gemm.k_major and params.gemv_k_major_bytes_per_s:
        return weight_bytes / params.gemv_k_major_bytes_per_s
    rows = subgraph.gemm.n * subgraph.gemm.count
    return weight_bytes / params.gemv_bytes_per_s + rows * (params.gemv_row_s or 0.0)


def packed_weight_s(subgraph, weight_bytes: float, weights_on_chip: bool, params: FamilyParams) -> float | None:
    """Time a GEMM with more than one row takes to read and pack weights that are not on chip
    (roofline's docstring, weight pass); None for other kernels, weights held on chip, and where the
    parameters have no packed rate (the DRAM stream and weight_layout_s price them)."""
    packs = subgraph.op_class == "matmul" and subgraph.gemm is not None and not is_gemv(subgraph)
    if not packs or not weight_bytes or weights_on_chip or not params.packed_weight_bytes_per_s:
        return None
    return weight_bytes / params.packed_weight_bytes_per_s


def weight_layout_s(subgraph, weight_bytes: float, params: FamilyParams) -> float:
    """Per-call weight reorder of a convolution, or pack of a GEMM's weight operand (roofline's
    docstring), `weight_bytes` at the precision's element size; 0 for other ops, for a
    matrix-vector product (one row: the BLAS streams the weights unpacked) and where the
    parameters have no rate."""
    cls = subgraph.op_class
    if not weight_bytes or cls not in (*CONV_CLASSES, "matmul") or (cls == "matmul" and is_gemv(subgraph)):
        return 0.0
    rate = (params.pointwise_weight_layout_bytes_per_s if cls in POINTWISE_CLASSES
            else params.weight_layout_bytes_per_s)
    return weight_bytes / rate if rate else 0.0
