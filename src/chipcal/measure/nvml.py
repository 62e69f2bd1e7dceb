"""Open NVML (module `pynvml`, package nvidia-ml-py) and find the handle of a CUDA device.

Shared by the fingerprint and the NVML power source. CUDA and NVML may number devices
differently (CUDA_VISIBLE_DEVICES, PCI order), so a CUDA device is matched to its NVML handle by
UUID when torch can give one, by index otherwise.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from chipcal.model.errors import MeasurementUnavailable


class NvmlUnavailable(MeasurementUnavailable):
    """NVML cannot be used here; the message says why (no module, no driver, no device)."""


def open_nvml() -> ModuleType:
    """Import pynvml and call nvmlInit; raise NvmlUnavailable with the reason otherwise."""
    try:
        pynvml = importlib.import_module("pynvml")
    except ImportError:
        raise NvmlUnavailable("the pynvml module (package nvidia-ml-py) is not installed") from None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # pynvml.NVMLError_* subclasses; the driver may be absent entirely
        raise NvmlUnavailable(f"nvmlInit failed: {exc} (no NVIDIA driver on this machine?)") from None
    return pynvml


def text(value: object) -> str:
    """NVML strings are bytes in old pynvml releases and str in new ones."""
    return value.decode() if isinstance(value, bytes) else str(value)


def device_handle(pynvml: ModuleType, cuda_index: int, uuid: str | None = None) -> object:
    """NVML handle of CUDA device `cuda_index` (matched by UUID when given)."""
    if uuid:
        key = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(key)
        except Exception:  # any NVML failure: fall back to the index
            pass
    try:
        return pynvml.nvmlDeviceGetHandleByIndex(cuda_index)
    except Exception as exc:
        raise NvmlUnavailable(f"NVML has no device {cuda_index}: {exc}") from None


def cuda_uuid(cuda_index: int) -> str | None:
    """torch's UUID of a CUDA device, or None where torch cannot say."""
    import torch

    try:
        return str(torch.cuda.get_device_properties(cuda_index).uuid)
    except (AttributeError, RuntimeError, AssertionError):
        return None
