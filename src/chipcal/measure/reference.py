"""The peaks a measurement is judged against: vendor spec (registry) and physics (derived).

The chip is measure.identify's, the same one the calibration models: a registry chip (matched by
PCI ID or SM count, memory and power limit for GPUs; model name and core count for CPUs) gives
the stated (spec) and the microarchitecture-derived (physics) peaks; a locally built CPU has
physics peaks only. An unmatched GPU has no reference.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chipcal.measure.device import Device
from chipcal.measure.identify import UnknownDevice, identify
from chipcal.measure.system import Fingerprint
from chipcal.model.registry import Registry


@dataclass(frozen=True)
class ReferencePeaks:
    device: str
    chip: str | None                       # registry name, "local-cpu", or None
    spec_flop_per_s: dict[str, float] = field(default_factory=dict)
    physics_flop_per_s: dict[str, float] = field(default_factory=dict)
    spec_bandwidth_bytes_per_s: float | None = None
    notes: tuple[str, ...] = ()

    def spec(self, precision: str) -> float | None:
        return self.spec_flop_per_s.get(precision)

    def physics(self, precision: str) -> float | None:
        return self.physics_flop_per_s.get(precision)


def _physics(chip) -> dict[str, float]:
    return {p: chip.peak_flop_per_s(p) for p in chip.precisions}


def reference_peaks(fp: Fingerprint, device: Device, registry: Registry | None = None) -> ReferencePeaks:
    """Spec and physics peaks for `device` on the machine `fp` describes (measure.identify)."""
    try:
        identity = identify(fp, device, registry)
    except UnknownDevice as exc:
        return ReferencePeaks(str(device), None, notes=(f"{exc}: no spec or physics peak",))
    chip = identity.chip
    notes = [f"physics peak: {identity.origin}"]
    if not identity.from_registry:
        notes.append(f"no vendor spec: no registry CPU with {fp.physical_cores} cores matches '{fp.cpu_model}'")
        return ReferencePeaks(str(device), chip.name, {}, _physics(chip), None, tuple(notes))
    if not chip.stated_peak_flop_per_s:
        notes.append(f"registry {chip.name} states no FLOP/s peak")
    return ReferencePeaks(str(device), chip.name, dict(chip.stated_peak_flop_per_s), _physics(chip),
                          chip.memory.bandwidth_bytes_per_s, tuple(notes))
