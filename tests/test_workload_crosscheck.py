"""Our MACs against fvcore (MACs) and FlopCounterMode (2 FLOP per MAC), family by family."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from chipcal.model.workload import build_model, default_input_size
from chipcal.model.workload.crosscheck import crosscheck

# fvcore is the optional `crosscheck` extra (in `dev`): without it there is nothing to compare with
pytest.importorskip("fvcore", reason="the cross-check needs fvcore (pip install 'chipcal[crosscheck]')")


def checks(name: str) -> dict:
    model = build_model(name)
    x = torch.randn(1, *default_input_size(name))
    return {row.family: row for row in crosscheck(model, x)}


@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_convnets_agree_to_the_mac(name):
    rows = checks(name)
    for family in ("conv", "matmul", "attention"):
        row = rows[family]
        assert row.ours_macs == row.fvcore == row.flopcounter_macs, family
        assert row.fvcore_agrees and row.flopcounter_agrees and not row.note
    assert rows["conv"].ours_macs > 0 and rows["matmul"].ours_macs > 0
    assert rows["norm"].fvcore_agrees is None        # different FLOP conventions: side by side


def test_vit_b_16_differences_are_the_skipped_attention():
    rows = checks("vit_b_16")
    # fvcore: conv and every linear (QKV and out projections included) match; it has no handle
    # for scaled_dot_product_attention, so Q.K^T and P.V are missing: 12 * 2 * 29,805,312 MACs
    assert rows["conv"].fvcore == rows["conv"].ours_macs == 115_605_504
    assert rows["matmul"].fvcore == rows["matmul"].ours_macs == 16_732_895_232
    assert rows["attention"].fvcore == 0
    assert rows["attention"].fvcore_skipped_macs == rows["attention"].ours_macs == 715_327_488
    # FlopCounterMode under no_grad: nn.MultiheadAttention takes its fused fast path, which it
    # does not count: the QKV and out projections, 12 * (348,585,984 + 116,195,328), and the
    # attention core are missing
    assert rows["matmul"].flopcounter_skipped_macs == 12 * (348_585_984 + 116_195_328) == 5_577_375_744
    assert rows["matmul"].flopcounter_macs == 16_732_895_232 - 5_577_375_744
    assert rows["attention"].flopcounter_macs == 0
    for family in ("conv", "matmul", "attention"):
        assert rows[family].fvcore_agrees and rows[family].flopcounter_agrees, family
    assert "scaled_dot_product_attention" in rows["attention"].note
    assert "_native_multi_head_attention" in rows["matmul"].note


def test_vit_b_16_flopcounter_with_grad_counts_everything_it_has_formulas_for():
    # with grad enabled nn.MultiheadAttention leaves its fast path: FlopCounterMode sees addmm and
    # the CPU SDPA kernel. It counts every projection (16,732,895,232 MACs, hand-derived in
    # test_vit_b_16_differences_are_the_skipped_attention); the attention core (715,327,488 MACs)
    # is counted where this torch's flop_registry has a formula for the SDPA kernel the CPU runs
    rows = {r.family: r for r in crosscheck(build_model("vit_b_16"), torch.randn(1, 3, 224, 224), grad=True)}
    assert rows["matmul"].flopcounter_macs == 16_732_895_232 and rows["matmul"].flopcounter_skipped_macs == 0
    attention = rows["attention"]
    assert attention.flopcounter_macs + attention.flopcounter_skipped_macs == 715_327_488
    assert attention.flopcounter_skipped_macs in (0, 715_327_488)
    assert attention.flopcounter_agrees
    if attention.flopcounter_skipped_macs:
        assert "FlopCounterMode has no formula" in attention.note


def test_sdpa_counted_by_flopcounter_not_by_fvcore():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.qkv = nn.Linear(16, 48)

        def forward(self, x):
            q, k, v = self.qkv(x).view(2, 6, 3, 4, 4).permute(2, 0, 3, 1, 4)
            return F.scaled_dot_product_attention(q, k, v)

    rows = {r.family: r for r in crosscheck(Block().eval(), torch.randn(2, 6, 16))}
    # attention: B = 2*4 heads, L = S = 6, E = 4: 8*6*6*4 * 2 = 2,304 MACs
    attention = rows["attention"]
    assert attention.ours_macs == 2_304
    # FlopCounterMode counts it unless its registry lacks the SDPA kernel this CPU dispatched
    assert attention.flopcounter_macs + attention.flopcounter_skipped_macs == 2_304
    assert attention.fvcore == 0 and attention.fvcore_skipped_macs == 2_304
    assert attention.fvcore_agrees and attention.flopcounter_agrees
    # qkv: 12 rows * 16 * 48 = 9,216
    assert rows["matmul"].ours_macs == rows["matmul"].fvcore == rows["matmul"].flopcounter_macs == 9_216


@pytest.mark.slow
@pytest.mark.parametrize("name", [
    "alexnet", "googlenet", "inception_v3", "shufflenet_v2_x1_0", "regnet_y_400mf", "efficientnet_b0",
    "mobilenet_v3_large", "squeezenet1_0", "convnext_tiny", "swin_v2_t", "maxvit_t",
])
def test_architectures_agree_with_both_references(name):
    rows = checks(name)
    for family in ("conv", "matmul", "attention"):
        row = rows[family]
        assert row.flopcounter_agrees, (family, row)
        if name == "maxvit_t" and family == "matmul":
            # fvcore's einsum figures come from numpy's 4-significant-digit report
            assert row.fvcore == pytest.approx(row.ours_macs, rel=1e-5) and "einsum" in row.note
        else:
            assert row.fvcore_agrees, (family, row)
