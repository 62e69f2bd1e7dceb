"""Per-operation counts against figures worked out by hand (arithmetic in the comments)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from test_mapping import chip

from chipcal.model.mapping import map_subgraph
from chipcal.model.precision import macs_to_flop
from chipcal.model.workload import GemmShape, characterize, characterize_model


def only_op(module, *inputs):
    w = characterize(module.eval(), inputs)
    work = [op for op in w.ops if op.terms]
    assert len(work) == 1, [op.name for op in w.ops]
    return w, work[0]


def test_conv2d_odd_shapes():
    # in (2,5,11,9); kernel (3,2), stride (2,1), padding (1,0), dilation (1,2)
    # H_out = floor((11 + 2*1 - 1*(3-1) - 1) / 2) + 1 = 6;  W_out = floor((9 - 2*(2-1) - 1) / 1) + 1 = 7
    # MACs = N*C_out*H_out*W_out*C_in*kh*kw = 2*7*6*7*5*3*2 = 17,640
    conv = nn.Conv2d(5, 7, (3, 2), stride=(2, 1), padding=(1, 0), dilation=(1, 2))
    w, op = only_op(conv, torch.randn(2, 5, 11, 9))
    assert op.macs == w.macs == 17_640
    assert op.flop == macs_to_flop(17_640) == 35_280
    assert (op.kind, op.op_class) == ("conv", "conv")
    # read: input 2*5*11*9*4 = 3,960 + weight 7*5*3*2*4 = 840 + bias 7*4 = 28; write 2*7*6*7*4 = 2,352
    assert op.bytes_read == 3_960 + 840 + 28
    assert op.bytes_written == 2_352
    assert op.gemm == GemmShape(m=2 * 6 * 7, n=7, k=5 * 3 * 2, count=1)
    assert op.parallelism.output_elements == 2 * 7 * 6 * 7
    assert op.arithmetic_intensity == pytest.approx(35_280 / (3_960 + 868 + 2_352))


def test_grouped_conv():
    # (1,6,8,8) -> 3x3, groups 3 -> (1,9,6,6): MACs = 9*36*(6/3)*9 = 5,832
    _, op = only_op(nn.Conv2d(6, 9, 3, groups=3, bias=False), torch.randn(1, 6, 8, 8))
    assert op.macs == 5_832
    assert op.op_class == "conv"
    assert op.parallelism.grouped and not op.parallelism.depthwise and op.parallelism.groups == 3
    assert op.gemm == GemmShape(m=36, n=3, k=2 * 9, count=3)


def test_depthwise_conv():
    # (1,8,10,10), 3x3, padding 1, groups 8: MACs = 8 channels * 100 pixels * 1 * 9 = 7,200
    _, op = only_op(nn.Conv2d(8, 8, 3, padding=1, groups=8, bias=False), torch.randn(1, 8, 10, 10))
    assert op.macs == 7_200
    assert op.op_class == "depthwise"
    assert op.parallelism.depthwise and op.parallelism.groups == 8
    # channel multiplier 2: (1,4,10,10) -> (1,8,8,8): MACs = 8*64*1*9 = 4,608
    _, op = only_op(nn.Conv2d(4, 8, 3, groups=4, bias=False), torch.randn(1, 4, 10, 10))
    assert op.macs == 4_608
    assert op.op_class == "depthwise"


def test_pointwise_and_transposed_conv():
    # 1x1: (1,16,7,7) -> 32 channels: 32*49*16 = 25,088
    _, op = only_op(nn.Conv2d(16, 32, 1), torch.randn(1, 16, 7, 7))
    assert (op.macs, op.op_class) == (25_088, "conv1x1")
    # transposed 3x3 stride 2: (1,4,5,5) -> (1,6,11,11); every input pixel scatters a 6x3x3
    # kernel: N*C_in*H_in*W_in*(C_out/g)*kh*kw = 4*25*6*9 = 5,400
    w, op = only_op(nn.ConvTranspose2d(4, 6, 3, stride=2), torch.randn(1, 4, 5, 5))
    assert op.macs == 5_400
    assert op.outputs[0].shape == (1, 6, 11, 11)


def test_linear_odd_shapes():
    # (3,5,13) @ (13 -> 7): m = 15 rows, MACs = 15*13*7 = 1,365
    w, op = only_op(nn.Linear(13, 7), torch.randn(3, 5, 13))
    assert op.macs == 1_365 and op.flop == 2_730
    assert (op.kind, op.op_class) == ("linear", "matmul")
    assert op.gemm == GemmShape(m=15, n=7, k=13)
    # read x 3*5*13*4 = 780, W 7*13*4 = 364, b 28; write 3*5*7*4 = 420
    assert op.bytes_read == 780 + 364 + 28
    assert op.bytes_written == 420
    assert sorted(s.shape for s in op.weights) == [(7,), (7, 13)]


def test_activation_matmul_is_matmul_kind():
    class MatMul(nn.Module):
        def forward(self, a, b):
            return a @ b

    # (2,3,4) @ (2,4,5): 2*3*4*5 = 120 MACs
    _, op = only_op(MatMul(), torch.randn(2, 3, 4), torch.randn(2, 4, 5))
    assert (op.macs, op.kind, op.op_class) == (120, "matmul", "matmul")


class SelfAttention(nn.Module):
    def __init__(self, need_weights: bool):
        super().__init__()
        self.attn = nn.MultiheadAttention(16, 4, batch_first=True)
        self.need_weights = need_weights

    def forward(self, x):
        return self.attn(x, x, x, need_weights=self.need_weights)[0]


@pytest.mark.parametrize("need_weights", [False, True])
def test_multihead_attention(need_weights):
    # E=16, H=4, d=4, N=2, L=S=5
    # in_proj 2*5*16*48 = 7,680; Q.K^T 2*4*5*5*4 = 800; P.V 800; out_proj 2*5*16*16 = 2,560
    w = characterize(SelfAttention(need_weights).eval(), torch.randn(2, 5, 16))
    assert w.macs == 7_680 + 800 + 800 + 2_560 == 11_840
    by_name = {op.name.rsplit(".", 1)[-1]: op for op in w.ops}
    assert by_name["in_proj"].macs == 7_680 and by_name["in_proj"].op_class == "matmul"
    assert by_name["out_proj"].macs == 2_560
    core = by_name["attention"]
    assert (core.macs, core.op_class) == (1_600, "attention")
    # scores 2*4*5*5 = 200: 1 scale + 5 softmax each; averaging weights over heads adds 200
    assert core.flop == 2 * 1_600 + 6 * 200 + (200 if need_weights else 0)


def test_native_mha_fast_path_kernel_counted_the_same():
    mha = nn.MultiheadAttention(16, 4, batch_first=True).eval()

    class FastPath(nn.Module):
        def forward(self, x):
            return torch._native_multi_head_attention(
                x, x, x, 16, 4, mha.in_proj_weight, mha.in_proj_bias, mha.out_proj.weight, mha.out_proj.bias,
                None, False)[0]

    w = characterize(FastPath(), torch.randn(2, 5, 16))
    assert w.macs == 11_840
    assert w.macs_by_class()["attention"] == 1_600


def test_cross_attention_with_kdim_vdim():
    # q (2,5,16), k (2,7,8), v (2,7,10); E=16, H=4, d=4
    # in_proj: q 2*5*16*16 = 2,560 + k 2*7*16*8 = 1,792 + v 2*7*16*10 = 2,240 = 6,592
    # core: 2*4*5*7*4 * 2 = 2,240; out_proj 2*5*16*16 = 2,560 -> 11,392
    class Cross(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = nn.MultiheadAttention(16, 4, kdim=8, vdim=10, batch_first=True)

        def forward(self, q, k, v):
            return self.attn(q, k, v, need_weights=False)[0]

    w = characterize(Cross().eval(), (torch.randn(2, 5, 16), torch.randn(2, 7, 8), torch.randn(2, 7, 10)))
    assert w.macs == 6_592 + 2_240 + 2_560


@pytest.mark.parametrize("causal", [False, True])
def test_scaled_dot_product_attention(causal):
    class SDPA(nn.Module):
        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    # q (2,3,7,8), k (2,3,9,8), v (2,3,9,5): B = 6; Q.K^T 6*7*9*8 = 3,024; P.V 6*7*9*5 = 1,890
    _, op = only_op(SDPA(), torch.randn(2, 3, 7, 8), torch.randn(2, 3, 9, 8), torch.randn(2, 3, 9, 5))
    assert op.macs == 4_914
    # scores 6*7*9 = 378: 6 FLOP each (+1 for the causal mask)
    assert op.flop == 2 * 4_914 + 378 * (7 if causal else 6)
    assert (op.kind, op.op_class) == ("attention", "attention")
    assert op.gemm == GemmShape(m=7, n=9, k=8, count=6)


def test_aten_sdpa_kernel_counted_from_its_schema():
    class Kernel(nn.Module):
        def forward(self, q, k, v):   # positional: dropout_p, is_causal (not attn_mask)
            return torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(q, k, v, 0.0, True)[0]

    # q, k, v (2,3,7,8), causal: B = 6, MACs 6*7*7*8 * 2 = 4,704; scores 294 at 7 FLOP each
    q, k, v = (torch.randn(2, 3, 7, 8) for _ in range(3))
    _, op = only_op(Kernel(), q, k, v)
    assert (op.macs, op.flop) == (4_704, 2 * 4_704 + 7 * 294)


@pytest.mark.parametrize(("module", "shape", "flop"), [
    (nn.BatchNorm2d(3), (2, 3, 4, 4), 2 * 96),               # folded scale+shift, 96 elements
    (nn.LayerNorm(8), (2, 5, 8), 8 * 80),                    # mean 1, var 3, normalize 2, affine 2
    (nn.LayerNorm(8, elementwise_affine=False), (2, 5, 8), 6 * 80),
    (nn.GroupNorm(2, 4), (1, 4, 3, 3), 8 * 36),
    (nn.ReLU(), (2, 10), 20),
    (nn.ReLU6(), (2, 10), 2 * 20),                           # min and max
    (nn.Sigmoid(), (2, 10), 4 * 20),
    (nn.SiLU(), (2, 10), 5 * 20),
    (nn.Hardswish(), (2, 10), 5 * 20),
    (nn.GELU(), (2, 10), 5 * 20),
    (nn.GELU(approximate="tanh"), (2, 10), 9 * 20),
    (nn.Softmax(dim=-1), (2, 10), 5 * 20),
    (nn.MaxPool2d(3, 2), (1, 2, 7, 7), 2 * 9 * 8),           # out 3x3 per channel, 9-1 compares each
    (nn.AvgPool2d(2), (1, 2, 4, 4), 2 * 4 * 4),              # out 2x2, 4 per window
    (nn.AdaptiveAvgPool2d(1), (1, 4, 7, 7), 4 * 49),         # every input added once
    # 7 -> 3 windows [0,3) [2,5) [4,7): 3+3+3 = 9 per dim, 81 per channel
    (nn.AdaptiveAvgPool2d(3), (1, 1, 7, 7), 81),
])
def test_non_mac_conventions(module, shape, flop):
    _, op = only_op(module, torch.randn(*shape))
    assert op.macs == 0
    assert op.flop == flop


def test_reductions_run_a_thread_per_element_read():
    """A global pool's kernel splits the reduced axis across threads (tree reduction): its
    parallelism is the 32 x 112 x 112 = 401,408 elements it reads, not its 32 outputs. A windowed
    pool keeps one thread per output: 32 x 56 x 56 = 100,352."""
    w, gap = only_op(nn.AdaptiveAvgPool2d(1), torch.randn(1, 32, 112, 112))
    assert gap.op_class == "reduce" and gap.parallelism.output_elements == 32
    assert gap.threads == 401_408 and w.subgraphs[0].threads == 401_408
    class SpatialMean(nn.Module):
        def forward(self, x):
            return x.mean(dim=(2, 3))

    _, mean = only_op(SpatialMean(), torch.randn(2, 8, 5, 5))
    assert mean.op_class == "reduce" and mean.threads == 2 * 8 * 25
    _, pool = only_op(nn.MaxPool2d(2), torch.randn(1, 32, 112, 112))
    assert pool.op_class == "pool" and pool.threads == 100_352


def test_a_global_pool_is_split_over_cpu_cores_by_the_elements_it_reads():
    """On a CPU the 32,768-element grain splits the elements read: a global pool over 2048 x 7 x 7
    (100,352 elements) is 4 chunks, so Orin's 12 Arm cores run 4 of them, not 1 (its 2048 outputs
    are under one grain); ATen splits a pool's channels over every thread."""
    w, _ = only_op(nn.AdaptiveAvgPool2d(1), torch.randn(1, 2048, 7, 7))
    a = map_subgraph(w.subgraphs[0], chip("jetson-agx-orin-64gb-cpu"), "fp32", 1.0)
    assert a.units_allocated == 4


