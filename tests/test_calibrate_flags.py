"""Gap flags trip on a synthetic over-spec chip and stay quiet on a consistent one."""

from __future__ import annotations

import pytest
from synthetic_chip import synthetic_chip

from chipcal.calibrate import flags
from chipcal.calibrate.power_records import PrecisionEnergy
from chipcal.model.tdp import compare_chip


def held(precision: str, j_per_flop: float, spec: float | None, tdp_w: float) -> PrecisionEnergy:
    """A precision that sustained 0.8e15 FLOP/s (40 % of a 2e15 spec), read without a clock sensor."""
    return PrecisionEnergy(
        precision=precision, engine="x", source="hold", settled=True, sustained_flop_per_s=0.8e15,
        burst_flop_per_s=None, sustained_power_w=tdp_w, sustained_clock_hz=None, boost_clock_hz=None,
        clock_events=(), spec_flop_per_s=spec, spec_clock_hz=None, tdp_w=tdp_w, bytes_per_flop=0.0,
        j_per_flop_at_boost=j_per_flop, j_per_flop_sustained=j_per_flop, j_per_flop_at_spec_clock=None,
        physics_j_per_flop_at_spec=None, power_at_spec_w=None)


def test_over_spec_chip_trips_every_flag():
    # 1e15 MAC/s at ~0.31 pJ/MAC = 308 W of compute in a 200 W TDP.
    chip = synthetic_chip(tdp_w=200, units=1_000_000)
    f = flags.spec_unsustainable(compare_chip(chip))
    spec = chip.stated_peak_flop_per_s["bf16"]  # 2e15
    # even the optimistic end of the band is above the 200 W TDP (the datapath alone is ~308 W), so
    # the clock is power-limited and the sustainable peak is below spec
    assert f is not None and f.values["tdp_w"] == 200 and f.values["power_at_spec_low_w"] > 200
    assert f.values["sustainable_peak_flop_per_s"] < spec
    assert flags.measured_below_spec("bf16", 0.5 * spec, spec).values["fraction"] == pytest.approx(0.5)
    # measured 0.2 pJ/FLOP at the sustained point * 2e15 FLOP/s = 400 W + 20 W idle > 200 W
    e = flags.energy_exceeds_tdp(held("bf16", 0.2e-12, spec, chip.tdp_w), idle_w=20)
    assert e.values["needed_w"] == pytest.approx(420) and e.message.startswith("bf16:")
    assert e.values["sustained_fraction_of_spec"] == pytest.approx(0.4) and "40% of spec" in e.message
    s = flags.sag("SM clock", [1980e6] * 10 + [1600e6] * 10, "Hz")
    assert s is not None and s.values["drop_fraction"] == pytest.approx((1980 - 1600) / 1980)
    assert flags.measured_below_physics("fp32", 1e11, 3e11).values["fraction"] == pytest.approx(1 / 3)
    # the Zen 4 VM's fp32 GEMM: 199.5 GFLOP/s against 2 cores x 32 FLOP/clock x 2.6 GHz (the TSC
    # rate) = 166.4 GFLOP/s: the cores ran at >= 2.6 x 199.5 / 166.4 = 3.117 GHz
    above = flags.measured_above_physics("fp32", 199.5e9, 2 * 32 * 2.6e9, 2.6e9)
    assert above.values["implied_clock_hz"] == pytest.approx(3.117e9, rel=1e-3) and "3.12 GHz" in above.message


def test_consistent_chip_stays_quiet():
    chip = synthetic_chip(tdp_w=400, units=100_000)   # 31 W compute in 400 W
    spec = chip.stated_peak_flop_per_s["bf16"]
    assert flags.spec_unsustainable(compare_chip(chip)) is None
    assert flags.measured_below_spec("bf16", 0.9 * spec, spec) is None
    assert flags.measured_below_spec("bf16", 0.1 * spec, None) is None       # no spec: nothing to say
    assert flags.energy_exceeds_tdp(held("bf16", 0.1e-12, spec, chip.tdp_w), idle_w=40) is None  # 200 + 40 < 400 W
    assert flags.energy_exceeds_tdp(held("bf16", 1e-12, None, chip.tdp_w), idle_w=40) is None   # no spec
    assert flags.sag("SM clock", [1980e6] * 20, "Hz") is None
    assert flags.sag("SM clock", [1980e6] * 3, "Hz") is None                  # too few samples
    assert flags.measured_below_physics("fp32", 2.5e11, 3e11) is None
    assert flags.measured_above_physics("fp32", 3.1e11, 3e11, 2.6e9) is None   # 3% over: timing noise
    assert flags.measured_above_physics("fp32", 4e11, None, 2.6e9) is None     # no derived peak
    assert flags.unstable_timing("gemm", 0.02, 0.1) is None


def test_flags_serialise():
    f = flags.unstable_timing("gemm", 0.3, 0.1)
    assert f.to_dict()["code"] == "unstable_timing" and f.severity == "info"
