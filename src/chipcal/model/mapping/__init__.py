"""Hardware mappers: a fused subgraph + a `Chip` → an `Allocation` (units, waves, fill, traffic).

One mapper per architecture family (cpu, gpu, tpu, kpu); `map_subgraph` dispatches on
`chip.kind`. Parameters geometry cannot supply live in `params` (calibration replaces them).
"""

from __future__ import annotations

from chipcal.model.chip import Chip
from chipcal.model.mapping import cpu, gpu, kpu, tpu
from chipcal.model.mapping.base import (
    MAC_CLASSES,
    Allocation,
    UnsupportedPrecision,
    traffic,
)
from chipcal.model.mapping.params import (
    CalibrationError,
    CalibrationParams,
    FamilyParams,
    default_params,
    params_for,
)
from chipcal.model.memo import recent

MAPPERS = {"cpu": cpu, "gpu": gpu, "tpu": tpu, "kpu": kpu}


# the validation fit cycles through ~8,400 mappings (42 rows), and a power-limited prediction maps
# the network again on a chip at each clock it tries
@recent(maxsize=1 << 15)
def map_subgraph(subgraph, chip: Chip, precision: str, bytes_scale: float,
                 weights_on_chip: bool = False, layout_passes: float = 0.0,
                 producer_layout_bytes: float = 0.0, scales: tuple[float, float, float] | None = None) -> Allocation:
    """Allocate `subgraph` on `chip` at `precision`; `bytes_scale` rescales the traced byte counts
    (BYTES_PER_ELEMENT[precision] / bytes per element of the traced dtype); `weights_on_chip`
    says the model's weights stay in on-chip memory between inferences (no DRAM weight reads);
    `layout_passes` the runtime's layout reorders around each convolution (FamilyParams), and
    `producer_layout_bytes` what the producers' reorders left beside this subgraph's input, and
    `scales` per-tensor byte factors where inputs, weights and outputs differ in dtype (base.traffic).

    The traffic is worked out here, once for every family: activations stay resident in the
    family's on-chip capacity; GEMM operands are blocked for its `blocking_capacity` (the same
    capacity, except one KPU tile's scratchpad). Recent allocations are reused (model.memo)."""
    mapper = MAPPERS[chip.kind]
    resident = mapper.onchip_capacity(chip)
    moved = traffic(subgraph, bytes_scale, resident, mapper.blocking_capacity(chip), precision, weights_on_chip,
                    layout_passes, producer_layout_bytes, scales)
    return mapper.allocate(subgraph, chip, precision, moved)


def onchip_capacity(chip: Chip) -> float:
    """Bytes of on-chip memory that can hold tensors between kernels (L2, L3+L2s, SRAM, scratchpads)."""
    return MAPPERS[chip.kind].onchip_capacity(chip)


__all__ = [
    "MAC_CLASSES", "MAPPERS", "Allocation", "CalibrationError", "CalibrationParams", "FamilyParams",
    "UnsupportedPrecision", "default_params", "map_subgraph", "onchip_capacity",
    "params_for",
]
