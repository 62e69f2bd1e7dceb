"""Fusion partitioning and concurrency on hand-built modules (expected values by hand) and invariants."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from chipcal.model.workload import characterize, characterize_model


class ConvBnRelu(nn.Module):
    def __init__(self, inplace: bool):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.relu = nn.ReLU(inplace=inplace)

    def forward(self, x):
        return self.relu(self.bn(self.conv(x)))


@pytest.mark.parametrize("inplace", [False, True])
def test_conv_bn_relu_is_one_kernel(inplace):
    w = characterize(ConvBnRelu(inplace).eval(), torch.randn(1, 3, 16, 16))
    assert len(w.ops) == 3 and len(w.subgraphs) == 1
    s = w.subgraphs[0]
    assert (s.pattern, s.op_class, s.op_indices) == ("conv_bn_relu", "conv", (0, 1, 2))
    activation = 8 * 16 * 16 * 4                  # 8,192 bytes of conv/bn/relu output
    assert s.input_bytes == 3 * 16 * 16 * 4       # 3,072
    # conv weight 8*3*9 + bias 8 floats; bn weight, bias, running mean, running var 4*8 floats
    assert s.weight_bytes == (8 * 3 * 9 + 8) * 4 + 4 * 8 * 4
    assert s.output_bytes == activation
    # conv writes A, bn reads and writes A, relu reads A: 4A never touch memory once fused
    assert s.bytes_saved_by_fusion == 4 * activation
    assert w.bytes_read + w.bytes_written - s.bytes_saved_by_fusion == s.bytes_read + s.bytes_written
    assert s.macs == 8 * 256 * 27 and s.threads == 8 * 256


def test_conv_bn_relu_is_two_kernels_under_inductor():
    """torch.compile (the `codegen` partition): the convolution is a library call with nothing
    fused into it, the BN and ReLU one generated kernel that reads the conv's output and writes the
    activation: that tensor goes to memory and back once more than under a vendor compiler. Before
    the convolution, the copy of its 8 x 3 x 3 x 3 fp32 weight into channels-last (864 B each way,
    workload/inductor_layout.py)."""
    w = characterize(ConvBnRelu(False).eval(), torch.randn(1, 3, 16, 16), codegen=True)
    assert [s.op_indices for s in w.subgraphs] == [(0,), (1,), (2, 3)]
    copy, conv, generated = w.subgraphs
    assert (copy.op_class, copy.weight_bytes, copy.output_bytes, copy.flop) == ("data", 864, 864, 0)
    assert conv.weight_bytes == 864 + 32 and conv.depends_on == (0,)   # the copy as its weight, and its bias
    activation = 8 * 16 * 16 * 4
    assert conv.op_class == "conv" and conv.output_bytes == activation and conv.bytes_saved_by_fusion == 0
    # the generated kernel reads the conv output and the BN's 4 x 8 floats, writes the activation once
    assert generated.input_bytes == activation and generated.output_bytes == activation
    assert generated.bytes_saved_by_fusion == 2 * activation        # BN -> ReLU write and read


class Branches(nn.Module):
    """x -> 3x3 conv -> relu and x -> 1x1 conv -> relu, concatenated."""

    def __init__(self):
        super().__init__()
        self.a = nn.Conv2d(3, 4, 3, padding=1)
        self.b = nn.Conv2d(3, 4, 1)

    def forward(self, x):
        return torch.cat([torch.relu(self.a(x)), torch.relu(self.b(x))], dim=1)


def test_parallel_branches_share_a_stage():
    w = characterize(Branches().eval(), torch.randn(1, 3, 8, 8))
    patterns = [(s.name, s.pattern, s.stage) for s in w.subgraphs]
    assert patterns == [("a", "conv_relu", 0), ("b", "conv_relu", 0), ("cat", "single", 1)]
    assert w.stages == ((0, 1), (2,)) and w.max_parallel_subgraphs == 2
    assert w.subgraphs[2].depends_on == (0, 1)
    # the 3x3 branch has 9x the MACs of the 1x1 one: the critical path runs through it
    # a: 64 px * 4 * 3 * 9 = 6,912 MACs -> 13,824 FLOP + relu 256 = 14,080 FLOP; cat 0 FLOP
    assert w.critical_path == (0, 2)
    assert w.critical_path_flop == 2 * 6_912 + 256


class Residual(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)) + x)


def test_residual_add_and_activation_fuse_into_the_conv():
    w = characterize(Residual().eval(), torch.randn(1, 4, 6, 6))
    assert [s.pattern for s in w.subgraphs] == ["conv_bn_add_relu"]
    s = w.subgraphs[0]
    act = 4 * 36 * 4                              # 576 bytes per activation tensor
    # x is read twice by ops (conv, add) but enters the kernel once
    assert s.input_bytes == act
    # saved: conv->bn (write+read), bn->add (write+read), add->relu (write+read) = 6A, plus
    # the second read of x by the add = 7A
    assert s.bytes_saved_by_fusion == 7 * act


class SharedOutput(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 1)

    def forward(self, x):
        y = self.conv(x)
        return torch.relu(y), torch.sigmoid(y)


def test_two_consumers_stop_fusion():
    w = characterize(SharedOutput().eval(), torch.randn(1, 2, 4, 4))
    assert [s.pattern for s in w.subgraphs] == ["single", "single", "single"]
    assert w.stages == ((0,), (1, 2))


class HandAttention(nn.Module):
    def __init__(self, dim: int = 8):
        super().__init__()
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.scale = dim ** -0.5

    def forward(self, x):
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        p = (q @ k.transpose(-2, -1) * self.scale).softmax(dim=-1)
        return self.proj(p @ v)


def test_hand_written_attention_is_one_attention_kernel():
    # x (2,5,8): Q.K^T 2*5*5*8 = 400 MACs, P.V 400 MACs
    w = characterize(HandAttention().eval(), torch.randn(2, 5, 8))
    assert w.macs_by_class()["attention"] == 800
    attention = [s for s in w.subgraphs if s.pattern == "attention"]
    assert len(attention) == 1
    assert attention[0].op_class == "attention" and attention[0].macs == 800
    kinds = sorted(w.ops[i].kind for i in attention[0].op_indices if w.ops[i].terms)
    assert kinds == ["elementwise", "matmul", "matmul", "softmax"]
    # scores (2,5,5) fp32 = 200 bytes: written by Q.K^T, the scale and the softmax and read back
    # by the next op each time: 6 * 200 bytes stay inside the kernel
    assert attention[0].bytes_saved_by_fusion == 6 * 200


@pytest.mark.parametrize("name", ["resnet18", "vit_b_16", "googlenet"])
def test_partition_invariants(name):
    w = characterize_model(name)
    covered = sorted(i for s in w.subgraphs for i in s.op_indices)
    assert covered == list(range(len(w.ops)))
    for s in w.subgraphs:
        assert all(d < s.index for d in s.depends_on)
        assert s.stage == 1 + max((w.subgraphs[d].stage for d in s.depends_on), default=-1)
        assert s.bytes_saved_by_fusion >= 0
    assert sum(s.macs for s in w.subgraphs) == w.macs
    assert sum(s.flop for s in w.subgraphs) == w.flop
    assert w.fused_bytes_read + w.fused_bytes_written + w.bytes_saved_by_fusion == w.bytes_read + w.bytes_written
    path = w.critical_path
    assert all(path[i] in w.subgraphs[path[i + 1]].depends_on for i in range(len(path) - 1))
    assert w.critical_path_flop <= w.flop


def test_model_level_structure():
    # ResNet-18: every BasicBlock is conv_bn_relu + conv_bn_add_relu; the 3 downsampling blocks
    # add a conv_bn branch that runs beside the block's first conv.
    r18 = characterize_model("resnet18")
    patterns = [s.pattern for s in r18.subgraphs]
    assert patterns.count("conv_bn_add_relu") == 8 and patterns.count("conv_bn") == 3
    assert r18.max_parallel_subgraphs == 2
    # GoogLeNet: four branches per inception module
    assert characterize_model("googlenet").max_parallel_subgraphs == 4
    # ViT-B/16: per encoder layer one attention core, linear+gelu, and two linear+residual kernels
    vit = [s.pattern for s in characterize_model("vit_b_16").subgraphs]
    assert (vit.count("attention"), vit.count("linear_gelu"), vit.count("linear_add")) == (12, 12, 24)


def test_eager_partition_is_one_kernel_per_op():
    import torch
    from torch import nn

    from chipcal.model.workload import characterize

    module = nn.Sequential(nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU()).eval()
    x = torch.randn(1, 8, 10, 10)
    fused = characterize(module, (x,), fuse=True)
    eager = characterize(module, (x,), fuse=False)
    assert len(fused.subgraphs) == 1 and fused.fused
    assert [sg.op_class for sg in eager.subgraphs] == ["conv", "norm", "elementwise"] and not eager.fused
    assert eager.macs == fused.macs == 16 * 10 * 10 * 8 * 9       # counts do not depend on the partition
    # eager: every intermediate goes out and back in. conv out = BN in = 16*10*10*4 B = 6400 B,
    # BN out = ReLU in = 6400 B: the fused kernel saves 4 x 6400 B of traffic
    assert all(sg.bytes_saved_by_fusion == 0 for sg in eager.subgraphs)
    assert fused.subgraphs[0].bytes_saved_by_fusion == 4 * 6400
