"""Which node of a fleet a run measured, beside its machine class.

The machine slug (measure.system.Fingerprint.slug) is a hash of the hardware: identical nodes
share it, so it names a *class*, and a fleet's peers are the nodes of one class. The node is the
one computer: its name and, on a GPU node, the UUIDs of its GPUs (a swapped GPU keeps the
hostname and changes the UUID).

The name is the one the scheduler knows the node by, since that is what a fleet's operator types
into `scontrol` or `kubectl`: `$CHIPCAL_NODE` where set (the Kubernetes manifest sets it from the
pod's spec.nodeName: a pod's own hostname is the pod's name), else Slurm's `$SLURMD_NODENAME`,
else the host's short name.
"""

from __future__ import annotations

import dataclasses
import os
import re
import socket
from dataclasses import dataclass

from chipcal.measure.nvml import NvmlUnavailable, open_nvml, text

NODE_ENV = "CHIPCAL_NODE"
SLURM_NODE_ENV = "SLURMD_NODENAME"
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class Node:
    """One computer of a fleet: its name, where the name came from, its host name and GPU UUIDs."""

    name: str
    source: str                       # NODE_ENV, SLURM_NODE_ENV or "hostname"
    hostname: str
    gpu_uuids: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """Its JSON form, as the calibration document holds it."""
        return {**dataclasses.asdict(self), "gpu_uuids": list(self.gpu_uuids)}

    @property
    def folder(self) -> str:
        """The node's directory name in a fleet store: its name with anything but letters,
        digits, '.', '_' and '-' replaced by '_'."""
        return folder_name(self.name)


def folder_name(name: str) -> str:
    return _UNSAFE.sub("_", name) or "_"


def gpu_uuids() -> tuple[str, ...]:
    """NVML's UUID of every GPU of this host, in NVML's order; () without NVML or a GPU."""
    try:
        nv = open_nvml()
    except NvmlUnavailable:
        return ()
    try:
        return tuple(text(nv.nvmlDeviceGetUUID(nv.nvmlDeviceGetHandleByIndex(i)))
                     for i in range(nv.nvmlDeviceGetCount()))
    except Exception:  # pynvml.NVMLError_*: a device NVML lists but cannot read
        return ()
    finally:
        nv.nvmlShutdown()


def this_node() -> Node:
    """The node this process runs on (module docstring: which name, and why)."""
    hostname = socket.gethostname()
    for env in (NODE_ENV, SLURM_NODE_ENV):
        if value := os.environ.get(env, "").strip():
            return Node(value, env, hostname, gpu_uuids())
    return Node(hostname.split(".")[0], "hostname", hostname, gpu_uuids())
