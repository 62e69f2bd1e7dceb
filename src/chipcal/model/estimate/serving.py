"""An LLM served with continuous batching at saturation (MLPerf's Offline scenario): output
tokens/s of a steady stream of requests of `input_tokens` prompt and `output_tokens` generated
tokens on average, on a layout of devices (estimate/llm_parallel.py).

A serving engine (vLLM, TensorRT-LLM) keeps as many sequences running as its KV-cache memory and
its sequence limit allow, and runs one iteration after another: a decode step of every running
sequence, plus the prompts of the sequences that replace the finished ones. In the steady state a
sequence runs output_tokens iterations, so each iteration admits batch / output_tokens new
sequences. The engine prefills the prompts waiting when slots free, so a prefill forward holds
the sequences that finished in one iteration, `group` of them, and runs once every
group / (batch / output_tokens) iterations:

    batch          = KV memory / (KV bytes per token x (input + output / 2)), at most max_batch if given
    KV memory      = MEMORY_UTILIZATION x a device's memory - a shard's weights - its prefill
                     activations at batch 1 (chunked prefill runs a chunk at a time)
    group          = max(1, round(batch / output_tokens))      prompts per prefill forward
    iteration_s    = decode step at `batch`, mean context input + output / 2
                     + prefill of `group` prompts x batch / (output_tokens x group)
    tokens_per_s   = dp x batch / iteration_s          (output tokens, all replicas)
    energy per output token = (decode step's + the prefill's share) energy / batch, x tp

A small group matters where a prefill of few prompts is inefficient (a CPU: measured against the
loop of measure/batching.py); on a GPU a prompt of hundreds of tokens keeps it busy at any group.

Beam search (`beams` W > 1: MLPerf's gptj runs 4) keeps W sequences per request. The engine
prefills a prompt once and shares its KV-cache blocks among the beams; each beam's generated
tokens get blocks of their own (TensorRT-LLM, cpp/tensorrt_llm/batch_manager/kvCacheManager.cpp:
BlockManager::addSequence allocates the context blocks with shareAmongBeams, allocateBlock the
generation blocks per beam where the beam width is above 1). So, with `batch` counting requests
(as TensorRT-LLM's max_batch_size does, beside max_beam_width):

    batch          = KV memory / (KV bytes per token x (input + W x output / 2))
    iteration_s    = decode step of W x batch sequences at a prompt of input / W each
                     + the prefill share as above
    tokens_per_s   = dp x batch / iteration_s          (a request's output: its best beam)
    energy per output token = W x the decode step's per sequence + the prefill's share

The prompt's KV blocks are read from DRAM once a request, not once a beam: the attention
kernel's grid is (heads, batch x beams) with the heads varying fastest (TensorRT-LLM,
cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/decoderMaskedMultiheadAttentionLaunch.h,
mmha_launch_kernel_ex), so a request's W beams run together and read the same shared blocks, the
later ones from L2. So the step is traced at input / W prompt tokens a beam (the DRAM bytes), and
each attention kernel re-reads the rest, W x batch x (input - input / W) tokens' KV, through the
on-chip level: on-chip time and energy, as every byte a kernel touches passes that level
(Subgraph.onchip_reread_bytes, mapping.base.traffic). Its attention FLOPs over the prompt stay
W-fold low (at GPT-J's 890-token prompts, 3 % of the step's FLOPs). MLPerf v4.1's gptj rows bear
the DRAM reading out: 8 x H200 served 2,510 tokens/s a GPU, 8 x H100 2,470, where reading the
prompt from DRAM once a beam would make the step bound by DRAM bandwidth and the H200 (1.4 x the
H100's) 27 % faster. Not modelled for beams: the top-k over W x vocabulary logits and the beams'
reordering each step; early stopping (a request runs its best beam's `output_tokens` iterations).

A sequence holds input + output / 2 tokens of KV cache on average over its life (vLLM's paged
cache allocates blocks as tokens arrive). MEMORY_UTILIZATION is vLLM's default
(`gpu_memory_utilization` 0.9: docs.vllm.ai, "Engine Arguments"); an engine's own cap on running
sequences (vLLM's `max_num_seqs`, TensorRT-LLM's `max_batch_size`) is the caller's `max_batch`:
at saturation the KV cache is the bound.
Not modelled: the sequences' spread of lengths (the mean stands for it), preemption, prefix
caching, speculative decoding, prefill chunks fused into the decode step's forward.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TypeVar

from chipcal.model import memo
from chipcal.model.chip import Chip
from chipcal.model.errors import ChipcalError
from chipcal.model.estimate.llm import LlmPrediction
from chipcal.model.estimate.llm_parallel import predict_on_layout
from chipcal.model.estimate.parallel import Layout, LayoutError, layouts, pipelines
from chipcal.model.estimate.placement import TRACE_DTYPE_BYTES
from chipcal.model.workload.llm_config import LlmConfig, LlmConfigError, StepKey
from chipcal.model.workload.types import LlmStep

MEMORY_UTILIZATION = 0.9
R = TypeVar("R")


class NoRoomForKvCache(ChipcalError, ValueError):
    """The weights and activations leave no KV-cache memory for one sequence."""


@dataclass(frozen=True)
class Serving:
    """Continuous batching at saturation (module docstring), SI units, per layout."""

    model: str
    chip: str
    precision: str
    runtime: str
    input_tokens: int
    output_tokens: int
    tp: int
    pp: int                         # pipeline stages per replica
    ep: int                         # devices a stage's experts are spread over, whole (1: split by channel)
    dp: int
    devices: int
    batch: int                      # running requests per replica (each `beams` sequences)
    beams: int                      # sequences per request (beam search); 1: greedy or sampling
    kv_batch_limit: int             # what the KV-cache memory alone allows
    max_batch: int | None
    tokens_per_s: float             # output tokens, all replicas
    iteration_s: float
    decode_step_s: float
    prefill_share_s: float          # the iteration's share of its new sequences' prefill
    prefill_group: int              # prompts per prefill forward
    energy_per_token_j: float
    bottleneck: str
    weight_bytes: float             # per device
    kv_bytes_per_token: float       # per device
    memory_capacity_bytes: float

    def record(self) -> dict:
        return asdict(self)


def kv_batch_limit(first: LlmPrediction, input_tokens: int, output_tokens: int, beams: int = 1) -> int:
    """Requests of `beams` sequences the KV-cache memory of one device holds (module docstring),
    from a batch-1 prediction of the same shard."""
    room = MEMORY_UTILIZATION * first.memory_capacity_bytes - first.weight_bytes - first.activation_peak_bytes
    per_request = first.kv_bytes_per_token * (input_tokens + beams * output_tokens / 2)
    return max(0, math.floor(room / per_request))


def prefill_group(batch: int, output_tokens: int) -> int:
    """Prompts per prefill forward: the sequences that finish in one iteration (module docstring)."""
    return max(1, round(batch / output_tokens))


def offline(config: LlmConfig, chip: Chip, precision: str, runtime: str, input_tokens: int, output_tokens: int,
            llm_step: Callable[[StepKey], LlmStep], devices: int = 1, layout: Layout | None = None,
            max_batch: int | None = None, beams: int = 1, **launch) -> Serving:
    """Output tokens/s at saturation (module docstring) in `layout`, or without one in the
    layout of most tokens/s among those parallel.layouts allows (more shards leave more KV-cache
    room per replica, fewer replicas), or where none holds a sequence among parallel.pipelines;
    NoRoomForKvCache where no layout fits one request."""
    def engine(candidate: Layout) -> Engine:
        return Engine(config, chip, precision, runtime, input_tokens, output_tokens, llm_step, candidate, launch, beams)

    if layout is not None:
        return engine(layout).saturated(max_batch)
    return best_layout(config, chip, devices, lambda candidate: engine(candidate).saturated(max_batch),
                       (NoRoomForKvCache, LayoutError, LlmConfigError), NoRoomForKvCache)


def best_layout(config: LlmConfig, chip: Chip, devices: int, attempt: Callable[[Layout], R],
                refusals: tuple[type[Exception], ...], nothing: type[Exception]) -> R:
    """The run of most tokens/s that `attempt(layout)` gives over the layouts a serving engine
    tries on `devices`: parallel.layouts, and parallel.pipelines only where none of those serves.
    `refusals`: the errors of a layout that cannot serve; the last one is raised where no layout
    serves (a `nothing` error where there was no layout to try)."""
    why = None
    for candidates in (layouts(devices, config.heads, chip), pipelines(devices, config.heads, chip, config.layers)):
        found = []
        for candidate in candidates:
            try:
                found.append(attempt(candidate))
            except refusals as exc:
                why = exc
        if found:
            return max(found, key=lambda s: s.tokens_per_s)
    raise why or nothing(f"{config.name} on {chip.name}: no layout of {devices} devices")

class Engine:
    """One layout's serving engine for requests of `input_tokens` + `output_tokens` in `beams`
    sequences each: its predictions by running batch, each made once (a server search asks for
    the same batches again), and the engine saturated at a cap on its running requests."""

    def __init__(self, config: LlmConfig, chip: Chip, precision: str, runtime: str, input_tokens: int,
                 output_tokens: int, llm_step: Callable[[StepKey], LlmStep], layout: Layout, launch: dict,
                 beams: int = 1):
        self.config, self.chip, self.precision, self.runtime = config, chip, precision, runtime
        self.input_tokens, self.output_tokens, self.llm_step = input_tokens, output_tokens, llm_step
        self.layout, self.launch, self.beams = layout, launch, beams
        self._predictions: dict[tuple[int, int], LlmPrediction] = {}

    def predicted(self, batch: int) -> LlmPrediction:
        """The decode request at `batch` on the layout (prefill and decode step), once per batch."""
        return self._on_layout(batch, self.input_tokens, self.llm_step)

    def decode_step(self, batch: int) -> LlmPrediction:
        """The decode step of `batch` requests' beams: W x batch sequences at the prompt each beam
        reads from DRAM, input / W, re-reading the rest on chip (module docstring)."""
        if self.beams == 1:
            return self.predicted(batch)
        own = -(-self.input_tokens // self.beams)
        return self._on_layout(batch * self.beams, own, with_prompt_rereads(self.llm_step, self.input_tokens - own))

    def _on_layout(self, batch: int, input_tokens: int, llm_step: Callable[[StepKey], LlmStep]) -> LlmPrediction:
        key = (batch, input_tokens)
        if key not in self._predictions:
            self._predictions[key] = predict_on_layout(
                self.config, self.chip, self.precision, self.runtime, "decode", batch, input_tokens,
                self.output_tokens, llm_step, self.layout.devices, self.layout, **self.launch)
        return self._predictions[key]


    def saturated(self, max_batch: int | None) -> Serving:
        """The engine at saturation with at most `max_batch` requests running (None: the KV cache's
        bound)."""
        first, layout, output_tokens, beams = self.predicted(1), self.layout, self.output_tokens, self.beams
        limit = kv_batch_limit(first, self.input_tokens, output_tokens, beams) if first.supported else 0
        if limit < 1:
            raise NoRoomForKvCache(f"{self.config.name} on {first.chip} ({layout.label}): weights and activations "
                                   f"leave no KV-cache room for one request of {self.input_tokens}+{output_tokens} "
                                   f"tokens{f' in {beams} beams' if beams > 1 else ''}")
        batch = limit if max_batch is None else min(limit, max_batch)
        p = self.decode_step(batch)
        group = prefill_group(batch, output_tokens)
        g = self.predicted(group)
        forwards = batch / (output_tokens * group)          # prefill forwards per iteration
        prefill_share = g.time_to_first_token_s * forwards
        iteration = p.time_per_output_token_s + prefill_share
        # every shard of every stage prefills its micro-batches of the group (llm_parallel.py)
        prefill_energy = (g.prefill.energy_j * layout.tp * layout.pp * group / g.prefill.batch * forwards
                          if g.prefill is not None else 0.0)
        return Serving(
            model=self.config.name, chip=p.chip, precision=self.precision, runtime=self.runtime,
            input_tokens=self.input_tokens, output_tokens=output_tokens, tp=layout.tp, pp=layout.pp, ep=layout.ep, dp=layout.dp,
            devices=layout.devices, batch=batch, beams=beams, kv_batch_limit=limit, max_batch=max_batch,
            tokens_per_s=layout.dp * batch / iteration, iteration_s=iteration, decode_step_s=p.time_per_output_token_s,
            prefill_share_s=prefill_share, prefill_group=group,
            energy_per_token_j=p.energy_per_token_j * beams + prefill_energy / batch, bottleneck=p.bottleneck,
            weight_bytes=p.weight_bytes, kv_bytes_per_token=p.kv_bytes_per_token,
            memory_capacity_bytes=p.memory_capacity_bytes)


def with_prompt_rereads(llm_step: Callable[[StepKey], LlmStep], tokens: int) -> Callable[[StepKey], LlmStep]:
    """`llm_step` whose decode steps' attention kernels each re-read, through the on-chip level,
    `tokens` more of every sequence's KV cache (a beam's share of its request's prompt that the
    step's own trace leaves out: module docstring), in the step's traced dtype."""
    def step(key: StepKey) -> LlmStep:
        traced = llm_step(key)
        if key.phase != "decode":
            return traced
        per_layer = key.config.kv_bytes_per_token(TRACE_DTYPE_BYTES[key.dtype]) / key.config.layers
        reread = round(key.batch * tokens * per_layer)
        subgraphs = tuple(memo.moved(s, onchip_reread_bytes=reread) if s.op_class == "attention" else s
                          for s in traced.workload.subgraphs)
        return memo.moved(traced, workload=memo.moved(traced.workload, subgraphs=subgraphs))
    return step
