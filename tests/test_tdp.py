"""TDP model: hand-worked values, linearity, sensitivity and verdicts on synthetic chips."""

from __future__ import annotations

import pytest
from synthetic_chip import synthetic_chip

from chipcal.model.tdp import (
    VERDICT_OK,
    VERDICT_TIGHT,
    VERDICT_UNSUSTAINABLE,
    compare_chip,
    estimate_tdp,
    static_power_w,
    sweep,
)

PJ = 1e-12


def test_hand_worked_estimate():
    # 1000 systolic MACs at 1 GHz, 45 nm, fp32:
    #   datapath 4.6 pJ * 0.8 = 3.68 pJ -> 1e12 MAC/s * 3.68 pJ = 3.68 W
    #   delivery 10% of that          = 0.368 W
    #   static is 10% of the total    -> 4.048 / 0.9 * 0.1 = 0.4498 W; total 4.4978 W
    e = estimate_tdp(alus=1000, frequency_hz=1e9, process_nm=45, circuit="systolic_mac", precision="fp32")
    assert e.compute_w == pytest.approx(3.68)
    assert e.delivery_w == pytest.approx(0.368)
    assert e.static_w == pytest.approx(4.048 / 0.9 * 0.1)
    assert e.tdp_w == pytest.approx(4.048 / 0.9)
    assert e.pj_per_mac == pytest.approx(4.048)
    assert e.peak_ops_per_s == pytest.approx(2e12)  # 2 ops per MAC
    assert e.ops_per_w == pytest.approx(2e12 / (4.048 / 0.9))


def test_memory_power():
    # 100 GB/s of DDR4 at 162.5 pJ/byte = 16.25 W
    e = estimate_tdp(alus=1, frequency_hz=1e9, process_nm=45, circuit="systolic_mac", precision="int8",
                     memory_bandwidth_bytes_per_s=100e9, memory_type="ddr4", static_fraction=0.0)
    assert e.memory_w == pytest.approx(16.25)
    with pytest.raises(ValueError):
        estimate_tdp(alus=1, frequency_hz=1e9, process_nm=45, circuit="systolic_mac", precision="int8",
                     memory_bandwidth_bytes_per_s=1e9)


def test_linear_in_alus_and_clock():
    base = dict(alus=4096, frequency_hz=1.5e9, process_nm=7, circuit="tensor_core", precision="fp16")
    one = estimate_tdp(**base).tdp_w
    assert estimate_tdp(**{**base, "alus": 3 * 4096}).tdp_w == pytest.approx(3 * one)
    assert estimate_tdp(**{**base, "frequency_hz": 0.5e9}).tdp_w == pytest.approx(one / 3)


def test_sweeps_cover_values():
    rows = sweep("process_nm", [28, 7, 4], alus=100, frequency_hz=1e9, circuit="cuda_core", precision="fp32")
    assert [r.process_nm for r in rows] == [28, 7, 4]
    assert rows[0].tdp_w > rows[1].tdp_w > rows[2].tdp_w


def test_verdicts_and_sensitivity():
    # bf16 systolic MAC at 7 nm: 1.69 pJ * (0.954/4.6) * 0.8 * 1.1 = 0.3084 pJ.
    e_mac = 1.69 * (0.9538235294117647 / 4.6) * 0.8 * 1.1 * PJ
    # Memory: HBM2 1 TB/s * 43.75 pJ/B = 43.75 W.
    # Over-spec chip: 1e15 MAC/s -> 308 W of compute, TDP 200 W -> compute alone exceeds it.
    over = compare_chip(synthetic_chip(tdp_w=200, units=1_000_000))
    assert over.compute_w == pytest.approx(1e15 * e_mac, rel=1e-3)
    assert over.verdict == VERDICT_UNSUSTAINABLE
    assert over.max_sustainable_pj_per_mac == pytest.approx(200 / 1e15 / PJ)  # 0.2 pJ/MAC
    assert over.margin < 1
    # Consistent chip: 1e14 MAC/s -> 30.8 W + 43.75 W + 10% of 400 W static -> fits in 400 W.
    ok = compare_chip(synthetic_chip(tdp_w=400, units=100_000))
    assert ok.memory_w == pytest.approx(43.75)
    assert ok.static_w == pytest.approx(40.0)
    assert ok.estimated_tdp_w == pytest.approx(1e14 * e_mac + 43.75 + 40, rel=1e-3)
    assert ok.verdict == VERDICT_OK and ok.margin > 1
    # Tight: compute + static fit, adding full-bandwidth memory does not.
    # units 200_000 -> 61.7 W compute, idle 10 W, memory 43.75 W, TDP 100 W.
    tight = compare_chip(synthetic_chip(tdp_w=100, units=200_000, idle_w=10))
    assert static_power_w(tight.chip) == 10
    assert tight.verdict == VERDICT_TIGHT


def test_unsupported_precision_raises():
    with pytest.raises(ValueError, match="does not support"):
        compare_chip(synthetic_chip(tdp_w=100, units=10), "fp8")
