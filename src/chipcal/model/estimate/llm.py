"""LLM inference on one chip: time to first token, time per output token, tokens/s, weights, KV
cache and memory fit, from two characterized forwards (a prefill, a decode step): `LlmPrediction`.

    time_to_first_token_s   the prefill (N prompt tokens of each of B sequences) under the runtime,
                            plus, eager, generate's own ops for the first token
    time_per_output_token_s the decode step that stands for all M steps (llm_config.decode_cached)
                            plus, eager, generate's per-token ops (GENERATE_LOOP_OPS), all issued
                            through the host queue (host.py): the loop syncs every token, so each
                            token's queue starts empty
    tokens_per_s            decode: B / time_per_output_token_s (summed over the batch);
                            prefill: B × N / time_to_first_token_s
    step_tokens_per_s       decode: B / the decode forward alone, without generate's own ops (what
                            a timing of the step measures, measure.llm); equal to tokens_per_s
                            where no loop ops are issued (a captured graph)
    bandwidth_bound_tokens_per_s  tokens of the step / (bytes it must move / spec DRAM bandwidth):
                            weights read (a mixture of experts: the experts touched) + KV cache
                            read + KV cache written; nothing else, no efficiency
    host_bound_tokens_per_s tokens of the step / the host's time to issue its ops (per-op cost,
                            class costs and call entry, host.run_queue); inf when a captured graph
                            replays the step (no per-op host cost)
    bottleneck              "host" when the host takes at least as long to issue the step's ops as
                            the device takes to run them (the slower side of the queue sets the
                            pace: tokens/s is then the host bound), else the step's (memory,
                            compute, overhead, power)

Counts of the step (exact, SI): MACs; weight bytes read; KV-cache bytes read = B × tokens
attended × KV bytes per token (a dynamic cache attends to the cached tokens plus the new ones,
a static cache to its whole buffer) and written = B × new tokens × KV bytes per token;
activation bytes = every other byte the kernels move (Σ subgraph inputs and outputs less the
KV traffic; with HF's dynamic cache this includes the copy torch.cat makes of the cache).

Memory: weights stored (weight-only int8/int4: `WEIGHT_ONLY`) + KV cache of B × (N + M) tokens
(window-capped) + the prefill's peak of live activations (memory.py). `devices_needed` = the
fewest devices whose memory holds that: a memory bound, not a claim that splitting the model
over that many devices runs at any given speed.

Weight-only quantization (`int8`, `int4` as LLM precisions): the weight matrices GEMMs read are
stored narrow and dequantized inside the matmul, which computes in bf16 with bf16 activations
and KV cache (torchao int8/int4 weight-only, gpt-fast):
    int8  per-output-channel symmetric, one bf16 scale per channel:   1 + 2/K bytes per weight
    int4  groups of 128 along K, bf16 scale and zero point per group: 0.5 + 4/128 bytes per weight
Embedding tables, norms and biases stay bf16. A GEMM's K loop (roofline.py: the latency floor of
a CTA streaming its K operand tile by tile, k_loop_cycles_per_byte per byte) streams the narrow
weights, so its charge per byte is scaled by bits / 16: a quarter of bf16's for int4.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields, replace

from chipcal.model.chip import Chip
from chipcal.model.estimate.host import DEFAULT_FRAMEWORK
from chipcal.model.estimate.prediction import (
    NAN,
    STATUS_OK,
    STATUS_UNSUPPORTED,
    Prediction,
    cast_kernel_s,
    chip_label,
    predict,
)
from chipcal.model.mapping.base import vector_engine
from chipcal.model.mapping.params import CalibrationParams, FamilyParams, params_for
from chipcal.model.precision import BYTES_PER_ELEMENT
from chipcal.model.workload.llm_config import LLM_RUNTIMES, LlmConfig, LlmConfigError, step_plan
from chipcal.model.workload.types import LlmStep, Subgraph, Workload

# ATen calls HF `generate` issues per new token outside the model's forward, views excluded
# (greedy search with the EOS stopping criterion: argmax, logits copy, isin/eq/any for EOS, the
# unfinished-sequence update, torch.cat of input_ids and attention_mask, cache_position update,
# one .item() sync). Counted with a TorchDispatchMode around `generate` of a 2-layer Llama
# and a 2-layer GPT-2, transformers 5.24: 41 calls per token, 7 of them views
# (tests/test_llm.py re-counts it with the installed transformers).
GENERATE_LOOP_OPS = 34


@dataclass(frozen=True)
class WeightOnly:
    """Weight-only quantization of the weight matrices (module docstring)."""

    precision: str
    bits: int
    group: int | None           # weights per scale along K; None: one per output channel
    scale_bytes: int            # per group: bf16 scale (+ bf16 zero point)
    compute: str = "bf16"

    def matrix_bytes(self, elements: float, k: int) -> float:
        """Bytes of `elements` weights whose reduction length is `k`, scales included."""
        return elements * self.bits / 8 + self.scale_bytes * elements / (self.group or k)

    def label(self) -> str:
        scales = "per-channel bf16 scales" if self.group is None else \
            f"groups of {self.group}, bf16 scale + zero point"
        return f"weight-only {self.precision} ({scales}), {self.compute} compute"


WEIGHT_ONLY: dict[str, WeightOnly] = {
    "int8": WeightOnly("int8", 8, None, 2),
    "int4": WeightOnly("int4", 4, 128, 4),
}
LLM_PRECISIONS = ("fp32", "bf16", "fp16", "fp8", "fp4", "int8", "int4")
DEVICES_NOTE = "a memory bound: the fewest devices whose memory holds weights, KV cache and activations, not a parallel-speed claim"


def compute_precision(precision: str) -> str:
    return WEIGHT_ONLY[precision].compute if precision in WEIGHT_ONLY else precision


def _quantized(subgraph: Subgraph, workload: Workload, scheme: WeightOnly) -> Subgraph:
    """`subgraph` with the weight matrices of its GEMMs at `scheme`'s bytes (the workload is
    traced in bf16, so the other bytes stay as they are)."""
    ops = [workload.ops[i] for i in subgraph.op_indices]
    if not any(op.kind == "linear" for op in ops):
        return subgraph
    weight = 0.0
    for op in ops:
        for w in op.weights:
            if op.kind == "linear" and len(w.shape) >= 2 and op.gemm is not None:
                weight += scheme.matrix_bytes(math.prod(w.shape), op.gemm.k)
            else:
                weight += w.nbytes
    return replace(subgraph, weight_bytes=round(weight))


def weight_only(workload: Workload, scheme: WeightOnly) -> Workload:
    """The workload with its GEMMs' weight matrices stored at `scheme` (traced in bf16)."""
    if workload.dtype != "bfloat16":
        raise LlmConfigError(f"weight-only {scheme.precision} needs a bf16 trace, got {workload.dtype}")
    return replace(workload, subgraphs=tuple(_quantized(s, workload, scheme) for s in workload.subgraphs))


