"""All-in TDP model: hand-worked energy per MAC, the DVFS solver, verdicts and the evidence fields."""

from __future__ import annotations

import pytest
from synthetic_chip import synthetic_chip

from chipcal.model import power
from chipcal.model.registry import load_registry
from chipcal.model.tdp import (
    VERDICT_OK,
    VERDICT_UNCERTAIN,
    VERDICT_UNSUSTAINABLE,
    compare_chip,
    estimate_tdp,
    static_power_w,
    sweep,
)

PJ = 1e-12


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def test_hand_worked_all_in_energy():
    # 1000 systolic MACs at 1 GHz, 45 nm, fp32, nominal constants (technology.py):
    #   datapath 4.6 pJ x 0.8 = 3.68; issue 10% = 0.368
    #   L1: 2/128 operands x 4 B = 0.0625 B x 20 pJ/8 B = 0.15625
    #   L2: 0.0625 B x 100 pJ/8 B = 0.78125; network: 0.0625 B x 8 bit x 0.1 pJ/bit/mm x 10 mm = 0.5
    #   clock/control: 0.5 x (3.68 + 0.368 + 0.15625 + 0.78125 + 0.5) = 2.74275  -> 8.22825 pJ/MAC
    #   static: 15% of the total -> total = 8.22825 W / 0.85
    e = estimate_tdp(alus=1000, frequency_hz=1e9, process_nm=45, circuit="systolic_mac", precision="fp32")
    assert e.pj_per_mac == pytest.approx(8.22825)
    assert e.compute_w == pytest.approx(3.68 + 0.368)
    assert e.delivery_w == pytest.approx(0.15625 + 0.78125 + 0.5 + 2.74275)
    assert e.tdp_w == pytest.approx(8.22825 / 0.85)
    assert e.static_w == pytest.approx(8.22825 / 0.85 * 0.15)
    assert e.peak_ops_per_s == pytest.approx(2e12)
    assert e.tdp_low_w < e.tdp_w < e.tdp_high_w


def test_memory_power_and_static_override():
    # 100 GB/s of DDR4 at 162.5 pJ/byte = 16.25 W
    e = estimate_tdp(alus=1, frequency_hz=1e9, process_nm=45, circuit="systolic_mac", precision="int8",
                     memory_bandwidth_bytes_per_s=100e9, memory_type="ddr4", static_fraction=0.0)
    assert e.memory_w == pytest.approx(16.25) and e.static_w == 0
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


def test_simd_register_reads_dominate_a_cpu_fma():
    # AVX-512 fp32 FMA at 7 nm: 3 reads + 1 write of 4 B = 16 B from the register file at
    # 7.5 pJ / 8 B = 15 pJ, vs a 1.69 pJ MAC: the operands, not the math, cost the energy.
    m = power.mac_breakdown(7, "x86_performance", "fp32", "ddr5", 1e9)
    assert m.register_file_j == pytest.approx(16 * 7.5 / 8 * PJ)
    assert m.arithmetic_j == pytest.approx(1.69 * PJ)


def _toy(tdp_w: float) -> power.GemmPower:
    # 1000 MACs/clock at 1 GHz = boost = spec, 1 pJ/MAC dynamic, no DRAM, 0.1 W static;
    # V floor 0.5 up to a knee at 0.5 GHz, then V = f / 1 GHz.
    mac = power.MacBreakdown(1 * PJ, 0, 0, 0, 0, 0, 0, 0.0, 0.0)
    k = power.NOMINAL.replace(v_floor=0.5, v_knee=0.5)
    return power.GemmPower("toy", "e", "bf16", 1000, 1e9, 1e9, tdp_w, mac, 0.1, k)


def test_dvfs_clock_solves_power_equals_tdp():
    assert _toy(2.0).sustained_clock_hz == 1e9                    # 1.1 W fits: spec clock
    f = _toy(0.6).sustained_clock_hz / 1e9                        # cubic region: f^3 + 0.1 f = 0.6
    assert f ** 3 + 0.1 * f == pytest.approx(0.6) and 0.5 < f < 1
    assert _toy(0.1).sustained_clock_hz == pytest.approx(0.2e9)   # floor: 0.25 f + 0.05 = 0.1
    assert _toy(0.04).sustained_clock_hz == 0                     # static at the floor (0.05) > TDP
    assert _toy(0.6).sustainable_peak_flop_per_s == pytest.approx(2 * 1000 * f * 1e9)


