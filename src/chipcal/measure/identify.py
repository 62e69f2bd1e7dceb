"""Which chip this machine's device is, decided once for every caller (calibration, reference
peaks): the registry chip it matches (measure.match: GPUs by PCI ID or SM count, memory and power
limit; CPUs by model name and core count), else, for a CPU, the chip built from what the OS and
torch report (engines for the precisions with a hardware unit here, Fingerprint.cpu_precisions).
A GPU that matches nothing is an error: a GPU model cannot be guessed from its name.
"""

from __future__ import annotations

from dataclasses import dataclass

from chipcal.measure.device import Device
from chipcal.measure.match import match_registry_chip
from chipcal.measure.system import Fingerprint, local_chip
from chipcal.model.chip import Chip
from chipcal.model.errors import ChipcalError
from chipcal.model.registry import Registry, load_registry


class UnknownDevice(ChipcalError, LookupError):
    """A GPU that matches no registry chip; the message gives its numbers and what to add."""


@dataclass(frozen=True)
class Identity:
    chip: Chip
    origin: str               # how the chip was chosen, for reports
    from_registry: bool       # True: a registry chip with the vendor's spec; False: built locally


def identify(fp: Fingerprint, device: Device, registry: Registry | None = None) -> Identity:
    """The chip `device` of the machine `fp` describes (module docstring)."""
    gpu = device.is_cuda
    match = match_registry_chip(fp, registry or load_registry(), device)
    if match is not None:
        return Identity(match, f"registry match for {fp.gpu_name if gpu else fp.cpu_model}", True)
    if gpu:
        raise UnknownDevice(
            f"GPU {fp.gpu_name!r} ({fp.gpu_sm_count} SMs, {(fp.gpu_memory_bytes or 0) / 2**30:.1f} GiB, default "
            f"power limit {fp.gpu_default_power_limit_w} W, PCI {fp.gpu_pci_device_id}) matches no registry GPU; "
            "add its TOML to src/chipcal/model/hardware/")
    return Identity(local_chip(support=fp.cpu_precisions, cpu=fp.cpu),
                    "built from this CPU's detected cores, SIMD width and clock (no registry match)", False)
