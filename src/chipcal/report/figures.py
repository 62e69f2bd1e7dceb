"""A run's key figures, each with the noise interval its own measurements give it: what a fleet
compares across nodes (fleet.outliers) and between a node's runs (fleet.drift).

The intervals are the ones `chipcal report --compare` judges a change by (report.compare), so a
figure means one thing wherever it is shown:

- `gemm_<precision>` (FLOP/s, higher is better), per precision with a hardware unit: the peak,
  and the 95 % CI of the median timing of the shape that gave it (compare.peak_interval);
- `bandwidth` (B/s, higher): the DRAM bandwidth and the range of the DRAM-level sizes' figures
  (compare.bandwidth_range);
- `dispatch` (s per op, lower): the host's eager dispatch cost, ± half its interquartile range;
- `latency <model>/<batch>` (s, lower): a held-out model's measured latency and the 95 % CI of
  its median;
- `sustained clock <precision>` (Hz, higher) and `power <precision>` (W): a GPU's settled clock
  and power while it held that precision's GEMM (measure.sustained), without an interval: the
  hold records its samples, not a CI;
- `held-out error` (fraction, lower): the calibrated median |error| of the held-out models, ±
  the run's round-to-round noise (validation.noise_rel).
"""

from __future__ import annotations

from dataclasses import dataclass

from chipcal.calibrate.document import CalibrationDocument
from chipcal.report.compare import bandwidth_range, peak_interval


@dataclass(frozen=True)
class Figure:
    """One figure of one run: its value, the interval its noise allows (None: not known), its
    unit, and whether a larger value is better (None: neither, e.g. power)."""

    name: str
    value: float
    low: float | None
    high: float | None
    unit: str
    higher_is_better: bool | None

    @property
    def noise_rel(self) -> float | None:
        """Half the interval's width over the value: the run's own relative noise on it."""
        if self.low is None or self.high is None or not self.value:
            return None
        return (self.high - self.low) / 2 / abs(self.value)


def _peaks(doc: CalibrationDocument) -> list[Figure]:
    out = []
    for p in doc.peaks:
        if p.support == "native" and p.measured_flop_per_s:
            low, high = peak_interval(doc, p.precision) or (None, None)
            out.append(Figure(f"gemm_{p.precision}", p.measured_flop_per_s, low, high, "FLOP/s", True))
    return out


def _bandwidth(doc: CalibrationDocument) -> list[Figure]:
    value = doc.bandwidth.measured_bytes_per_s
    if not value:
        return []
    low, high = bandwidth_range(doc) or (None, None)
    return [Figure("bandwidth", value, low, high, "B/s", True)]


def _dispatch(doc: CalibrationDocument) -> list[Figure]:
    d = doc.dispatch
    if d is None or not d.per_op_s:
        return []
    half = d.iqr_s / 2 if d.iqr_s is not None else None
    return [Figure("dispatch", d.per_op_s, None if half is None else d.per_op_s - half,
                   None if half is None else d.per_op_s + half, "s", False)]


def _models(doc: CalibrationDocument) -> list[Figure]:
    return [Figure(f"latency {r.model}/{r.batch}", r.median_s, r.ci_low_s, r.ci_high_s, "s", False)
            for r in doc.observations.models if r.median_s]


def _holds(doc: CalibrationDocument) -> list[Figure]:
    out = []
    for h in doc.observations.holds:
        if h.kind == "gemm" and h.precision and h.settled:
            if h.sm_clock_hz:
                out.append(Figure(f"sustained clock {h.precision}", h.sm_clock_hz, None, None, "Hz", True))
            if h.power_w:
                out.append(Figure(f"power {h.precision}", h.power_w, None, None, "W", None))
    return out


def _held_out(doc: CalibrationDocument) -> list[Figure]:
    v = doc.validation
    if v.median_abs_error is None:
        return []
    noise = v.noise_rel
    return [Figure("held-out error", v.median_abs_error,
                   None if noise is None else max(v.median_abs_error - noise, 0.0),
                   None if noise is None else v.median_abs_error + noise, "", False)]


def run_figures(doc: CalibrationDocument) -> tuple[Figure, ...]:
    """The run's key figures (module docstring), in that order."""
    return tuple(_peaks(doc) + _bandwidth(doc) + _dispatch(doc) + _models(doc) + _holds(doc) + _held_out(doc))
