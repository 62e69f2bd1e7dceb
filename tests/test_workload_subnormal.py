"""Subnormal fp32 operands in a traced network (model/workload/subnormal.py) and what an Intel core
pays for them (mapping/cpu.assist_cycles): counts worked out by hand on a masked attention."""

from __future__ import annotations

import math

import pytest
import torch
from recorded import machine_tree

from chipcal.model.workload import characterize
from chipcal.model.workload.subnormal import (
    ELEMENTWISE_ASSISTS,
    SOFTMAX_ASSISTS,
    exp_subnormal_fraction,
)


class MaskedAttention(torch.nn.Module):
    """softmax(logits + mask) @ v, the mask built in forward from slices of a zero tensor as Swin
    builds its shifted-window mask: the last `masked` of 8 key columns get `fill`."""

    def __init__(self, fill: float, masked: int = 4):
        super().__init__()
        self.fill, self.masked = fill, masked

    def forward(self, logits, v):           # (1, 4, 8), (1, 8, 16)
        mask = logits.new_zeros((4, 8))
        mask[:, 8 - self.masked:] = 1.0
        mask = mask.masked_fill(mask != 0, self.fill)
        return torch.bmm(torch.softmax(logits + mask, dim=-1), v)


def _ops(fill: float, masked: int = 4) -> float:
    inputs = (torch.randn(1, 4, 8), torch.randn(1, 8, 16))
    w = characterize(MaskedAttention(fill, masked), inputs, fuse=False)
    return sum(sg.subnormal_ops for sg in w.subgraphs)


def test_exp_subnormal_range():
    # exp(c) is subnormal in fp32 for ln(2^-149) = -103.28 <= c < ln(2^-126) = -87.34
    values = torch.tensor([-200.0, -103.0, -100.0, -88.0, -87.0, 0.0, -math.inf])
    assert exp_subnormal_fraction(values) == pytest.approx(3 / 7)


def test_a_minus_100_mask_makes_softmax_and_the_next_matmul_take_subnormals():
    # half the 32 logits masked: 16 subnormal softmax outputs, SOFTMAX_ASSISTS each; the bmm
    # multiplies each of them by the 16 columns of v: 16 x 16
    assert _ops(-100.0) == pytest.approx(SOFTMAX_ASSISTS * 16 + 16 * 16)
    assert _ops(-100.0, masked=2) == pytest.approx(SOFTMAX_ASSISTS * 8 + 8 * 16)
    assert SOFTMAX_ASSISTS == 5 and ELEMENTWISE_ASSISTS == 2     # measured ratios, module docstring


@pytest.mark.parametrize("fill", [-math.inf, -1e4, -10.0])
def test_masks_that_give_zeros_or_normals_cost_nothing(fill):
    # exp(-inf) and exp(-1e4) are exact zeros, exp(-10) is normal: no subnormal anywhere
    assert _ops(fill) == 0.0


def test_an_intel_core_pays_assists_and_an_amd_core_does_not(tmp_path):
    from chipcal.measure import system
    from chipcal.model.mapping import cpu

    w = characterize(MaskedAttention(-100.0), (torch.randn(1, 4, 8), torch.randn(1, 8, 16)), fuse=False)
    (bmm,) = [sg for sg in w.subgraphs if sg.gemm is not None and sg.subnormal_ops]
    chips = {}
    for name in ("intel-xeon-spr-2vcpu-20261126", "amd-epyc-zen4-2vcpu"):
        proc, sys_ = machine_tree(tmp_path, name)
        chips[name] = system.local_chip(cpu=system.detect_cpu(proc, sys_, arch="x86_64"))
    intel, amd = chips.values()
    # 256 subnormal multiplies / 16 fp32 lanes x 92 cycles, on one busy core
    assert cpu.assist_cycles(bmm, intel, "fp32", 1) == pytest.approx(256 / 16 * 92)
    assert cpu.assist_cycles(bmm, intel, "fp32", 2) == pytest.approx(256 / 16 * 92 / 2)
    assert cpu.assist_cycles(bmm, amd, "fp32", 1) == 0.0
    assert cpu.assist_cycles(bmm, intel, "fp16", 1) == 0.0       # counted on fp32 values only
