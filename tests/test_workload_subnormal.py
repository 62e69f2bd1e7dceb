"""Subnormal fp32 operands in a traced network (src/chipcal/model/workload/subnormal.py) and what an Intel core
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


def test_busiest_share_of_contiguous_ranges():
    from chipcal.model.mapping.cpu import busiest_share

    assert busiest_share((0.0, 0.0, 1.0, 1.0), 2) == 1.0          # all of it in the second half
    assert busiest_share((1.0, 1.0, 1.0, 1.0), 2) == 0.5
    assert busiest_share((1.0, 1.0, 1.0), 2) == pytest.approx(2 / 3)   # ranges of ceil(3/2) = 2
    assert busiest_share((5.0,), 2) == 0.5                        # one matrix: split inside it
    assert busiest_share((), 4) == 0.25                           # not located: even


def _stage1_shifted_window_attention():
    """swin_t's stage-1 shifted block at batch 1: 56 x 56 tokens of 96 channels, 7 x 7 windows
    shifted by 3, 3 heads of 32 channels."""
    from torchvision.models.swin_transformer import ShiftedWindowAttention

    block = ShiftedWindowAttention(96, [7, 7], [3, 3], 3).eval()
    return characterize(block, (torch.randn(1, 56, 56, 96),), fuse=False)


def test_swin_shifted_mask_located_by_window(tmp_path):
    # Worked by hand from Swin's mask: of the 8 x 8 windows only the last row and column mix
    # regions. A window of the last column (or row) splits its 7 x 7 tokens 28 | 21, so
    # 2·28·21 = 1176 of its 2401 logit pairs are masked; the corner window splits 16, 12, 12, 9:
    # 2401 - (16² + 12² + 12² + 9²) = 1776. Windows 0-31 hold 4 of the last column's (4704 masked);
    # windows 32-63 hold 3 more, 7 of the last row and the corner: 10·1176 + 1776 = 13536.
    from chipcal.measure import system
    from chipcal.model.mapping import cpu

    w = _stage1_shifted_window_attention()
    softmax, bmm = [sg for sg in w.subgraphs if sg.subnormal_ops]
    masked = 4704 + 13536
    assert softmax.subnormal_ops == pytest.approx(SOFTMAX_ASSISTS * masked * 3)    # 3 heads
    assert bmm.subnormal_ops == pytest.approx(masked * 3 * 32)                     # x 32 value columns
    assert len(bmm.subnormal_split) == 64 * 3 and sum(bmm.subnormal_split) == pytest.approx(bmm.subnormal_ops)
    share = 13536 / masked                                                         # 0.742
    assert cpu.busiest_share(bmm.subnormal_split, 2) == pytest.approx(share)
    assert cpu.busiest_share(softmax.subnormal_split, 2) == pytest.approx(share)
    proc, sys_ = machine_tree(tmp_path, "intel-xeon-spr-2vcpu-20261126")
    intel = system.local_chip(cpu=system.detect_cpu(proc, sys_, arch="x86_64"))
    # the busier of two cores: its share of the assisted 16-lane FMAs, 92 cycles each
    assert cpu.assist_cycles(bmm, intel, "fp32", 2) == pytest.approx(masked * 3 * 32 * share / 16 * 92)
