"""Precision names and their storage sizes.

The one list of precision names used everywhere (CLI flags, registry keys, JSON fields).
For integer precisions "FLOP" fields count integer operations (2 per MAC), so one
unit-suffixed field name serves every precision.
"""

from __future__ import annotations

PRECISIONS: tuple[str, ...] = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "fp4", "int8", "int4")

# Storage bytes per element. tf32 is a compute format: operands live in memory as fp32.
BYTES_PER_ELEMENT: dict[str, float] = {
    "fp64": 8.0,
    "fp32": 4.0,
    "tf32": 4.0,
    "bf16": 2.0,
    "fp16": 2.0,
    "fp8": 1.0,
    # fp4: NVFP4, E2M1 values in blocks of 16 with one E4M3 scale each (NVIDIA, "Introducing NVFP4
    # for efficient and accurate low-precision inference", 2025): 0.5 + 1/16 byte. AMD's MXFP4 (OCP
    # Microscaling spec v1.0: blocks of 32, one E8M0 scale) stores 0.5 + 1/32, 3 % less.
    "fp4": 0.5 + 1 / 16,
    "int8": 1.0,
    "int4": 0.5,
}

FLOP_PER_MAC = 2  # 1 MAC = 1 multiply + 1 add = 2 FLOP, always.


def macs_to_flop(macs: float) -> float:
    """Convert multiply-accumulates to FLOP (2 per MAC)."""
    return FLOP_PER_MAC * macs


def is_integer(precision: str) -> bool:
    return precision.startswith("int")


def check_precision(name: str) -> str:
    """Return the canonical precision name or raise ValueError naming the valid ones."""
    key = name.strip().lower()
    if key not in PRECISIONS:
        raise ValueError(f"unknown precision {name!r}; valid: {', '.join(PRECISIONS)}")
    return key
