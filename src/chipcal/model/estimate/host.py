"""Host side of an eager runtime: per-op issue cost and the asynchronous queue to the device.

In PyTorch eager mode the host issues one op at a time (Python, dispatcher, kernel launch): each
costs `h` seconds of host time. The launch is asynchronous: the host runs ahead of the device
until it must synchronize (end of the inference). Op i (in program order) is issued at
H_i = (i + 1) × h; the device starts it when both it is issued and the previous op is done:

    S_i = max(H_i, E_{i-1}),   E_i = S_i + d_i,   latency = E_n (host waits for the last op)

so at each point the slower side sets the pace; latency is not Σ h + Σ d. The device idles
`host_wait_s` = Σ_i max(0, H_i − E_{i-1}) waiting for the host; when that idle time exceeds the
device's busy time, the host dominates (bottleneck "host").

A CPU runs the host and its own kernels on the same cores: nothing overlaps and
latency = Σ (h + d_i) (`synchronous`). Its per-op dispatch is part of the fitted per-op
`overhead_s` (mapping/params.py), so a CPU's extra host cost defaults to 0 unless given.

Compiled (torch.compile with CUDA graphs) and fused (TensorRT, XLA) runtimes replay a captured
graph: no per-op host cost (`host_cost` returns None).

Default h per host class and framework generation (FRAMEWORKS):
    server    x86 server CPU driving a discrete accelerator (PCIe/SXM board)
    embedded  Arm cores of an SoC sharing LPDDR with the accelerator (Jetson, Coral)
    pytorch2  today's PyTorch (2.x): the default of a prediction
    pytorch1  the PyTorch 1.x hosts of the validation corpus (2020-21), kept for its rows
A prediction can also take this machine's own dispatch probe (measure.dispatch, cached by a
calibration) when the target's host is this one (`chipcal predict --host local`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from chipcal.model.chip import Chip
from chipcal.model.errors import ChipcalError
from chipcal.model.mapping.params import DEFAULT_FRAMEWORK, FRAMEWORKS, HOST_RUNTIMES, FamilyParams


@dataclass(frozen=True)
class HostClass:
    name: str
    framework: str
    per_op_s: float
    source: str


_SERVER_PT2 = 18.5e-6     # the H100 host's dispatch probe, torch 2.11 (tests/machines/nvidia-h100-sxm5)
HOST_CLASSES: dict[tuple[str, str], HostClass] = {
    ("server", "pytorch2"): HostClass(
        "server", "pytorch2", _SERVER_PT2,
        "default: eager per-op issue cost of PyTorch 2.x on an x86 server host, 18.5 us: the dispatch probe "
        "(nn.Module Conv2d/BatchNorm2d/ReLU chain, inference mode) on the 16-core Xeon host of an H100 SXM5, "
        "torch 2.11, 2026-11-26 (chipcal calibrate --device cuda)"),
    ("server", "pytorch1"): HostClass(
        "server", "pytorch1", 47e-6,
        "PyTorch 1.x era: eager per-op issue cost (module call, dispatcher, kernel launch) on an x86 server "
        "host, 46.7 +- 2.5 us fitted on the validation corpus's fit split (PyTorch 1.8 on DGX-1 / DGX A100 "
        "hosts; docs/validation.md)"),
    ("embedded", "pytorch2"): HostClass(
        "embedded", "pytorch2", 2 * _SERVER_PT2,
        "default: assumed 2x the server host's per-op cost for the Arm cores of an SoC (lower single-thread "
        "speed; no measurement constrains it)"),
    ("embedded", "pytorch1"): HostClass(
        "embedded", "pytorch1", 94e-6,
        "PyTorch 1.x era: assumed 2x the server host's per-op cost for the Arm cores of an SoC (no corpus "
        "row constrains it, docs/validation.md)"),
}


class HostError(ChipcalError, ValueError):
    """A host cost that cannot be used (negative, not finite)."""


@dataclass(frozen=True)
class HostCost:
    """Per-op host issue cost for one (chip, runtime) and where it came from."""

    per_op_s: float
    synchronous: bool       # host and device are the same cores (a CPU): no overlap
    host_class: str
    source: str


@dataclass(frozen=True)
class HostQueue:
    """Result of running the ops through the host → device queue (module docstring)."""

    latency_s: float
    host_s: float           # Σ host issue time
    device_busy_s: float    # Σ device time
    host_wait_s: float      # device idle, waiting for the host to issue the next op

    @property
    def host_bound(self) -> bool:
        return self.host_wait_s > self.device_busy_s


def host_class(chip: Chip) -> str:
    """'embedded' for an SoC whose host cores share LPDDR with the chip, else 'server'."""
    return "embedded" if chip.memory.type.startswith("lpddr") else "server"


def check_framework(framework: str) -> str:
    if framework not in FRAMEWORKS:
        raise HostError(f"unknown framework generation {framework!r}; valid: {', '.join(FRAMEWORKS)}")
    return framework


def host_cost(chip: Chip, runtime: str, params: FamilyParams,
              override_s: float | None = None, framework: str = DEFAULT_FRAMEWORK,
              override_source: str = "given (--host-overhead-s)") -> HostCost | None:
    """The per-op host cost of running on `chip` under `runtime`; None for a captured graph.

    Precedence: `override_s` (--host-overhead-s, or this machine's dispatch probe, named by
    `override_source`) > params.host_overhead_s (a calibration's dispatch probe) > the default of
    the host class and `framework` generation (0 extra for a CPU, whose dispatch is in overhead_s).
    """
    if runtime not in HOST_RUNTIMES:
        return None
    synchronous = chip.kind == "cpu"
    cls = host_class(chip)
    if override_s is not None:
        if not math.isfinite(override_s) or override_s < 0:
            raise HostError(f"host overhead must be a finite number of seconds >= 0, got {override_s!r}")
        return HostCost(override_s, synchronous, cls, override_source)
    if params.host_overhead_s is not None:
        return HostCost(params.host_overhead_s, synchronous, cls, params.source)
    if synchronous:
        return HostCost(0.0, True, cls, "CPU: per-op dispatch is part of overhead_s")
    default = HOST_CLASSES[cls, check_framework(framework)]
    return HostCost(default.per_op_s, False, cls, default.source)


def run_queue(device_s: Sequence[float], host: HostCost, extra_host_s: Sequence[float] | None = None,
              repeated: bool = False, call_s: float = 0.0) -> HostQueue:
    """Latency of ops with device times `device_s` (program order) issued by `host`, op i costing
    the host per_op_s + extra_host_s[i] (a GPU's per-class issue cost, roofline.host_issue_s), after
    `call_s` of host time entering the call (FamilyParams.host_call_s).

    `repeated`: the time per call of the sequence called back to back with no synchronisation
    between calls (what a timer averaging many calls reports): the host runs a call ahead, so the
    slower side sets the pace, max(Σ host, Σ device), and no call waits for its own issue."""
    extra = list(extra_host_s) if extra_host_s is not None else [0.0] * len(device_s)
    issue = [host.per_op_s + x for x in extra]
    host_total = call_s + float(sum(issue))
    busy = float(sum(device_s))
    if host.synchronous:
        return HostQueue(latency_s=busy + host_total, host_s=host_total, device_busy_s=busy, host_wait_s=host_total)
    if repeated:
        return HostQueue(latency_s=max(host_total, busy), host_s=host_total, device_busy_s=busy,
                         host_wait_s=max(0.0, host_total - busy))
    end = 0.0
    wait = 0.0
    issued = call_s
    for h, d in zip(issue, device_s, strict=True):
        issued += h
        wait += max(0.0, issued - end)
        end = max(issued, end) + d
    return HostQueue(latency_s=end, host_s=host_total, device_busy_s=busy, host_wait_s=wait)