def test_verdicts():
    # Over-spec: 1e15 bf16 MAC/s at 7 nm. Optimistic end of every band:
    #   datapath 1.69 x (0.954/4.6) x 0.8 = 0.28034; issue 0.02803; L1 0.5 x 2/128 x 2 B x 8.5/8 = 0.01660;
    #   L2 0.5 x 0.03125 B x 14/8 = 0.02734; network 0.03125 B x 8 x 0.04 x 5 mm = 0.05;
    #   clock 0.25 -> 0.40232 x 1.25 = 0.50290 pJ/MAC -> 503 W of core power > 200 W.
    over = compare_chip(synthetic_chip(tdp_w=200, units=1_000_000))
    assert over.low.mac.dynamic_j == pytest.approx(0.50290 * PJ, rel=1e-4)
    assert over.verdict == VERDICT_UNSUSTAINABLE and over.sustainable_fraction < 1
    assert over.max_sustainable_pj_per_mac == pytest.approx(200 / 1e15 / PJ)
    # Consistent: 1e14 MAC/s, pessimistic end: (0.28034 + 0.02803 + 3 x (0.03320 + 0.05469)
    #   + 0.03125 x 8 x 0.2 x 15) x 2 = 2.6441 pJ/MAC -> 264 W + 25% x 400 W static + DRAM
    #   (2 x 2 B / sqrt(2^24 / 6) = 0.002392 B/MAC x 1e14 x 56.25 pJ/B = 13.5 W) = 378 W <= 400 W.
    ok = compare_chip(synthetic_chip(tdp_w=400, units=100_000))
    assert ok.high.mac.dynamic_j == pytest.approx(2.6441 * PJ, rel=1e-4)
    assert ok.power_at_spec_high_w == pytest.approx(264.41 + 100 + 13.46, rel=2e-3)
    assert ok.verdict == VERDICT_OK and ok.sustainable_fraction == 1
    # In between: 1e14 MAC/s in 250 W fits optimistically but not pessimistically.
    mid = compare_chip(synthetic_chip(tdp_w=250, units=100_000, idle_w=10))
    assert static_power_w(mid.chip) == 10
    assert mid.verdict == VERDICT_UNCERTAIN


def test_unsupported_precision_raises():
    with pytest.raises(ValueError, match="does not support"):
        compare_chip(synthetic_chip(tdp_w=100, units=10), "fp8")


def test_registry_h100_is_power_limited_and_carries_evidence(registry):
    c = compare_chip(registry.get("h100-sxm5"), "bf16")
    assert c.spec_peak_flop_per_s == pytest.approx(2 * 528 * 512 * 1.83e9)
    assert c.power_at_spec_low_w < c.power_at_spec_w < c.power_at_spec_high_w
    assert c.power_at_spec_w > 700 and c.sustained_clock_hz < 1.83e9
    assert c.sustainable_peak_flop_per_s == pytest.approx(2 * 528 * 512 * c.sustained_clock_hz)
    # MAMF table (stas00/ml-engineering, 2025 revision): 794.5 TFLOPS bf16 on H100 SXM
    assert c.measured_peak_flop_per_s == pytest.approx(794.5e12) and "ml-engineering" in c.measured_source


def test_t4_spec_peak_needs_more_than_its_70_w(registry):
    # Seed 002 asked whether the T4's 65 TFLOPS fp16 fits in 70 W. The all-in model says no at
    # the nominal constants, and the published ~24 TFLOPS under the power cap agrees.
    c = compare_chip(registry.get("t4"), "fp16")
    assert c.power_at_spec_w > 70 and c.sustainable_fraction < 1
    assert c.measured_peak_flop_per_s == pytest.approx(24e12)


def test_power_mode_lowers_the_clock_on_the_same_voltage_curve(registry):
    # Orin 15 W mode: tensor cores at 408 MHz of their 1300.5 MHz full clock, below the knee
    # (0.5 x 1300.5 MHz), so at the 0.7 voltage floor: dynamic power x 0.49 vs running at V = 1.
    full = compare_chip(registry.get("jetson-agx-orin-64gb"), "bf16").gemm
    low = compare_chip(registry.get("jetson-agx-orin-64gb@15W"), "bf16").gemm
    assert low.boost_clock_hz == full.spec_clock_hz == 1300.5e6
    core = low.components_w(low.spec_clock_hz)
    at_v1 = low.macs_per_clock * 408e6 * low.mac.arithmetic_j
    assert core["arithmetic_w"] == pytest.approx(0.49 * at_v1)
