"""Fit the local GPU's all-in energy per FLOP and static power from a GEMM sweep with NVML samples.

Each observation is one GEMM shape run long enough to sample board power and SM clock (NVML).
With F_i the achieved FLOP/s, f_i the median SM clock and P_i the median board power:

    P_i = P_static + e_boost x F_i x V(f_i)^2          (least squares, e_boost >= 0, P_static >= 0)

V(f) is the model's voltage curve relative to boost (model/power.py, nominal constants), so
e_boost is the all-in energy per FLOP at the boost voltage, comparable with the physics model's
pj_per_flop_at_spec. The sustained clock is the median SM clock over the observations marked
`sustained` (the long run at the largest shape; else the fastest observation). The datasheet
peak is beyond the TDP when P_static + e_boost x spec FLOP/s x V(spec clock)^2 > TDP.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from chipcal.calibrate.flags import Flag
from chipcal.model import power
from chipcal.model.errors import ChipcalError


class SustainFitError(ChipcalError, ValueError):
    """The observations cannot support the fit (too few, or no spread in FLOP/s)."""


@dataclass(frozen=True)
class GemmObservation:
    """One GEMM shape from the sweep with the NVML samples taken while it ran.

    flop: FLOP per call (2 m n k); seconds: median time per call; power_w: board power samples
    (W); sm_clock_hz: SM clock samples (Hz); sustained: the long run that shows the clock the
    chip holds under sustained load.
    """

    precision: str
    flop: float
    seconds: float
    power_w: tuple[float, ...]
    sm_clock_hz: tuple[float, ...]
    sustained: bool = False

    @property
    def flop_per_s(self) -> float:
        return self.flop / self.seconds

    @property
    def median_power_w(self) -> float:
        return float(np.median(self.power_w))

    @property
    def median_clock_hz(self) -> float:
        return float(np.median(self.sm_clock_hz))


@dataclass(frozen=True)
class SustainFit:
    precision: str
    j_per_flop_at_boost: float
    static_w: float
    rms_residual_w: float
    n: int
    sustained_clock_hz: float
    boost_clock_hz: float
    sustained_flop_per_s: float
    spec_flop_per_s: float | None
    spec_clock_hz: float | None
    tdp_w: float | None

    @property
    def clock_fraction(self) -> float:
        """Measured sustained SM clock / boost clock."""
        return self.sustained_clock_hz / self.boost_clock_hz

    @property
    def power_at_spec_w(self) -> float | None:
        """Board power the fitted chip would need at its datasheet peak."""
        if self.spec_flop_per_s is None or self.spec_clock_hz is None:
            return None
        v = power.voltage(self.spec_clock_hz, self.boost_clock_hz, power.NOMINAL)
        return self.static_w + self.j_per_flop_at_boost * self.spec_flop_per_s * v * v

    def spec_beyond_tdp(self) -> Flag | None:
        """`spec_beyond_tdp` with the measured figures, or None when the spec peak fits the TDP."""
        need = self.power_at_spec_w
        if need is None or self.tdp_w is None or need <= self.tdp_w:
            return None
        return Flag(
            "spec_beyond_tdp", "warning",
            f"{self.precision}: measured {self.j_per_flop_at_boost * 1e12:.3g} pJ/FLOP at boost voltage and "
            f"{self.static_w:.0f} W static put the {self.spec_flop_per_s / 1e12:.4g} TFLOP/s spec peak at "
            f"{need:.0f} W > {self.tdp_w:.0f} W TDP; under sustained GEMM the SM clock held "
            f"{self.sustained_clock_hz / 1e9:.3g} GHz ({self.clock_fraction:.0%} of the "
            f"{self.boost_clock_hz / 1e9:.3g} GHz boost) for {self.sustained_flop_per_s / 1e12:.4g} TFLOP/s",
            {"j_per_flop_at_boost": self.j_per_flop_at_boost, "static_w": self.static_w,
             "power_at_spec_w": need, "tdp_w": self.tdp_w, "spec_flop_per_s": self.spec_flop_per_s,
             "sustained_clock_hz": self.sustained_clock_hz, "boost_clock_hz": self.boost_clock_hz,
             "clock_fraction": self.clock_fraction, "sustained_flop_per_s": self.sustained_flop_per_s},
        )


def fit_sustain(observations: Sequence[GemmObservation], boost_clock_hz: float,
                spec_flop_per_s: float | None = None, spec_clock_hz: float | None = None,
                tdp_w: float | None = None) -> SustainFit:
    """Fit P = P_static + e F V(f)^2 on one precision's observations (module docstring)."""
    from scipy.optimize import nnls

    obs = [o for o in observations if o.power_w and o.sm_clock_hz and o.seconds > 0 and o.flop > 0]
    if len({o.precision for o in obs}) > 1:
        raise SustainFitError("fit one precision at a time; got " + ", ".join(sorted({o.precision for o in obs})))
    if len(obs) < 2:
        raise SustainFitError(f"need at least 2 GEMM observations with power and clock samples, got {len(obs)}")
    if not boost_clock_hz > 0:
        raise SustainFitError("boost_clock_hz must be positive")
    x = np.array([o.flop_per_s * power.voltage(o.median_clock_hz, boost_clock_hz, power.NOMINAL) ** 2 for o in obs])
    if np.ptp(x) <= 0.05 * np.max(x):
        raise SustainFitError("the observations span too narrow a FLOP/s range to separate static from dynamic power")
    y = np.array([o.median_power_w for o in obs])
    (e, static), _ = nnls(np.column_stack([x, np.ones_like(x)]), y)
    residual = y - (e * x + static)
    sustained = [o for o in obs if o.sustained] or [max(obs, key=lambda o: o.flop_per_s)]
    clocks = np.concatenate([np.asarray(o.sm_clock_hz, dtype=float) for o in sustained])
    return SustainFit(
        precision=obs[0].precision, j_per_flop_at_boost=float(e), static_w=float(static),
        rms_residual_w=float(math.sqrt(np.mean(residual ** 2))), n=len(obs),
        sustained_clock_hz=float(np.median(clocks)), boost_clock_hz=float(boost_clock_hz),
        sustained_flop_per_s=float(np.median([o.flop_per_s for o in sustained])),
        spec_flop_per_s=spec_flop_per_s, spec_clock_hz=spec_clock_hz, tdp_w=tdp_w,
    )


def observations_from_power_rows(rows: Sequence[dict], precision: str) -> list[GemmObservation]:
    """GemmObservations from measure.power_curve rows: its GEMM and sustained windows that carry
    SM clock samples (one board-power figure per window: the window's average)."""
    return [GemmObservation(precision, flop=r["flop_per_s"], seconds=1.0, power_w=(r["avg_power_w"],),
                            sm_clock_hz=tuple(r["sm_clock_hz"]), sustained=r["kind"] == "sustained")
            for r in rows if r["kind"] in ("gemm", "sustained") and r.get("sm_clock_hz")]
