"""fp4 (NVFP4 on Blackwell, MXFP4 on CDNA 4) against the formats' specifications and the
vendors' datasheets."""

from __future__ import annotations

import math

import pytest

from chipcal.model.precision import BYTES_PER_ELEMENT, PRECISIONS
from chipcal.model.registry import load_registry
from chipcal.model.technology import ARITHMETIC_45NM, mac_45nm_pj


def test_fp4_stores_a_block_scale_beside_its_half_byte():
    # NVFP4: E2M1 values (4 bits) in blocks of 16 sharing one E4M3 scale (8 bits): 72 bits / 16
    assert BYTES_PER_ELEMENT["fp4"] == 72 / 8 / 16
    assert PRECISIONS.index("fp8") < PRECISIONS.index("fp4") < PRECISIONS.index("int8")     # the brief's order


def test_fp4_peaks_are_the_datasheets_dense_figures():
    registry = load_registry()
    # NVIDIA HGX B200 / GB200 NVL72 specifications: FP4 Tensor Core 18 and 20 PFLOPS per GPU with
    # sparsity, halved for dense; AMD CDNA 4 white paper: MI355X MXFP4 10 PFLOPS dense
    # (16,384 FLOPs per clock per CU x 256 CUs x 2.4 GHz = 10.07e15)
    assert registry.get("b200").peak_flop_per_s("fp4") == pytest.approx(18e15 / 2, rel=1e-3)
    assert registry.get("gb200").peak_flop_per_s("fp4") == pytest.approx(20e15 / 2, rel=1e-3)
    assert registry.get("mi355x").peak_flop_per_s("fp4") == pytest.approx(16384 * 256 * 2.4e9, rel=1e-6)
    assert not registry.get("h200-sxm").supports("fp4")          # Hopper has no fp4 tensor core


def test_an_fp4_mac_costs_a_two_bit_multiplier_and_an_fp32_add():
    # Horowitz's fp16 multiplier (1.1 pJ, 11-bit mantissa) at a 2-bit mantissa by the power law
    # through his fp16 and fp32 multipliers (3.7 pJ at 24 bits), plus his fp32 adder (0.9 pJ)
    exponent = math.log(3.7 / 1.1) / math.log(24 / 11)           # 1.555
    multiplier = 1.1 * (2 / 11) ** exponent
    assert ARITHMETIC_45NM["fp4"].mult_pj == pytest.approx(multiplier, rel=1e-3)
    assert mac_45nm_pj("fp4") == pytest.approx(multiplier + 0.9, rel=1e-3)
    assert mac_45nm_pj("fp4") < mac_45nm_pj("fp8") < mac_45nm_pj("fp16")


@pytest.mark.slow
def test_llama2_70b_weights_at_fp4(source):
    pytest.importorskip("transformers")
    from chipcal.model.estimate.llm import predict_llm
    from chipcal.model.workload.llm_config import load_llm_config, step_key

    config = load_llm_config("llama-2-70b")
    steps = [source.llm_step(step_key(config, "compiled", p, 1, 128, 64, "fp4")) for p in ("prefill", "decode")]
    p = predict_llm(config, *steps, load_registry().get("b200"), "fp4", "compiled", 128, 64)
    # Llama-2-70B's 68,976,648,192 parameters (its config: 80 layers, 8,192 wide, 28,672 MLP,
    # 32,000 vocabulary, untied head) at 9 bytes per 16
    assert p.weight_bytes == pytest.approx(68_976_648_192 * 9 / 16, rel=1e-3)
    assert p.kv_bytes_per_token == pytest.approx(2 * 80 * 8 * 128 * 9 / 16)