def stored_weight_bytes(step: LlmStep, precision: str) -> float:
    """Bytes the weights occupy at `precision` (weight-only: matrices narrow, the rest bf16)."""
    scheme = WEIGHT_ONLY.get(precision)
    if scheme is None:
        return step.params * BYTES_PER_ELEMENT[precision]
    rest = (step.params - step.matrix_params) * BYTES_PER_ELEMENT[scheme.compute]
    if scheme.group is None:
        return rest + step.matrix_params * scheme.bits / 8 + scheme.scale_bytes * step.matrix_channels
    return rest + scheme.matrix_bytes(step.matrix_params, scheme.group)


def loop_op(chip: Chip, precision: str, params: FamilyParams) -> tuple[float, float]:
    """(device time, extra host issue time) of one of generate's loop ops: a kernel with almost no
    work, priced as an empty cast kernel on the vector engine (prediction.cast_kernel_s)."""
    vec = vector_engine(chip, precision)
    clock = vec[0].clock_hz if vec is not None else max(e.clock_hz for e in chip.engines)
    return cast_kernel_s(0.0, chip, clock, params)


@dataclass(frozen=True)
class StepCounts:
    """What one forward moves and computes (module docstring), at the run precision."""

    macs: int
    flop: int
    weight_bytes_read: float
    kv_read_bytes: float
    kv_written_bytes: float
    activation_bytes: float

    @property
    def must_move_bytes(self) -> float:
        return self.weight_bytes_read + self.kv_read_bytes + self.kv_written_bytes


