"""Energy per FLOP of each precision at the point the chip sustains, from the power phase's holds.

With S the static power, F_p the FLOP/s of precision p's held GEMM, B the DRAM bytes/s, f the SM
clock and V(f) = model.power.voltage(f, boost, NOMINAL) (the model's V-f curve, 1 at boost):

    P = S·V(f) + e_p·F_p·V(f)² + e_byte·B                          (src/chipcal/model/power.py's form)

S is the idle hold's power, read as static power at boost voltage (the model's convention: its
P_static is the chip's idle power, scaled by V). e_byte and one e_p per precision (on the engine
that runs it) are then fitted by non-negative least squares on P − S·V(f) over the streaming hold
(the triad: its bytes only) and each precision's hold; without a streaming hold e_byte is not
fitted and the GEMMs' bytes are not charged. e_p is the all-in energy per FLOP at boost voltage:
at the spec clock's voltage, plus the GEMM's DRAM bytes per FLOP at e_byte, it compares with the
physics model's GemmPower.pj_per_flop_at_spec. A CPU without a clock sensor is read at V = 1.

GEMMs of one precision at several sizes are not fitted together: a small GEMM does its work in
fewer of the MAC slots while the clock tree toggles in all of them (model.power), so its energy
per FLOP is higher and P is not linear in F across sizes (the SCHEMA_1 fit read 389 W 'static'
and 6.2 pJ/FLOP off the recorded H100's fp32 sizes). A SCHEMA_1 document has no holds: its idle
and triad rows and the eight sustained windows of its largest GEMM (at the run's precision)
stand in, and its GEMM-size rows are left out.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chipcal.calibrate.fits import FitResult
from chipcal.calibrate.power_records import HoldRow, PowerRow, PrecisionEnergy
from chipcal.model import power
from chipcal.model.errors import ChipcalError

SOURCE_HOLD, SOURCE_WINDOWS = "hold", "sustained windows"


class EnergyFitError(ChipcalError, ValueError):
    """The power observations cannot support the energy fit; the message says why."""


@dataclass(frozen=True)
class EnergyPoint:
    """One settled power reading at a known throughput: an idle, streaming or GEMM hold (or a
    SCHEMA_1 window)."""

    kind: str                      # idle, stream, gemm
    precision: str | None
    power_w: float
    flop_per_s: float
    bytes_per_s: float
    sm_clock_hz: float | None
    source: str
    burst_flop_per_s: float | None = None
    clock_events: tuple[str, ...] = ()
    settled: bool | None = None


def points_from_holds(holds: Sequence[HoldRow]) -> list[EnergyPoint]:
    """The holds that read a power, as points."""
    return [EnergyPoint(h.kind, h.precision, h.power_w, h.sustained_flop_per_s or 0.0, h.sustained_bytes_per_s or 0.0,
                        h.sm_clock_hz, SOURCE_HOLD, h.burst_flop_per_s, h.clock_events, h.settled)
            for h in holds if h.power_w is not None and math.isfinite(h.power_w)]


def points_from_power_rows(rows: Sequence[PowerRow], precision: str) -> list[EnergyPoint]:
    """A SCHEMA_1 power curve as points: its idle and triad rows and its sustained windows (each
    at the median of its clock samples), all at `precision`, the run's; its GEMM sizes left out."""
    kinds = {"idle": "idle", "bandwidth": "stream", "sustained": "gemm"}
    return [EnergyPoint(kinds[r.kind], precision if r.kind == "sustained" else None, r.avg_power_w, r.flop_per_s,
                        r.bytes_per_s, statistics.median(r.sm_clock_hz) if r.sm_clock_hz else None, SOURCE_WINDOWS)
            for r in rows if r.kind in kinds and r.avg_power_w is not None and math.isfinite(r.avg_power_w)]


@dataclass(frozen=True)
class EnergyFit:
    """The fitted static power, energy per DRAM byte (None: no streaming reading) and energy per
    FLOP at boost voltage of each precision, with the least-squares record."""

    static_w: float
    j_per_byte: float | None
    j_per_flop_at_boost: dict[str, float]
    boost_clock_hz: float | None
    fit: FitResult

    def voltage(self, clock_hz: float | None) -> float:
        return voltage(clock_hz, self.boost_clock_hz)


def voltage(clock_hz: float | None, boost_clock_hz: float | None) -> float:
    """V(f) relative to boost (model.power.voltage, NOMINAL); 1 where the clock or the boost is
    unknown (a CPU without a clock sensor)."""
    if clock_hz is None or not boost_clock_hz:
        return 1.0
    return power.voltage(clock_hz, boost_clock_hz, power.NOMINAL)


