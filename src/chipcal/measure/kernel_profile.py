"""Where a forward pass's time goes, kernel by kernel, as torch.profiler records it.

A latency says how long a pass took; a profile says which kernels took it. Comparing two runtimes
of the same model (eager against torch.compile, where compiled ran slower on lent GPUs: issue 55,
docs/findings/2026-11-30-compiled-multihead-attention.md) needs the second.

    GPU   each CUDA kernel's device time (CUPTI; the kernels of a replayed CUDA graph included),
          summed by kernel name: cuBLAS, cuDNN, flash attention and Inductor's Triton kernels
    CPU   each operator's own CPU time (`self_cpu_time_total`), summed by name: ATen ops and the
          extern kernels a compiled graph calls. Inductor's generated C++ records no event of its
          own (`torch._inductor.config.cpp.enable_kernel_profile` is off by default), so its time
          stays in the enclosing compiled region's own time.

The callable runs WARMUP_PASSES times unprofiled (a CUDA graph tree records on its second call and
replays from its third), then `passes` times under the profiler; every figure is per pass.

A pass that is not the unit of interest is reduced to it by `per_unit`: an LLM's `generate` call of
K tokens less its 1-token call, over K − 1, gives the kernels of one output token, as the time per
token is derived (measure.llm).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chipcal.measure.device import Device
from chipcal.model.errors import ChipcalError

PROFILE_PASSES = 5
WARMUP_PASSES = 2
GENERATE_PROFILE_CALLS = 2      # profiled calls of each length of an LLM's generate
GENERATE_PROFILE_TOKENS = 8     # the longer calls' tokens at most (generate_profile_tokens)


class ProfileUnavailable(ChipcalError, RuntimeError):
    """torch.profiler failed, or recorded no kernel (a GPU whose CUPTI gives no activity)."""


@dataclass(frozen=True)
class KernelTime:
    """One kernel (GPU) or operator (CPU), summed over its calls."""

    name: str
    calls: float            # per pass
    self_s: float           # its own time per pass: device time on a GPU, CPU time on a CPU


@dataclass(frozen=True)
class KernelProfile:
    """A profiled pass: the kernels by their own time, largest first."""

    clock: str              # "cuda" (device time per kernel) or "cpu" (each operator's own CPU time)
    passes: int
    kernels: tuple[KernelTime, ...]

    @property
    def total_s(self) -> float:
        """The kernels' own time per pass: on a GPU the device's busy time (serial kernels)."""
        return sum(k.self_s for k in self.kernels)


def summarize(events, clock: str, passes: int) -> KernelProfile:
    """A KernelProfile from torch.profiler's `key_averages()` (FunctionEventAvg: key, count, device_type,
    self_cpu_time_total and self_device_time_total in µs). On a GPU only the kernels' own events
    count: a CPU operator's device time is that of the kernels it launched, which are counted already."""
    from torch.autograd import DeviceType

    kernels = []
    for event in events:
        if clock == "cuda":
            own_us = event.self_device_time_total if event.device_type == DeviceType.CUDA else 0
        else:
            own_us = event.self_cpu_time_total if event.device_type == DeviceType.CPU else 0
        if own_us > 0:
            kernels.append(KernelTime(event.key, event.count / passes, own_us * 1e-6 / passes))
    return KernelProfile(clock, passes, tuple(sorted(kernels, key=lambda k: k.self_s, reverse=True)))


def generate_profile_tokens(new_tokens: int) -> int:
    """Tokens of the longer generate calls profiled for a timing of `new_tokens`: at most
    GENERATE_PROFILE_TOKENS. The profiler's own cost grows with the events it records (5.5 s for
    two gpt2 calls of 32 tokens on a 2-vCPU VM, 0.3 s for two of one), and every decode forward
    of a call runs the same kernels, so a few tokens give the kernels of one."""
    return min(new_tokens, GENERATE_PROFILE_TOKENS)


def profiled(take: Callable[[], KernelProfile]) -> tuple[KernelProfile | None, str | None]:
    """(the profile `take` returns, None), or (None, why) when the profiler fails: a timing stands
    without its profile."""
    try:
        return take(), None
    except ProfileUnavailable as exc:
        return None, str(exc)


def per_unit(whole: KernelProfile, part: KernelProfile, units: int) -> KernelProfile:
    """The kernels of one unit of `whole` beyond `part`: (whole − part) / `units`, kernel by kernel
    (module docstring). A kernel whose difference is not positive is left out: one that `part` runs
    as much as `whole` (a prefill's attention), or whose difference is profiler noise."""
    if whole.clock != part.clock:
        raise ValueError(f"profiles of different clocks: {whole.clock} and {part.clock}")
    rest = {k.name: k for k in part.kernels}
    kernels = []
    for k in whole.kernels:
        other = rest.get(k.name, KernelTime(k.name, 0.0, 0.0))
        if k.self_s > other.self_s:
            kernels.append(KernelTime(k.name, (k.calls - other.calls) / units, (k.self_s - other.self_s) / units))
    return KernelProfile(whole.clock, min(whole.passes, part.passes),
                         tuple(sorted(kernels, key=lambda k: k.self_s, reverse=True)))


def profile_passes(fn, device: Device, passes: int = PROFILE_PASSES, warmup: int = WARMUP_PASSES) -> KernelProfile:
    """Profile `passes` calls of `fn` on `device` after `warmup` unprofiled ones (module docstring:
    none needed when `fn` has just been timed eager); ProfileUnavailable when the profiler fails or
    records no kernel."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    def run(n: int) -> None:
        for _ in range(n):
            fn()
        if device.is_cuda:
            torch.cuda.synchronize()

    run(warmup)
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if device.is_cuda else [])]
    try:
        with profile(activities=activities) as prof:
            run(passes)
    except RuntimeError as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ProfileUnavailable(f"torch.profiler failed: {first}") from None
    result = summarize(prof.key_averages(), "cuda" if device.is_cuda else "cpu", passes)
    if not result.kernels:
        raise ProfileUnavailable(f"torch.profiler recorded no {'CUDA kernel' if device.is_cuda else 'operator'}")
    return result
