"""Tensor facts the counters need: footprint in bytes, dtype name, shape helpers.

Footprint = element size × number of distinct elements addressed, i.e. the product of the sizes
of the dimensions with a non-zero stride. A bias broadcast to (N, C, H, W) by `expand` still
spans C elements, which is what a kernel reads from memory.
"""

from __future__ import annotations

import math

import torch
from torch.utils._pytree import tree_leaves

from chipcal.model.workload.types import TensorSpec


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def footprint(t: torch.Tensor) -> int:
    if t.numel() == 0:
        return 0
    elements = math.prod(size for size, stride in zip(t.shape, t.stride(), strict=True) if stride != 0)
    return elements * t.element_size()


def spec_of(t: torch.Tensor) -> TensorSpec:
    return TensorSpec(tuple(t.shape), dtype_name(t.dtype), footprint(t))


def tensors_in(value: object) -> list[torch.Tensor]:
    """Tensors anywhere in a (nested) argument structure, each object once, in order."""
    seen: set[int] = set()
    found = []
    for leaf in tree_leaves(value):
        if isinstance(leaf, torch.Tensor) and id(leaf) not in seen:
            seen.add(id(leaf))
            found.append(leaf)
    return found
