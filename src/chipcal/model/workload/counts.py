"""Counting rules per ATen operator: kind, class, MACs, FLOP and parallelism of one call.

MAC work (flop = 2 × macs; bias additions are not counted, as in fvcore and FlopCounterMode):
    convolution  N·C_out·prod(out_spatial)·(C_in/groups)·prod(kernel); transposed:
                 N·C_in·prod(in_spatial)·(C_out/groups)·prod(kernel)
    mm/addmm     m·n·k;  bmm/baddbmm  b·m·n·k;  mv/addmv  m·k;  dot  k
Non-MAC work, FLOP per output element unless noted (a transcendental counts as 1):
    add sub mul div neg compare where … 1;  relu clamp_min threshold 1;  hardtanh clamp 2
    leaky_relu prelu 2;  sigmoid 4;  hardsigmoid 4;  silu hardswish mish 5;  gelu 5 (tanh: 9)
    softmax / log_softmax 5 (max, subtract, exp, sum, divide)
    batch norm, inference 2 (per-channel scale and shift folded); training 6
    layer/group norm 8 with affine, 6 without (mean 1, variance 3, normalize 2, affine 2)
    max pool: window − 1 compares; avg pool: window (adds + divide); adaptive pools: their windows
    reductions (mean, sum, amax, …) and top-k selection 1 per input element; vector norm 2; var/std 4
    linear / bilinear / trilinear interpolation 3 / 7 / 15 (2, 4, 8 multiplies and their adds)
Data movement (views, copies, cat, pad, gather, nearest upsampling, factories) is 0 FLOP;
views move no bytes.
Partial accesses: an embedding lookup reads the rows it gathers (one per index, at most the
table), not the table; a bag of them (embedding_bag, as DLRM pools its tables) likewise, writes
its pooled rows only (not its index bookkeeping) and counts 1 FLOP per gathered element beyond
the first of each bag (a sum); the in-place indexed writes index_copy_, index_put_ and index_add_
write (and index_add_ reads) as many elements of their target as their source holds, not the
target (a KV-cache update writes one token's keys, not the cache). index_add_ is 1 FLOP per
source element.
Anything else is unclassified: counted as zero and flagged.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from chipcal.model.precision import FLOP_PER_MAC
from chipcal.model.workload import attention
from chipcal.model.workload.parts import Part, gemm_parallelism, tensor_parallelism
from chipcal.model.workload.tensors import dtype_name, spec_of, tensors_in
from chipcal.model.workload.types import GemmShape, Parallelism, TensorSpec

IsWeight = Callable[[torch.Tensor], bool]

ACTIVATION_FLOP: dict[str, int] = {
    "relu": 1, "threshold": 1, "clamp_min": 1, "clamp_max": 1, "hardtanh": 2, "relu6": 2,
    "leaky_relu": 2, "_prelu_kernel": 2, "prelu": 2, "elu": 4, "sigmoid": 4, "hardsigmoid": 4,
    "silu": 5, "hardswish": 5, "mish": 5, "softplus": 3, "tanh": 1, "log_sigmoid_forward": 4,
}
ELEMENTWISE_FLOP: dict[str, int] = {
    **dict.fromkeys((
        "add", "sub", "rsub", "mul", "div", "neg", "abs", "reciprocal", "sqrt", "rsqrt", "exp",
        "exp2", "expm1", "log", "log2", "log1p", "pow", "square", "maximum", "minimum", "eq", "ne",
        "lt", "le", "gt", "ge", "where", "masked_fill", "logical_and", "logical_or", "logical_not",
        "logical_xor", "bitwise_and", "bitwise_or", "bitwise_not", "bitwise_xor", "erf", "sin", "cos",
        "floor", "ceil", "round", "trunc", "sign", "remainder", "fmod", "sgn", "isnan", "nan_to_num",
        "cumsum", "cumprod",
    ), 1),
    "addcmul": 2, "addcdiv": 2, "lerp": 2,
    # interpolation: a weighted sum of 2, 4 or 8 neighbours (n multiplies, n-1 adds) per output
    "upsample_linear1d": 3, "upsample_bilinear2d": 7, "_upsample_bilinear2d_aa": 7, "upsample_trilinear3d": 15,
}
SOFTMAX = ("_softmax", "_safe_softmax", "_log_softmax")
REDUCTION_FLOP: dict[str, int] = {
    **dict.fromkeys(("sum", "mean", "amax", "amin", "max", "min", "prod", "argmax", "argmin", "any",
                     "all", "nansum", "aminmax", "logsumexp", "topk"), 1),
    "linalg_vector_norm": 2, "norm": 2,
    **dict.fromkeys(("var", "std", "var_mean", "std_mean"), 4),
}
VIEWS = frozenset((
    "view", "_unsafe_view", "_reshape_alias", "expand", "permute", "t", "transpose", "select", "slice",
    "split", "split_with_sizes", "unbind", "chunk", "squeeze", "unsqueeze", "alias", "as_strided",
    "detach", "narrow", "diagonal", "unfold", "view_as_real", "view_as_complex", "lift_fresh",
    "movedim", "unsafe_split", "unsafe_chunk", "unsafe_split_with_sizes", "_conj", "_neg_view",
))
COPIES = frozenset((
    "clone", "_to_copy", "copy", "copy_", "cat", "stack", "constant_pad_nd", "reflection_pad1d",
    "reflection_pad2d", "reflection_pad3d", "replication_pad1d", "replication_pad2d", "replication_pad3d",
    "roll", "index", "_unsafe_index", "index_select", "gather", "repeat", "flip", "tril", "triu",
    "pixel_shuffle", "pixel_unshuffle", "channel_shuffle", "native_channel_shuffle", "slice_scatter",
    "select_scatter", "fill_", "zero_", "zeros", "ones", "full", "zeros_like", "ones_like",
    "full_like", "new_zeros", "new_ones", "new_full", "arange", "scalar_tensor", "eye", "linspace",
    "_local_scalar_dense",   # Tensor.item(): one element read back to the host
    "lift_fresh_copy", "index_put", "scatter", "scatter_add", "masked_scatter", "nonzero", "masked_select",
    "upsample_nearest1d", "upsample_nearest2d", "upsample_nearest3d", "_upsample_nearest_exact1d",
    "_upsample_nearest_exact2d", "_upsample_nearest_exact3d",
))
# allocations and checks that move no data
ALLOCATIONS = frozenset(("empty", "empty_like", "new_empty", "empty_strided", "new_empty_strided", "resize",
                         "_assert_async", "_assert_scalar", "_assert_tensor_metadata", "_functional_assert_async",
                         "sym_constrain_range", "record_stream"))
OVERWRITES = frozenset(("copy_", "fill_", "zero_"))   # in-place ops that do not read their target
CONVOLUTIONS = frozenset(("convolution", "_convolution", "convolution_overrideable"))
POOLS_MAX = frozenset(("max_pool1d", "max_pool2d", "max_pool3d", "max_pool1d_with_indices",
                       "max_pool2d_with_indices", "max_pool3d_with_indices"))
POOLS_AVG = frozenset(("avg_pool1d", "avg_pool2d", "avg_pool3d"))
POOLS_ADAPTIVE = frozenset(("_adaptive_avg_pool2d", "_adaptive_avg_pool3d", "adaptive_avg_pool1d",
                            "adaptive_max_pool1d", "adaptive_max_pool2d", "adaptive_max_pool3d"))
INDEXED_WRITES = frozenset(("index_copy_", "index_put_", "index_add_"))   # in place, partial
SDPA_KERNELS = frozenset(("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_flash_attention",
                          "_scaled_dot_product_efficient_attention", "_scaled_dot_product_cudnn_attention",
                          "_scaled_dot_product_fused_attention_overrideable"))

_ARG_NAMES: dict[torch._ops.OpOverload, tuple[str, ...]] = {}


def _named(func: torch._ops.OpOverload, args: tuple, kwargs: dict) -> dict:
    names = _ARG_NAMES.get(func)
    if names is None:
        names = _ARG_NAMES[func] = tuple(a.name for a in func._schema.arguments)
    return dict(zip(names, args, strict=False)) | kwargs


def _part(target, label, kind, op_class, family, macs, flop, gemm, par, reads, writes,
          moves_data=True, classified=True, touched=None) -> Part:
    return Part(target, label, kind, op_class, family, int(macs), int(flop), gemm, par, moves_data,
                classified, tuple(reads), tuple(writes), touched)


def _rows(t: torch.Tensor, rows: int) -> TensorSpec:
    """`rows` rows (index into dim 0) of `t`, capped at the whole tensor."""
    whole = spec_of(t)
    if t.dim() == 0 or rows >= t.shape[0]:
        return whole
    return TensorSpec((rows, *t.shape[1:]), whole.dtype, rows * (whole.nbytes // t.shape[0]))


def _like(source: torch.Tensor, target: torch.Tensor) -> TensorSpec:
    """As many elements of `target` as `source` holds, at `target`'s element size."""
    elements = min(source.numel(), target.numel())
    return TensorSpec(tuple(source.shape), dtype_name(target.dtype), elements * target.element_size())


