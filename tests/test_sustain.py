"""The per-precision energy fit (calibrate.sustain) on hand-made boards: static power from idle,
pJ/byte from the stream, one pJ/FLOP per precision at boost voltage through the model's V(f)."""

from __future__ import annotations

import math
import tomllib
from pathlib import Path

import pytest

from chipcal.calibrate.power_records import PowerRow
from chipcal.calibrate.sustain import (
    EnergyFitError,
    EnergyPoint,
    fit_energy,
    points_from_power_rows,
)
from chipcal.model import power

GHZ, PJ = 1e9, 1e-12


def _v(f_ghz: float) -> float:
    """The shipped voltage curve (fitted v0, knee) for a 2 GHz boost: v0 up to knee x 2 GHz, then
    linear to 1 at 2 GHz."""
    k = tomllib.loads(Path(power.__file__).with_name("fitted_constants.toml").read_text())["values"]
    knee = k["v_knee"] * 2.0
    return k["v_floor"] if f_ghz <= knee else k["v_floor"] + (1 - k["v_floor"]) * (f_ghz - knee) / (2.0 - knee)


def point(kind, watts, tflops=0.0, gbytes=0.0, ghz=None, precision=None):
    return EnergyPoint(kind, precision, watts, tflops * 1e12, gbytes * 1e9, ghz * GHZ if ghz else None, "hold")


def board():
    """50 W static, 100 pJ/byte, bf16 1 pJ/FLOP and fp32 10 pJ/FLOP at boost voltage (boost 2 GHz):
      idle                                          50 W
      stream 1 TB/s at 2 GHz (V = 1):               50 + 100                      = 150 W
      bf16 400 TFLOP/s + 10 GB/s at 1.5 GHz:        50 V + 400 V^2 + 1            (V = V(1.5 GHz))
      fp32 50 TFLOP/s + 5 GB/s at 1.9 GHz:          50 V + 500 V^2 + 0.5"""
    vb, vf = _v(1.5), _v(1.9)
    return [point("idle", 50.0, ghz=2.0), point("stream", 150.0, gbytes=1000, ghz=2.0),
            point("gemm", 50 * vb + 400 * vb**2 + 1, 400, 10, 1.5, "bf16"),
            point("gemm", 50 * vf + 500 * vf**2 + 0.5, 50, 5, 1.9, "fp32")]


def test_each_precision_gets_its_own_energy_at_boost_voltage():
    fit = fit_energy(board(), 2 * GHZ)
    assert fit.static_w == 50
    assert fit.j_per_byte / PJ == pytest.approx(100, rel=1e-9)
    assert {p: e / PJ for p, e in fit.j_per_flop_at_boost.items()} == pytest.approx({"bf16": 1.0, "fp32": 10.0},
                                                                                 rel=1e-9)
    assert max(abs(r) for r in fit.fit.residuals) < 1e-9
    # as many readings as energies: each is determined, none checked, so no standard error is claimed
    assert all(math.isnan(fit.fit.stderr[k]) for k in fit.fit.stderr)


def test_more_readings_of_a_precision_give_standard_errors():
    vb = _v(1.4)
    extra = point("gemm", 50 * vb + 1.02 * 380 * vb**2 + 1, 380, 10, 1.4, "bf16")   # 2 % above 1 pJ/FLOP
    fit = fit_energy([*board(), extra], 2 * GHZ)
    assert 1.0 < fit.j_per_flop_at_boost["bf16"] / PJ < 1.02
    assert 0 < fit.fit.stderr["j_per_flop_bf16"] < 0.05 * PJ and fit.fit.n == 5


def test_without_a_stream_bytes_are_not_charged():
    vb = _v(1.5)
    fit = fit_energy([point("idle", 50.0), point("gemm", 50 * vb + 400 * vb**2, 400, 10, 1.5, "bf16")], 2 * GHZ)
    assert fit.j_per_byte is None and "j_per_byte" not in fit.fit.parameters
    assert fit.j_per_flop_at_boost["bf16"] / PJ == pytest.approx(1.0, rel=1e-9)


def test_without_a_clock_sensor_every_reading_is_at_boost_voltage():
    """A CPU (RAPL, no clock samples): V = 1, e = (P - S) / F: (90 - 30) W / 1.5 TFLOP/s = 40 pJ/FLOP."""
    fit = fit_energy([point("idle", 30.0), point("gemm", 90.0, 1.5, precision="fp32")], None)
    assert fit.j_per_flop_at_boost["fp32"] / PJ == pytest.approx(40, rel=1e-9)


@pytest.mark.parametrize(("points", "match"), [
    ([point("gemm", 100.0, 1.0, precision="fp32")], "no idle"),
    ([point("idle", 30.0), point("stream", 60.0, gbytes=10)], "no GEMM"),
])
def test_what_cannot_be_fitted_says_why(points, match):
    with pytest.raises(EnergyFitError, match=match):
        fit_energy(points, None)


def test_a_schema_1_power_curve_reads_its_idle_triad_and_sustained_windows_only():
    """The GEMM sizes of the old power curve differ in efficiency (model.power): left out."""
    def row(kind, watts, clocks=None):
        return PowerRow(kind=kind, label=kind, avg_power_w=watts, peak_power_w=None, flop_per_s=1e12,
                        bytes_per_s=1e9, duration_s=2.0, n_samples=20, warnings=(), sm_clock_hz=clocks)

    points = points_from_power_rows([row("idle", 100.0), row("gemm", 600.0, (2e9,)), row("bandwidth", 300.0),
                                     row("sustained", 650.0, (1.9e9, 1.95e9, 2e9))], "fp32")
    assert [(p.kind, p.precision, p.power_w) for p in points] == [
        ("idle", None, 100.0), ("stream", None, 300.0), ("gemm", "fp32", 650.0)]
    assert points[-1].sm_clock_hz == 1.95e9 and points[-1].settled is None
