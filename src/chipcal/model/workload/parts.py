"""Part: one counted unit of work (an ATen call, or a named piece of a composite such as the
input projection of nn.MultiheadAttention), with the tensors it reads and writes.

Also the parallelism descriptors shared by the counting rules:
- GEMM-like work: batch = independent GEMMs, channels = n, spatial = m, vector_dim = n.
- tensor-shaped work (elementwise, norm, pool, data): read off the output layout, NCHW for
  4-D and up, (batch, tokens, features) for 3-D, (batch, features) for 2-D; vector_dim is the
  longest unit-stride run of the output in memory order (its element count when it is dense).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from chipcal.model.workload.types import GemmShape, Parallelism, TensorSpec


@dataclass(frozen=True, eq=False)
class Part:
    target: str             # "aten.convolution", "F.multi_head_attention_forward:in_proj"
    label: str              # short name: "convolution", "relu", "in_proj"
    kind: str               # one of OP_KINDS
    op_class: str           # one of OP_CLASSES
    family: str             # one of FAMILIES
    macs: int
    flop: int
    gemm: GemmShape | None
    parallelism: Parallelism
    moves_data: bool        # False for views/aliases and allocations that write nothing
    classified: bool
    reads: tuple[torch.Tensor, ...]
    writes: tuple[torch.Tensor, ...]
    # id(tensor) -> the part of it this call touches, for a read or write of less than the whole
    # tensor (an embedding lookup reads its rows, an in-place index_copy_ writes its source's);
    # None: every tensor is touched whole (its footprint)
    touched: dict[int, TensorSpec] | None = None


def contiguous_run(t: torch.Tensor) -> int:
    """Elements in the longest unit-stride run of `t` in memory order: its dimensions from the
    smallest stride up, while each continues the run. A tensor dense in any order of its dimensions
    (contiguous, or channels-last as a permuted view or a convolution network's activations leave
    it) is one run of numel elements: an elementwise kernel walks it in memory order (ATen's
    TensorIterator sorts the dimensions by stride and coalesces them)."""
    dims = ((size, stride) for size, stride in zip(t.shape, t.stride(), strict=True) if size != 1 and stride != 0)
    run = 1     # a broadcast dimension (stride 0) re-reads the same elements: it does not break the run
    for size, stride in sorted(dims, key=lambda dim: dim[1]):
        if stride != run:
            break
        run *= size
    return run


def tensor_parallelism(t: torch.Tensor | None) -> Parallelism:
    if t is None:
        return Parallelism(1, 1, 1, 0, False, False, 1, 1)
    shape = tuple(t.shape)
    if len(shape) == 0:
        batch, channels, spatial = 1, 1, 1
    elif len(shape) == 1:
        batch, channels, spatial = 1, shape[0], 1
    elif len(shape) == 2:
        batch, channels, spatial = shape[0], shape[1], 1
    elif len(shape) == 3:
        batch, spatial, channels = shape
    else:
        batch, channels, spatial = shape[0], shape[1], math.prod(shape[2:])
    return Parallelism(batch, channels, spatial, t.numel(), False, False, 1, contiguous_run(t))


def gemm_parallelism(gemm: GemmShape, vector_dim: int | None = None) -> Parallelism:
    return Parallelism(gemm.count, gemm.n, gemm.m, gemm.count * gemm.m * gemm.n, False, False, 1,
                       gemm.n if vector_dim is None else vector_dim)