def _embedding(target, named, reads, writes) -> Part:
    weight, indices = named["weight"], named["indices"]
    touched = {id(weight): _rows(weight, indices.numel())}
    return _part(target, "embedding", "reshape", "data", "data", 0, 0, None,
                 tensor_parallelism(writes[0] if writes else None), reads, writes, touched=touched)


EMBEDDING_BAGS = ("_embedding_bag", "_embedding_bag_forward_only")   # the latter where no gradient is needed


def _embedding_bag(target, named, reads, writes) -> Part:
    weight, indices, pooled = named["weight"], named["indices"], writes[0]
    touched = {id(weight): _rows(weight, indices.numel())}
    flop = max(indices.numel() * weight.shape[-1] - pooled.numel(), 0)
    return _part(target, "embedding_bag", "reshape", "data", "data", 0, flop, None, tensor_parallelism(pooled),
                 reads, writes[:1], touched=touched)


def _indexed_write(target, base, named, reads, writes) -> Part:
    """index_copy_ / index_put_ / index_add_ on `self`: the source's worth of `self` is written
    (index_add_ also reads it), not all of it."""
    dest = named["self"]
    source = named.get("source", named.get("values"))
    touched = {id(dest): _like(source, dest)}
    reads = [t for t in reads if t is not dest] + ([dest] if base == "index_add" else [])
    adds = base == "index_add"
    return _part(target, base, "elementwise" if adds else "reshape", "elementwise" if adds else "data",
                 "elementwise" if adds else "data", 0, source.numel() if adds else 0, None,
                 tensor_parallelism(source), reads, writes, touched=touched)


