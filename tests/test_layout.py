"""Layout passes around CPU convolutions: counting them in a recorded oneDNN trace, the probe on
this machine, and the bytes the roofline charges for them, by hand."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from chipcal.calibrate.document import LayoutSection
from chipcal.measure.layout import IN_DIMS, OUT_DIMS, conv_layout_passes, passes_in_trace
from chipcal.model.estimate.roofline import with_layout_passes
from chipcal.model.mapping.base import Allocation
from chipcal.model.mapping.params import FamilyParams, default_params

# ONEDNN_VERBOSE of one call of Conv2d(32, 48, 3, padding=1) on a 2x32x20x20 NCHW input, torch 2.15,
# Zen 4 (AVX-512), 2026-11-24: input reorder, weight reorder, convolution, output reorder
ZEN4_TRACE = """\
onednn_verbose,v1,info,oneDNN v3.13.3 (commit b38f97eb6f2173513112f15a0481750b8a66e901)
onednn_verbose,v1,primitive,exec,cpu,reorder,jit:blk,undef,src:f32::blocked:abcd::f0 dst:f32::blocked:aBcd16b::f0,attr-scratchpad:user,,2x32x20x20,7.58594
onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32::blocked:abcd::f0 dst:f32::blocked:ABcd16b16a::f0,attr-scratchpad:user,,48x32x3x3,7.85693
onednn_verbose,v1,primitive,exec,cpu,convolution,jit:avx512_core,forward_training,src:f32:a:blocked:aBcd16b::f0 wei:f32:a:blocked:ABcd16b16a::f0 bia:f32:a:blocked:a::f0 dst:f32:a:blocked:aBcd16b::f0,attr-scratchpad:user,alg:convolution_direct,mb2_ic32oc48_ih20oh20kh3sh1dh0ph1_iw20ow20kw3sw1dw0pw1,8.03491
onednn_verbose,v1,primitive,exec,cpu,reorder,jit:blk,undef,src:f32::blocked:aBcd16b::f0 dst:f32::blocked:abcd::f0,attr-scratchpad:user,,2x48x20x20,7.83911
"""


def test_passes_in_a_recorded_trace():
    assert (IN_DIMS, OUT_DIMS) == ("2x32x20x20", "2x48x20x20")
    # one input reorder + one output reorder = 2 reorders / 2 = 1 pass; the weight reorder is not one
    assert passes_in_trace(ZEN4_TRACE) == 1.0
    only_input = "\n".join(line for line in ZEN4_TRACE.splitlines() if "2x48x20x20" not in line)
    assert passes_in_trace(only_input) == 0.5
    # channels-last tensors go straight to the kernel: only the convolution line remains
    assert passes_in_trace("\n".join(line for line in ZEN4_TRACE.splitlines() if ",reorder," not in line)) == 0.0


def test_probe_counts_this_machine_and_none_without_onednn():
    import torch

    found = conv_layout_passes()
    assert found.passes in (0.0, 0.5, 1.0)
    assert "trace" in found.detail or "without oneDNN" in found.detail
    with torch.backends.mkldnn.flags(enabled=False):
        off = conv_layout_passes()
    assert off.passes == 0.0 and "without oneDNN" in off.detail


def _alloc(dram: float, onchip: float, on_chip: bool) -> Allocation:
    return Allocation(family="cpu", engine="e", circuit="c", compute_precision="fp32", peak_flop_per_s=1e12,
                      unit_name="core", units_total=2, units_allocated=2, waves=1, utilization=1.0, lane_fill=1.0,
                      occupancy=None, dram_bytes=dram, onchip_bytes=onchip, activations_on_chip=on_chip, detail="")


def test_layout_bytes_by_hand():
    params = dataclasses.replace(default_params("cpu"), layout_passes=1.0)
    conv = SimpleNamespace(op_class="depthwise", input_bytes=4e6, output_bytes=1e6)
    # one pass over the input (read 4 MB, write 4 MB) and one over the output (read 1 MB, write 1 MB): 10 MB,
    # at fp32 traced in fp32 (scale 1); in DRAM when the activations do not stay on chip
    moved = with_layout_passes(_alloc(6e6, 6e6, False), conv, 1.0, params)
    assert (moved.dram_bytes, moved.onchip_bytes) == (pytest.approx(16e6), pytest.approx(16e6))
    resident = with_layout_passes(_alloc(1e6, 6e6, True), conv, 1.0, params)
    assert (resident.dram_bytes, resident.onchip_bytes) == (1e6, pytest.approx(16e6))
    # bf16 from an fp32 trace: half the bytes, 5 MB
    assert with_layout_passes(_alloc(0, 0, False), conv, 0.5, params).dram_bytes == pytest.approx(5e6)
    # not a convolution, or no passes counted: nothing added
    norm = SimpleNamespace(op_class="norm", input_bytes=4e6, output_bytes=4e6)
    assert with_layout_passes(_alloc(8e6, 8e6, False), norm, 1.0, params).dram_bytes == 8e6
    assert with_layout_passes(_alloc(6e6, 6e6, False), conv, 1.0, default_params("cpu")).dram_bytes == 6e6


def test_layout_passes_round_trip_and_are_charged_by_the_document():
    section = LayoutSection(passes=1.0, detail="recorded")
    params = section.charged_in(default_params("cpu"))
    assert params.layout_passes == 1.0
    assert FamilyParams.from_dict(params.to_dict()).layout_passes == 1.0
    assert default_params("cpu").layout_passes == 0.0       # not counted: not charged
