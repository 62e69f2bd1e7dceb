"""Timing of a decoder LLM built from its config with random weights: a prefill, or decode steps.

The model is `AutoModelForCausalLM.from_config` with HF's random initialization, seeded (no
weights are downloaded), run in PyTorch eager as Hugging Face `generate` runs it (the eager
runtime, llm_config.StepPlan): a DynamicCache, `logits_to_keep=1`, greedy argmax of the logits.

    prefill  one call = the forward over B × N prompt tokens with a fresh cache, then argmax
    decode   the context is prefilled once (N + (M − 1) // 2 tokens: the step that stands for the
             M steps of a growing cache, llm_config.decode_cached); one call = the forward of one
             new token per sequence, argmax, then the cache is cropped back to that context, so
             every sample times the same step

    generate `model.generate` end to end as users time it (measure_generate): greedy, `min_new_tokens`
             = `max_new_tokens` = M, no EOS, `pad_token_id` 0, an attention mask of ones, after a
             4-token warm-up call. One sample = one call of M tokens, T; the prefill is timed the
             same way as a call of one token (the prompt's forward and one pass of the loop), P;
             the time per output token is (T − median P) / (M − 1): the M − 1 decode forwards and
             generate's own work around each (logits processors, stopping criteria, input_ids and
             mask concatenation, cache bookkeeping, the host sync that ends every token)

Each call is one sample of a distribution (measure.timing: median, CI, n), bounded in time as
every model timing is (measure.timing.budget_s). The step timing leaves generate's own
per-token work out; the generate timing includes it, so the two differ by exactly that.

With `profile`, each kernel's own time (measure.kernel_profile): of PROFILE_PASSES steps, or of one
output token of generate, derived as its time is: (GENERATE_PROFILE_CALLS calls of K = min(M, 8)
tokens less as many 1-token calls) / (K − 1) (kernel_profile.generate_profile_tokens). On a GPU
their sum is the device's busy time per token, and the rest of the token's time is the host's
(issue 55: the gap between a step and generate on one H100 host).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from chipcal.measure.device import CPU, Device
from chipcal.measure.kernel_profile import (
    GENERATE_PROFILE_CALLS,
    generate_profile_tokens,
    per_unit,
    profile_passes,
    profiled,
)
from chipcal.measure.models import (
    MODEL_FP32_MODE,
    ModelMeasurement,
    first_call_failure,
    numerics,
    power_provenance,
)
from chipcal.measure.power import PowerSource
from chipcal.measure.timing import Measurement, budget_s, time_callable
from chipcal.model.errors import ChipcalError, UnsupportedPrecision
from chipcal.model.workload.llm import build_llm, cache_argument, transformers_module
from chipcal.model.workload.llm_config import LlmConfig, decode_cached, trace_dtype

LLM_MEASURE_PRECISIONS = ("fp32", "bf16", "fp16")
GENERATE_WARMUP_TOKENS = 4


class GenerateTooShort(ChipcalError, ValueError):
    """A generate call of M tokens took no longer than its prefill: no time per token to derive."""


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
                ceiling_s: float | None = None, profile: bool = False) -> ModelMeasurement:
    """Time one prefill or decode step of `config` at `batch` (module docstring). `flop` is the
    step's work (2 per MAC, from the characterized step); `fp32_mode`: measure.models.numerics;
    `ceiling_s`: `min_samples` required within it (measure.timing.time_callable); `profile`: each
    kernel's time in a step too. Raises OutOfMemory when the model or its cache does not fit,
    UnsupportedPrecision when the first forward fails at `precision`."""
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
        kernels, profile_note = profiled(lambda: profile_passes(fn, device, warmup=0)) if profile else (None, None)
    source, note = power_provenance(power, reading)
    return ModelMeasurement(model=config.name, batch=batch, precision=precision, device=str(device), flop=int(flop),
                            latency=latency, delivered_flop_per_s=flop / latency.median_s, power=reading,
                            power_source=source, power_note=note, numerics=switches, kernels=kernels,
                            profile_note=profile_note)


def _generate_call(config: LlmConfig, model, batch: int, context: int, tokens: int, device: Device, seed: int):
    """One `generate` call of `tokens` new tokens per sequence, as measure_generate times it."""
    gen = torch.Generator().manual_seed(seed)
    prompt = torch.randint(config.vocab, (batch, context), generator=gen).to(str(device))
    mask = torch.ones_like(prompt)

    def call():
        with torch.inference_mode():
            return model.generate(prompt, attention_mask=mask, max_new_tokens=tokens, min_new_tokens=tokens,
                                  do_sample=False, eos_token_id=None, pad_token_id=0)
    return call


def _token_profile(config: LlmConfig, model, batch: int, context: int, new_tokens: int, device: Device, seed: int,
                   first):
    """The kernels of one output token of generate (module docstring), or None and why not."""
    tokens = generate_profile_tokens(new_tokens)
    calls = (_generate_call(config, model, batch, context, tokens, device, seed), first)
    # one call unprofiled first: the K-token call is new, and its first may grow the allocator's pool
    return profiled(lambda: per_unit(*(profile_passes(fn, device, passes=GENERATE_PROFILE_CALLS, warmup=1)
                                       for fn in calls), tokens - 1))


def per_token(whole: Measurement, prefill_s: float, new_tokens: int) -> Measurement:
    """Time per output token of each generate sample: (T − P) / (M − 1) (module docstring)."""
    samples = [(t - prefill_s) / (new_tokens - 1) for t in whole.samples_s]
    if min(samples) <= 0:
        raise GenerateTooShort(f"a generate call of {new_tokens} tokens took no longer than its prefill "
                               f"({min(whole.samples_s):.3g} s against {prefill_s:.3g} s): give more new tokens")
    m = Measurement.from_samples(samples, method=f"generate of {new_tokens} tokens less its prefill, / "
                                 f"{new_tokens - 1}; {whole.method}", threads=whole.threads,
                                 clocks_hz=whole.clocks_hz, other_cpus=whole.other_cpus)
    return replace(m, warnings=tuple(dict.fromkeys(m.warnings + whole.warnings)))   # each note once


@dataclass(frozen=True)
class GenerateMeasurement:
    """A generate timing: the time per output token (a ModelMeasurement whose latency is per
    token, its flop the decode step's) and the prefill it was derived with (module docstring)."""

    step: ModelMeasurement
    prefill: Measurement
    whole: Measurement


def measure_generate(config: LlmConfig, batch: int, context: int, new_tokens: int, flop: int,
                     precision: str = "fp32", device: Device = CPU, *, max_time_s: float = 5.0,
                     min_samples: int = 3, threads: int | None = None, clock_probe=None, seed: int = 0,
                     fp32_mode: str = MODEL_FP32_MODE, profile: bool = False) -> GenerateMeasurement:
    """Time HF `generate` end to end (module docstring): `new_tokens` ≥ 2 per call, `flop` the
    decode step's work. The prefill gets a quarter of `max_time_s`, the calls of `new_tokens`
    the rest (budget_s: room for `min_samples` calls); `profile`: each kernel's time per output
    token too. No power is read: a generate call's energy mixes the prefill's with the tokens'."""
    if precision not in LLM_MEASURE_PRECISIONS:
        raise UnsupportedPrecision(f"LLM timing runs {', '.join(LLM_MEASURE_PRECISIONS)}, not {precision}")
    if new_tokens < 2:
        raise GenerateTooShort("generate is timed over at least 2 new tokens (one decode forward)")
    config.check_positions(context + new_tokens)
    with numerics(precision, device, fp32_mode) as switches:
        try:
            model = build_llm(config, trace_dtype(precision), str(device), seed=seed)
            _generate_call(config, model, batch, context, GENERATE_WARMUP_TOKENS, device, seed)()
        except (RuntimeError, NotImplementedError) as exc:
            raise first_call_failure(exc, f"{config.name} generate", batch, precision, device) from None
        first = _generate_call(config, model, batch, context, 1, device, seed)
        whole_fn = _generate_call(config, model, batch, context, new_tokens, device, seed)
        timing = {"device": device, "warmup": 0, "threads": threads, "clock_probe": clock_probe}
        prefill = time_callable(first, min_samples=min_samples, max_time_s=max_time_s / 4, **timing)
        budget = budget_s(whole_fn, device, max_time_s, min_samples, warm=True)
        whole = time_callable(whole_fn, min_samples=min_samples, max_time_s=budget, **timing)
        kernels, profile_note = _token_profile(config, model, batch, context, new_tokens, device, seed,
                                               first) if profile else (None, None)
    latency = per_token(whole, prefill.median_s, new_tokens)
    step = ModelMeasurement(model=config.name, batch=batch, precision=precision, device=str(device), flop=int(flop),
                            latency=latency, delivered_flop_per_s=flop / latency.median_s, power=None,
                            power_source="unavailable", power_note="not read for generate: a call's energy "
                            "mixes the prefill's with the tokens'", numerics=switches, runtime="generate",
                            kernels=kernels, profile_note=profile_note)
    return GenerateMeasurement(step, prefill, whole)
