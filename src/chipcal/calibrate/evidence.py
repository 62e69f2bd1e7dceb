"""Fit the all-in model's uncertain constants on sustained measurements; bursts as a ceiling.

The evidence is the registry's `[[measured]]` rows of real chips. A *sustained* row (held until
clock and power settled under the power limit) is what the sustained-peak model is judged against;
a *burst* row (a short window before the governor acts) only bounds the kernel: it must not beat
2 x MACs/clock x boost clock (the model's burst ceiling, power.GemmPower.burst_peak_flop_per_s).

Residuals, one per sustained row (src/chipcal/model/power.py has P(f)):
    with board power and SM clock:  log(P_model(f_measured, eta_measured, data) / P_measured),
        eta_measured = measured FLOP/s / (2 x MACs/clock x f_measured): the energy and V-f constants
        are judged at the operating point the chip reached, whatever its kernel's efficiency;
    without them:                   log(sustained FLOP/s predicted / measured).
technology.FITTABLE are fitted within their sourced bands (scipy.optimize.least_squares) on the
rows marked fit (a row whose chip's datapath is itself an assumption checks the model instead).
Only a zero-data row constrains the activity floor (random data switches at 1 whatever the floor).

Validation is leave-one-chip-out: each chip's sustained rows are predicted (throughput at the
power-limited clock, the circuit's sourced efficiency) by constants fitted on the other chips.
The band the model keeps after the fit is the range of each constant over the fit on all chips
and the leave-one-chip-out fits (FittedConstants.low/high), within the sourced band.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from chipcal.calibrate.accuracy import relative_error
from chipcal.model import power, technology
from chipcal.model.chip import Chip, Measured
from chipcal.model.precision import FLOP_PER_MAC
from chipcal.model.technology import RANDOM_DATA, ZERO_DATA

BANDS = {"delivery_scale": technology.DELIVERY_SCALE,
         "clock_control_fraction": technology.CLOCK_CONTROL_FRACTION,
         "v_floor": technology.V_FLOOR,
         "v_knee": technology.V_KNEE,
         "activity_floor": technology.ACTIVITY_FLOOR}
DATA_ACTIVITY = {"random": RANDOM_DATA, "zeros": ZERO_DATA}


@dataclass(frozen=True)
class Point:
    chip: Chip
    measured: Measured

    @property
    def activity(self) -> float:
        return DATA_ACTIVITY[self.measured.data]

    @property
    def at_operating_point(self) -> bool:
        """The row says where the chip ran: board power and SM clock."""
        return self.measured.board_power_w is not None and self.measured.sm_clock_hz is not None


def evidence(chips: Iterable[Chip], kind: str = "sustained") -> list[Point]:
    """Every `kind` measurement of a real (non-hypothetical) chip at a precision it runs."""
    return [Point(c, m) for c in sorted(chips, key=lambda c: c.name) if not c.hypothetical
            for m in c.measured if m.kind == kind and c.supports(m.precision)]


def gemm(point: Point, k: power.Constants) -> power.GemmPower:
    return power.gemm_power(point.chip, point.measured.precision, k, activity=point.activity)


def predicted_flop_per_s(point: Point, k: power.Constants) -> float:
    """Sustained throughput the model predicts for the row's chip, precision and data."""
    return gemm(point, k).sustainable_peak_flop_per_s


def residual(point: Point, k: power.Constants) -> float:
    """log(model / measured) of one sustained row (module docstring)."""
    g = gemm(point, k)
    m = point.measured
    if point.at_operating_point:
        f = m.sm_clock_hz
        eta = m.flop_per_s / (FLOP_PER_MAC * g.macs_per_clock * f)
        return math.log(g.power_w(f, efficiency=eta) / m.board_power_w)
    return math.log(max(g.sustainable_peak_flop_per_s, 1.0) / m.flop_per_s)


def _constants(x, base: power.Constants = power.SOURCED) -> power.Constants:
    return base.replace(**dict(zip(technology.FITTABLE, map(float, x), strict=True)))


@dataclass(frozen=True)
class Fit:
    constants: power.Constants
    values: dict[str, float]
    n: int
    rms_log_residual: float


