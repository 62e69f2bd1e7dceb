"""nn.MultiheadAttention as TorchInductor runs it (issue 55): Dynamo traces the slow path, whose
packed in-projection is copied into q, k and v with the bias add fused in (attention.py's
docstring); the eager fast path and separate projections copy nothing. Bytes by hand."""

from __future__ import annotations

import torch

from chipcal.model.workload.characterization import characterize

E, HEADS, N, L, S = 64, 4, 2, 10, 7


def layout_subgraphs(module, *inputs, codegen: bool):
    workload = characterize(module.eval(), inputs, model_name="mha", fuse=codegen, codegen=codegen)
    return [s for s in workload.subgraphs if s.name.endswith("qkv_layout")]


class SelfAttention(torch.nn.Module):
    def __init__(self, **kwargs):
        super().__init__()
        self.attn = torch.nn.MultiheadAttention(E, HEADS, batch_first=True, **kwargs)

    def forward(self, x):
        return self.attn(x, x, x, need_weights=False)[0]


class CrossAttention(SelfAttention):
    def forward(self, x, memory):
        return self.attn(x, memory, memory, need_weights=False)[0]


def x(tokens: int = L) -> torch.Tensor:
    return torch.empty(N, tokens, E, device="meta")


def test_self_attention_copies_q_k_and_v_under_codegen():
    """3 × N·L·E fp32 = 3 × 2 × 10 × 64 × 4 B = 15,360 B read and the same written, no FLOP."""
    (layout,) = layout_subgraphs(SelfAttention(device="meta"), x(), codegen=True)
    assert (layout.bytes_read, layout.bytes_written, layout.flop) == (15_360, 15_360, 0)


def test_cross_attention_copies_k_and_v_only():
    """K and V share the memory's input: 2 × N·S·E fp32 = 2 × 2 × 7 × 64 × 4 B = 7,168 B."""
    (layout,) = layout_subgraphs(CrossAttention(device="meta"), x(), x(S), codegen=True)
    assert (layout.bytes_read, layout.bytes_written) == (7_168, 7_168)


def test_separate_projections_copy_nothing():
    """Keys and values of another width (kdim = vdim = 32): three weights, three GEMMs, no copy."""
    module = CrossAttention(device="meta", kdim=32, vdim=32)
    assert layout_subgraphs(module, x(), torch.empty(N, S, 32, device="meta"), codegen=True) == []


def test_eager_keeps_the_fast_paths_three_parts():
    """The eager fast path (ATen's native MHA) projects with the bias in the GEMM and views q, k, v."""
    assert layout_subgraphs(SelfAttention(device="meta"), x(), codegen=False) == []