def step_counts(config: LlmConfig, step: LlmStep, workload: Workload, precision: str) -> StepCounts:
    """Counts of `step` with `workload` its (possibly quantized) workload at `precision`."""
    bpe = BYTES_PER_ELEMENT[compute_precision(precision)]
    scale = bpe / BYTES_PER_ELEMENT["fp32" if workload.dtype == "float32" else "bf16"]
    per_token = config.kv_bytes_per_token(bpe)
    attended = config.cached_tokens(step.capacity if step.capacity else step.cached + step.tokens)
    kv_read = step.batch * attended * per_token
    kv_written = step.batch * step.tokens * per_token
    moved = sum(s.input_bytes + s.output_bytes for s in workload.subgraphs) * scale
    return StepCounts(macs=workload.macs, flop=workload.flop,
                      weight_bytes_read=sum(s.weight_bytes for s in workload.subgraphs) * scale,
                      kv_read_bytes=kv_read, kv_written_bytes=kv_written,
                      activation_bytes=max(0.0, moved - kv_read - kv_written))


@dataclass(frozen=True)
class LlmPrediction:
    """One (LLM, chip, phase, batch, context, precision, runtime) prediction (module docstring)."""

    model: str
    chip: str
    kind: str
    phase: str
    batch: int
    context: int
    new_tokens: int
    precision: str
    compute_precision: str
    weight_format: str
    runtime: str
    status: str
    reason: str = ""
    tokens_per_s: float = NAN
    step_tokens_per_s: float = NAN
    time_to_first_token_s: float = NAN
    time_per_output_token_s: float = NAN
    bandwidth_bound_tokens_per_s: float = NAN
    host_bound_tokens_per_s: float = NAN
    bottleneck: str = ""
    params: int = 0
    weight_bytes: float = NAN
    kv_bytes_per_token: float = NAN
    kv_cache_bytes: float = NAN
    activation_peak_bytes: float = NAN
    memory_bytes: float = NAN
    memory_capacity_bytes: float = NAN
    devices_needed: int = 0
    devices_needed_means: str = DEVICES_NOTE
    step_macs: int = 0
    step_flop: int = 0
    step_weight_bytes_read: float = NAN
    step_kv_read_bytes: float = NAN
    step_kv_written_bytes: float = NAN
    step_activation_bytes: float = NAN
    experts_touched: int = 0
    host_ops_per_step: int = 0
    generate_loop_ops: int = 0
    host_per_op_s: float = 0.0
    energy_per_token_j: float = NAN
    avg_power_w: float = NAN
    tp: int = 1                      # tensor-parallel shards of each replica (estimate/parallel.py)
    dp: int = 1                      # replicas
    devices: int = 1                 # tp x dp
    allreduce_s: float = 0.0         # the phase's step: its all-reduces joining the shards
    params_source: str = ""
    prefill: Prediction | None = field(default=None, repr=False)
    step: Prediction | None = field(default=None, repr=False)

    @property
    def supported(self) -> bool:
        return self.status == STATUS_OK

    @property
    def fits_in_memory(self) -> bool:
        return self.supported and self.memory_bytes <= self.memory_capacity_bytes

    def record(self) -> dict:
        """Flat record for tables, JSON and CSV (the per-forward predictions left out)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("prefill", "step")}
        out["fits_in_memory"] = self.fits_in_memory if self.supported else None
        return out


def _unsupported(config: LlmConfig, chip: Chip, phase: str, batch: int, context: int, new_tokens: int,
                 precision: str, runtime: str, reason: str) -> LlmPrediction:
    return LlmPrediction(model=config.name, chip=chip_label(chip), kind=chip.kind, phase=phase, batch=batch,
                         context=context, new_tokens=new_tokens, precision=precision,
                         compute_precision=compute_precision(precision), weight_format="", runtime=runtime,
                         status=STATUS_UNSUPPORTED, reason=reason,
                         memory_capacity_bytes=chip.memory.capacity_bytes)


def predict_llm(config: LlmConfig, prefill: LlmStep, decode: LlmStep | None, chip: Chip, precision: str,
                runtime: str, context: int, new_tokens: int, calibration: CalibrationParams | None = None,
                host_overhead_s: float | None = None, params: FamilyParams | None = None,
                host_source: str = "given (--host-overhead-s)", framework: str = DEFAULT_FRAMEWORK,
                fp32_mode: str = "pytorch") -> LlmPrediction:
    """Predict a request of `context` prompt tokens and `new_tokens` generated, at the batch of
    the steps, on `chip`. `decode` None: the prefill phase only (time to first token). The host
    cost per op: `host_overhead_s` (named by `host_source`), else the calibration's, else the
    `framework` default (host.py); `fp32_mode`: prediction.py."""
    if runtime not in LLM_RUNTIMES:
        raise LlmConfigError(f"LLM runtime must be one of {', '.join(LLM_RUNTIMES)}, got {runtime!r}")
    phase = "prefill" if decode is None else "decode"
    batch = prefill.batch
    compute = compute_precision(precision)
    scheme = WEIGHT_ONLY.get(precision)

    def run(step: LlmStep, loop: bool = True) -> tuple[Prediction, Workload, tuple[tuple[float, float], ...]]:
        step_runtime = "eager" if step_plan(runtime, step.phase).host_issued else "compiled"
        chosen = params or params_for(chip.name, chip.kind, calibration, chip.active_mode, step_runtime, framework)
        if scheme is not None:
            chosen = replace(chosen, k_loop_cycles_per_byte=chosen.k_loop_cycles_per_byte * scheme.bits
                             / (8 * BYTES_PER_ELEMENT[scheme.compute]))
        workload = weight_only(step.workload, scheme) if scheme else step.workload
        trailing = (loop_op(chip, compute, chosen),) * GENERATE_LOOP_OPS \
            if loop and runtime == "eager" and chip.supports(compute) else ()
        return predict(workload, chip, compute, params=chosen, runtime=step_runtime,
                       host_overhead_s=host_overhead_s, host_source=host_source, framework=framework,
                       fp32_mode=fp32_mode, trailing_ops=trailing), workload, trailing

    first, first_workload, _ = run(prefill)
    if not first.supported:
        return _unsupported(config, chip, phase, batch, context, new_tokens, precision, runtime, first.reason)
    weights = stored_weight_bytes(prefill, precision)
    kv_per_token = config.kv_bytes_per_token(BYTES_PER_ELEMENT[compute])
    kv_cache = batch * config.cached_tokens(context + new_tokens) * kv_per_token
    activations = first.peak_activation_bytes
    memory = weights + kv_cache + activations
    capacity = chip.memory.capacity_bytes
    if decode is None:
        pred, step, workload, tokens = first, prefill, first_workload, batch * context
        trailing = ()
    else:
        pred, workload, trailing = run(decode)
        step, tokens = decode, batch
    forward = run(decode, loop=False)[0] if decode is not None and trailing else pred
    counts = step_counts(config, step, workload, precision)
    host_issued = step_plan(runtime, step.phase).host_issued
    host_ops = len(workload.subgraphs) + len(trailing) if host_issued else 0    # as predict queued them
    host_bound = tokens / pred.host_s if host_issued and pred.host_s > 0 else math.inf
    device_busy = pred.serial_latency_s + sum(d for d, _ in trailing)
    host_paced = host_issued and pred.host_s >= device_busy and not pred.power_limited
    bandwidth_bound = tokens / (counts.must_move_bytes / chip.memory.bandwidth_bytes_per_s)
    return LlmPrediction(
        model=config.name, chip=chip_label(chip), kind=chip.kind, phase=phase, batch=batch, context=context,
        new_tokens=new_tokens, precision=precision, compute_precision=compute,
        weight_format=scheme.label() if scheme else precision, runtime=runtime, status=STATUS_OK,
        tokens_per_s=tokens / pred.latency_s,
        step_tokens_per_s=tokens / forward.latency_s if decode is not None else NAN,
        time_to_first_token_s=first.latency_s,
        time_per_output_token_s=pred.latency_s if decode is not None else NAN,
        bandwidth_bound_tokens_per_s=bandwidth_bound, host_bound_tokens_per_s=host_bound,
        bottleneck="host" if host_paced else pred.bottleneck, params=prefill.params, weight_bytes=weights, kv_bytes_per_token=kv_per_token,
        kv_cache_bytes=kv_cache, activation_peak_bytes=activations, memory_bytes=memory,
        memory_capacity_bytes=capacity, devices_needed=max(1, math.ceil(memory / capacity)),
        step_macs=counts.macs, step_flop=counts.flop, step_weight_bytes_read=counts.weight_bytes_read,
        step_kv_read_bytes=counts.kv_read_bytes, step_kv_written_bytes=counts.kv_written_bytes,
        step_activation_bytes=counts.activation_bytes, experts_touched=step.experts_touched,
        host_ops_per_step=host_ops, generate_loop_ops=len(trailing) if decode is not None else 0,
        host_per_op_s=pred.host_s / host_ops if host_ops else 0.0, energy_per_token_j=pred.energy_j / tokens, avg_power_w=pred.avg_power_w,
        params_source=pred.params_source, prefill=first, step=pred if decode is not None else None)
