"""An LLM prediction on a layout of devices (estimate/parallel.py): one shard's prediction
(estimate/llm.py on model.workload.llm_shard's config), joined and replicated.

For a replica of tp shards, each step's time is the shard's plus its all-reduces: 2 per layer,
each of the step's hidden state (batch x new tokens x hidden x the activations' bytes: 2 in
bf16/fp16 and fp8 or weight-only compute, 4 in fp32). dp replicas serve separate requests:

    time_per_output_token = shard's + 2 x layers x allreduce(batch x hidden x bytes)
    time_to_first_token   = shard's + 2 x layers x allreduce(batch x context x hidden x bytes)
    tokens_per_s          = dp x the replica's tokens per step / the step's time
    energy_per_token_j    = tp x the shard's (every shard works on every token); the links'
                            energy and the idle power while they run are not counted

Memory and its fit are one device's: the shard's weights, KV cache and activations. The bounds
(bandwidth, host) are a replica's times dp, as tokens/s is. The step is `interconnect`-bound where
its all-reduces take longer than the shard's own work.

A pipeline of pp stages (each layers / pp consecutive layers, tp shards each) keeps pp
micro-batches of ceil(batch / pp) sequences in flight: while one stage runs a micro-batch, the
others run the rest, so every stage is busy and a sequence advances one token per pass through
all stages (GPipe, arXiv:1811.06965, without its training bubble: decode streams never drain):

    stage_s               = the stage shard's step at the micro-batch + its all-reduces
    time_per_output_token = pp x stage_s + (pp - 1) x p2p(micro-batch x hidden x bytes)
    time_to_first_token   = the same, of the prefill
    energy_per_token_j    = tp x pp x the stage shard's

A stage is traced as a model of layers / pp layers, so each stage carries the embedding and the
head: the head's share of a 70B model's step, about 1.5 % per stage, is counted pp times. The
memory fields are one stage device's at one micro-batch; a serving engine's KV-cache bound
(estimate/serving.py) counts every micro-batch's sequences.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from chipcal.model.chip import Chip
from chipcal.model.estimate.llm import LlmPrediction, predict_llm
from chipcal.model.estimate.parallel import (
    ALLREDUCES_PER_LAYER,
    Layout,
    LayoutError,
    allreduce_s,
    choose_layout,
    p2p_s,
)
from chipcal.model.estimate.placement import TRACE_DTYPE_BYTES
from chipcal.model.workload.llm_config import LlmConfig, StepKey, step_key, trace_dtype
from chipcal.model.workload.llm_layers import NotRepeating, with_layers
from chipcal.model.workload.llm_shard import expert_shard, tensor_shard
from chipcal.model.workload.types import LlmStep


def step_allreduce_s(layers: int, hidden: int, chip: Chip, tp: int, batch: int, tokens: int, dtype: str) -> float:
    """The all-reduces of `layers` layers in one forward of `tokens` new tokens per sequence at
    `batch` over tp shards."""
    message = batch * tokens * hidden * TRACE_DTYPE_BYTES[dtype]
    return layers * ALLREDUCES_PER_LAYER * allreduce_s(message, tp, chip)


def joined(shard: LlmPrediction, config: LlmConfig, chip: Chip, layout: Layout, dtype: str,
           batch: int | None = None) -> LlmPrediction:
    """`shard`'s prediction (one of layout.tp shards of one of layout.pp stages, at a micro-batch)
    as the layout's at `batch` running sequences (module docstring)."""
    pp, dp = layout.pp, layout.dp
    if not shard.supported:
        return replace(shard, model=config.name, tp=layout.tp, dp=dp, devices=layout.devices)
    micro, context = shard.batch, shard.context
    batch = batch or micro
    stage_layers = config.layers // pp

    def stages(step_s: float, ar_s: float, tokens: int) -> float:
        hop = p2p_s(micro * tokens * config.hidden * TRACE_DTYPE_BYTES[dtype], chip) if pp > 1 else 0.0
        return pp * (step_s + ar_s) + (pp - 1) * hop

    prefill_ar = step_allreduce_s(stage_layers, config.hidden, chip, layout.tp, micro, context, dtype)
    ttft = stages(shard.time_to_first_token_s, prefill_ar, context)
    common = dict(model=config.name, tp=layout.tp, dp=dp, devices=layout.devices, batch=batch,
                  time_to_first_token_s=ttft, energy_per_token_j=shard.energy_per_token_j * layout.tp * pp,
                  bandwidth_bound_tokens_per_s=shard.bandwidth_bound_tokens_per_s * dp,
                  host_bound_tokens_per_s=shard.host_bound_tokens_per_s * dp)
    if shard.phase == "prefill":
        return replace(shard, **common, tokens_per_s=dp * batch * context / ttft, allreduce_s=prefill_ar,
                       bottleneck="interconnect" if prefill_ar > shard.time_to_first_token_s else shard.bottleneck)
    decode_ar = step_allreduce_s(stage_layers, config.hidden, chip, layout.tp, micro, 1, dtype)
    tpot = stages(shard.time_per_output_token_s, decode_ar, 1)
    step = stages(micro / shard.step_tokens_per_s, decode_ar, 1)
    return replace(shard, **common, time_per_output_token_s=tpot, tokens_per_s=dp * batch / tpot,
                   step_tokens_per_s=dp * batch / step, allreduce_s=decode_ar,
                   bottleneck="interconnect" if decode_ar > shard.time_per_output_token_s else shard.bottleneck)


def predict_on_layout(config: LlmConfig, chip: Chip, precision: str, runtime: str, phase: str, batch: int,
                      context: int, new_tokens: int, llm_step: Callable[[StepKey], LlmStep],
                      devices: int = 1, layout: Layout | None = None, **launch) -> LlmPrediction:
    """`config` served on `devices` of `chip` in `layout` (None: choose_layout's pick), through
    one shard's steps from `llm_step`; `launch`: predict_llm's keyword arguments."""
    def shard_prediction(tp: int, pp: int = 1) -> LlmPrediction:
        try:
            stage = config if pp == 1 else with_layers(config, config.layers // pp)
            shard = expert_shard(stage, tp) if layout is not None and layout.ep > 1 else tensor_shard(stage, tp)
        except NotRepeating as exc:
            raise LayoutError(f"pp={pp}: {exc}") from None
        micro = -(-batch // pp)
        prefill, decode = (llm_step(step_key(shard, runtime, p, micro, context, new_tokens, precision))
                           if p == "prefill" or phase == "decode" else None for p in ("prefill", "decode"))
        return predict_llm(shard, prefill, decode, chip, precision, runtime, context, new_tokens, **launch)

    predictions: dict[int, LlmPrediction] = {}

    def fits(tp: int) -> bool:
        predictions[tp] = shard_prediction(tp)
        return not predictions[tp].supported or predictions[tp].fits_in_memory

    if layout is None:      # one device: predicted whether it fits or not (devices_needed says)
        layout = Layout() if devices == 1 else choose_layout(devices, config.heads, chip, fits)
    if layout.pp > 1 and config.layers % layout.pp:
        raise LayoutError(f"pp={layout.pp} does not divide {config.name}'s {config.layers} layers")
    shard = (predictions.get(layout.tp) if layout.pp == 1 else None) or shard_prediction(layout.tp, layout.pp)
    return joined(shard, config, chip, layout, trace_dtype(precision), batch)
