"""Which registry chip this machine is: GPUs by SM count, memory size and power limit (never by
name alone, so H100 SXM5, H100 PCIe and H200 are told apart), CPUs by vendor and SKU tokens and
the core count (a VM slice of a 96-core part is not that part)."""

from __future__ import annotations

import math
import re

from chipcal.measure.device import CPU, Device
from chipcal.measure.system import Fingerprint
from chipcal.model.chip import Chip
from chipcal.model.registry import Registry


def _capacity_distance(measured_bytes: float, stated_bytes: float) -> float:
    """|log ratio| of a reported memory size to a datasheet capacity.

    Datasheet "80 GB" is read both as 80e9 and as 80 GiB: NVML reports 81559 MiB (79.6 GiB) for
    an H100 80GB and 143771 MiB (140.4 GiB) for an H200 141GB.
    """
    return min(abs(math.log(measured_bytes / stated_bytes)),
               abs(math.log(measured_bytes / (stated_bytes / 1e9 * 2**30))))


def _match_gpu(fp: Fingerprint, registry: Registry, tolerance: float = 0.10) -> Chip | None:
    """Match on the PCI device ID (`microarch.pci_device_id`, one registry chip per ID), else
    on SM count (exact), memory size (within `tolerance`) and default power limit.

    The name is not used: an H100 SXM5 (132 SMs, 80 GB, 700 W), H100 PCIe (114 SMs, 80 GB,
    350 W) and H200 (132 SMs, 141 GB, 700 W) differ in those three numbers, and drivers name
    parts without the vendor ("Tesla T4", "Tesla V100-SXM2-16GB"). A CUDA device is an NVIDIA GPU.
    """
    if fp.gpu_pci_device_id:
        by_id = [c for c in registry.chips.values()
                 if c.kind == "gpu" and str(c.microarch.get("pci_device_id", "")).lower() == fp.gpu_pci_device_id]
        if len(by_id) == 1:
            return by_id[0]
    if fp.gpu_name is None or fp.gpu_memory_bytes is None:
        return None
    candidates = []
    for chip in registry.chips.values():
        if chip.kind != "gpu" or chip.vendor.lower() != "nvidia":
            continue
        sm = chip.microarch.get("sm_count")
        if fp.gpu_sm_count is not None and sm is not None and int(sm) != fp.gpu_sm_count:
            continue
        mem_gap = _capacity_distance(fp.gpu_memory_bytes, chip.memory.capacity_bytes)
        if mem_gap > tolerance:
            continue
        limit = fp.gpu_default_power_limit_w or fp.gpu_power_limit_w
        power_gap = abs(math.log(limit / chip.tdp_w)) if limit else 0.0
        candidates.append((power_gap, mem_gap, chip.name, chip))
    if not candidates:
        return None
    candidates.sort(key=lambda c: c[:3])
    best = candidates[0]
    # A power limit far from every TDP (e.g. a 300 W card vs 700 W parts) is not a match.
    return best[3] if best[0] <= math.log(1.5) else None


def _normalize_model(name: str) -> str:
    name = re.sub(r"\((r|tm)\)|\b(cpu|processor)\b|@.*$", " ", name.lower())
    return " ".join(re.sub(r"[^a-z0-9]+", " ", name).split())


def _match_cpu(fp: Fingerprint, registry: Registry) -> Chip | None:
    """A registry CPU whose model name (microarch.model_name or display_name) is the local one
    and whose core count is the number of physical cores this OS sees.

    The vendor word and every token with a digit (the SKU) must appear in the local name, so a
    VM's masked "Intel(R) Xeon(R) Processor" matches nothing rather than every Xeon; a 2-vCPU
    VM reporting "AMD EPYC 9654 96-Core Processor" is not the 96-core part (its peaks would be
    48x too high).
    """
    local = _normalize_model(fp.cpu_model).split()
    for chip in registry.chips.values():
        if chip.kind != "cpu" or int(chip.microarch.get("cores", 0)) != fp.physical_cores:
            continue
        for name in filter(None, (str(chip.microarch.get("model_name", "")), chip.display_name)):
            tokens = _normalize_model(name).split()
            sku = [t for t in tokens if re.search(r"\d", t)]
            if sku and tokens[0] in local and all(t in local for t in sku):
                return chip
    return None


def match_registry_chip(fp: Fingerprint, registry: Registry, device: Device | None = None) -> Chip | None:
    """The registry chip this machine's `device` is (GPU when None and a GPU is present), or None."""
    if device is None:
        device = Device("cuda") if fp.gpu_name else CPU
    return _match_gpu(fp, registry) if device.is_cuda else _match_cpu(fp, registry)
