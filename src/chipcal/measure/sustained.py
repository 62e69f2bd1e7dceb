"""Hold one kernel back to back until the chip's clock and power settle, and record the point it
sustains: throughput, power, SM clock and clock-event reasons.

A GPU under its power limit starts a long GEMM at the boost clock, and within about a second its
governor lowers the clock to what the limit allows (H100 SXM5, bf16 8192³ on random data: 1980 ->
about 1365 MHz, clock-event reason sw_power_cap; tests/machines/nvidia-h100-sxm5/sustained-power.json).
NVML's power reading is a 1 s running average on Ampere/Hopper, so it lags by about a second as
well. A short window therefore measures the burst; the hold measures what the chip sustains.

The kernel runs in batches of calls, each synchronised and sized from the previous one to last
about `batch_s`, and the sensor is read after each batch. The hold ends once at least `min_s` have
passed and the medians of the last `settle_window_s` of clock and power samples are within
`settle_tolerance` of the window before (settled), or at `max_s` (not settled). The second half of
the hold is its settled part: calls done there over its duration are the sustained FLOP/s, and the
median power and SM clock of its samples (and the energy counter's average power over it, where
the sensor has a counter) the sustained power and clock. The calls of the first `burst_s` give
the burst FLOP/s. Every loop is bounded by `max_s` and a batch count.

Time, the batch runner and the sensor are arguments, so a test replays a recorded trace through
a fake clock (tests/test_sustained_hold.py).
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chipcal.measure.throttle import decode_clock_events

HOLD_KINDS = ("idle", "stream", "gemm")


@dataclass(frozen=True)
class SensorReading:
    """One reading of the device's sensors (None where the device has no such sensor)."""

    power_w: float | None        # the sensor's power now (NVML: a 1 s running average); None: energy only
    energy_j: float | None       # cumulative energy in joules, any origin (wrap-corrected); None: no counter
    sm_clock_hz: float | None = None
    clock_events: int | None = None      # NVML clock-event reason bitmask (measure.throttle)


Sensor = Callable[[], SensorReading]
BatchRunner = Callable[[int], None]      # runs n calls of the kernel and synchronises


@dataclass(frozen=True)
class HoldLimits:
    """How long a hold runs and when it counts as settled (module docstring)."""

    min_s: float = 5.0
    max_s: float = 8.0
    batch_s: float = 0.1
    settle_window_s: float = 1.0
    settle_tolerance: float = 0.02
    burst_s: float = 0.2

    @property
    def max_batches(self) -> int:
        """A bound on the loop that holds even where the clock does not advance."""
        return 10 * math.ceil(self.max_s / self.batch_s) + 10


# min_s: replaying the recorded H100 traces, a hold stopped at 3 s read the bf16 and tf32 clocks
# 2.7 % above their 4-8 s medians (the chip still warming), at 5 s within 0.6 %
FULL_LIMITS = HoldLimits()
QUICK_LIMITS = HoldLimits(min_s=4.0, max_s=5.0)
MAX_GROWTH = 16          # a batch holds at most this many times the previous batch's calls


@dataclass(frozen=True)
class HoldSample:
    """The sensors after a batch: time since the hold began, calls finished by then."""

    t_s: float
    calls: int
    power_w: float | None        # the sensor's power, else the energy counter's since the previous sample
    energy_j: float | None
    sm_clock_hz: float | None
    clock_events: int | None


def _median(values) -> float | None:
    values = [v for v in values if v is not None and math.isfinite(v)]
    return float(statistics.median(values)) if values else None


