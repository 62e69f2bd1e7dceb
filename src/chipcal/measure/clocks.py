"""The clock readers a probe samples while it times a device: on a CUDA device NVML's SM clock
(Hz) and its clock-event (throttle) reason bitmask; on a CPU none here (measure.timing reads the
cpufreq clock between rounds itself). Shared by the GEMM sweep, the bandwidth probe and the power
holds."""

from __future__ import annotations

from collections.abc import Callable

from chipcal.measure.device import Device


def _nvml_handle(device: Device):
    """(pynvml module, handle) of a CUDA device, None without NVML."""
    from chipcal.measure.nvml import NvmlUnavailable, cuda_uuid, device_handle, open_nvml

    index = device.index
    try:
        nv = open_nvml()
        return nv, device_handle(nv, index, cuda_uuid(index))
    except NvmlUnavailable:
        return None


def clock_events_probe_for(device: Device) -> Callable[[], int] | None:
    """NVML clock-event reason bitmask reader of a CUDA device (None on CPU or without NVML)."""
    opened = _nvml_handle(device) if device.is_cuda else None
    if opened is None:
        return None
    nv, handle = opened
    read = (getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None)
            or getattr(nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None))
    return None if read is None else (lambda: read(handle))


def gpuclock_probe_for(device: Device) -> Callable[[], float | None] | None:
    """NVML SM clock reader (Hz) for clock-change detection, None without NVML."""
    opened = _nvml_handle(device)
    if opened is None:
        return None
    nv, handle = opened

    def probe() -> float | None:
        try:
            return float(nv.nvmlDeviceGetClockInfo(handle, nv.NVML_CLOCK_SM)) * 1e6
        except Exception:
            return None

    return probe


def clock_probe_for(device: Device):
    return gpuclock_probe_for(device) if device.is_cuda else None
