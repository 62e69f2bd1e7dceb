"""Subnormal fp32 values in a traced network, and the operations that take them as operands.

Why: Intel cores run a SIMD floating-point instruction with a subnormal input or result through a
microcode assist (Intel oneMKL developer guide, "Operating on Denormals"; perf event
FP_ASSIST.ANY); AMD Zen and Arm Neoverse cores handle subnormals in hardware. PyTorch leaves
flush-to-zero off. Swin's shifted-window attention masks its logits with -100: exp(-100) =
3.7e-44 is subnormal in fp32 (below 2^-126), so about half the entries of a masked window's
softmax are, and the attention-times-values matmul takes them as operands. On the 2-vCPU Xeon
(Sapphire Rapids class) VM, 192 x (49x49 @ 49x32) bmm took 20.2 ms with half of one operand
subnormal against 0.24 ms without (one thread); masks of -inf or -1e4 give exact zeros and cost
nothing.

What is tracked, during the capture (meta or real execution):
* constants: tensors made by factories (zeros, new_zeros, full, arange, ...) and by ops whose
  tensor inputs are all constants; they are evaluated for real on the CPU beside the meta run
  (at most CONSTANT_ELEMENTS elements), so a mask built from slices of a zero tensor has values;
* exp-subnormal fraction: an activation plus a constant (add, sub, masked_fill with a scalar):
  the fraction of the constant's entries c with exp(c) subnormal, ln(2^-149) <= c < ln(2^-126)
  (after a softmax subtracts its row maximum, O(1) logits keep a -100 entry at about -100);
* subnormal fraction: the output of softmax or exp of such a tensor.
Both follow views and copies; the subnormal fraction also follows scaling (mul, div).

`subnormal_ops` of an ATen call: its element-operations on subnormal operands, each counted as
an assisted lane (lanes / SIMD width = assisted instructions, mapping/cpu.py):
    matmul (mm, bmm, addmm, linear, ...)  f_A·numel(A)·N + f_B·numel(B)·M   (every multiply it feeds)
    softmax producing subnormals          SOFTMAX_ASSISTS × subnormal outputs
    any other op reading a subnormal input ELEMENTWISE_ASSISTS × f × numel(input)
Multipliers measured on that VM (thread CPU time, one thread): bmm 44 ns per assisted 16-lane
FMA whatever N (16-128) or which operand; softmax 229 ns per subnormal output vector (5.2 x 44);
an elementwise add or mul 87 ns per vector with subnormal inputs (2 x 44). Copies move bits and
take no assist.

`subnormal_split` of a call: the same operations by matrix (the index over all but the last two
dimensions, flattened), where the subnormals' position is known: a constant shift's entries are,
and views that keep the element order, softmax, scaling and the ops counted above carry them.
A CPU kernel gives its threads contiguous ranges of that index (at::parallel_for; MKL's batched
GEMM), so the thread holding the masked windows sets the time, not the average
(mapping/cpu.assist_cycles). Swin's shifted blocks mask only the last row and column of windows:
at batch 1 on two threads one thread holds 74 % of stage 1's assists, and the attention-times-values
bmm took 4.1 ms on that VM against 2.4 ms at an even split (docs/findings/2026-11-26-xeon-transfer.md, 6.).
"""

from __future__ import annotations

import math

import torch
from torch.utils._pytree import tree_map

from chipcal.model.workload.tensors import tensors_in

CONSTANT_ELEMENTS = 1 << 20          # largest constant evaluated beside the trace
EXP_SUBNORMAL = (math.log(2.0**-149), math.log(2.0**-126))   # exp(c) subnormal in fp32: [-103.3, -87.3)
SOFTMAX_ASSISTS = 5.0                # assisted lanes per subnormal softmax output (measured, module docstring)
ELEMENTWISE_ASSISTS = 2.0            # per subnormal input element of another op

FACTORIES = frozenset(("zeros", "ones", "full", "new_zeros", "new_ones", "new_full", "zeros_like",
                       "ones_like", "full_like", "arange", "eye", "linspace", "scalar_tensor"))
SHIFTS = frozenset(("add", "sub", "rsub", "masked_fill", "where"))
SOFTMAXES = frozenset(("_softmax", "_safe_softmax", "softmax", "exp"))
SCALINGS = frozenset(("mul", "div"))
MATMULS = frozenset(("mm", "bmm", "addmm", "baddbmm", "_addmm_activation", "linear", "matmul"))
BATCHED = frozenset(("bmm", "baddbmm", "matmul"))   # matmuls whose threads split the batch of matrices
ORDER_KEEPING = frozenset(("view", "_unsafe_view", "_reshape_alias", "reshape", "alias", "detach", "clone", "expand",
                           "contiguous", "copy", "_to_copy", "unsqueeze", "squeeze", "lift_fresh", "dropout"))
PROFILE_ELEMENTS = 1 << 26   # largest tensor whose subnormals are located by matrix


def _base(func) -> str:
    name = func.overloadpacket.__name__
    return name[:-1] if name.endswith("_") and not name.endswith("__") else name


