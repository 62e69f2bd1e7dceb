"""Dispatch micro-probe: the host's per-op cost of eager PyTorch on this machine.

Method: a chain of `repeats` × (Conv2d 1→1 1x1, BatchNorm2d, ReLU) modules in eval mode runs on a
1x1x1x1 tensor on the probed device, one CPU thread, under inference mode. Each op does a handful
of FLOPs, so the time per op is what eager mode pays before any arithmetic: the nn.Module call,
the functional wrapper, the dispatcher, a kernel's fixed setup and, on a GPU, the kernel launch
(the device finishes each 1-element kernel before the host has issued the next, so the chain is
host-bound). The chain is timed with `measure.timing.time_callable` (bounded rounds, median with
its CI), and every sample is divided by the number of ops:

    per-op cost = time(chain) / (3 × repeats)

This is model.estimate.host's per-op issue cost `h`; a calibration stores the median as
`host_overhead_s`. The device matters: on the H100 machine's Xeon host the CPU-tensor chain took
9.6 µs per op, while ResNet-50 eager at batch 1 on the GPU spent ~34 µs per op.
"""

from __future__ import annotations

from dataclasses import dataclass

from chipcal.measure import cache
from chipcal.measure.device import CPU, Device
from chipcal.measure.timing import Measurement, time_callable

OPS_PER_REPEAT = 3      # Conv2d, BatchNorm2d, ReLU


@dataclass(frozen=True)
class DispatchCost:
    """Per-op host cost: the distribution of the chain's samples divided by its op count."""

    per_op: Measurement
    ops_per_call: int
    method: str

    @property
    def per_op_s(self) -> float:
        return self.per_op.median_s


def probe_dispatch(repeats: int = 32, max_time_s: float = 1.0, min_samples: int = 10,
                   device: Device = CPU) -> DispatchCost:
    """Measure the per-op eager dispatch cost of ops on `device` in at most ~`max_time_s` of timing."""
    import torch

    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    layers = []
    for _ in range(repeats):
        layers += [torch.nn.Conv2d(1, 1, 1), torch.nn.BatchNorm2d(1), torch.nn.ReLU()]
    chain = torch.nn.Sequential(*layers).eval().to(str(device))
    x = torch.zeros(1, 1, 1, 1, device=str(device))
    ops = OPS_PER_REPEAT * repeats
    timed = time_callable(lambda: chain(x), device=device, min_samples=min_samples, max_time_s=max_time_s,
                          threads=1)
    per_op = Measurement.from_samples([s / ops for s in timed.samples_s], method=timed.method,
                                      warnings=[w for w in timed.warnings if not w.startswith(("unstable:", "only "))],
                                      calls_per_sample=timed.calls_per_sample, threads=timed.threads,
                                      clocks_hz=timed.clocks_hz, other_cpus=timed.other_cpus)
    return DispatchCost(per_op=per_op, ops_per_call=ops,
                        method=f"chain of {repeats} x (Conv2d 1x1, BatchNorm2d, ReLU) on a 1x1x1x1 {device} tensor, "
                               f"1 thread, inference mode; time per call / {ops}")


def local_dispatch(device: Device | None = None, use_cache: bool = True) -> DispatchCost:
    """This machine's dispatch probe on `device` (default: the first CUDA device, else the CPU),
    from the measurement cache when an entry of this machine, torch and driver is there, else
    probed now (about a second) and cached. `chipcal calibrate` probes the same chain."""
    import torch

    from chipcal.measure.system import fingerprint

    device = device or (Device("cuda") if torch.cuda.is_available() else CPU)
    fp = fingerprint()
    path, key = cache.cache_path("dispatch", device, fp.slug), fp.cache_key(device)
    notes: list[str] = []
    entry = cache.load_or_empty(path, key, use_cache, notes).get("dispatch")
    if isinstance(entry, dict):
        try:
            return DispatchCost(Measurement.from_dict(entry["per_op"]), int(entry["ops_per_call"]), str(entry["method"]))
        except (KeyError, TypeError, ValueError):
            cache.warn(f"ignoring corrupt dispatch entry in measurement cache {path}", notes)
    cost = probe_dispatch(device=device)
    if not cost.per_op.unstable:
        cache.update(path, key, {"dispatch": {"per_op": cost.per_op.to_dict(), "ops_per_call": cost.ops_per_call,
                                              "method": cost.method}})
    return cost
