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
    lo, hi = EXP_SUBNORMAL
    return float(((values >= lo) & (values < hi)).float().mean())


class SubnormalTracker:
    """Follows constants, exp-subnormal and subnormal fractions through the recorded ATen calls
    (module docstring); `observe` returns a call's subnormal_ops."""

    def __init__(self) -> None:
        # id -> (traced tensor kept alive so its id is not reused, value)
        self._const: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self._exp_sub: dict[int, tuple[torch.Tensor, float]] = {}
        self._sub: dict[int, tuple[torch.Tensor, float]] = {}

    def _frac(self, table: dict, t: torch.Tensor) -> float:
        hit = table.get(id(t))
        return hit[1] if hit is not None and hit[0] is t else 0.0

    def _value(self, t: torch.Tensor) -> torch.Tensor | None:
        hit = self._const.get(id(t))
        return hit[1] if hit is not None and hit[0] is t else None

    def observe(self, func, args: tuple, kwargs: dict, out: object) -> float:
        base = _base(func)
        reads = tensors_in((args, kwargs))
        writes = tensors_in(out)
        self._constants(func, base, args, kwargs, reads, writes)
        ops = self._subnormal_ops(base, args, kwargs, reads, writes)
        self._propagate(func, base, args, kwargs, reads, writes)
        return ops

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
    def _subnormal_ops(self, base, args, kwargs, reads, writes) -> float:
        fractions = [(t, self._frac(self._sub, t)) for t in reads]
        if base in MATMULS:
            mats = [t for t in reads if t.dim() >= 2][-2:]
            if len(mats) < 2:
                return 0.0
            a, b = mats
            n = b.shape[0] if base == "linear" else b.shape[-1]          # linear's weight is (N, K)
            m = a.numel() // a.shape[-1] if base == "linear" else a.shape[-2]
            return self._frac(self._sub, a) * a.numel() * n + self._frac(self._sub, b) * b.numel() * m
        if base in SOFTMAXES and reads:
            f = self._frac(self._exp_sub, reads[0])
            return SOFTMAX_ASSISTS * f * writes[0].numel() if f and writes else 0.0
        if base in ("copy", "clone", "contiguous") or not any(f for _, f in fractions):
            return 0.0
        return ELEMENTWISE_ASSISTS * sum(f * t.numel() for t, f in fractions)

    # -- propagation -----------------------------------------------------------------------------
    def _propagate(self, func, base, args, kwargs, reads, writes) -> None:
        if not writes or not reads:
            return
        out = writes[0]
        first = reads[0]
        if _moves_bits(func):
            for table in (self._exp_sub, self._sub):
                f = self._frac(table, first)
                if f:
                    table[id(out)] = (out, f)
            return
        if base in SOFTMAXES:
            f = self._frac(self._exp_sub, first)
            if f:
                self._sub[id(out)] = (out, f)
            return
        if base in SCALINGS:
            f = self._frac(self._sub, first)
            if f:
                self._sub[id(out)] = (out, f)
        if base in SHIFTS and self._value(out) is None:
            shift = self._shift_fraction(base, args, reads)
            carried = max((self._frac(self._exp_sub, t) for t in reads), default=0.0)
            f = max(shift, carried)
            if f:
                self._exp_sub[id(out)] = (out, f)

    def _shift_fraction(self, base, args, reads) -> float:
        """Fraction of an activation's entries a constant shifts into the exp-subnormal range."""
        if base == "masked_fill" and len(args) >= 3 and not isinstance(args[2], torch.Tensor):
            lo, hi = EXP_SUBNORMAL
            mask = self._value(args[1]) if isinstance(args[1], torch.Tensor) else None
            if mask is not None and lo <= float(args[2]) < hi:
                return float(mask.float().mean())
            return 0.0
        constants = [self._value(t) for t in reads]
        if any(v is None for v in constants) and any(v is not None for v in constants):
            return max(exp_subnormal_fraction(v) for v in constants if v is not None)
        return 0.0
