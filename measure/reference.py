"""The peaks a measurement is judged against: vendor spec (registry) and physics (derived).

GPU: the registry chip matched by SM count, memory size and power limit gives both the stated
(spec) peak and the microarchitecture-derived (physics) peak; no match, no reference.
CPU: physics always comes from the locally built chip (the cores and clock this OS sees); the spec
comes from the registry CPU that measure.match finds (model name and core count: a VM slice of a
56-core part is not that part). The local VM CPU has no vendor spec: spec is None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chipcal.measure.device import Device
from chipcal.measure.match import match_registry_chip
from chipcal.measure.system import Fingerprint, local_chip
from chipcal.model.registry import Registry, load_registry


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


def reference_peaks(fp: Fingerprint, device: str, registry: Registry | None = None) -> ReferencePeaks:
    """Spec and physics peaks for `device` on the machine `fp` describes."""
    registry = registry or load_registry()
    if Device.parse(device).is_cuda:
        chip = match_registry_chip(fp, registry, device)
        if chip is None:
            return ReferencePeaks(device, None, notes=(
                f"no registry chip matches {fp.gpu_name} ({fp.gpu_sm_count} SMs, "
                f"{(fp.gpu_memory_bytes or 0) / 2**30:.1f} GiB, default power limit "
                f"{fp.gpu_default_power_limit_w} W): no spec or physics peak",))
        return ReferencePeaks(device, chip.name, dict(chip.stated_peak_flop_per_s), _physics(chip),
                              chip.memory.bandwidth_bytes_per_s)
    local = local_chip(support=fp.cpu_precisions)
    notes = [f"physics peak: local CPU model ({local.sources[0]})"]
    chip = match_registry_chip(fp, registry, "cpu")
    if chip is None:
        notes.append(f"no vendor spec: no registry CPU with {fp.physical_cores} cores matches '{fp.cpu_model}'")
        return ReferencePeaks(device, local.name, {}, _physics(local), None, tuple(notes))
    if not chip.stated_peak_flop_per_s:
        notes.append(f"registry {chip.name} states no FLOP/s peak")
    return ReferencePeaks(device, chip.name, dict(chip.stated_peak_flop_per_s), _physics(local),
                          chip.memory.bandwidth_bytes_per_s, tuple(notes))