def test_broadcast_footprint_and_views():
    class BiasAdd(nn.Module):
        def __init__(self):
            super().__init__()
            self.bias = nn.Parameter(torch.randn(3, 1, 1))

        def forward(self, x):
            return torch.flatten(x + self.bias.expand(2, 3, 4, 4), 1)

    w = characterize(BiasAdd(), torch.randn(2, 3, 4, 4))
    add = next(op for op in w.ops if op.kind == "elementwise")
    # x: 2*3*4*4*4 = 384 bytes; the expanded bias spans its 3 elements = 12 bytes
    assert add.bytes_read == 384 + 12 and add.bytes_written == 384
    assert [s.nbytes for s in add.weights] == [12]
    flatten = next(op for op in w.ops if op.kind == "reshape")
    assert flatten.bytes_read == flatten.bytes_written == 0


def test_an_embedding_bag_reads_the_rows_it_sums_not_the_table():
    """DLRM's pooled lookups: 2 bags of 3 rows of a 1000 x 8 fp32 table read 6 rows (192 bytes) and
    the 6 int64 indices (48), write the 2 pooled rows (64), and add 2 rows per bag (2 x 2 x 8 FLOP)."""
    class Bag(nn.Module):
        def __init__(self):
            super().__init__()
            self.table = nn.Parameter(torch.randn(1000, 8))

        def forward(self, indices):
            return F.embedding_bag(indices, self.table, mode="sum")

    w = characterize(Bag(), torch.randint(0, 1000, (2, 3)))
    bag = next(op for op in w.ops if any(t.target.startswith("aten._embedding_bag") for t in op.terms))
    assert bag.classified and not w.unclassified_ops
    assert (bag.bytes_read, bag.bytes_written, bag.flop, bag.macs) == (6 * 8 * 4 + 6 * 8, 2 * 8 * 4, 2 * 2 * 8, 0)