def _moves_bits(func) -> bool:
    """Views and copies: values pass through unchanged."""
    from chipcal.model.workload.counts import COPIES, VIEWS

    base = _base(func)
    return base in VIEWS or base in COPIES or func.is_view or base in ("contiguous", "reshape", "expand")


def exp_subnormal_fraction(values: torch.Tensor) -> float:
    """Fraction of `values` whose exp is subnormal in fp32."""
    if values.numel() == 0 or not values.is_floating_point():
        return 0.0
    return float(_in_exp_subnormal_range(values).float().mean())


def _in_exp_subnormal_range(values: torch.Tensor) -> torch.Tensor:
    lo, hi = EXP_SUBNORMAL
    return (values >= lo) & (values < hi)


def _matrices(t: torch.Tensor) -> int:
    """How many matrices (all but the last two dimensions, flattened) `t` holds; 0 below 3-D."""
    return t.numel() // (t.shape[-1] * t.shape[-2]) if t.dim() >= 3 and t.shape[-1] * t.shape[-2] else 0


def _per_matrix(indicator: torch.Tensor, shape: torch.Size) -> torch.Tensor | None:
    """Mean of `indicator` broadcast to `shape`, per matrix of `shape` (flattened), without
    materialising the broadcast; None when `shape` has no matrices or is too large to follow."""
    if len(shape) < 3 or math.prod(shape) > PROFILE_ELEMENTS:
        return None
    ind = indicator.float().reshape((1,) * (len(shape) - indicator.dim()) + tuple(indicator.shape))
    per = torch.broadcast_to(ind, ind.shape[:-2] + tuple(shape[-2:])).mean(dim=(-2, -1))
    return torch.broadcast_to(per, tuple(shape[:-2])).reshape(-1)


def _split(profile: torch.Tensor | None, per_matrix: float) -> tuple[float, ...]:
    """Operations per matrix from a per-matrix fraction of a matrix's `per_matrix` operations; ()
    where the fraction is not located."""
    return () if profile is None else tuple(float(x) for x in profile * per_matrix)


def merge_splits(parts) -> tuple[float, ...]:
    """The subnormal_split of work made of several calls' (subnormal_ops, subnormal_split): their
    sum by matrix where every part with operations has a split of the same length, else () (an
    even spread: where the subnormals lie is not known)."""
    splits = [split for ops, split in parts if ops]
    if not splits or any(len(x) != len(splits[0]) or not x for x in splits):
        return ()
    return tuple(float(sum(col)) for col in zip(*splits, strict=True))


