"""Technology table: Horowitz/Jouppi anchors reproduced, monotonic, explicit interpolation."""

from __future__ import annotations

import math

import pytest

from chipcal.model import technology as t
from chipcal.model.precision import PRECISIONS

PJ = 1e-12


def test_horowitz_45nm_anchors_reproduced():
    # Horowitz ISSCC 2014 (issue's list): fp32 3.7+0.9, fp16 1.1+0.4, int8 adder 0.03 pJ; the int8
    # multiplier is measured on a tensor core instead (0.70 pJ, not his 0.2: tests/test_int8_energy.py).
    a = t.ARITHMETIC_45NM
    assert (a["fp32"].mult_pj, a["fp32"].add_pj) == (3.7, 0.9)
    assert (a["fp16"].mult_pj, a["fp16"].add_pj) == (1.1, 0.4)
    assert (a["int8"].mult_pj, a["int8"].add_pj) == (0.7, 0.03)
    # A MAC adds at its accumulator's width: fp32 for fp16 (1.1 + 0.9 = 2.0 pJ), int32 for int8
    # (Horowitz's 32-bit int add, 0.1 pJ: 0.7 + 0.1 = 0.8 pJ).
    assert t.arithmetic_energy_per_mac_j(45, "fp32") / PJ == pytest.approx(4.6, rel=1e-12)
    assert t.arithmetic_energy_per_mac_j(45, "fp16") / PJ == pytest.approx(2.0, rel=1e-12)
    assert t.arithmetic_energy_per_mac_j(45, "int8") / PJ == pytest.approx(0.8, rel=1e-12)


def test_7nm_anchor_and_bf16_cross_check():
    # Jouppi et al. ISCA 2021 Table 2 at 7 nm: fp32 mult 1.31 + add 0.38 = 1.69 pJ.
    assert t.arithmetic_energy_per_mac_j(7, "fp32") / PJ == pytest.approx(1.69, rel=1e-12)
    # The same table gives a bf16 multiply at 0.21 pJ; with its fp32 accumulator add (0.38) a bf16
    # MAC is 0.59 pJ. Our single node-scaling law (fitted on fp32) gives
    # 1.69 x (0.6794 + 0.9) / 4.6 = 0.580 pJ: within 2 % of the independent figure.
    assert t.arithmetic_energy_per_mac_j(7, "bf16") / PJ == pytest.approx(0.21 + 0.38, rel=0.02)
    # And fp16 at 7 nm: 0.34 + 0.38 = 0.72 pJ vs ours 1.69 x 2.0 / 4.6 = 0.735 pJ.
    assert t.arithmetic_energy_per_mac_j(7, "fp16") / PJ == pytest.approx(0.34 + 0.38, rel=0.03)


def test_interpolation_is_the_stated_power_law():
    alpha = math.log(4.6 / 1.69) / math.log(45 / 7)  # = 0.538
    assert t.ALPHA == pytest.approx(alpha)
    # 16 nm: 4.6 * (16/45)^0.538 = 2.637 pJ
    assert t.arithmetic_energy_per_mac_j(16, "fp32") / PJ == pytest.approx(4.6 * (16 / 45) ** alpha, rel=1e-12)
    assert t.is_extrapolated(5) and not t.is_extrapolated(7)


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("circuit", t.CIRCUITS)
def test_smaller_node_means_less_energy(precision, circuit):
    energies = [t.energy_per_mac_j(n, circuit, precision) for n in sorted(t.PROCESS_NODES_NM)]
    assert all(a < b for a, b in zip(energies, energies[1:], strict=False))


@pytest.mark.parametrize("node", t.PROCESS_NODES_NM)
def test_wider_precision_means_more_energy(node):
    # Ordered by multiplier mantissa, then accumulator: bf16 (8-bit mantissa) below fp16 (11-bit).
    # tf32 and fp16 share an 11-bit-mantissa multiplier and the fp32 accumulator: the same MAC.
    order = ["fp64", "fp32", "tf32", "bf16", "fp8", "int8", "int4"]
    energies = [t.energy_per_mac_j(node, "tensor_core", p) for p in order]
    assert all(a > b for a, b in zip(energies, energies[1:], strict=False))
    assert t.energy_per_mac_j(node, "tensor_core", "fp16") == t.energy_per_mac_j(node, "tensor_core", "tf32")