def test_unclassified_ops_are_flagged_with_zero_counts():
    class Odd(nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = nn.Linear(5, 5)

        def forward(self, x):
            return self.fc(torch.special.bessel_j0(x))

    w = characterize(Odd(), torch.randn(4, 5))
    odd = [op for op in w.ops if not op.classified]
    assert [op.name for op in odd] == list(w.unclassified_ops) and len(odd) == 1
    assert (odd[0].macs, odd[0].flop, odd[0].bytes_read, odd[0].bytes_written) == (0, 0, 0, 0)
    assert odd[0].terms[0].target == "aten.special_bessel_j0" and not odd[0].terms[0].classified
    assert w.macs == 4 * 5 * 5   # the rest is still counted


def test_batch_scaling_of_mac_work():
    for name in ("resnet18", "vit_b_16", "mobilenet_v2"):
        one, eight = characterize_model(name, batch=1), characterize_model(name, batch=8)
        assert eight.batch == 8 and eight.input_shape[0] == 8
        assert eight.macs == 8 * one.macs, name
        assert eight.macs_by_class() == {k: 8 * v for k, v in one.macs_by_class().items()}


def test_dispatch_capture_counts_like_fx():
    for name in ("resnet18", "mobilenet_v2"):
        from chipcal.model.workload import build_model

        model = build_model(name, device="meta")
        x = torch.empty(2, 3, 224, 224, device="meta")
        fx, dispatch = characterize(model, x), characterize(model, x, capture="dispatch")
        assert (fx.capture, dispatch.capture) == ("fx", "dispatch")
        assert (dispatch.macs, dispatch.flop) == (fx.macs, fx.flop)
        assert (dispatch.bytes_read, dispatch.bytes_written) == (fx.bytes_read, fx.bytes_written)
        assert [(op.kind, op.macs) for op in dispatch.ops] == [(op.kind, op.macs) for op in fx.ops]
        assert (dispatch.ops[0].name, dispatch.ops[0].target) == (fx.ops[0].name, "torch.nn.Conv2d")


def test_meta_and_real_execution_agree():
    from chipcal.model.workload import build_model

    model = build_model("resnet18")
    x = torch.randn(1, 3, 64, 64)
    meta, real = characterize(model, x), characterize(model, x, execution="real")
    assert (meta.execution, real.execution) == ("meta", "real")
    assert (real.macs, real.flop, real.bytes_read, real.bytes_written) == (
        meta.macs, meta.flop, meta.bytes_read, meta.bytes_written)


def test_untraceable_model_falls_back_and_says_so():
    class DataDependent(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 4, 3)

        def forward(self, x):
            y = self.conv(x)
            if y.sum() > 0:          # needs values: no symbolic trace, no meta tensors
                y = y * 2
            return y

    w = characterize(DataDependent().eval(), torch.ones(1, 3, 8, 8))
    assert (w.capture, w.execution) == ("dispatch", "real")
    assert w.capture_notes[0].startswith("fx: symbolic trace failed")
    assert any(note.startswith("dispatch/meta") for note in w.capture_notes)
    # conv (1,3,8,8) -> (1,4,6,6): 4*36*3*9 = 3,888 MACs
    assert w.macs == 3_888
    assert not w.unclassified_ops


def _cuda_resnet18():
    """ResNet-18 and an input on the GPU, and the model's counts characterized on the CPU first."""
    from chipcal.model.workload import build_model

    model = build_model("resnet18")
    x = torch.randn(1, 3, 224, 224)
    cpu = characterize(model, x)
    return model.cuda(), x.cuda(), cpu


@pytest.mark.gpu
def test_cuda_resident_model_counts_like_cpu():
    model, x, cpu = _cuda_resnet18()
    gpu = characterize(model, x)
    assert gpu.execution == "meta"
    assert (gpu.macs, gpu.flop, gpu.bytes_read, gpu.bytes_written) == (
        cpu.macs, cpu.flop, cpu.bytes_read, cpu.bytes_written)


@pytest.mark.gpu
def test_cuda_resident_model_crosschecks_like_cpu():
    """fvcore (the optional `crosscheck` extra) and FlopCounterMode agree on the GPU-resident model."""
    pytest.importorskip("fvcore", reason="the cross-check needs fvcore (pip install 'chipcal[crosscheck]')")
    from chipcal.model.workload.crosscheck import crosscheck

    model, x, _ = _cuda_resnet18()
    rows = {r.family: r for r in crosscheck(model, x, workload=characterize(model, x))}
    assert rows["conv"].flopcounter_agrees and rows["conv"].fvcore_agrees
    assert rows["matmul"].flopcounter_agrees and rows["matmul"].fvcore_agrees


def test_global_pooling_is_a_reduction_windowed_pooling_is_a_pool():
    import torch
    from torch import nn

    from chipcal.model.workload import characterize

    x = torch.randn(1, 4, 8, 8)
    w = characterize(nn.Sequential(nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1)).eval(), (x,))
    classes = [op.op_class for op in w.ops if op.flop]
    # max pool 2x2 on 4x8x8: 4*4*4 outputs x 3 compares = 192; global average: 4*4*4 = 64 adds
    assert classes == ["pool", "reduce"]
    assert [op.flop for op in w.ops if op.flop] == [192, 64]


def test_the_simd_run_follows_memory_order():
    """vector_dim is the unit-stride run an elementwise kernel streams (parts.contiguous_run). A
    ConvNeXt block hands its layer-scale multiply a permuted view (N, C, H, W) of an (N, H, W, C)
    tensor: dense, so one run of 8 × 96 × 56 × 56 = 2,408,448 elements (ATen walks it in memory
    order), not the W stride's break at 1. A slice keeps its 28-wide rows; a broadcast dimension
    (stride 0) does not break a run."""
    from chipcal.model.workload.parts import contiguous_run, tensor_parallelism

    nhwc = torch.empty(8, 56, 56, 96)
    assert contiguous_run(nhwc.permute(0, 3, 1, 2)) == 8 * 96 * 56 * 56 == 2_408_448
    assert tensor_parallelism(nhwc.permute(0, 3, 1, 2)).vector_dim == 2_408_448
    assert contiguous_run(torch.empty(8, 96, 56, 56)[..., :28]) == 28
    assert contiguous_run(torch.empty(1, 5).expand(3, 5)) == 5
    assert contiguous_run(torch.empty(4, 6).t()) == 24                      # a transposed matrix is dense
