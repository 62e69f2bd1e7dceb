"""Local sustained-GEMM fit: all-in pJ/FLOP, static power, sustained clock, spec_beyond_tdp (fakes)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from chipcal.calibrate.sustain import GemmObservation, SustainFitError, fit_sustain
from chipcal.model import power

GHZ = 1e9


def _obs(tflops: float, watts: float, clocks_ghz, sustained=False, precision="bf16"):
    # flop per call x 100 calls per second = tflops
    return GemmObservation(precision, tflops * 1e12 * 0.01, 0.01, (watts - 1, watts, watts + 1),
                           tuple(c * GHZ for c in clocks_ghz), sustained)


def _v(f_ghz: float) -> float:
    """The shipped voltage curve (fitted v0, knee) for a 2 GHz boost: v0 up to knee x 2 GHz, then
    linear to 1 at 2 GHz."""
    k = tomllib.loads(Path(power.__file__).with_name("fitted_constants.toml").read_text())["values"]
    knee = k["v_knee"] * 2.0
    return k["v_floor"] if f_ghz <= knee else k["v_floor"] + (1 - k["v_floor"]) * (f_ghz - knee) / (2.0 - knee)


def _sweep():
    # Hand-made chip: 1 pJ/FLOP at boost voltage, 50 W static, boost 2 GHz:
    #   100 TFLOP/s at 2.0 GHz (V = 1):      50 + 100            = 150 W
    #   200 TFLOP/s at 2.0 GHz (V = 1):      50 + 200            = 250 W
    #   400 TFLOP/s at 1.5 GHz:              50 + 400 x V(1.5)^2       (the sustained run)
    return [_obs(100, 150, [2.0] * 3), _obs(200, 250, [2.0] * 3),
            _obs(400, 50 + 400 * _v(1.5) ** 2, [1.6, 1.5, 1.4], sustained=True)]


def test_fit_recovers_energy_static_and_sustained_clock():
    f = fit_sustain(_sweep(), boost_clock_hz=2 * GHZ, spec_flop_per_s=600e12, spec_clock_hz=2 * GHZ, tdp_w=400)
    assert f.j_per_flop_at_boost == pytest.approx(1e-12, rel=1e-9)
    assert f.static_w == pytest.approx(50, abs=1e-6)
    assert f.rms_residual_w == pytest.approx(0, abs=1e-6)
    assert f.sustained_clock_hz == 1.5 * GHZ and f.clock_fraction == pytest.approx(0.75)
    assert f.sustained_flop_per_s == pytest.approx(400e12)
    # spec 600 TFLOP/s at the 2 GHz boost: 50 + 600 = 650 W > 400 W
    assert f.power_at_spec_w == pytest.approx(650)
    flag = f.spec_beyond_tdp()
    assert flag.code == "spec_beyond_tdp"
    assert flag.values["power_at_spec_w"] == pytest.approx(650) and flag.values["tdp_w"] == 400
    assert flag.values["clock_fraction"] == pytest.approx(0.75)
    assert "1.5 GHz" in flag.message and "75%" in flag.message


def test_spec_inside_tdp_stays_quiet():
    f = fit_sustain(_sweep(), boost_clock_hz=2 * GHZ, spec_flop_per_s=600e12, spec_clock_hz=2 * GHZ, tdp_w=700)
    assert f.spec_beyond_tdp() is None
    assert fit_sustain(_sweep(), boost_clock_hz=2 * GHZ).spec_beyond_tdp() is None   # no spec: nothing to say


def test_without_a_marked_run_the_fastest_is_the_sustained_one():
    obs = [_obs(100, 150, [2.0]), _obs(400, 50 + 400 * _v(1.5) ** 2, [1.5])]
    f = fit_sustain(obs, boost_clock_hz=2 * GHZ)
    assert f.sustained_clock_hz == 1.5 * GHZ and f.n == 2


@pytest.mark.parametrize("obs,match", [
    ([_obs(100, 150, [2.0])], "at least 2"),
    ([_obs(100, 150, [2.0]), _obs(100, 150, [2.0], precision="fp16")], "one precision"),
    ([_obs(100, 150, [2.0]), _obs(101, 151, [2.0])], "too narrow"),
])
def test_bad_input_raises(obs, match):
    with pytest.raises(SustainFitError, match=match):
        fit_sustain(obs, boost_clock_hz=2 * GHZ)
