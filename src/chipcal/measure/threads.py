"""Do the torch threads add up? One fp32 GEMM timed with one thread and with all of them.

A VM's vCPUs can be whole cores or, for minutes at a time, one core's worth (SMT siblings, or a
host that time-shares them). On the 2-vCPU Zen 5 VM of 2026-11-25 a 1024³ fp32 matmul ran at
209 GFLOP/s with 2 threads in one GEMM sweep, and at 104 GFLOP/s with 1 or 2 threads alike for
the hour after, while the OS reported no steal time. The physics peak counts every core; the
speedup says how many cores' worth the run had while it timed:

    speedup = median time with 1 thread / median time with N threads     (ideal: N)

Both timings use `measure.timing.time_callable` (bounded rounds, median with its CI), the
one-thread one first and again after the N-thread one, so a change of regime between them shows
as two one-thread figures that disagree (the slower is used: the speedup is not overstated).
"""

from __future__ import annotations

from dataclasses import dataclass

from chipcal.measure.timing import Measurement, time_callable

GEMM_N = 1024           # 2.1 GFLOP: ~10-20 ms on one core of these VMs, far beyond the call overhead


@dataclass(frozen=True)
class ThreadScaling:
    """A GEMM's time with one thread and with `threads` threads."""

    threads: int
    one_thread: Measurement
    all_threads: Measurement
    method: str

    @property
    def speedup(self) -> float:
        return self.one_thread.median_s / self.all_threads.median_s


def probe_thread_scaling(max_time_s: float = 0.5, min_samples: int = 5) -> ThreadScaling | None:
    """Time a GEMM_N³ fp32 matmul with 1 and with torch's thread count (at most ~3 × max_time_s
    of timing); None when torch runs one thread."""
    import torch

    threads = torch.get_num_threads()
    if threads < 2:
        return None
    a, b = torch.randn(GEMM_N, GEMM_N), torch.randn(GEMM_N, GEMM_N)

    def timed(n: int) -> Measurement:
        return time_callable(lambda: a @ b, min_samples=min_samples, max_time_s=max_time_s, threads=n)

    first, every, again = timed(1), timed(threads), timed(1)
    one = max(first, again, key=lambda m: m.median_s)
    return ThreadScaling(threads, one, every,
                         f"{GEMM_N}^3 fp32 matmul, 1 thread, {threads} threads, 1 thread again (the slower "
                         "1-thread median is used)")