def fit_energy(points: Sequence[EnergyPoint], boost_clock_hz: float | None) -> EnergyFit:
    """Fit S, e_byte and e_p (module docstring)."""
    from scipy.optimize import nnls

    idle = [p.power_w for p in points if p.kind == "idle"]
    if not idle:
        raise EnergyFitError("no idle reading: the static power is unknown, so no energy is fitted")
    work = [p for p in points if (p.kind == "gemm" and p.precision and p.flop_per_s > 0)
            or (p.kind == "stream" and p.bytes_per_s > 0)]
    precisions = list(dict.fromkeys(p.precision for p in work if p.kind == "gemm"))
    if not precisions:
        raise EnergyFitError("no GEMM held with a power reading: no energy per FLOP to fit")
    static = float(statistics.median(idle))
    streams = any(p.kind == "stream" for p in work)
    names = (["j_per_byte"] if streams else []) + [f"j_per_flop_{p}" for p in precisions]
    columns = []
    for p in work:
        v = voltage(p.sm_clock_hz, boost_clock_hz)
        flop = [p.flop_per_s * v * v if p.kind == "gemm" and p.precision == q else 0.0 for q in precisions]
        columns.append(([p.bytes_per_s] if streams else []) + flop)
    x = np.asarray(columns, dtype=float)
    y = np.array([p.power_w - static * voltage(p.sm_clock_hz, boost_clock_hz) for p in work])
    scale = np.maximum(np.max(np.abs(x), axis=0), 1e-30)
    solution, _ = nnls(x / scale, y)
    coef = solution / scale
    residuals = np.concatenate([[w - static for w in idle], y - x @ coef])
    measured = np.array(idle + [p.power_w for p in work])
    spread = float(np.sum((measured - measured.mean()) ** 2))
    dof = len(work) - len(names)
    if dof > 0:
        cov = np.linalg.pinv((x / scale).T @ (x / scale)) * float((y - x @ coef) @ (y - x @ coef)) / dof
        stderr = np.sqrt(np.clip(np.diag(cov), 0, None)) / scale
    else:
        stderr = np.full(len(names), np.nan)     # as many readings as energies: each is determined, not checked
    parameters = dict(zip(names, map(float, coef), strict=True))
    record = FitResult(
        name="power",
        model="P = static_w V(f) + sum_p j_per_flop_p FLOP/s_p V(f)^2 + j_per_byte byte/s; static_w = the idle "
              "hold's power, the rest non-negative least squares; V(f) model.power.voltage (1 at boost)",
        parameters={"static_w": static, **parameters},
        stderr={"static_w": float("nan"), **dict(zip(names, map(float, stderr), strict=True))},
        residuals=tuple(map(float, residuals)), residual_space="watts",
        r2=1 - float(residuals @ residuals) / spread if spread > 0 else float("nan"), n=len(measured))
    return EnergyFit(static, parameters.get("j_per_byte"),
                     {p: parameters[f"j_per_flop_{p}"] for p in precisions}, boost_clock_hz, record)


def precision_energy(fit: EnergyFit, points: Sequence[EnergyPoint], precision: str, chip,
                     tdp_w: float | None) -> PrecisionEnergy:
    """`precision`'s sustained point (the medians of its GEMM points), its fitted energy at boost,
    at the sustained and at the spec clock's voltage, the physics model's energy and the power
    the datasheet peak would need at the fitted energy."""
    own = [p for p in points if p.kind == "gemm" and p.precision == precision]
    flop = statistics.median(p.flop_per_s for p in own)
    clocks = [p.sm_clock_hz for p in own if p.sm_clock_hz]
    clock = statistics.median(clocks) if clocks else None
    bursts = [p.burst_flop_per_s for p in own if p.burst_flop_per_s]
    engine = chip.engine_for(precision)
    spec = chip.stated_peak_flop_per_s.get(precision)
    spec_clock = engine.clock_hz if engine else None
    e = fit.j_per_flop_at_boost[precision]
    bytes_per_flop = statistics.median(p.bytes_per_s / p.flop_per_s for p in own)
    # the spec clock's voltage where the clock is sensed (else every reading is at V = 1)
    v_spec = fit.voltage(spec_clock) if clock and spec_clock else 1.0
    at_spec = e * v_spec ** 2 + (fit.j_per_byte or 0.0) * bytes_per_flop if spec_clock else None
    try:
        physics = power.gemm_power(chip, precision).pj_per_flop_at_spec * 1e-12
    except ValueError:            # the chip model has no engine for it
        physics = None
    return PrecisionEnergy(
        precision=precision, engine=engine.name if engine else None, source=own[0].source,
        settled=None if any(p.settled is None for p in own) else all(p.settled for p in own),
        sustained_flop_per_s=flop, burst_flop_per_s=statistics.median(bursts) if bursts else None,
        sustained_power_w=statistics.median(p.power_w for p in own), sustained_clock_hz=clock,
        boost_clock_hz=fit.boost_clock_hz if clock else None,
        clock_events=tuple(sorted({r for p in own for r in p.clock_events})),
        spec_flop_per_s=spec, spec_clock_hz=spec_clock, tdp_w=tdp_w, bytes_per_flop=bytes_per_flop,
        j_per_flop_at_boost=e, j_per_flop_sustained=e * fit.voltage(clock) ** 2, j_per_flop_at_spec_clock=at_spec,
        physics_j_per_flop_at_spec=physics,
        power_at_spec_w=fit.static_w * v_spec + spec * at_spec if spec and at_spec is not None else None)
