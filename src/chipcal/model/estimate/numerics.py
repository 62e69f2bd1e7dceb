"""What each op computes and stores in, under a framework's numerics switches: the `OpNumerics`.

A run's precision names what the user asked for; the framework decides per op:

* fp32 on a GPU with TF32 tensor cores (Ampere and later), three modes (FP32_MODES):
    pytorch  PyTorch's defaults: cuDNN convolutions in TF32 (torch.backends.cudnn.allow_tf32 is
             True by default), matmuls in fp32 (torch.backends.cuda.matmul.allow_tf32 False since
             PyTorch 1.12, torch.get_float32_matmul_precision() "highest"); depthwise
             convolutions have no tensor-core kernel and stay fp32
             (PyTorch docs, "TensorFloat-32 (TF32) on Ampere (and later) devices")
    strict   every op in fp32 (allow_tf32 off for both, as measure_model_efficiency's strict mode)
    tf32     every convolution and matmul in TF32 (set_float32_matmul_precision("high") + cuDNN)
  Elsewhere (CPUs, GPUs without TF32, other precisions) an op computes in the run's precision.
* autocast (torch.autocast to bf16/fp16): the weights and graph input stay fp32; per op
  (PyTorch AMP docs, "CUDA Op-Specific Behavior"):
    lower     convolutions, linear, matmul, bmm, attention: run in the low precision; an fp32 input
              is cast first (one cast kernel reading 4 B and writing 2 B per element), the weights
              are cast at every call (placement.weight_cast)
    float32   layer_norm, group_norm, softmax, sum/prod/norm reductions, exp/log/pow: run in fp32;
              a low-precision input is cast up first (2 B read, 4 B written per element)
    promote   everything else (elementwise, batch_norm, pooling, data movement) runs in the widest
              dtype of its inputs, with no cast kernel (mixed-dtype kernels)
  The dtype of each subgraph's output follows; its input bytes are the producers' outputs at the
  producers' dtypes (the graph input at fp32).
Bytes are traced at the workload's dtype; OpNumerics carries the factors that rescale a
subgraph's input, weight and output bytes, and the cast kernels that run before it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from chipcal.model.chip import Chip
from chipcal.model.errors import ChipcalError
from chipcal.model.mapping.base import is_mac_work
from chipcal.model.precision import BYTES_PER_ELEMENT

FP32_MODES = ("pytorch", "strict", "tf32")
AUTOCAST_PRECISIONS = ("bf16", "fp16")
TF32_CONV_CLASSES = ("conv", "conv1x1")          # cuDNN tensor-core convolutions (not depthwise)
TF32_MATMUL_CLASSES = ("matmul", "attention")
LOWER_KINDS = ("conv", "linear", "matmul", "attention")      # workload op kinds autocast lowers
FLOAT32_TARGETS = ("layernorm", "layer_norm", "groupnorm", "group_norm", "softmax", "log_softmax", "sum", "prod",
                   "norm", "exp", "log", "pow", "rsqrt", "reciprocal", "softplus", "cumsum")


class NumericsError(ChipcalError, ValueError):
    """A numerics switch that does not apply (unknown fp32 mode, autocast to fp32)."""


@dataclass(frozen=True)
class Cast:
    """A cast kernel autocast runs before an op: `elements` read at `from_bytes`, written at `to_bytes`."""

    elements: float
    from_bytes: float
    to_bytes: float

    @property
    def bytes(self) -> float:
        return self.elements * (self.from_bytes + self.to_bytes)


@dataclass(frozen=True)
class OpNumerics:
    """One subgraph's precision (what its engine computes in) and byte factors (bytes at the dtype
    it reads or writes ÷ bytes traced), and the activation casts that run before it."""

    precision: str
    input_scale: float
    weight_scale: float
    output_scale: float
    casts: tuple[Cast, ...] = ()

    @property
    def scales(self) -> tuple[float, float, float]:
        return (self.input_scale, self.weight_scale, self.output_scale)


def check_fp32_mode(mode: str) -> str:
    if mode not in FP32_MODES:
        raise NumericsError(f"unknown fp32 mode {mode!r}; valid: {', '.join(FP32_MODES)}")
    return mode


def switches(chip: Chip, precision: str, fp32_mode: str, autocast: bool) -> str:
    """The framework switches a prediction assumes, in words (recorded with it)."""
    if autocast:
        return f"torch.autocast({precision}): weights and graph input fp32"
    if precision == "fp32" and chip.kind == "gpu" and chip.supports("tf32"):
        return {"pytorch": "PyTorch defaults: cuDNN allow_tf32 on, matmul precision highest",
                "strict": "strict fp32: cuDNN allow_tf32 off, matmul precision highest",
                "tf32": "TF32: cuDNN allow_tf32 on, matmul precision high"}[fp32_mode]
    return f"{precision} throughout"


def op_precision(op_class: str, precision: str, chip: Chip, fp32_mode: str = "pytorch") -> str:
    """The precision an op of `op_class` computes in when the run asks for `precision` (no autocast)."""
    if precision != "fp32" or chip.kind != "gpu" or not chip.supports("tf32") or fp32_mode == "strict":
        return precision
    tf32 = TF32_CONV_CLASSES + (TF32_MATMUL_CLASSES if fp32_mode == "tf32" else ())
    return "tf32" if op_class in tf32 else "fp32"


def _autocast_policy(workload, subgraph) -> str:
    """lower / float32 / promote for a subgraph (its ops' kinds and targets, module docstring)."""
    ops = [workload.ops[i] for i in subgraph.op_indices if i < len(workload.ops)]
    if any(o.kind in LOWER_KINDS and o.macs > 0 for o in ops) or (not ops and is_mac_work(subgraph)):
        return "lower"
    names = {w for o in ops for w in re.split(r"[^a-z0-9_]+", o.target.lower())}
    if any(o.kind == "softmax" for o in ops) or names & set(FLOAT32_TARGETS):
        return "float32"
    return "promote"


def plan(workload, chip: Chip, precision: str, trace_bytes_per_element: float, fp32_mode: str = "pytorch",
         autocast: bool = False) -> tuple[OpNumerics, ...]:
    """OpNumerics of every subgraph of `workload` (module docstring)."""
    check_fp32_mode(fp32_mode)
    if not autocast:
        scale = BYTES_PER_ELEMENT[precision] / trace_bytes_per_element
        return tuple(OpNumerics(op_precision(sg.op_class, precision, chip, fp32_mode), scale, scale, scale)
                     for sg in workload.subgraphs)
    if precision not in AUTOCAST_PRECISIONS:
        raise NumericsError(f"autocast lowers to {' or '.join(AUTOCAST_PRECISIONS)}, not {precision}")
    low, full = BYTES_PER_ELEMENT[precision], BYTES_PER_ELEMENT["fp32"]
    out_bytes: dict[int, float] = {}       # subgraph index -> bytes per element of its output
    plans: list[OpNumerics] = []
    for sg in sorted(workload.subgraphs, key=lambda s: s.index):
        produced = [(workload.subgraphs[p].output_bytes, out_bytes[p]) for p in sg.depends_on if p in out_bytes]
        from_producers = sum(b for b, _ in produced)
        graph_input = max(0.0, sg.input_bytes - from_producers)     # the fp32 graph input
        read = [*produced, (graph_input, full)] if graph_input else produced
        elements = sum(b for b, _ in read) / trace_bytes_per_element
        widest = max((size for b, size in read if b > 0), default=full)
        policy = _autocast_policy(workload, sg)
        if policy == "lower":
            casts = tuple(Cast(b / trace_bytes_per_element, full, low) for b, size in read if b > 0 and size > low)
            out, compute, weights = low, precision, low
        elif policy == "float32":
            casts = tuple(Cast(b / trace_bytes_per_element, size, full) for b, size in read if b > 0 and size < full)
            out, compute, weights = full, "fp32", full
        else:
            casts, out, weights = (), widest, full
            compute = precision if widest == low else "fp32"
        in_size = (sum(b * size for b, size in read) / (elements * trace_bytes_per_element)
                   if elements else widest)
        if policy != "promote":      # after its casts the op reads its own dtype
            in_size = low if policy == "lower" else full
        out_bytes[sg.index] = out
        plans.append(OpNumerics(compute, in_size / trace_bytes_per_element, weights / trace_bytes_per_element,
                                out / trace_bytes_per_element, casts))
    by_index = {sg.index: p for sg, p in zip(sorted(workload.subgraphs, key=lambda s: s.index), plans, strict=True)}
    return tuple(by_index[sg.index] for sg in workload.subgraphs)
