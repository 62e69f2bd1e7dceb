"""Throttling evidence around a sustained run: CPU thermal-throttle counters, the cpufreq
governor, and NVML's clock-event reasons.

CPU: /sys/devices/system/cpu/cpu*/thermal_throttle/{core,package}_throttle_count (Linux
x86 thermal driver) count throttle events since boot; a rise during a run means it was slowed.
Under a hypervisor these files, cpufreq and the real clock are usually absent: the note says so.
GPU: nvmlDeviceGetCurrentClocksEventReasons (older drivers: ...ThrottleReasons) is a bitmask;
the bit names are NVML's nvmlClocksEventReasons (nvml.h).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from chipcal.measure.device import Device

# nvml.h: nvmlClocksEventReason* bits
NVML_CLOCK_EVENT_BITS = {
    0x1: "gpu_idle", 0x2: "applications_clocks_setting", 0x4: "sw_power_cap", 0x8: "hw_slowdown",
    0x10: "sync_boost", 0x20: "sw_thermal_slowdown", 0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown", 0x100: "display_clock_setting",
}
# reasons that lower the clock under load (idle, an application clock setting or the display are not throttling)
THROTTLING = ("sw_power_cap", "hw_slowdown", "sync_boost", "sw_thermal_slowdown", "hw_thermal_slowdown",
              "hw_power_brake_slowdown")


def decode_clock_events(mask: int) -> tuple[str, ...]:
    """NVML clock-event bitmask -> reason names (unknown bits as hex)."""
    names = [name for bit, name in NVML_CLOCK_EVENT_BITS.items() if mask & bit]
    unknown = mask & ~sum(NVML_CLOCK_EVENT_BITS)
    return tuple(names + ([f"0x{unknown:x}"] if unknown else []))


def cpu_throttle_count(sys: Path = Path("/sys")) -> int | None:
    """Thermal throttle events since boot over all CPUs; None where the kernel exposes none."""
    counts = []
    for f in sorted((sys / "devices/system/cpu").glob("cpu[0-9]*/thermal_throttle/*_throttle_count")):
        with contextlib.suppress(OSError, ValueError):
            counts.append(int(f.read_text().strip()))
    return sum(counts) if counts else None


def cpu_governor(sys: Path = Path("/sys")) -> str | None:
    try:
        return (sys / "devices/system/cpu/cpu0/cpufreq/scaling_governor").read_text().strip()
    except OSError:
        return None


class ThrottleWatch:
    """What throttled during the enclosed block: `.reasons` after exit (empty = nothing seen),
    `.observable` False where neither counters nor NVML exist (a VM: throttling cannot be seen)."""

    def __init__(self, device: Device, sys: Path = Path("/sys"), nvml_reasons=None):
        self.device, self.sys = device, sys
        self.nvml_reasons = nvml_reasons          # () -> bitmask, for CUDA devices
        self.reasons: tuple[str, ...] = ()
        self.observable = False
        self.note = ""

    @contextlib.contextmanager
    def watch(self) -> Iterator[ThrottleWatch]:
        before = cpu_throttle_count(self.sys)
        seen: set[str] = set()
        try:
            yield self
        finally:
            if self.nvml_reasons is not None:
                with contextlib.suppress(Exception):   # NVMLError_NotSupported on old boards
                    seen |= {r for r in decode_clock_events(int(self.nvml_reasons())) if r in THROTTLING}
                    self.observable = True
            after = cpu_throttle_count(self.sys)
            if before is not None and after is not None:
                self.observable = True
                if after > before:
                    seen.add(f"cpu_thermal_throttle (+{after - before} events)")
            self.reasons = tuple(sorted(seen))
            if not self.observable:
                self.note = ("throttling not observable here: no thermal_throttle counters"
                             + ("" if self.device.is_cuda else " and, in a VM, no real CPU clock"))
