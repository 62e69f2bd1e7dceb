"""Counting rules for attention, whichever path PyTorch takes.

Scaled-dot-product attention with q (…, L, E), k (…, S, E), v (…, S, Ev) and B = prod(…):
    macs = B·L·S·E (Q·K^T) + B·L·S·Ev (P·V)
    flop = 2·macs + 6·B·L·S (1 scale + 5 softmax per score) [+ B·L·S for a mask or causal select]
Causal attention is counted dense (as FlopCounterMode does); the mask costs one op per score.

nn.MultiheadAttention (E = embed_dim, H heads, d = E/H, N batch, L query and S key tokens) is
counted by its definition as three parts, whether it ran F.multi_head_attention_forward or
the fused inference fast path aten._native_multi_head_attention:
    in_proj:   N·L·E·E + N·S·E·kdim + N·S·E·vdim   (Q, K, V projections)
    attention: N·H·L·S·d (Q·K^T) + N·H·L·S·d (P·V), softmax as above
    out_proj:  N·L·E·E
Projection biases are not counted, as for every linear layer (docs/workload.md).

Under torch.compile (`codegen`), Dynamo traces nn.MultiheadAttention's slow path,
F.multi_head_attention_forward, never the fused fast path (a trace of torchvision's ViT encoder
block under inference_mode, torch 2.14). Its packed in-projection is `linear(q, w, b)` then
`.unflatten(-1, (3, E)).unsqueeze(0).transpose(0, -2).squeeze(-2).contiguous()`
(torch/nn/functional.py, `_in_projection_packed`; K and V only where the query differs): a copy
of the projected tensors, into which Inductor fuses the bias add that the eager fast path leaves
in the GEMM's epilogue (ATen's native_multi_head_attention_cuda: `at::linear` with the bias, then
views). So the codegen partition has a fourth part, qkv_layout, that reads and writes the packed
projections (data class, no FLOP). The attention's output needs no copy: the flash kernels' meta
functions allocate it `empty_like(query)` (torch/_meta_registrations.py), in the layout the
out-projection reads.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable

import torch
import torch.nn.functional as F

from chipcal.model.precision import FLOP_PER_MAC
from chipcal.model.workload.parts import Part, gemm_parallelism, tensor_parallelism
from chipcal.model.workload.tensors import tensors_in
from chipcal.model.workload.types import GemmShape, Parallelism

SOFTMAX_FLOP_PER_ELEMENT = 5      # max, subtract, exp, sum, divide
SCALE_FLOP_PER_SCORE = 1

SDPA_TARGET = "F.scaled_dot_product_attention"
MHA_TARGET = "F.multi_head_attention_forward"
_MHA_SIGNATURE = inspect.signature(F.multi_head_attention_forward)
_SDPA_PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def _core(target: str, label: str, batch: int, lq: int, s: int, e: int, ev: int, masked: bool,
          extra_flop: int, reads, writes) -> Part:
    macs = batch * lq * s * (e + ev)
    scores = batch * lq * s
    flop = (FLOP_PER_MAC * macs + scores * (SOFTMAX_FLOP_PER_ELEMENT + SCALE_FLOP_PER_SCORE)
            + (scores if masked else 0) + extra_flop)
    gemm = GemmShape(m=lq, n=s, k=e, count=batch)
    par = Parallelism(batch, ev, lq, batch * lq * ev, False, False, 1, ev)
    return Part(target, label, "attention", "attention", "attention", macs, flop, gemm, par, True, True,
                tuple(reads), tuple(writes))


def _projection(target: str, label: str, m: int, n: int, k: int, count: int, reads, writes) -> Part:
    gemm = GemmShape(m=m, n=n, k=k, count=count)
    macs = gemm.macs
    return Part(target, label, "linear", "matmul", "matmul", macs, FLOP_PER_MAC * macs,
                gemm, gemm_parallelism(gemm), True, True, tuple(reads), tuple(writes))


def sdpa(named: dict, out: object, target: str) -> list[Part]:
    """Scaled-dot-product attention from its named arguments (F.scaled_dot_product_attention's,
    or the schema names of ATen's SDPA kernels: query, key, value, attn_mask/attn_bias, is_causal)."""
    q, k, v = named["query"], named["key"], named["value"]
    mask = next((named[m] for m in ("attn_mask", "attn_bias") if isinstance(named.get(m), torch.Tensor)), None)
    masked = mask is not None or bool(named.get("is_causal", False))
    batch = math.prod(q.shape[:-2])
    result = out[0] if isinstance(out, tuple | list) else out
    reads = tensors_in([q, k, v, mask])
    label = target.rsplit(".", 1)[-1]
    return [_core(target, label, batch, q.shape[-2], k.shape[-2], q.shape[-1], v.shape[-1], masked, 0,
                  reads, [result])]


def _lne(t: torch.Tensor, batch_first: bool) -> tuple[int, int, int]:
    """(tokens, batch, features) of an attention input; unbatched inputs are (L, E)."""
    if t.dim() == 2:
        return t.shape[0], 1, t.shape[1]
    if batch_first:
        return t.shape[1], t.shape[0], t.shape[2]
    return t.shape[0], t.shape[1], t.shape[2]


def _mha_parts(target: str, query: torch.Tensor, heads: int, s_total: int, proj: tuple[int, GemmShape | None],
               proj_reads: list, masks: list, out_weights: list, need_weights: bool, average: bool,
               outputs: tuple, batch_first: bool, relayout: int = 0) -> list[Part]:
    """The parts of multi-head attention: in_proj, attention, out_proj, and where `relayout` is
    2 or 3 the copy of that many packed projections between in_proj and attention (the module
    docstring's qkv_layout). `proj` is (in-projection MACs, its GEMM or None)."""
    lq, n, e = _lne(query, batch_first)
    d = e // heads
    meta = dict(device="meta", dtype=query.dtype)
    q_p, ctx = torch.empty((lq, n, e), **meta), torch.empty((lq, n, e), **meta)
    k_p, v_p = torch.empty((s_total, n, e), **meta), torch.empty((s_total, n, e), **meta)
    projected = [q_p, k_p, v_p]
    copied = [torch.empty_like(t) for t in projected[3 - relayout:]] if relayout else []
    layout = ([Part(f"{target}:qkv_layout", "qkv_layout", "reshape", "data", "data", 0, 0, None,
                    tensor_parallelism(copied[0]), True, True, tuple(projected[3 - relayout:]), tuple(copied))]
              if relayout else [])
    q_a, k_a, v_a = projected[:3 - relayout] + copied
    attn_out, attn_weights = outputs

    proj_macs, proj_gemm = proj
    in_gemm = proj_gemm or GemmShape(m=n * lq, n=e, k=e)
    in_proj = Part(f"{target}:in_proj", "in_proj", "linear", "matmul", "matmul", proj_macs,
                   FLOP_PER_MAC * proj_macs, proj_gemm, gemm_parallelism(in_gemm), True, True,
                   tuple(tensors_in(proj_reads)), (q_p, k_p, v_p))
    scores = n * heads * lq * s_total
    averaging = scores if (need_weights and average) else 0
    weights_out = [attn_weights] if isinstance(attn_weights, torch.Tensor) else []
    core = _core(f"{target}:attention", "attention", n * heads, lq, s_total, d, d,
                 any(isinstance(m, torch.Tensor) for m in masks), averaging,
                 tensors_in([q_a, k_a, v_a, *masks]), [ctx, *weights_out])
    out_proj = _projection(f"{target}:out_proj", "out_proj", m=n * lq, n=e, k=e, count=1,
                           reads=tensors_in([ctx, *out_weights]), writes=[attn_out])
    return [in_proj, *layout, core, out_proj]


def _in_projection(query, key, value, batch_first: bool, kv_projected: bool) -> tuple[int, GemmShape | None]:
    """MACs of the Q, K, V projections and, when it is one GEMM shape, that shape."""
    lq, n, e = _lne(query, batch_first)
    s, _, kdim = _lne(key, batch_first)
    _, _, vdim = _lne(value, batch_first)
    macs = n * lq * e * e + (n * s * e * (kdim + vdim) if kv_projected else 0)
    if query is key is value:
        return macs, GemmShape(m=n * lq, n=3 * e, k=e)
    if kv_projected and lq == s and e == kdim == vdim:
        return macs, GemmShape(m=n * lq, n=e, k=e, count=3)
    return macs, GemmShape(m=n * lq, n=e, k=e) if not kv_projected else None


def _packed(p: dict) -> int:
    """How many projections `_in_projection_packed` copies: 3 for self-attention (q is k is v), 2
    where only K and V share their input, 0 with separate weights or inputs (module docstring)."""
    if p["use_separate_proj_weight"] or p["static_k"] is not None or p["key"] is not p["value"]:
        return 0
    return 3 if p["query"] is p["key"] else 2


def mha(args: tuple, kwargs: dict, out: object, codegen: bool = False) -> list[Part]:
    """F.multi_head_attention_forward: inputs are (L, N, E) (nn.MultiheadAttention transposes);
    `codegen`: as TorchInductor runs it, with the packed projections' copy (module docstring)."""
    bound = _MHA_SIGNATURE.bind(*args, **kwargs)
    bound.apply_defaults()
    p = bound.arguments
    query, key, value = p["query"], p["key"], p["value"]
    # static_k/static_v are already-projected keys/values of shape (N*H, S, d).
    kv_projected = p["static_k"] is None
    s = key.shape[0] if kv_projected else p["static_k"].shape[1]
    s_total = s + int(p["bias_k"] is not None) + int(bool(p["add_zero_attn"]))
    if p["use_separate_proj_weight"]:
        in_weights = [p["q_proj_weight"], p["k_proj_weight"], p["v_proj_weight"], p["in_proj_bias"]]
    else:
        in_weights = [p["in_proj_weight"], p["in_proj_bias"]]
    extra = [p["bias_k"], p["bias_v"], p["static_k"], p["static_v"]]
    return _mha_parts(MHA_TARGET, query, p["num_heads"], s_total,
                      _in_projection(query, key, value, False, kv_projected),
                      [query, key, value, *in_weights, *extra], [p["attn_mask"], p["key_padding_mask"]],
                      [p["out_proj_weight"], p["out_proj_bias"]], bool(p["need_weights"]),
                      bool(p["average_attn_weights"]), tuple(out), batch_first=False,
                      relayout=_packed(p) if codegen else 0)


def native_mha(named: dict, out: object) -> list[Part]:
    """aten._native_multi_head_attention: nn.MultiheadAttention's inference fast path (batch-first)."""
    query, key, value = named["query"], named["key"], named["value"]
    s = _lne(key, True)[0]
    return _mha_parts("aten._native_multi_head_attention", query, named["num_head"], s,
                      _in_projection(query, key, value, True, True),
                      [query, key, value, named["qkv_weight"], named["qkv_bias"]], [named.get("mask")],
                      [named["proj_weight"], named["proj_bias"]], bool(named.get("need_weights", True)),
                      bool(named.get("average_attn_weights", True)), tuple(out), batch_first=True)


def sdpa_call(args: tuple, kwargs: dict, out: object, codegen: bool = False) -> list[Part]:
    """F.scaled_dot_product_attention(query, key, value, attn_mask, dropout_p, is_causal, scale, …);
    the same parts under `codegen` (Inductor calls the same SDPA kernel)."""
    return sdpa(dict(zip(_SDPA_PARAMS, args, strict=False)) | kwargs, out, SDPA_TARGET)


# Python-level functions counted whole (their decomposition would lose what they compute), each
# called as (args, kwargs, out, codegen): codegen for the parts TorchInductor runs.
COMPOSITES: dict[Callable, Callable[[tuple, dict, object, bool], list[Part]]] = {
    F.scaled_dot_product_attention: sdpa_call,
    F.multi_head_attention_forward: mha,
}