def fit_constants(points: list[Point]) -> Fit:
    """Least-squares fit of technology.FITTABLE within their sourced bands on `points`
    (sustained rows); a constant no point constrains stays at its sourced nominal value."""
    from scipy.optimize import least_squares

    if not points:
        raise ValueError("no sustained measurements to fit on")
    bands = [BANDS[name] for name in technology.FITTABLE]
    lo, hi = np.array([b.low for b in bands]), np.array([b.high for b in bands])
    nominal = np.array([b.nominal for b in bands])
    free = np.array([name != "activity_floor" or any(p.activity < 1 for p in points)
                     for name in technology.FITTABLE])

    def full(x):
        out = nominal.copy()
        out[free] = x
        return out

    def residuals(x):
        k = _constants(full(x))
        return [residual(p, k) for p in points]

    best = None
    # the residual is flat where a clock is capped at spec: start from the nominal point and from
    # the quarter points of every band, keep the best fit
    for x0 in (nominal, lo + 0.25 * (hi - lo), lo + 0.75 * (hi - lo)):
        r = least_squares(residuals, np.clip(x0, lo, hi)[free], bounds=(lo[free], hi[free]), diff_step=1e-3)
        if best is None or r.cost < best.cost:
            best = r
    x = full(best.x)
    values = dict(zip(technology.FITTABLE, map(float, x), strict=True))
    rms = float(math.sqrt(np.mean(np.square(best.fun))))
    return Fit(_constants(x), values, len(points), rms)


def fit_points(points: list[Point]) -> list[Point]:
    """The points that set the constants (Measured.fit)."""
    return [p for p in points if p.measured.fit]


def leave_one_chip_out(points: list[Point]) -> dict[str, Fit]:
    """Chip name -> the fit on every other chip's fit points (chips with fit points only)."""
    used = fit_points(points)
    names = sorted({p.chip.name for p in used})
    return {n: fit_constants([p for p in used if p.chip.name != n]) for n in names
            if any(p.chip.name != n for p in used)}


@dataclass(frozen=True)
class EvidenceRow:
    """One sustained row against the model: throughput where the chip ran at its power limit on
    random data, power at the measured clock for a zero-data row (its clock stops short of the
    board limit, so only its power tests the activity floor)."""

    chip: str
    precision: str
    circuit: str                    # of the engine that runs the precision
    data: str
    in_fit: bool
    measured_flop_per_s: float
    measured_clock_hz: float | None
    measured_power_w: float | None
    sourced_flop_per_s: float       # physics only: every constant at its sourced nominal value
    fitted_flop_per_s: float        # constants fitted on all fit rows
    loo_flop_per_s: float           # constants fitted without this chip's rows
    loo_clock_hz: float
    loo_power_at_measured_clock_w: float | None
    source: str

    @property
    def sourced_error(self) -> float:
        return relative_error(self.sourced_flop_per_s, self.measured_flop_per_s)

    @property
    def fitted_error(self) -> float:
        return relative_error(self.fitted_flop_per_s, self.measured_flop_per_s)

    @property
    def loo_error(self) -> float:
        return relative_error(self.loo_flop_per_s, self.measured_flop_per_s)

    @property
    def loo_power_error(self) -> float | None:
        if self.loo_power_at_measured_clock_w is None or self.measured_power_w is None:
            return None
        return relative_error(self.loo_power_at_measured_clock_w, self.measured_power_w)

    def record(self) -> dict:
        return {"hardware": self.chip, "precision": self.precision, "data": self.data, "in_fit": self.in_fit,
                "measured_flop_per_s": self.measured_flop_per_s, "measured_clock_hz": self.measured_clock_hz,
                "measured_power_w": self.measured_power_w,
                "sourced_sustainable_peak_flop_per_s": self.sourced_flop_per_s,
                "fitted_sustainable_peak_flop_per_s": self.fitted_flop_per_s,
                "loo_sustainable_peak_flop_per_s": self.loo_flop_per_s, "loo_sustained_clock_hz": self.loo_clock_hz,
                "loo_power_at_measured_clock_w": self.loo_power_at_measured_clock_w,
                "sourced_error": self.sourced_error, "fitted_error": self.fitted_error, "loo_error": self.loo_error,
                "loo_power_error": self.loo_power_error, "measured_source": self.source}


