"""Cross-check our counts against fvcore and torch.utils.flop_counter.FlopCounterMode, family by family.

fvcore counts MACs (and calls them flops); FlopCounterMode counts 2 FLOP per MAC, so its
figures are halved here. Both run the real module on the real inputs (fvcore through a JIT
trace, FlopCounterMode under torch.no_grad(), as inference code calls it). For the MAC
families (conv, matmul, attention) every difference must be explained by a construct the
reference skipped; `agrees` says whether our MACs minus those constructs equal its count:
- fvcore has no handle for aten::scaled_dot_product_attention: it skips Q·K^T and P·V of
  F.scaled_dot_product_attention and of nn.MultiheadAttention's attention core.
- FlopCounterMode has no formula for aten._native_multi_head_attention, the fused kernel
  nn.MultiheadAttention runs in inference (eval, no grad): it skips all of its projections and
  its attention. On CPU with grad enabled it sees the unfused path and counts it, except the
  CPU SDPA kernel where its flop_registry has no formula for it (torch 2.14 has none for
  aten._scaled_dot_product_flash_attention_for_cpu; 2.15 has one): what it skips is read from
  the registry of the torch that runs, never assumed.
- Neither counts matrix-vector products (mv, addmv, dot) or aten._addmm_activation (and
  fvcore's aten::matmul handle raises on a vector operand).
- fvcore counts torch.einsum from numpy's einsum_path report, which prints the FLOP count to
  four significant digits: its einsum figures are rounded (MaxViT: off by about 1e-6). Not a
  construct it skips, so `agrees` stays False and the note says why.
Norm, pool and elementwise FLOP follow different conventions (fvcore: inference batch norm 1–2
per element, layer/group norm 5, adaptive average pool 1 per input element; FlopCounterMode
counts none of them), so they are reported side by side, not compared.
"""

from __future__ import annotations

import warnings
from collections import Counter
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from chipcal.model.errors import ChipcalError
from chipcal.model.precision import FLOP_PER_MAC
from chipcal.model.workload.characterization import characterize
from chipcal.model.workload.types import Workload

MAC_FAMILIES = ("conv", "matmul", "attention")
FAMILY_ORDER = ("conv", "matmul", "attention", "norm", "pool", "elementwise")

_FVCORE_FAMILY = {
    "conv": "conv", "linear": "matmul", "addmm": "matmul", "matmul": "matmul", "mm": "matmul",
    "bmm": "matmul", "einsum": "matmul", "batch_norm": "norm", "group_norm": "norm",
    "layer_norm": "norm", "instance_norm": "norm", "adaptive_avg_pool2d": "pool",
    "upsample_nearest2d": "elementwise", "upsample_bilinear2d": "elementwise", "grid_sampler": "elementwise",
}
_MHA_TARGETS = ("F.multi_head_attention_forward", "aten._native_multi_head_attention")
_UNCOUNTED = ("mv", "addmv", "dot", "vdot", "_addmm_activation", "_int_mm", "addbmm")
_SDPA_TARGETS = ("F.scaled_dot_product_attention", "F.multi_head_attention_forward:attention")
# SDPA kernels a CPU build may dispatch; FlopCounterMode skips one only when its flop_registry
# has no formula for it (torch 2.14 has none for the CPU flash kernel, 2.15 has one)
_SDPA_KERNELS = ("_scaled_dot_product_flash_attention_for_cpu", "_scaled_dot_product_attention_math")
# reference-side operator name -> (prefixes of our term targets it covers, why it is skipped)
_SKIPS = {
    "aten::scaled_dot_product_attention": (_SDPA_TARGETS, "fvcore has no handle for scaled_dot_product_attention"),
    **{name: (_SDPA_TARGETS, f"FlopCounterMode has no formula for aten.{name} in this torch build")
       for name in _SDPA_KERNELS},
    "aten::_native_multi_head_attention": (_MHA_TARGETS, "fvcore has no handle for the fused MHA kernel"),
    "_native_multi_head_attention": (
        _MHA_TARGETS, "FlopCounterMode has no formula for nn.MultiheadAttention's inference fast path"),
    **{name: ((f"aten.{name}",), f"FlopCounterMode has no formula for aten.{name}") for name in _UNCOUNTED},
    **{f"aten::{name}": ((f"aten.{name}",), f"fvcore has no handle for aten::{name}") for name in _UNCOUNTED},
}


@dataclass(frozen=True)
class FamilyCheck:
    family: str
    ours_macs: int
    ours_flop: int
    fvcore: int                 # fvcore's count: MACs for the MAC families, its own FLOP convention otherwise
    fvcore_skipped_macs: int    # our MACs in constructs fvcore skipped
    flopcounter_macs: int       # FlopCounterMode FLOP / FLOP_PER_MAC
    flopcounter_skipped_macs: int
    fvcore_agrees: bool | None  # None: not a MAC family (conventions differ)
    flopcounter_agrees: bool | None
    note: str