def _convolution(target, label, named, reads, writes) -> Part:
    x, w, out = named["input"], named["weight"], writes[0]
    groups = int(named.get("groups", 1))
    transposed = bool(named.get("transposed", False))
    kernel = math.prod(w.shape[2:])
    n, c_in, c_out = x.shape[0], x.shape[1], out.shape[1]
    out_spatial, in_spatial = math.prod(out.shape[2:]), math.prod(x.shape[2:])
    if transposed:   # weight is (C_in, C_out/groups, *kernel): every input pixel scatters a kernel
        gemm = GemmShape(m=n * in_spatial, n=(c_out // groups) * kernel, k=c_in // groups, count=groups)
    else:
        gemm = GemmShape(m=n * out_spatial, n=c_out // groups, k=(c_in // groups) * kernel, count=groups)
    depthwise = groups > 1 and groups == c_in
    op_class = "depthwise" if depthwise else ("conv1x1" if kernel == 1 else "conv")
    par = Parallelism(n, c_out, out_spatial, out.numel(), depthwise, groups > 1, groups,
                      c_out if depthwise else gemm.n)
    return _part(target, label, "conv", op_class, "conv", gemm.macs, FLOP_PER_MAC * gemm.macs, gemm, par,
                 reads, writes)


def _gemm(base: str, named: dict) -> tuple[GemmShape, list[torch.Tensor]]:
    """The GEMM of a matrix-product op and its two operands."""
    if base in ("mm", "addmm", "_addmm_activation", "_scaled_mm", "_int_mm"):
        a, b = (named["mat1"], named["mat2"]) if "mat1" in named else (named["self"], named["mat2"])
        k_major = b.shape[1] > 1 and b.stride(1) == 1         # W[k, n] itself, not the view W[n, k].t()
        return GemmShape(m=a.shape[0], n=b.shape[1], k=a.shape[1], k_major=k_major), [a, b]
    if base in ("bmm", "baddbmm", "addbmm"):
        a, b = (named["self"], named["mat2"]) if base == "bmm" else (named["batch1"], named["batch2"])
        return GemmShape(m=a.shape[1], n=b.shape[2], k=a.shape[2], count=a.shape[0]), [a, b]
    if base in ("mv", "addmv"):
        a, v = (named["self"], named["vec"]) if base == "mv" else (named["mat"], named["vec"])
        return GemmShape(m=a.shape[0], n=1, k=a.shape[1]), [a, v]
    if base == "linear":
        x, weight = named["input"], named["weight"]
        return GemmShape(m=x.numel() // x.shape[-1], n=weight.shape[0], k=x.shape[-1]), [x, weight]
    a, b = named["self"], named["tensor"]   # dot, vdot
    return GemmShape(m=1, n=1, k=a.shape[0]), [a, b]


GEMMS = frozenset(("linear", "mm", "addmm", "_addmm_activation", "_scaled_mm", "_int_mm", "bmm", "baddbmm",
                   "addbmm", "mv", "addmv", "dot", "vdot"))


def _pool_windows(in_size: int, out_size: int) -> int:
    """Sum of adaptive-pooling window lengths along one dimension (windows may overlap)."""
    return sum(math.ceil((i + 1) * in_size / out_size) - (i * in_size) // out_size for i in range(out_size))


def _pool_flop(base: str, named: dict, x: torch.Tensor, out: torch.Tensor) -> int:
    dims = int(next(ch for ch in base if ch.isdigit()))
    if base in POOLS_ADAPTIVE:
        windows = math.prod(out.shape[:-dims]) * math.prod(
            _pool_windows(i, o) for i, o in zip(x.shape[-dims:], out.shape[-dims:], strict=True))
        return windows - out.numel() if "max" in base else windows
    kernel = list(named["kernel_size"])
    window = math.prod(kernel * dims if len(kernel) == 1 else kernel)
    return out.numel() * (window - 1 if base in POOLS_MAX else window)


def count_aten(func: torch._ops.OpOverload, args: tuple, kwargs: dict, out: object,
               is_weight: IsWeight) -> list[Part]:
    """The parts of one ATen call (one part except for composites such as fused MHA)."""
    name = func.overloadpacket.__name__
    target = f"aten.{name}"
    base = name[:-1] if name.endswith("_") and not name.endswith("__") else name
    writes = tensors_in(out)
    reads = tensors_in((args, kwargs))
    if name in OVERWRITES and reads:
        reads = reads[1:]
    first_out = writes[0] if writes else None

    if base in VIEWS or (func.is_view and name not in COPIES):
        return [_part(target, base, "reshape", "data", "data", 0, 0, None, tensor_parallelism(first_out),
                      reads, writes, moves_data=False)]
    if name in INDEXED_WRITES:
        return [_indexed_write(target, base, _named(func, args, kwargs), reads, writes)]
    if base == "embedding":
        return [_embedding(target, _named(func, args, kwargs), reads, writes)]
    if base in EMBEDDING_BAGS:
        return [_embedding_bag(target, _named(func, args, kwargs), reads, writes)]
    if base in ALLOCATIONS:
        return [_part(target, base, "reshape", "data", "data", 0, 0, None, tensor_parallelism(first_out),
                      reads, writes, moves_data=False)]
    if name in COPIES or base in COPIES:
        return [_part(target, base, "reshape", "data", "data", 0, 0, None, tensor_parallelism(first_out),
                      reads, writes)]

    named = _named(func, args, kwargs)
    if base in CONVOLUTIONS:
        return [_convolution(target, base, named, reads, writes)]
    if base in GEMMS:
        gemm, operands = _gemm(base, named)
        kind = "linear" if any(is_weight(t) for t in operands) else "matmul"
        flop = FLOP_PER_MAC * gemm.macs
        if base == "_addmm_activation":
            flop += gemm.m * gemm.n * (5 if named.get("use_gelu") else 1)
        return [_part(target, base, kind, "matmul", "matmul", gemm.macs, flop, gemm, gemm_parallelism(gemm),
                      reads, writes)]
    if base in SDPA_KERNELS:
        return attention.sdpa(named, out, target)
    if base == "_native_multi_head_attention":
        return attention.native_mha(named, out)

    par = tensor_parallelism(first_out)
    numel = first_out.numel() if first_out is not None else 0
    if base in ACTIVATION_FLOP or base in ("gelu", "clamp"):
        if base == "gelu":
            per = 9 if named.get("approximate", "none") == "tanh" else 5
        elif base == "clamp":
            per = sum(named.get(bound) is not None for bound in ("min", "max"))
        else:
            per = ACTIVATION_FLOP[base]
        return [_part(target, base, "activation", "elementwise", "elementwise", 0, per * numel, None, par,
                      reads, writes)]
    if base in ELEMENTWISE_FLOP or (base in ("max", "min") and func._overloadname == "other"):
        return [_part(target, base, "elementwise", "elementwise", "elementwise", 0,
                      ELEMENTWISE_FLOP.get(base, 1) * numel, None, par, reads, writes)]
    if base in SOFTMAX:
        return [_part(target, base, "softmax", "elementwise", "elementwise", 0,
                      attention.SOFTMAX_FLOP_PER_ELEMENT * numel, None, par, reads, writes)]
    x = reads[0] if reads else None
    if base in ("native_batch_norm", "_native_batch_norm_legit", "_native_batch_norm_legit_no_training",
                "_native_batch_norm_legit_functional"):
        training = base != "_native_batch_norm_legit_no_training" and bool(named.get("training", False))
        return [_part(target, base, "norm", "norm", "norm", 0, (6 if training else 2) * x.numel(), None,
                      par, reads, writes)]
    if base in ("native_layer_norm", "native_group_norm", "_fused_rms_norm"):
        affine = named.get("weight") is not None
        per = (4 if affine else 3) if base == "_fused_rms_norm" else (8 if affine else 6)
        return [_part(target, base, "norm", "norm", "norm", 0, per * x.numel(), None, par, reads, writes)]
    if base in POOLS_MAX or base in POOLS_AVG or base in POOLS_ADAPTIVE:
        dims = int(next(ch for ch in base if ch.isdigit()))
        is_global = base in POOLS_ADAPTIVE and math.prod(first_out.shape[-dims:]) == 1
        return [_part(target, base, "pool", "reduce" if is_global else "pool", "pool", 0,
                      _pool_flop(base, named, x, first_out), None, par, reads, writes)]
    if base in REDUCTION_FLOP:
        return [_part(target, base, "pool", "reduce", "pool", 0, REDUCTION_FLOP[base] * x.numel(), None,
                      par, reads, writes)]
    return [_part(target, base, "other", "data", "data", 0, 0, None, par, reads, writes, classified=False)]
