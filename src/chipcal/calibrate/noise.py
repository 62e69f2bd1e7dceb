"""How much accuracy the host's timing noise permits, and when the calibration times more rounds.

The held-out models are timed in interleaved rounds (calibrate.run), each round a few calls per
(model, batch), pooled. Two figures describe the noise, both relative to the median:

    round noise  median over the models of half the spread of their round medians (max/min − 1) / 2:
                 how far the host drifts within minutes; more rounds do not shrink it
    median CI    median over the models of the half-width of the 95 % CI of the pooled median
                 (measure.timing, order statistics): how well the figure the prediction is checked
                 against is known; more samples shrink it

A check of the model can be no better than `permitted = max(round noise, median CI)`: that is
the accuracy the noise permits. The same two figures at the 90th percentile over the models
instead of the median bound a check of the p90 |error| (`permitted_p90`). The target (median
|error| <= TARGET_MEDIAN_ERROR, the issue's 10 %) is checkable when the noise takes at most
NOISE_SHARE of it. When the round noise exceeds that share, the run adds rounds, each as long as
the rounds so far took on average, while the median CI is wider than that share and the extra time
(CalibrationConfig.extra_rounds_time_s) allows. A validation median |error| no larger than
`permitted` is explained by the noise alone: the run cannot tell the model's error from the
host's (flag `error_within_noise`).
`ModelPlan` holds one held-out (model, batch) of the run: its workload, budget and pooled rounds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from chipcal.measure.timing import Measurement

TARGET_MEDIAN_ERROR = 0.10   # the validation target the issues hold a calibration to (median |error|)
NOISE_SHARE = 0.5            # the noise may take at most half of it
MAX_ROUNDS = 12              # never more rounds than this, whatever the budget


@dataclass(frozen=True)
class RoundTimings:
    """One held-out (model, batch): its samples pooled over the rounds and each round's median."""

    samples_s: tuple[float, ...]
    round_medians_s: tuple[float, ...]


def round_noise(timings: Sequence[RoundTimings], percentile: float = 50) -> float:
    """Median (or `percentile`) over the models of half the spread of their round medians (module
    docstring); nan when no model has two rounds."""
    spreads = [(max(t.round_medians_s) / min(t.round_medians_s) - 1) / 2
               for t in timings if len(t.round_medians_s) >= 2]
    return float(np.percentile(spreads, percentile)) if spreads else float("nan")


def median_ci(timings: Sequence[RoundTimings], percentile: float = 50) -> float:
    """Median (or `percentile`) over the models of their pooled median's relative 95 % CI
    half-width; nan without samples."""
    return ci_percentile([Measurement.from_samples(t.samples_s).rel_ci for t in timings if t.samples_s], percentile)


def ci_percentile(rel_cis: Sequence[float], percentile: float = 50) -> float:
    """`percentile` of the models' relative CI half-widths; nan when there are none."""
    return float(np.percentile(rel_cis, percentile)) if len(rel_cis) else float("nan")


def allowed(target: float = TARGET_MEDIAN_ERROR) -> float:
    """The noise a check of `target` tolerates."""
    return NOISE_SHARE * target


def permitted(timings: Sequence[RoundTimings], percentile: float = 50) -> float:
    """The accuracy the noise permits: the larger of the round noise and the median CI (nan
    ignored), both at `percentile` over the models (50: the median's, 90: the p90's)."""
    return permitted_by(round_noise(timings, percentile), median_ci(timings, percentile))


def permitted_by(round_noise_rel: float | None, median_ci_rel: float | None) -> float:
    """The larger of a round noise and a median CI, both relative (None or nan ignored); nan when neither."""
    figures = [f for f in (round_noise_rel, median_ci_rel) if f is not None and np.isfinite(f)]
    return max(figures) if figures else float("nan")


def explains(median_abs_error: float | None, accuracy: float) -> bool:
    """Whether a validation median |error| is within the accuracy the noise permits (module docstring)."""
    return bool(median_abs_error is not None and np.isfinite(accuracy) and median_abs_error <= accuracy)


def another_round(timings: Sequence[RoundTimings], rounds_done: int, round_s: float, left_s: float,
                  target: float = TARGET_MEDIAN_ERROR) -> bool:
    """True when the round noise exceeds what `target` allows, the pooled median's CI is still
    wider than that, and a round as long as `round_s` fits in `left_s` (at most MAX_ROUNDS)."""
    if rounds_done >= MAX_ROUNDS or round_s > left_s:
        return False
    limit = allowed(target)
    noise, ci = round_noise(timings), median_ci(timings)
    return bool(np.isfinite(noise) and noise > limit and np.isfinite(ci) and ci > limit)


@dataclass(frozen=True)
class NoiseVerdict:
    """What the validation's noise permits, and whether it explains the validation error."""

    rounds: int
    added_rounds: int
    round_noise: float
    median_ci: float
    permitted: float
    explained_by_noise: bool     # validation median |error| <= permitted
    permitted_p90: float           # the same at the 90th percentile over the models
    p90_explained_by_noise: bool   # validation p90 |error| <= permitted_p90


def verdict(timings: Sequence[RoundTimings], base_rounds: int, rounds: int,
            median_abs_error: float | None, p90_abs_error: float | None = None) -> NoiseVerdict:
    """The noise figures after `rounds` rounds (`base_rounds` of them planned), and whether they
    explain the validation's median and p90 |error|."""
    accuracy, accuracy_p90 = permitted(timings), permitted(timings, 90)
    return NoiseVerdict(rounds, max(0, rounds - base_rounds), round_noise(timings), median_ci(timings),
                        accuracy, explains(median_abs_error, accuracy),
                        accuracy_p90, explains(p90_abs_error, accuracy_p90))


@dataclass
class ModelPlan:
    """One held-out (model, batch) of the validation: its workload, timing budget and the
    samples its interleaved rounds have gathered so far."""

    name: str
    batch: int
    workload: object
    budget_s: float          # the predicted call time until the budget is set from it
    samples: list[float] = field(default_factory=list)
    methods: list[str] = field(default_factory=list)
    round_medians: list[float] = field(default_factory=list)

    @property
    def key(self) -> str:
        return f"{self.name}|{self.batch}"

    def add(self, timing: dict) -> None:
        """Pool one round's Measurement (as its to_dict data)."""
        m = Measurement.from_dict(timing)
        self.samples.extend(m.samples_s)
        self.methods.append(m.method)
        self.round_medians.append(m.median_s)

    def measurement(self, rounds: int) -> Measurement:
        return Measurement.from_samples(self.samples, method=f"{self.methods[-1]}; {rounds} interleaved rounds")

    def timings(self) -> RoundTimings:
        return RoundTimings(tuple(self.samples), tuple(self.round_medians))
