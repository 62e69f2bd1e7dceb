"""Timing with a distribution: samples, median, IQR, a 95% CI of the median, instability flags.

CPU: blocks of calls timed as torch.utils.benchmark.Timer times them (the stdlib `timeit.Timer` it
wraps, GC off inside a block, the torch thread count fixed), sized by torch's blocked_autorange
rule (×10 calls until the timer's overhead is < 0.01% of a block; `first_block`), the last block
timed while sizing kept as the first sample, until the CI of the median is within `target_rel_ci`
of it (and `min_samples` are in) or `max_time_s` is spent; never the unbounded
`adaptive_autorange`. Not `Timer.timeit`: it runs max(calls / 100, 2) warm-up calls before every
block, so a block of one 2 s call cost 6 s (issue 50: a --quick run's model timings were a third
samples, two thirds torch's warm-ups). GPU: CUDA events around blocks of calls (block ≥ 1 ms, so the
~0.5 µs event resolution is < 0.1%), synchronized once per block.

Every run is under `torch.inference_mode()` with a fixed torch thread count, after warm-up calls.
A sample is the mean per-call time of one block; with blocks of several calls the spread is that of
block means (as in torch.utils.benchmark), narrower than the per-call spread.

CI of the median: distribution-free, from order statistics — [x_(l), x_(n+1-l)] with l the largest
rank where P(Bin(n, ½) ≤ l−1) ≤ 0.025, coverage ≥ 95% (Conover, Practical Nonparametric
Statistics, §3.2). With n < 6 no such l exists; the CI is then [min, max] and says so.
CI of the mean: mean ± t(0.975, n−1)·s/√n (Student). The two statistics answer different
questions (docs/measurement.md, "Which statistic"); where one falls outside the
other's CI (the mean outside the median's, or the median outside the mean's) the distribution
is not one symmetric peak and says which shape it has:
"bimodal" when the bimodality coefficient (g² + 1) / (κ + 3(n−1)²/((n−2)(n−3))) exceeds 5/9
(g skewness, κ excess kurtosis; SAS, Pfister et al. 2013, Front. Psychol. 4:700) and the smaller
side of the samples' best two-group split (Otsu: the cut with the largest between-group variance)
holds at least MODE_SHARE of them; else "heavy-tailed" (a few slow samples pull the mean: a very
skewed sample alone also scores above 5/9).
"""

from __future__ import annotations

import contextlib
import math
import os
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from chipcal.measure.cpu import cpufreq_current_hz
from chipcal.measure.device import CPU, Device
from chipcal.measure.system import OtherLoad
from chipcal.model.errors import ChipcalError

