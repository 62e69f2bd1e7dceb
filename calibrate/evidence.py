"""Fit the all-in model's uncertain constants on published sustained-GEMM measurements.

The evidence is the registry's `[[measured]]` entries (best sustained dense GEMM throughput,
with citations). The model's prediction for one is the sustainable peak (model/power.py): the
power-limited clock x MACs/clock x 2. The constants in technology.FITTABLE are fitted within
their bands (scipy.optimize.least_squares, bounds = the bands) on log(predicted / measured).
Validation is leave-one-chip-out: each chip is predicted by constants fitted on the others.
The physics-only error (nominal constants, no fit) is reported beside it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from chipcal.model import power, technology
from chipcal.model.chip import Chip, Measured

BANDS = {"delivery_scale": technology.DELIVERY_SCALE,
         "clock_control_fraction": technology.CLOCK_CONTROL_FRACTION,
         "static_fraction": technology.STATIC_FRACTION_BAND,
         "v_floor": technology.V_FLOOR}


@dataclass(frozen=True)
class Point:
    chip: Chip
    measured: Measured


def evidence(chips: Iterable[Chip]) -> list[Point]:
    """Every published measurement of a real (non-hypothetical) chip, one per chip and precision."""
    return [Point(c, m) for c in sorted(chips, key=lambda c: c.name) if not c.hypothetical
            for m in c.measured if c.supports(m.precision)]


def predicted_flop_per_s(point: Point, k: power.Constants) -> float:
    return power.gemm_power(point.chip, point.measured.precision, k).sustainable_peak_flop_per_s


def _constants(x) -> power.Constants:
    return power.NOMINAL.replace(**dict(zip(technology.FITTABLE, map(float, x), strict=True)))


@dataclass(frozen=True)
class Fit:
    constants: power.Constants
    values: dict[str, float]
    n: int


def fit_constants(chips: Iterable[Chip] | list[Point]) -> Fit:
    """Least-squares fit of technology.FITTABLE within their bands on log(predicted/measured)."""
    from scipy.optimize import least_squares

    points = [p for p in chips if isinstance(p, Point)] or evidence(chips)
    if not points:
        raise ValueError("no published measurements to fit on")
    bands = [BANDS[name] for name in technology.FITTABLE]
    lo, hi = np.array([b.low for b in bands]), np.array([b.high for b in bands])

    def residuals(x):
        k = _constants(x)
        return [math.log(max(predicted_flop_per_s(p, k), 1.0) / p.measured.flop_per_s) for p in points]

    best = None
    # the sustained clock is capped at spec, so the residual is flat in places: start from the
    # nominal point and from the middle of the upper half of every band, keep the better fit
    for x0 in (np.array([b.nominal for b in bands]), lo + 0.75 * (hi - lo)):
        r = least_squares(residuals, x0, bounds=(lo, hi), diff_step=1e-2)
        if best is None or r.cost < best.cost:
            best = r
    values = dict(zip(technology.FITTABLE, map(float, best.x), strict=True))
    return Fit(_constants(best.x), values, len(points))


@dataclass(frozen=True)
class EvidenceRow:
    chip: str
    precision: str
    measured_flop_per_s: float
    physics_flop_per_s: float
    loo_flop_per_s: float
    source: str

    @property
    def physics_error(self) -> float:
        return self.physics_flop_per_s / self.measured_flop_per_s - 1

    @property
    def loo_error(self) -> float:
        return self.loo_flop_per_s / self.measured_flop_per_s - 1

    def record(self) -> dict:
        return {"hardware": self.chip, "precision": self.precision,
                "measured_peak_flop_per_s": self.measured_flop_per_s,
                "physics_sustainable_peak_flop_per_s": self.physics_flop_per_s,
                "loo_sustainable_peak_flop_per_s": self.loo_flop_per_s,
                "physics_error": self.physics_error, "loo_error": self.loo_error, "measured_source": self.source}


@dataclass(frozen=True)
class EvidenceReport:
    rows: tuple[EvidenceRow, ...]
    fitted: dict[str, float]

    @property
    def physics_median_abs_error(self) -> float:
        return float(np.median([abs(r.physics_error) for r in self.rows]))

    @property
    def loo_median_abs_error(self) -> float:
        return float(np.median([abs(r.loo_error) for r in self.rows]))


def validate(registry) -> EvidenceReport:
    """Physics-only and leave-one-chip-out predictions for every measured chip."""
    points = evidence(registry.chips.values())
    if len(points) < 2:
        raise ValueError("leave-one-chip-out needs measurements on at least two chips")
    rows = []
    for p in points:
        others = [q for q in points if q.chip.name != p.chip.name]
        loo = fit_constants(others).constants
        m = p.measured
        rows.append(EvidenceRow(p.chip.name, m.precision, m.flop_per_s, predicted_flop_per_s(p, power.NOMINAL),
                                predicted_flop_per_s(p, loo), f"{m.title}, {m.url} ({m.date})"))
    return EvidenceReport(tuple(rows), fit_constants(points).values)
