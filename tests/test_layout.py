"""Layout passes around CPU convolutions: counting them in a recorded oneDNN trace, the probe on
this machine, and the bytes the roofline charges for them, by hand."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from chipcal.calibrate.document import LayoutSection
from chipcal.measure.layout import IN_DIMS, OUT_DIMS, conv_layout_passes, passes_in_trace
from chipcal.model.mapping.base import traffic
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
    # oneDNN 2.x-style lines (no "v1,primitive"): the same count
    assert passes_in_trace(ZEN4_TRACE.replace(",v1,primitive,exec,", ",exec,")) == 1.0
    only_input = "\n".join(line for line in ZEN4_TRACE.splitlines() if "2x48x20x20" not in line)
    assert passes_in_trace(only_input) == 0.5
    # channels-last tensors go straight to the kernel: only the convolution line remains
    assert passes_in_trace("\n".join(line for line in ZEN4_TRACE.splitlines() if ",reorder," not in line)) == 0.0


@pytest.mark.timing
# torch.backends.mkldnn.flags() also sets oneDNN's TF32 switch, which warns on builds without Intel GPU support
@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN:UserWarning")
def test_probe_counts_this_machine_and_none_without_onednn():
    import torch

    found = conv_layout_passes()
    assert found.passes in (0.0, 0.5, 1.0)
    assert "trace" in found.detail or "without oneDNN" in found.detail   # counted, or said why not
    with torch.backends.mkldnn.flags(enabled=False):
        off = conv_layout_passes()
    assert off.passes == 0.0 and "without oneDNN" in off.detail


def test_no_trace_is_said_and_not_charged(monkeypatch):
    """A torch whose oneDNN prints nothing: passes unknown, none charged, and the detail says so."""
    import torch

    from chipcal.measure import layout

    if not torch.backends.mkldnn.is_available():
        pytest.skip("torch without oneDNN: the probe never asks for a trace")
    monkeypatch.setattr(layout, "_stdout_of", lambda call, context: "")
    found = layout.conv_layout_passes()
    assert found.passes == 0.0 and "no trace" in found.detail
    assert found.weight_bytes_per_s is None and found.pointwise_weight_bytes_per_s is None


def _subgraph(op_class: str, input_bytes: float, output_bytes: float, reread: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(op_class=op_class, input_bytes=input_bytes, weight_bytes=1e5, output_bytes=output_bytes,
                           depends_on=(0,), gemm=None, macs=0, onchip_reread_bytes=reread)


def test_rereads_pass_the_on_chip_level_and_not_dram():
    """An attention kernel reading 40 MB of KV cache from DRAM and 120 MB more again from the L2
    (three more beams of one prompt): 40.1 MB of DRAM (with 0.1 MB of weights, 1 MB out), 161.1 MB
    on chip; in fp8 from a bf16 trace, every byte halves."""
    attention = _subgraph("attention", 40e6, 1e6, reread=120e6)
    moved = traffic(attention, 1.0, 6e6, 6e6, "bf16", False)
    assert (moved.dram_bytes, moved.onchip_bytes) == (pytest.approx(41.1e6), pytest.approx(161.1e6))
    half = traffic(attention, 0.5, 6e6, 6e6, "fp8", False)
    assert (half.dram_bytes, half.onchip_bytes) == (pytest.approx(20.55e6), pytest.approx(80.55e6))


def test_layout_bytes_by_hand():
    conv = _subgraph("depthwise", 4e6, 1e6)
    # no passes: input 4 MB + output 1 MB fit a 6 MB cache; only the weights (0.1 MB) come from DRAM
    plain = traffic(conv, 1.0, 6e6, 6e6, "fp32", False)
    assert plain.activations_on_chip and plain.dram_bytes == pytest.approx(1e5)
    # one pass each way: input (read 4 MB, write 4 MB) and output (1 + 1 MB) = 10 MB more traffic, and the
    # blocked copies live beside the originals: 2 x 5 MB = 10 MB no longer fit 6 MB, so all of it is DRAM:
    # 0.1 weights + 4 input + 1 output + 10 layout = 15.1 MB; on chip: 5.1 compulsory + 10 = 15.1 MB
    moved = traffic(conv, 1.0, 6e6, 6e6, "fp32", False, layout_passes=1.0)
    assert not moved.activations_on_chip
    assert (moved.dram_bytes, moved.onchip_bytes) == (pytest.approx(15.1e6), pytest.approx(15.1e6))
    # a 12 MB cache holds the 10 MB: the layout bytes stay on chip
    kept = traffic(conv, 1.0, 12e6, 12e6, "fp32", False, layout_passes=1.0)
    assert kept.activations_on_chip and kept.dram_bytes == pytest.approx(1e5)
    assert kept.onchip_bytes == pytest.approx(15.1e6)
    # a conv producer's last pass read its blocked output (as large as this input, 4 MB) while writing
    # the input: 10 + 4 = 14 MB no longer fit 12 MB; 2 MB of it would (12 MB exactly)
    assert not traffic(conv, 1.0, 12e6, 12e6, "fp32", False, layout_passes=1.0, producer_layout_bytes=4e6) \
        .activations_on_chip
    assert traffic(conv, 1.0, 12e6, 12e6, "fp32", False, layout_passes=1.0, producer_layout_bytes=2e6) \
        .activations_on_chip
    # bf16 from an fp32 trace: every byte halves; 2 x 2.5 MB fit 6 MB again, and a 4 MB cache does not:
    # 0.05 + 2 + 0.5 + 5 = 7.55 MB from DRAM
    assert traffic(conv, 0.5, 6e6, 6e6, "bf16", False, layout_passes=1.0).activations_on_chip
    assert traffic(conv, 0.5, 4e6, 4e6, "bf16", False, layout_passes=1.0).dram_bytes == pytest.approx(7.55e6)
    # not a convolution: no layout passes whatever the parameter says
    norm = _subgraph("norm", 2e6, 2e6)
    assert traffic(norm, 1.0, 6e6, 6e6, "fp32", False, layout_passes=1.0) == traffic(norm, 1.0, 6e6, 6e6, "fp32", False)


def test_producer_layout_bytes_of_a_conv_bn_relu():
    import torch

    from chipcal.model.estimate.placement import producer_layout_bytes
    from chipcal.model.workload import characterize

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8), torch.nn.ReLU()).eval()
    workload = characterize(net, (torch.randn(1, 3, 16, 16),), model_name="cbr", fuse=False)
    by_class = {sg.op_class: sg for sg in workload.subgraphs}
    # the BN reads the conv's 1x8x16x16 fp32 output (8192 B) that the conv's output reorder wrote while
    # reading its blocked copy (8192 B more); the ReLU's producer is the BN: nothing; no passes: nothing
    one, none = [1.0] * len(workload.subgraphs), [0.0] * len(workload.subgraphs)   # passes by subgraph
    assert producer_layout_bytes(workload, by_class["norm"], one) == 8 * 16 * 16 * 4
    assert producer_layout_bytes(workload, by_class["elementwise"], one) == 0.0
    assert producer_layout_bytes(workload, by_class["norm"], none) == 0.0


def test_prediction_charges_layout_passes_from_the_parameters():
    """One eager conv on the local CPU model: the calibrated passes make it slower, never faster."""
    import torch

    from chipcal.measure.system import local_chip
    from chipcal.model.estimate.prediction import predict
    from chipcal.model.workload import characterize

    conv = torch.nn.Conv2d(96, 96, 3, 2, 1, groups=96, bias=False).eval()
    workload = characterize(conv, (torch.randn(8, 96, 112, 112),), model_name="dw", fuse=False)
    chip, params = local_chip(), default_params("cpu")
    plain = predict(workload, chip, "fp32", params=params, runtime="eager")
    charged = predict(workload, chip, "fp32", params=dataclasses.replace(params, layout_passes=1.0), runtime="eager")
    # 38.5 MB input + 9.6 MB output: 2 x 48.2 MB = 96.3 MB more bytes
    assert charged.dram_bytes - plain.dram_bytes in (pytest.approx(0.0), pytest.approx(2 * 48_168_960))
    assert charged.latency_s > plain.latency_s


def test_layout_passes_round_trip_and_are_charged_by_the_document():
    section = LayoutSection(passes=1.0, detail="recorded")
    params = section.charged_in(default_params("cpu"))
    assert params.layout_passes == 1.0
    assert FamilyParams.from_dict(params.to_dict()).layout_passes == 1.0
    assert default_params("cpu").layout_passes == 0.0       # not counted: not charged


# ONEDNN_VERBOSE of Conv2d(512, 512, 3, padding=1) on 1x512x7x7 (allocator pinned), torch 2.15, Zen 5 VM,
# 2026-11-25: the 9.4 MB weight reorder takes 0.344 ms of the call, the convolution 0.485 ms
ZEN5_WEIGHT_TRACE = """\
onednn_verbose,v1,primitive,exec,cpu,reorder,jit:blk,undef,src:f32::blocked:abcd::f0 dst:f32::blocked:aBcd16b::f0,attr-scratchpad:user,,1x512x7x7,0.00903
onednn_verbose,v1,primitive,exec,cpu,reorder,jit:uni,undef,src:f32::blocked:abcd::f0 dst:f32::blocked:ABcd16b16a::f0,attr-scratchpad:user,,512x512x3x3,0.344
onednn_verbose,v1,primitive,exec,cpu,convolution,jit:avx512_core,forward_training,src:f32:a:blocked:aBcd16b::f0 wei:f32:a:blocked:ABcd16b16a::f0 bia:undef::undef::: dst:f32:a:blocked:aBcd16b::f0,attr-scratchpad:user,alg:convolution_direct,mb1_ic512oc512_ih7oh7kh3sh1dh0ph1_iw7ow7kw3sw1dw0pw1,0.485
onednn_verbose,v1,primitive,exec,cpu,reorder,jit:blk,undef,src:f32::blocked:aBcd16b::f0 dst:f32::blocked:abcd::f0,attr-scratchpad:user,,1x512x7x7,0.00513
"""


def test_weight_reorder_times_in_a_recorded_trace():
    from chipcal.measure.layout import reorder_times_s

    assert reorder_times_s(ZEN5_WEIGHT_TRACE, "512x512x3x3") == [pytest.approx(0.344e-3)]
    assert reorder_times_s(ZEN5_WEIGHT_TRACE, "1x512x7x7") == [pytest.approx(9.03e-6), pytest.approx(5.13e-6)]
    assert reorder_times_s(ZEN5_WEIGHT_TRACE, "2048x512x1x1") == []
    # the convolution line carries the same last field but is not a reorder
    assert reorder_times_s(ZEN5_WEIGHT_TRACE.replace("512x512x3x3", "x"), "512x512x3x3") == []


@pytest.mark.timing
@pytest.mark.filterwarnings("ignore:TF32 acceleration on top of oneDNN:UserWarning")
def test_probe_times_weight_reorders_or_says_none():
    """On this machine: oneDNN reorders OIHW weights in every call (a rate), or the detail says not."""
    found = conv_layout_passes()
    if "trace of a" not in found.detail:     # a torch without oneDNN, or no trace: nothing timed, nothing charged
        assert found.weight_bytes_per_s is None and found.pointwise_weight_bytes_per_s is None
        return
    for rate, dims in ((found.weight_bytes_per_s, "512x512x3x3"), (found.pointwise_weight_bytes_per_s, "2048x512x1x1")):
        assert dims in found.detail
        # a reorder reads and writes the tensor: slower than 1 MB/s or faster than 10 TB/s is no reorder
        assert rate is None or 1e6 < rate < 1e13
    # the fixed cost of a oneDNN call: timed, or said why not; a millisecond outside a 7x7 depthwise
    # convolution's primitives would be a clock or a trace gone wrong, not a dispatch cost
    assert "depthwise 3x3 64 @7" in found.detail
    assert found.call_overhead_s is None or 0.0 <= found.call_overhead_s < 1e-3


def test_weight_reorder_is_serial_per_call_by_hand():
    """A 512->512 3x3 conv at 7x7 with weights reordered at 25 GB/s: 9,437,184 B / 25e9 = 377.5 us more,
    at batch 1 and at batch 8 alike (the reorder does not depend on the batch), on top of max(compute, memory)."""
    import torch

    from chipcal.model.estimate.prediction import predict
    from chipcal.model.registry import load_registry
    from chipcal.model.workload import characterize

    conv = torch.nn.Conv2d(512, 512, 3, padding=1, bias=False).eval()
    # a registry CPU with bf16 units: the term is the same on any chip, and no test may need this host's ISA
    chip, params = load_registry().get("xeon-platinum-8480-plus"), default_params("cpu")
    timed = dataclasses.replace(params, weight_layout_bytes_per_s=25e9)
    extra = 512 * 512 * 9 * 4 / 25e9
    for batch in (1, 8):
        workload = characterize(conv, (torch.randn(batch, 512, 7, 7),), model_name="c", fuse=False)
        plain = predict(workload, chip, "fp32", params=params, runtime="eager")
        charged = predict(workload, chip, "fp32", params=timed, runtime="eager")
        assert charged.latency_s - plain.latency_s == pytest.approx(extra, rel=1e-9)
    # a 1x1 convolution takes the pointwise rate; without one it is not charged
    conv1 = torch.nn.Conv2d(512, 2048, 1, bias=False).eval()
    workload = characterize(conv1, (torch.randn(1, 512, 7, 7),), model_name="c1", fuse=False)
    base = predict(workload, chip, "fp32", params=params, runtime="eager").latency_s
    assert predict(workload, chip, "fp32", params=timed, runtime="eager").latency_s == pytest.approx(base)
    pointwise = dataclasses.replace(params, pointwise_weight_layout_bytes_per_s=50e9)
    assert predict(workload, chip, "fp32", params=pointwise, runtime="eager").latency_s - base \
        == pytest.approx(2048 * 512 * 4 / 50e9, rel=1e-9)
    # bf16 weights are half the bytes: half the reorder
    workload16 = characterize(conv, (torch.randn(1, 512, 7, 7),), model_name="c", fuse=False)
    half = (predict(workload16, chip, "bf16", params=timed, runtime="eager").latency_s
            - predict(workload16, chip, "bf16", params=params, runtime="eager").latency_s)
    assert half == pytest.approx(extra / 2, rel=1e-9)


def test_weight_reorder_rates_round_trip_and_old_documents_charge_none():
    section = LayoutSection(passes=1.0, detail="recorded", weight_bytes_per_s=25e9, pointwise_weight_bytes_per_s=55e9)
    params = section.charged_in(default_params("cpu"))
    assert (params.weight_layout_bytes_per_s, params.pointwise_weight_layout_bytes_per_s) == (25e9, 55e9)
    again = FamilyParams.from_dict(params.to_dict())
    assert (again.weight_layout_bytes_per_s, again.pointwise_weight_layout_bytes_per_s) == (25e9, 55e9)
    old = LayoutSection.from_dict({"passes": 1.0, "detail": "written before the weight reorders were timed"})
    assert old.charged_in(default_params("cpu")).weight_layout_bytes_per_s is None
    assert "weight_bytes_per_s" not in old.to_dict()
    assert default_params("cpu").weight_layout_bytes_per_s is None     # not timed: not charged


def test_primitive_time_of_a_recorded_trace():
    """Every primitive of the Zen 5 call above: 0.00903 + 0.344 + 0.485 + 0.00513 ms = 0.84316 ms."""
    from chipcal.measure.layout import primitive_time_s

    assert primitive_time_s(ZEN5_WEIGHT_TRACE) == pytest.approx(0.84316e-3)
    assert primitive_time_s("no trace at all") == 0.0


def test_call_overhead_is_the_prior_of_every_convolution_class():
    """A run that timed oneDNN's fixed cost per call (40 us) puts it in conv, conv1x1 and depthwise;
    the other classes keep their defaults, and a run before it was timed changes nothing."""
    defaults = default_params("cpu")
    params = LayoutSection(passes=1.0, detail="recorded", call_overhead_s=40e-6).charged_in(defaults)
    assert {c: params.overhead_s[c] for c in ("conv", "conv1x1", "depthwise")} == \
        {"conv": 40e-6, "conv1x1": 40e-6, "depthwise": 40e-6}
    assert params.overhead_s["matmul"] == defaults.overhead_s["matmul"] == 5e-6
    old = LayoutSection.from_dict({"passes": 1.0, "detail": "written before the fixed cost was timed"})
    assert old.charged_in(defaults).overhead_s == defaults.overhead_s
    assert "call_overhead_s" not in old.to_dict()