@dataclass(frozen=True)
class BurstRow:
    """A burst measurement against the model's burst ceiling (2 x MACs/clock x boost x efficiency)."""

    chip: str
    precision: str
    measured_flop_per_s: float
    ceiling_flop_per_s: float
    source: str

    @property
    def within_ceiling(self) -> bool:
        return self.measured_flop_per_s <= self.ceiling_flop_per_s * 1.02


@dataclass(frozen=True)
class EvidenceReport:
    rows: tuple[EvidenceRow, ...]
    bursts: tuple[BurstRow, ...]
    fitted: Fit
    loo: dict[str, Fit]

    def median_abs_error(self, which: str, chip: str | None = None) -> float:
        """Median |error| of the random-data rows ('sourced', 'fitted' or 'loo'), of one chip or all."""
        errors = [abs(getattr(r, f"{which}_error")) for r in self.rows
                  if r.data == "random" and (chip is None or r.chip == chip)]
        return float(np.median(errors)) if errors else math.nan

    def band(self) -> tuple[dict[str, float], dict[str, float]]:
        """(low, high) of each fitted constant over the fit on all chips and the leave-one-chip-out fits."""
        fits = [self.fitted, *self.loo.values()]
        low = {k: min(f.values[k] for f in fits) for k in technology.FITTABLE}
        high = {k: max(f.values[k] for f in fits) for k in technology.FITTABLE}
        return low, high


def validate(chips: Iterable[Chip]) -> EvidenceReport:
    """Sourced, fitted and leave-one-chip-out predictions of every sustained row; bursts against
    the burst ceiling at the fitted constants."""
    chips = list(chips)
    points = evidence(chips)
    used = fit_points(points)
    if len({p.chip.name for p in used}) < 2:
        raise ValueError("leave-one-chip-out needs sustained measurements on at least two chips")
    fitted = fit_constants(used)
    loo = leave_one_chip_out(points)
    rows = []
    for p in points:
        m = p.measured
        g = gemm(p, loo.get(p.chip.name, fitted).constants)
        power_at_clock = None
        if p.at_operating_point:
            power_at_clock = g.power_w(m.sm_clock_hz, efficiency=m.flop_per_s / (FLOP_PER_MAC * g.macs_per_clock
                                                                               * m.sm_clock_hz))
        circuit = p.chip.engine_for(m.precision).circuit
        rows.append(EvidenceRow(p.chip.name, m.precision, circuit, m.data, m.fit, m.flop_per_s, m.sm_clock_hz,
                                m.board_power_w, predicted_flop_per_s(p, power.SOURCED),
                                predicted_flop_per_s(p, fitted.constants), g.sustainable_peak_flop_per_s,
                                g.sustained_clock_hz, power_at_clock, m.source))
    bursts = tuple(BurstRow(p.chip.name, p.measured.precision, p.measured.flop_per_s,
                            gemm(p, fitted.constants).burst_peak_flop_per_s, p.measured.source)
                   for p in evidence(chips, "burst"))
    return EvidenceReport(tuple(rows), bursts, fitted, loo)


def fitted_constants_toml(report: EvidenceReport) -> str:
    """The shipped fitted constants (src/chipcal/model/fitted_constants.toml) from a validation report."""
    low, high = report.band()
    chips = sorted({r.chip for r in report.rows if r.in_fit})
    circuits = sorted({r.circuit for r in report.rows if r.in_fit})

    def table(name: str, values: dict[str, float]) -> str:
        return f"[{name}]\n" + "".join(f"{k} = {round(values[k], 6):.6g}\n" for k in technology.FITTABLE)

    return ("# Generated by `compare_tdp_registry --refit` (src/chipcal/calibrate/evidence.py): the all-in model's\n"
            "# constants fitted on the registry's sustained measurements. Do not edit by hand.\n"
            f'source = "derived: least squares within the sourced bands on {report.fitted.n} sustained rows of '
            f'{", ".join(chips)}; rms log residual {report.fitted.rms_log_residual:.3f}; band = range over the '
            f'fit and the leave-one-chip-out fits"\n'
            f"circuits = {json.dumps(circuits)}\n\n"
            + table("values", report.fitted.values) + "\n" + table("low", low) + "\n" + table("high", high))