class SubnormalTracker:
    """Follows constants, exp-subnormal and subnormal fractions through the recorded ATen calls,
    with their split by matrix where known (module docstring); `observe` returns a call's
    (subnormal_ops, subnormal_split)."""

    def __init__(self) -> None:
        # id -> (traced tensor kept alive so its id is not reused, value)
        self._const: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        # id -> (traced tensor, fraction of its entries, that fraction per matrix or None)
        self._exp_sub: dict[int, tuple[torch.Tensor, float, torch.Tensor | None]] = {}
        self._sub: dict[int, tuple[torch.Tensor, float, torch.Tensor | None]] = {}

    @staticmethod
    def _entry(table: dict, t: torch.Tensor) -> tuple[float, torch.Tensor | None]:
        """(fraction, per-matrix fraction or None) of `t` in `table`; (0, None) where absent."""
        hit = table.get(id(t))
        return hit[1:] if hit is not None and hit[0] is t else (0.0, None)

    def _frac(self, table: dict, t: torch.Tensor) -> float:
        return self._entry(table, t)[0]

    def _profile(self, table: dict, t: torch.Tensor) -> torch.Tensor | None:
        return self._entry(table, t)[1]

    def _value(self, t: torch.Tensor) -> torch.Tensor | None:
        hit = self._const.get(id(t))
        return hit[1] if hit is not None and hit[0] is t else None

    def observe(self, func, args: tuple, kwargs: dict, out: object) -> tuple[float, tuple[float, ...]]:
        base = _base(func)
        reads = tensors_in((args, kwargs))
        writes = tensors_in(out)
        self._constants(func, base, args, kwargs, reads, writes)
        ops, split = (0.0, ()) if _moves_bits(func) else self._subnormal_ops(base, reads, writes)
        self._propagate(func, base, args, reads, writes)
        return (ops, split) if ops else (0.0, ())

    # -- constants -------------------------------------------------------------------------------
    def _constants(self, func, base, args, kwargs, reads, writes) -> None:
        if not writes or any(w.numel() > CONSTANT_ELEMENTS for w in writes):
            return
        factory = base in FACTORIES
        if not factory and (not reads or any(self._value(t) is None for t in reads)):
            for w in writes:       # written in place by an op not evaluated: its value is unknown now
                self._const.pop(id(w), None)
            return

        def real(x):
            if isinstance(x, torch.Tensor):     # a factory's tensor argument gives a dtype (a shape: *_like)
                value = self._value(x)
                if value is not None:
                    return value
                return torch.empty(x.shape if base.endswith("_like") else (), dtype=x.dtype)
            if isinstance(x, torch.device):
                return torch.device("cpu")
            return x
        try:
            result = func(*tree_map(real, args), **{k: ("cpu" if k == "device" else real(v))
                                                     for k, v in kwargs.items()})
        except Exception:    # a constant the CPU cannot rebuild stays unknown: no subnormals assumed
            return
        for w, value in zip(writes, tensors_in(result), strict=False):
            if tuple(value.shape) == tuple(w.shape):
                self._const[id(w)] = (w, value)

    # -- counting --------------------------------------------------------------------------------
    def _operand_ops(self, t: torch.Tensor, uses: int) -> tuple[float, tuple[float, ...]]:
        """Operations on `t`'s subnormal entries, each used `uses` times, and their split by matrix."""
        f, profile = self._entry(self._sub, t)
        if not f:
            return 0.0, ()
        return f * t.numel() * uses, _split(profile, t.shape[-1] * t.shape[-2] * uses) if profile is not None else ()

    def _subnormal_ops(self, base, reads, writes) -> tuple[float, tuple[float, ...]]:
        if base in MATMULS:
            mats = [t for t in reads if t.dim() >= 2][-2:]
            if len(mats) < 2:
                return 0.0, ()
            a, b = mats
            n = b.shape[0] if base == "linear" else b.shape[-1]          # linear's weight is (N, K)
            m = a.numel() // a.shape[-1] if base == "linear" else a.shape[-2]
            parts = [self._operand_ops(a, n), self._operand_ops(b, m)]
            located = base in BATCHED and a.dim() >= 3 and _matrices(a) == _matrices(b)
            return sum(o for o, _ in parts), merge_splits(parts) if located else ()
        if base in SOFTMAXES and reads:
            f, profile = self._entry(self._exp_sub, reads[0])
            if not f or not writes or writes[0].dim() < 2:
                return 0.0, ()
            out = writes[0]
            same = tuple(reads[0].shape) == tuple(out.shape)
            return (SOFTMAX_ASSISTS * f * out.numel(),
                    _split(profile, SOFTMAX_ASSISTS * out.shape[-1] * out.shape[-2]) if same else ())
        if not any(self._frac(self._sub, t) for t in reads):
            return 0.0, ()
        parts = [self._operand_ops(t, ELEMENTWISE_ASSISTS) for t in reads]
        same = bool(writes) and all(tuple(t.shape) == tuple(writes[0].shape) for t in reads if self._frac(self._sub, t))
        return sum(o for o, _ in parts), merge_splits(parts) if same else ()

    # -- propagation -----------------------------------------------------------------------------
    def _propagate(self, func, base, args, reads, writes) -> None:
        if not writes or not reads:
            return
        out = writes[0]
        first = reads[0]
        same = tuple(out.shape) == tuple(first.shape)
        if _moves_bits(func):
            keeps = (base in ORDER_KEEPING and out.numel() == first.numel() and out.dim() >= 3
                     and first.dim() >= 3 and tuple(out.shape[-2:]) == tuple(first.shape[-2:]))
            for table in (self._exp_sub, self._sub):
                f = self._frac(table, first)
                if f:
                    profile = self._profile(table, first) if keeps else None
                    table[id(out)] = (out, f, profile)
            return
        if base in SOFTMAXES:
            f = self._frac(self._exp_sub, first)
            if f:
                self._sub[id(out)] = (out, f, self._profile(self._exp_sub, first) if same else None)
            return
        if base in SCALINGS:
            f = self._frac(self._sub, first)
            if f:
                self._sub[id(out)] = (out, f, self._profile(self._sub, first) if same else None)
        if base in SHIFTS and self._value(out) is None:
            shifted = self._shift(base, args, reads, out)
            carried = max(((self._frac(self._exp_sub, t), self._profile(self._exp_sub, t)
                            if tuple(t.shape) == tuple(out.shape) else None) for t in reads),
                          key=lambda fp: fp[0], default=(0.0, None))
            f, profile = max(shifted, carried, key=lambda fp: fp[0])
            if f:
                self._exp_sub[id(out)] = (out, f, profile)

    def _shift(self, base, args, reads, out) -> tuple[float, torch.Tensor | None]:
        """Fraction of an activation's entries a constant shifts into the exp-subnormal range, and
        that fraction per matrix of the output."""
        if base == "masked_fill" and len(args) >= 3 and not isinstance(args[2], torch.Tensor):
            lo, hi = EXP_SUBNORMAL
            mask = self._value(args[1]) if isinstance(args[1], torch.Tensor) else None
            if mask is not None and lo <= float(args[2]) < hi:
                return float(mask.float().mean()), _per_matrix(mask.bool(), out.shape)
            return 0.0, None
        constants = [self._value(t) for t in reads]
        if any(v is None for v in constants) and any(v is not None for v in constants):
            f, v = max(((exp_subnormal_fraction(v), v) for v in constants if v is not None), key=lambda fv: fv[0])
            return f, _per_matrix(_in_exp_subnormal_range(v), out.shape) if f else None
        return 0.0, None
