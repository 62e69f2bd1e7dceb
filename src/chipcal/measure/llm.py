"""Timing of a decoder LLM built from its config with random weights: a prefill, or decode steps.

The model is `AutoModelForCausalLM.from_config` with HF's random initialization, seeded (no
weights are downloaded), run in PyTorch eager as Hugging Face `generate` runs it (the eager
runtime, llm_config.StepPlan): a DynamicCache, `logits_to_keep=1`, greedy argmax of the logits.

    prefill  one call = the forward over B × N prompt tokens with a fresh cache, then argmax
    decode   the context is prefilled once (N + (M − 1) // 2 tokens: the step that stands for the
             M steps of a growing cache, llm_config.decode_cached); one call = the forward of one
             new token per sequence, argmax, then the cache is cropped back to that context, so
             every sample times the same step

Each call is one sample of a distribution (measure.timing: median, CI, n), bounded in time as
every model timing is (measure.timing.budget_s). Generate's own per-token bookkeeping
(stopping criteria, attention-mask and input_ids concatenation) is not timed: on a CPU it is
about 34 small ops, well under 1 % of a step.
"""

from __future__ import annotations

import torch

from chipcal.measure.device import CPU, Device
from chipcal.measure.models import (
    MODEL_FP32_MODE,
    ModelMeasurement,
    first_call_failure,
    numerics,
    power_provenance,
)
from chipcal.measure.power import PowerSource
from chipcal.measure.timing import budget_s, time_callable
from chipcal.model.errors import UnsupportedPrecision
from chipcal.model.workload.llm import build_llm, cache_argument, transformers_module
from chipcal.model.workload.llm_config import LlmConfig, decode_cached, trace_dtype

LLM_MEASURE_PRECISIONS = ("fp32", "bf16", "fp16")


def _step(config: LlmConfig, model, phase: str, batch: int, context: int, new_tokens: int, device: Device, seed: int):
    """The callable one sample times (module docstring)."""
    tf = transformers_module(config.name)
    arg = cache_argument(model)
    gen = torch.Generator().manual_seed(seed)

    def ids(tokens: int) -> torch.Tensor:
        return torch.randint(config.vocab, (batch, tokens), generator=gen).to(str(device))

    def forward(input_ids, cache):
        return model(input_ids=input_ids, use_cache=True, logits_to_keep=1, **{arg: cache}).logits.argmax(-1)

    if phase == "prefill":
        prompt = ids(context)

        def prefill():
            with torch.inference_mode():
                return forward(prompt, tf.DynamicCache(config=model.config))
        return prefill

    cache = tf.DynamicCache(config=model.config)
    with torch.inference_mode():
        forward(ids(decode_cached("eager", context, new_tokens)), cache)
    token = ids(1)

    def decode():
        with torch.inference_mode():
            out = forward(token, cache)
            cache.crop(-1)
            return out
    return decode


def measure_llm(config: LlmConfig, phase: str, batch: int, context: int, new_tokens: int, flop: int,
                precision: str = "fp32", device: Device = CPU, *, power: PowerSource | None = None,
                max_time_s: float = 5.0, min_samples: int = 10, threads: int | None = None,
                clock_probe=None, seed: int = 0, fp32_mode: str = MODEL_FP32_MODE,
                ceiling_s: float | None = None) -> ModelMeasurement:
    """Time one prefill or decode step of `config` at `batch` (module docstring). `flop` is the
    step's work (2 per MAC, from the characterized step); `fp32_mode`: measure.models.numerics;
    `ceiling_s`: `min_samples` required within it (measure.timing.time_callable). Raises OutOfMemory
    when the model or its cache does not fit, UnsupportedPrecision when the first forward fails at
    `precision`."""
    if precision not in LLM_MEASURE_PRECISIONS:
        raise UnsupportedPrecision(f"LLM timing runs {', '.join(LLM_MEASURE_PRECISIONS)}, not {precision}")
    config.check_positions(context + new_tokens)
    name = f"{config.name} {phase}"
    with numerics(precision, device, fp32_mode) as switches:
        try:
            model = build_llm(config, trace_dtype(precision), str(device), seed=seed)
            fn = _step(config, model, phase, batch, context, new_tokens, device, seed)
        except (RuntimeError, NotImplementedError) as exc:
            raise first_call_failure(exc, name, batch, precision, device) from None
        budget = budget_s(fn, device, max_time_s, min(min_samples, 6))
        latency = time_callable(fn, device=device, min_samples=min_samples, max_time_s=budget, warmup=0,
                                threads=threads, clock_probe=clock_probe,
                                ceiling_s=None if ceiling_s is None else max(ceiling_s, budget))
        reading = power.measure(fn, call_time_s=latency.median_s) if power is not None and power.available else None
    source, note = power_provenance(power, reading)
    return ModelMeasurement(model=config.name, batch=batch, precision=precision, device=str(device), flop=int(flop),
                            latency=latency, delivered_flop_per_s=flop / latency.median_s, power=reading,
                            power_source=source, power_note=note, numerics=switches)