def test_circuit_energy_is_datapath_times_delivery():
    # tensor_core at 45 nm fp32: 4.6 * 0.85 = 3.91 pJ datapath, + 22% delivery = 4.770 pJ
    e = t.mac_energy(45, "tensor_core", "fp32")
    assert e.compute_j / PJ == pytest.approx(3.91, rel=1e-12)
    assert e.delivery_j / PJ == pytest.approx(3.91 * 0.22, rel=1e-12)
    # x86 vs systolic on the same node and precision: (1.0 * 2.5) / (0.8 * 1.1) = 2.84x
    ratio = t.energy_per_mac_j(7, "x86_performance", "bf16") / t.energy_per_mac_j(7, "systolic_mac", "bf16")
    assert ratio == pytest.approx(2.5 / 0.88)


def test_memory_energy_per_byte():
    # DDR4: 1300 pJ per 64-bit access = 20.3 pJ/bit = 162.5 pJ/byte
    assert t.dram_energy_per_byte_j("ddr4") / PJ == pytest.approx(162.5, rel=1e-12)
    # HBM2: midpoint of 250-450 pJ per 64 bits = 350/64 pJ/bit = 43.75 pJ/byte
    assert t.dram_energy_per_byte_j("hbm2") / PJ == pytest.approx(43.75, rel=1e-12)
    for m in t.MEMORY_TABLE.values():
        assert m.low_pj_per_bit <= m.pj_per_bit <= m.high_pj_per_bit, m.name
        assert m.source
    # On-chip is far cheaper than off-chip: 1 MB SRAM at 45 nm = 100 pJ / 8 B = 12.5 pJ/B
    assert t.sram_energy_per_byte_j(45, "l2") / PJ == pytest.approx(12.5, rel=1e-12)
    assert t.sram_energy_per_byte_j(7, "l1") / PJ == pytest.approx(8.5 / 8, rel=1e-12)
    assert t.sram_energy_per_byte_j(7, "l2") < t.dram_energy_per_byte_j("hbm3")


def test_every_constant_has_a_source():
    for op in t.ARITHMETIC_45NM.values():
        assert op.source
    for c in t.CIRCUITS_TABLE.values():
        assert c.source.split(":")[0] in ("derived", "assumed", "hypothetical") or "Dally" in c.source
    assert set(t.ARITHMETIC_45NM) == set(PRECISIONS)


@pytest.mark.parametrize("bad", [0, -7, 2, 90, float("nan")])
def test_bad_process_rejected(bad):
    with pytest.raises(ValueError):
        t.node_scale(bad)


def test_bad_names_rejected():
    with pytest.raises(ValueError, match="valid"):
        t.check_circuit("gpu_core")
    with pytest.raises(ValueError, match="valid"):
        t.dram_energy_per_byte_j("hbm9")
    with pytest.raises(ValueError, match="valid"):
        t.precision_scale("fp12")


def test_mma_reuse_by_hand():
    # m16n8k16: A 16x16 + B 16x8 = 384 operands, C 16x8 read + written = 256, for 2048 MACs
    assert t.mma_reuse(16, 8, 16) == pytest.approx((384 / 2048, 256 / 2048))
    # Volta m8n8k4: (32 + 32) / 256 operands, 2 x 64 / 256 accumulators per MAC
    assert t.mma_reuse(8, 8, 4) == pytest.approx((0.25, 0.5))


def test_uncertain_constants_are_ordered_bands_with_sources():
    bands = [t.NOC_PJ_PER_BIT_MM, t.NOC_DISTANCE_MM, t.DELIVERY_SCALE, t.CLOCK_CONTROL_FRACTION,
             t.STATIC_FRACTION_BAND, t.V_FLOOR, t.V_KNEE, t.ACTIVITY_FLOOR, *t.GEMM_EFFICIENCY.values()]
    for b in bands:
        assert b.low <= b.nominal <= b.high and b.source
    with pytest.raises(ValueError):
        t.Band(1.0, 2.0, 3.0, "nominal below low")
    for r in t.REUSE_TABLE.values():
        assert r.source and r.issue >= 0
    assert set(t.REUSE_TABLE) == set(t.CIRCUITS) == set(t.GEMM_EFFICIENCY)