@dataclass(frozen=True)
class Hold:
    """One kernel held back to back (module docstring). FLOP and bytes are per call (1 MAC = 2 FLOP;
    bytes: the DRAM traffic the caller counts, a lower bound for a GEMM)."""

    kind: str                    # idle, stream, gemm
    label: str
    precision: str | None
    flop_per_call: float
    bytes_per_call: float
    settled: bool
    samples: tuple[HoldSample, ...]     # the first at t = 0 before any call
    burst_s: float = FULL_LIMITS.burst_s

    @property
    def duration_s(self) -> float:
        return self.samples[-1].t_s

    @property
    def calls(self) -> int:
        return self.samples[-1].calls

    @property
    def settled_samples(self) -> tuple[HoldSample, ...]:
        """The second half of the hold (the sample at its start included)."""
        half = self.duration_s / 2
        start = max((i for i, s in enumerate(self.samples) if s.t_s <= half), default=0)
        return self.samples[start:]

    def _rate(self, samples: Sequence[HoldSample]) -> float | None:
        first, last = samples[0], samples[-1]
        if last.t_s <= first.t_s:
            return None
        return (last.calls - first.calls) / (last.t_s - first.t_s)

    @property
    def calls_per_s(self) -> float | None:
        """Calls per second over the settled part."""
        return self._rate(self.settled_samples)

    @property
    def sustained_flop_per_s(self) -> float | None:
        rate = self.calls_per_s
        return None if rate is None else rate * self.flop_per_call

    @property
    def sustained_bytes_per_s(self) -> float | None:
        rate = self.calls_per_s
        return None if rate is None else rate * self.bytes_per_call

    @property
    def burst_flop_per_s(self) -> float | None:
        """FLOP/s of the batches finished within the first `burst_s` (at least the first batch)."""
        if len(self.samples) < 2 or not self.flop_per_call:
            return None
        end = next((i for i, s in enumerate(self.samples) if s.t_s >= self.burst_s), len(self.samples) - 1)
        rate = self._rate(self.samples[:max(end, 1) + 1])
        return None if rate is None else rate * self.flop_per_call

    @property
    def median_power_w(self) -> float | None:
        return _median(s.power_w for s in self.settled_samples[1:])

    @property
    def energy_power_w(self) -> float | None:
        """The energy counter's average power over the settled part, None without a counter."""
        part = self.settled_samples
        first, last = part[0], part[-1]
        if first.energy_j is None or last.energy_j is None or last.t_s <= first.t_s:
            return None
        return (last.energy_j - first.energy_j) / (last.t_s - first.t_s)

    @property
    def power_w(self) -> float | None:
        """The sustained power: the energy counter's average where there is one (NVML's power
        reading is a lagging 1 s average), else the median of the power samples."""
        energy = self.energy_power_w
        return energy if energy is not None else self.median_power_w

    @property
    def sm_clock_hz(self) -> float | None:
        return _median(s.sm_clock_hz for s in self.settled_samples[1:])

    @property
    def clock_events(self) -> tuple[str, ...]:
        """Every clock-event reason any sample reported (measure.throttle names)."""
        mask = 0
        for s in self.samples:
            mask |= s.clock_events or 0
        return decode_clock_events(mask)


def settled(samples: Sequence[HoldSample], window_s: float, tolerance: float) -> bool:
    """The medians of the last `window_s` of clock and power samples are within `tolerance` of
    those of the window before (each window with at least 2 samples); a quantity the sensor does
    not give is not checked."""
    if not samples:
        return False
    end = samples[-1].t_s
    last = [s for s in samples if end - window_s < s.t_s <= end]
    before = [s for s in samples if end - 2 * window_s < s.t_s <= end - window_s]
    if len(last) < 2 or len(before) < 2:
        return False
    for quantity in ("power_w", "sm_clock_hz"):
        a, b = _median(getattr(s, quantity) for s in last), _median(getattr(s, quantity) for s in before)
        if a is None and b is None:
            continue
        if a is None or b is None or b <= 0 or abs(a / b - 1) > tolerance:
            return False
    return True


def hold(run_batch: BatchRunner, sensor: Sensor, *, kind: str, label: str, precision: str | None = None,
         flop_per_call: float = 0.0, bytes_per_call: float = 0.0, limits: HoldLimits = FULL_LIMITS,
         clock: Callable[[], float] = time.monotonic) -> Hold:
    """Run the kernel in synchronised batches until clock and power settle (module docstring).
    `run_batch(n)` runs n calls and returns once they are done; `sensor()` reads the device."""
    if kind not in HOLD_KINDS:
        raise ValueError(f"hold kind must be one of {', '.join(HOLD_KINDS)}, got {kind!r}")
    t0 = clock()
    previous = _sample(sensor(), 0.0, 0, None)
    samples = [previous]
    n, calls, is_settled = 1, 0, False
    for _ in range(limits.max_batches):
        run_batch(n)
        calls += n
        sample = _sample(sensor(), clock() - t0, calls, previous)
        samples.append(sample)
        if sample.t_s >= limits.min_s and settled(samples, limits.settle_window_s, limits.settle_tolerance):
            is_settled = True
            break
        if sample.t_s >= limits.max_s:
            break
        if sample.t_s > previous.t_s:       # (a clock that did not move says nothing of the call time)
            n = max(1, min(MAX_GROWTH * n, round(limits.batch_s * n / (sample.t_s - previous.t_s))))
        previous = sample
    return Hold(kind, label, precision, float(flop_per_call), float(bytes_per_call), is_settled, tuple(samples),
                limits.burst_s)


def _sample(reading: SensorReading, t_s: float, calls: int, previous: HoldSample | None) -> HoldSample:
    power = reading.power_w
    if power is None and previous is not None and reading.energy_j is not None and previous.energy_j is not None \
            and t_s > previous.t_s:
        power = (reading.energy_j - previous.energy_j) / (t_s - previous.t_s)
    return HoldSample(t_s, calls, power, reading.energy_j, reading.sm_clock_hz, reading.clock_events)