class _OpNames(TorchDispatchMode):
    """Counts the ATen operators a run dispatches (to see what FlopCounterMode saw)."""

    def __init__(self):
        super().__init__()
        self.seen: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def _fvcore(module: torch.nn.Module, inputs: tuple) -> tuple[dict[str, int], Counter[str], int]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # fvcore's import and JIT trace warn about deprecations
        try:
            from fvcore.nn import FlopCountAnalysis
        except ImportError:
            raise ChipcalError("the cross-check needs fvcore: pip install 'chipcal[crosscheck]'") from None

        analysis = FlopCountAnalysis(module, inputs)
        analysis.unsupported_ops_warnings(False)
        analysis.uncalled_modules_warnings(False)
        by_operator = analysis.by_operator()
        unsupported = Counter(analysis.unsupported_ops())
    counts = dict.fromkeys(FAMILY_ORDER, 0)
    for name, value in by_operator.items():
        counts[_FVCORE_FAMILY.get(name, "elementwise")] += int(value)
    return counts, unsupported, int(by_operator.get("einsum", 0))


def _flopcounter(module: torch.nn.Module, inputs: tuple, grad: bool) -> tuple[dict[str, int], Counter[str]]:
    from torch.utils.flop_counter import FlopCounterMode, flop_registry

    counter = FlopCounterMode(display=False)
    names = _OpNames()
    with torch.set_grad_enabled(grad), counter, names:
        module(*inputs)
    counts = dict.fromkeys(FAMILY_ORDER, 0)
    for packet, flop in counter.get_flop_counts().get("Global", {}).items():
        name = str(packet).removeprefix("aten.")
        family = ("attention" if "attention" in name else "conv" if "conv" in name else "matmul")
        counts[family] += int(flop) // FLOP_PER_MAC
    counted = {str(p).removeprefix("aten.") for p in flop_registry}
    return counts, Counter({k: v for k, v in names.seen.items() if k not in counted})


def _skipped(workload: Workload, skipped_ops: Counter[str]) -> tuple[dict[str, int], dict[str, list[str]]]:
    """Our MACs per family in constructs the reference skipped, and notes saying which."""
    macs = dict.fromkeys(FAMILY_ORDER, 0)
    notes: dict[str, list[str]] = {family: [] for family in FAMILY_ORDER}
    for name, calls in skipped_ops.items():
        if name not in _SKIPS:
            continue
        prefixes, why = _SKIPS[name]
        covered = dict.fromkeys(FAMILY_ORDER, 0)
        for op in workload.ops:
            for term in op.terms:
                if term.target.startswith(prefixes) and term.family in covered:
                    covered[term.family] += term.macs
        for family, value in covered.items():
            if value:
                macs[family] += value
                notes[family].append(f"{why} ({name}, {calls} calls): {value:,} MACs")
    return macs, notes


def crosscheck(module: torch.nn.Module, example_inputs, workload: Workload | None = None,
               grad: bool = False) -> tuple[FamilyCheck, ...]:
    """Our counts next to fvcore's and FlopCounterMode's, one record per family.

    `module` must hold real weights (the references run it); `workload` defaults to
    characterize(module, example_inputs). FlopCounterMode runs under no_grad (as inference code
    calls it) unless `grad`, which keeps nn.MultiheadAttention off its fused fast path.
    """
    inputs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    workload = workload or characterize(module, inputs)
    fv, fv_unsupported, fv_einsum = _fvcore(module, inputs)
    fc, fc_uncounted = _flopcounter(module, inputs, grad)
    fv_skip, fv_notes = _skipped(workload, fv_unsupported)
    fc_skip, fc_notes = _skipped(workload, fc_uncounted)
    ours_macs = workload.macs_by_family()
    ours_flop = dict.fromkeys(FAMILY_ORDER, 0)
    for op in workload.ops:
        for term in op.terms:
            if term.family in ours_flop:
                ours_flop[term.family] += term.flop
    rows = []
    for family in FAMILY_ORDER:
        mac_family = family in MAC_FAMILIES
        notes = [*fv_notes[family], *fc_notes[family]] if mac_family else [
            f"FLOP conventions differ (docs/workload.md); ours {ours_flop[family]:,} FLOP"]
        if family == "matmul" and fv_einsum:
            notes.append(f"fvcore's einsum count ({fv_einsum:,} MACs) is rounded to 4 significant digits "
                         "by numpy's einsum_path report")
        rows.append(FamilyCheck(
            family=family, ours_macs=ours_macs[family], ours_flop=ours_flop[family],
            fvcore=fv[family], fvcore_skipped_macs=fv_skip[family],
            flopcounter_macs=fc[family], flopcounter_skipped_macs=fc_skip[family],
            fvcore_agrees=(ours_macs[family] - fv_skip[family] == fv[family]) if mac_family else None,
            flopcounter_agrees=(ours_macs[family] - fc_skip[family] == fc[family]) if mac_family else None,
            note="; ".join(notes)))
    return tuple(rows)
