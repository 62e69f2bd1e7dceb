"""Energy per operation by process node, circuit type and precision; memory energy per byte."""

from __future__ import annotations

CIRCUITS = ("x86_performance", "arm_core", "cuda_core", "tensor_core", "systolic_mac", "domain_flow")

MEMORY_TYPES = (
    "hbm2", "hbm2e", "hbm3", "hbm3e",
    "gddr6", "gddr6x",
    "ddr4", "ddr5",
    "lpddr4", "lpddr4x", "lpddr5", "lpddr5x",
)