BIMODAL_COEFFICIENT = 5 / 9   # the bimodality coefficient of a uniform distribution: above it, two modes
MODE_SHARE = 0.2              # a second mode holds at least this share of the samples; fewer: a tail
CV_THRESHOLD = 0.10        # coefficient of variation above which a measurement is unstable (pyperf warns at 10%)
CLOCK_DRIFT = 0.05         # relative clock change between rounds that marks a measurement unstable
CONTENTION = 0.25          # share of the CPUs other processes may use before a timing is unstable
MIN_CUDA_BLOCK_S = 1e-3
# CPU: the clock is read between timed blocks, at most 2 x this many times per budget (no sampling thread)
CPU_CLOCK_READS = 8


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int] | None:
    """1-based ranks (l, u) of the order-statistic CI of the median, or None when n is too small."""
    from scipy.stats import binom  # here, not at import: a cached-result reader needs no scipy

    alpha = (1.0 - confidence) / 2
    best = None
    for rank in range(1, n // 2 + 1):
        if binom.cdf(rank - 1, n, 0.5) <= alpha:
            best = rank
        else:
            break
    return None if best is None else (best, n + 1 - best)


def mean_ci(x: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Student-t CI of the mean of `x` ([mean, mean] for a single sample)."""
    mean = float(x.mean())
    if x.size < 2:
        return mean, mean
    from scipy.stats import t  # here, not at import: a cached-result reader needs no scipy

    half = float(t.ppf(0.5 + confidence / 2, x.size - 1) * x.std(ddof=1) / math.sqrt(x.size))
    return mean - half, mean + half


def bimodality_coefficient(x: np.ndarray) -> float | None:
    """Sample bimodality coefficient (module docstring); None below 4 samples or with no spread."""
    n = x.size
    sd = x.std()
    if n < 4 or sd == 0:
        return None
    z = (x - x.mean()) / sd
    g = float(np.mean(z**3)) * math.sqrt(n * (n - 1)) / (n - 2)
    kurt = (n - 1) / ((n - 2) * (n - 3)) * ((n + 1) * (float(np.mean(z**4)) - 3) + 6)
    return (g * g + 1) / (kurt + 3 * (n - 1) ** 2 / ((n - 2) * (n - 3)))


def minor_mode_share(x: np.ndarray) -> float:
    """Share of the samples on the smaller side of the two-group split with the largest
    between-group variance (Otsu's criterion on the sorted samples)."""
    xs = np.sort(x)
    n = xs.size
    if n < 2:
        return 0.0
    k = np.arange(1, n)
    csum = np.cumsum(xs)[:-1]
    mean_lo, mean_hi = csum / k, (xs.sum() - csum) / (n - k)
    cut = int(np.argmax(k * (n - k) * (mean_hi - mean_lo) ** 2)) + 1
    return min(cut, n - cut) / n


def distribution_shape(x: np.ndarray, median: float, median_ci: tuple[float, float],
                       mean: float, mean_ci_: tuple[float, float]) -> tuple[str, str | None]:
    """("" | "bimodal" | "heavy-tailed", a warning): "" when the mean lies in the median's CI and
    the median in the mean's; otherwise the shape the bimodality coefficient says."""
    if median_ci[0] <= mean <= median_ci[1] and mean_ci_[0] <= median <= mean_ci_[1]:
        return "", None
    bc, share = bimodality_coefficient(x), minor_mode_share(x)
    shape = "bimodal" if bc is not None and bc > BIMODAL_COEFFICIENT and share >= MODE_SHARE else "heavy-tailed"
    why = ("too few samples to test for two modes" if bc is None else
           f"bimodality coefficient {bc:.2f} {'>' if bc > BIMODAL_COEFFICIENT else '<='} 5/9, "
           f"the smaller group {share:.0%} of the samples")
    return shape, (f"{shape}: median {median * 1e3:.4g} ms (95% CI {median_ci[0] * 1e3:.4g}-{median_ci[1] * 1e3:.4g}) "
                   f"and mean {mean * 1e3:.4g} ms (95% CI {mean_ci_[0] * 1e3:.4g}-{mean_ci_[1] * 1e3:.4g}) "
                   f"disagree ({why}): the calls do not share one typical time; quote the median with this flag")


@dataclass(frozen=True)
class Measurement:
    """A timing distribution (seconds per call). Build with `from_samples`."""

    samples_s: tuple[float, ...]
    n: int
    median_s: float
    q1_s: float
    q3_s: float
    iqr_s: float
    ci_low_s: float
    ci_high_s: float
    mean_s: float
    cv: float
    unstable: bool
    warnings: tuple[str, ...] = ()
    mean_ci_low_s: float = math.nan
    mean_ci_high_s: float = math.nan
    distribution: str = ""               # "", "bimodal" or "heavy-tailed" (module docstring)
    method: str = ""
    calls_per_sample: int = 1
    threads: int | None = None
    clocks_hz: tuple[float, ...] = field(default=())
    other_cpus: float | None = None      # CPUs other processes (and steal) used during the timing

    @property
    def rel_ci(self) -> float:
        """Half-width of the median's CI relative to the median."""
        return (self.ci_high_s - self.ci_low_s) / 2 / self.median_s if self.median_s > 0 else math.inf

    @property
    def mean_rel_ci(self) -> float:
        """Half-width of the mean's CI relative to the mean."""
        return (self.mean_ci_high_s - self.mean_ci_low_s) / 2 / self.mean_s if self.mean_s > 0 else math.inf

    @classmethod
    def from_samples(cls, samples: Sequence[float], *, method: str = "", warnings: Sequence[str] = (),
                     calls_per_sample: int = 1, threads: int | None = None,
                     clocks_hz: Sequence[float] = (), cv_threshold: float = CV_THRESHOLD,
                     clock_drift: float = CLOCK_DRIFT, other_cpus: float | None = None,
                     cpu_count: int | None = None) -> Measurement:
        """Statistics of per-call times; flags instability (CV, clock drift, contention) in `warnings`.

        Contention: other processes used ≥ CONTENTION × `cpu_count` CPUs while timing (on a
        shared machine a multithreaded op can then wait milliseconds at every barrier).
        """
        x = np.asarray(samples, dtype=float)
        if x.size == 0 or not np.all(np.isfinite(x)) or np.any(x <= 0):
            raise ValueError("a Measurement needs at least one positive, finite sample")
        notes = list(warnings)
        xs = np.sort(x)
        n = int(x.size)
        q1, median, q3 = np.percentile(x, [25, 50, 75])
        ranks = median_ci_ranks(n)
        if ranks is None:
            lo, hi = float(xs[0]), float(xs[-1])
            notes.append(f"only {n} samples: the CI of the median is [min, max], coverage < 95%")
        else:
            lo, hi = float(xs[ranks[0] - 1]), float(xs[ranks[1] - 1])
        mean = float(x.mean())
        mean_lo, mean_hi = mean_ci(x)
        shape, note = distribution_shape(x, float(median), (lo, hi), mean, (mean_lo, mean_hi))
        if note:
            notes.append(note)
        cv = float(x.std(ddof=1) / mean) if n > 1 else 0.0
        unstable = False
        if cv > cv_threshold:
            unstable = True
            notes.append(f"unstable: coefficient of variation {cv:.1%} > {cv_threshold:.0%}")
        clocks = [c for c in clocks_hz if c]
        if len(clocks) > 1 and max(clocks) / min(clocks) - 1 > clock_drift:
            unstable = True
            notes.append(f"unstable: clock changed between {min(clocks) / 1e6:.0f} and "
                         f"{max(clocks) / 1e6:.0f} MHz during the measurement")
        cpus = cpu_count or _usable_cpus()
        if other_cpus is not None and other_cpus >= CONTENTION * cpus:
            unstable = True
            notes.append(f"unstable: other processes used {other_cpus:.1f} of {cpus} CPUs during the timing")
        return cls(samples_s=tuple(float(v) for v in x), n=n, median_s=float(median), q1_s=float(q1),
                   q3_s=float(q3), iqr_s=float(q3 - q1), ci_low_s=lo, ci_high_s=hi, mean_s=mean, cv=cv,
                   unstable=unstable, warnings=tuple(notes), mean_ci_low_s=mean_lo, mean_ci_high_s=mean_hi,
                   distribution=shape, method=method,
                   calls_per_sample=calls_per_sample, threads=threads, clocks_hz=tuple(clocks),
                   other_cpus=other_cpus)

    def to_dict(self) -> dict:
        """What `from_dict` needs to rebuild it (the statistics are recomputed from the samples)."""
        return {"samples_s": list(self.samples_s), "method": self.method, "calls_per_sample": self.calls_per_sample,
                "threads": self.threads, "clocks_hz": list(self.clocks_hz), "other_cpus": self.other_cpus,
                "warnings": [w for w in self.warnings if not w.startswith(("unstable:", "only ", "bimodal:",
                                                                          "heavy-tailed:"))]}

    @classmethod
    def from_dict(cls, data: dict) -> Measurement:
        return cls.from_samples(data["samples_s"], method=data.get("method", ""),
                                warnings=data.get("warnings", ()), calls_per_sample=data.get("calls_per_sample", 1),
                                threads=data.get("threads"), clocks_hz=data.get("clocks_hz", ()),
                                other_cpus=data.get("other_cpus"))


def _usable_cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


@contextlib.contextmanager
def fixed_threads(n: int) -> Iterator[None]:
    """torch's intra-op thread count fixed to `n` inside the block, restored after."""
    import torch

    prior = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(prior)


class ClockSampler:
    """Reads `probe` every CLOCK_SAMPLE_PERIOD_S in a thread while the block runs, so a sustained
    run has clock samples throughout (a few timing rounds give only 2-5). A probe that raises
    stops the sampling; `failure` says why."""

    def __init__(self, probe: Callable[[], float | None] | None, period_s: float = 0.1):
        self.probe, self.period_s = probe, period_s
        self.clocks_hz: list[float | None] = []
        self.failure: str | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _loop(self) -> None:
        while not self._stop.wait(self.period_s):
            try:
                self.clocks_hz.append(self.probe())
            except Exception as exc:  # a sensor read failing (sysfs, NVML)
                self.failure = f"{type(exc).__name__}: {exc}"
                return

    def __enter__(self) -> ClockSampler:
        if self.probe is not None:
            self._thread = threading.Thread(target=self._loop, name="clock-sampler", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is not None:
            self._stop.set()
            self._thread.join()


def cpu_clock_probe() -> float | None:
    """Mean current CPU clock in Hz from cpufreq (sysfs scaling_cur_freq); None without cpufreq.

    /proc/cpuinfo's 'cpu MHz' is not read: under a hypervisor without cpufreq it is the constant TSC
    rate (it can show no drift), and reading and parsing it for every CPU is the costliest probe."""
    return cpufreq_current_hz()


def _done(samples: list[float], min_samples: int, target_rel_ci: float) -> bool:
    if len(samples) < min_samples:
        return False
    m = Measurement.from_samples(samples)
    return m.rel_ci <= target_rel_ci and median_ci_ranks(len(samples)) is not None


def block_calls(autorange_number: int, call_s: float, max_time_s: float, min_samples: int) -> int:
    """Calls per timed block: blocked_autorange's choice, at most what lets `min_samples` blocks
    fill half the budget, and at least 1.

    torch's rule (block ≥ 10⁴ × the timer's overhead) depends on the host: an empty timeit costs
    2.6 µs on the Zen 4 VM and more on a busy or slower one, so a 20 ms call was given blocks of 10
    and a 68 ms gpt2 decode step one block of 10 for its whole budget (issue 50). The cap binds only
    where the budget cannot hold `min_samples` of torch's blocks; the timer's overhead then weighs
    more than 10⁻⁴ of a block (1.3·10⁻⁴ for that 20 ms call), a smaller error than a median of one
    sample, and the sample count becomes a property of the budget, not of the host."""
    fits = int(max_time_s / (2 * min_samples * call_s)) if call_s > 0 else autorange_number
    return max(1, min(autorange_number, fits))


def first_block(timed: Callable[[int], float], overhead_s: float, min_run_time: float) -> tuple[int, float]:
    """(calls per block, seconds of the last block timed) by torch's block-size rule
    (torch.utils.benchmark.Timer._estimate_block_size, which blocked_autorange calls): from one
    call, ×10 until the timer's own overhead is ≤ 1e-4 of a block that lasts ≥ min_run_time / 1000,
    or until a block lasts longer than `min_run_time`. `timed(n)` runs a block of n calls and
    returns its seconds. torch throws that last block away and times again; it is a block of the
    size chosen, so here it is the first sample (a 2 s vision-transformer pass was run twice for
    nothing in every model timing: issue 50)."""
    number = 1
    while True:
        block_s = timed(number)
        if (overhead_s <= 1e-4 * block_s and block_s >= min_run_time / 1000) or block_s > min_run_time \
                or number * 10 > 2**31 - 1:
            return number, block_s
        number *= 10


def _time_cpu(fn: Callable[[], object], *, min_samples: int, max_time_s: float, target_rel_ci: float,
              threads: int, clock_probe: Callable[[], float | None] | None,
              ceiling_s: float | None) -> tuple[list[float], int, list, str]:
    """Blocks of calls (module docstring): the size by torch's rule over a quarter of the budget
    (`first_block`, its last block the first sample), capped by `block_calls`; then one block per
    sample until the CI target, min_samples and the budget allow (with a `ceiling_s`, past the
    budget until min_samples are in). `threads` is already set (time_callable). The clock is read
    between blocks, at most every budget / CPU_CLOCK_READS / 2 s (no sampling thread), so a
    sustained run has the samples a sag check needs (calibrate.flags.sag: 8)."""
    import timeit

    block = timeit.Timer(fn).timeit                     # seconds for a block of n calls
    empty = timeit.Timer("pass").timeit                 # the timer's own cost per block
    overhead_s = float(np.median([empty(1) for _ in range(5)]))
    clocks: list[float | None] = [clock_probe() if clock_probe else None]
    start = time.perf_counter()
    sized, block_s = first_block(block, overhead_s, max(max_time_s / 4, 1e-3))
    number = block_calls(sized, block_s / sized, max_time_s, min_samples)
    samples: list[float] = [block_s / sized]
    clocks.append(clock_probe() if clock_probe else None)
    read_every, last_read = max_time_s / CPU_CLOCK_READS / 2, time.perf_counter()
    check_at = min_samples
    while _measuring(time.perf_counter() - start, len(samples), max_time_s, min_samples, ceiling_s):
        if len(samples) >= check_at:
            if _done(samples, min_samples, target_rel_ci):
                break
            check_at = len(samples) + max(1, len(samples) // 8)     # the CI is sorted out every ~12 %
        samples.append(block(number) / number)
        if clock_probe and time.perf_counter() - last_read >= read_every:
            clocks.append(clock_probe())
            last_read = time.perf_counter()
    sizing = f"1 block of {sized} calls" if number != sized else "its last block the first sample"
    method = (f"timeit blocks as torch.utils.benchmark.Timer times them, sized by blocked_autorange's rule "
              f"({sizing}), then {len(samples) - 1} blocks of {number} calls, {threads} threads, inference_mode")
    return samples, number, clocks, method


def _measuring(elapsed_s: float, n: int, max_time_s: float, min_samples: int, ceiling_s: float | None) -> bool:
    """Whether to time another block: within the budget, or past it while a `ceiling_s` is set and
    fewer than `min_samples` are in (the ceiling then bounds it)."""
    if elapsed_s < max_time_s:
        return True
    return ceiling_s is not None and n < min_samples and elapsed_s < ceiling_s


class TooFewSamples(ChipcalError, RuntimeError):
    """`min_samples` were required (a `ceiling_s` was given) and the ceiling came first."""


def _time_cuda(fn: Callable[[], object], *, min_samples: int, max_time_s: float, target_rel_ci: float,
               clock_probe: Callable[[], float | None] | None,
               ceiling_s: float | None) -> tuple[list[float], int, list, str]:
    import torch

    def block(number: int) -> float:
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        return begin.elapsed_time(end) / 1e3  # elapsed_time is in ms

    torch.cuda.synchronize()
    one = block(1)
    number = max(1, math.ceil(MIN_CUDA_BLOCK_S / max(one, 1e-9)))
    samples: list[float] = []
    clocks: list[float | None] = [clock_probe() if clock_probe else None]
    start = time.perf_counter()
    while True:
        samples.append(block(number) / number)
        if len(samples) % max(min_samples, 1) == 0:
            clocks.append(clock_probe() if clock_probe else None)
        if _done(samples, min_samples, target_rel_ci) or not _measuring(
                time.perf_counter() - start, len(samples), max_time_s, min_samples, ceiling_s):
            break
    clocks.append(clock_probe() if clock_probe else None)
    return samples, number, clocks, f"CUDA events, {number} calls per sample, inference_mode"


def budget_s(fn: Callable[[], object], device: Device, max_time_s: float, samples: int, warm: bool = False) -> float:
    """A time budget with room for `samples` calls of a slow `fn`, at most 4 × max_time_s.

    One synchronized call after a warm-up call (none when the caller has just called `fn`: `warm`)
    gives the per-call time t; budget = min(max(max_time_s, 1.5 · samples · t), 4 · max_time_s).
    The calls also serve as the warm-up of the measurement that follows.
    """
    import torch

    cuda = device.is_cuda
    with torch.inference_mode():
        if not warm:
            fn()
        if cuda:
            torch.cuda.synchronize()
        start = time.perf_counter()
        fn()
        if cuda:
            torch.cuda.synchronize()
        call_s = time.perf_counter() - start
    return min(max(max_time_s, 1.5 * samples * call_s), 4 * max_time_s)


def time_callable(fn: Callable[[], object], *, device: Device = CPU, min_samples: int = 10,
                  max_time_s: float = 2.0, target_rel_ci: float = 0.05, warmup: int = 2,
                  threads: int | None = None, clock_probe: Callable[[], float | None] | None = None,
                  cv_threshold: float = CV_THRESHOLD, ceiling_s: float | None = None) -> Measurement:
    """Time `fn()` (seconds per call) until the median's 95% CI is within ±target_rel_ci.

    Bounded: stops after `max_time_s` of measuring even if the target is not met (the Measurement
    then says so). With `ceiling_s`, `min_samples` is a requirement, not a wish: measuring goes on
    past `max_time_s` until they are in, and raises TooFewSamples if `ceiling_s` passes first (a
    slow host gets a clear error, never a silent n = 1). `clock_probe` returns the current clock in Hz; it is read between rounds to
    detect clock changes (default: the cpufreq clock on CPU, none on CUDA — pass the NVML SM
    clock), and on CUDA also every 0.1 s by a sampling thread (ClockSampler).
    """
    import torch

    if min_samples < 1 or max_time_s <= 0 or target_rel_ci <= 0:
        raise ValueError("min_samples, max_time_s and target_rel_ci must be positive")
    if ceiling_s is not None and ceiling_s < max_time_s:
        raise ValueError(f"ceiling_s {ceiling_s} is below max_time_s {max_time_s}")
    cuda = device.require().is_cuda
    threads = threads or torch.get_num_threads()
    if clock_probe is None and not cuda:
        clock_probe = cpu_clock_probe
    # CPU: the clock is read between rounds only. A sampling thread is a third runnable thread on
    # a 2-core machine timing 2 torch threads: each wake-up preempts a worker, and the other
    # waits for it at the next OpenMP barrier (docs/measurement.md, "Which statistic")
    sampler = ClockSampler(clock_probe if cuda else None)
    with fixed_threads(threads), torch.inference_mode(), OtherLoad() as other, sampler:
        for _ in range(warmup):
            fn()
        if cuda:
            samples, number, clocks, method = _time_cuda(
                fn, min_samples=min_samples, max_time_s=max_time_s, target_rel_ci=target_rel_ci,
                clock_probe=clock_probe, ceiling_s=ceiling_s)
        else:
            samples, number, clocks, method = _time_cpu(
                fn, min_samples=min_samples, max_time_s=max_time_s, target_rel_ci=target_rel_ci,
                threads=threads, clock_probe=clock_probe, ceiling_s=ceiling_s)
    if ceiling_s is not None and len(samples) < min_samples:
        raise TooFewSamples(f"{len(samples)} of the {min_samples} samples required in the {ceiling_s:.3g} s ceiling "
                            f"(a sample took ~{float(np.median(samples)) * number:.3g} s)")
    notes = [f"clock sampler failed ({sampler.failure}): clock samples stop there"] if sampler.failure else []
    if len(samples) < min_samples:
        notes.append(f"time limit {max_time_s:.3g} s reached with {len(samples)} < {min_samples} samples")
    m = Measurement.from_samples(samples)
    if m.rel_ci > target_rel_ci:
        notes.append(f"CI of the median ±{m.rel_ci:.1%} is wider than the ±{target_rel_ci:.0%} target "
                     f"after {max_time_s:.3g} s")
    return Measurement.from_samples(samples, method=method, warnings=notes, calls_per_sample=number,
                                    threads=threads, clocks_hz=[c for c in clocks + sampler.clocks_hz if c],
                                    cv_threshold=cv_threshold, other_cpus=other.cpus)
