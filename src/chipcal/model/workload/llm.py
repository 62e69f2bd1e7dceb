"""Decoder LLMs built from their config.json with Hugging Face transformers, characterized one
forward at a time: a prefill over the prompt, or one decode step with a KV cache holding the
context.

The model is `AutoModelForCausalLM.from_config` (random or no weights, no network) with SDPA
attention, on the meta device for counting: the real HF module runs through the usual capture
(capture.py, dispatch path, meta tensors), so op counts, bytes, fusion and the eager host cost
per op are those of the HF code. The forward is called as `generate` calls it: `logits_to_keep=1`
(the prefill computes logits for the last position only) with the runtime's cache (StepPlan):
a DynamicCache or a StaticCache, built with meta tensors outside the recording and holding
`cached` tokens, so attention and the cache update grow with the context.

Mixture of experts: routing is data-dependent (nonzero, where) and cannot run on meta tensors.
For the capture each experts module routes its T·k (token, expert) pairs evenly over the
expected number of distinct experts (llm_config.expected_experts, uniform routing, rounded to
whole experts, at least k) and runs, per expert, the ops HF's eager loop runs: gather the
tokens, gate/up GEMM, activation, product, down GEMM, routing weight, index_add_. The routing
bookkeeping (one_hot, nonzero, where: a few small ops per layer and expert) is not counted.
"""

from __future__ import annotations

import contextlib
import inspect
import types
from collections.abc import Iterator
from dataclasses import replace

import torch
import torch.nn.functional as F

from chipcal.model.workload.characterization import characterize
from chipcal.model.workload.llm_config import (
    LlmConfig,
    LlmConfigError,
    StepKey,
    TransformersMissing,
    expected_experts_rounded,
)
from chipcal.model.workload.llm_layers import expanded_step
from chipcal.model.workload.types import LlmStep

DTYPES = {"float32": torch.float32, "float16": torch.float16, "bfloat16": torch.bfloat16}


def transformers_module(model: str):
    """`transformers`, or TransformersMissing naming `model` and the install line."""
    try:
        import transformers
    except ImportError:
        raise TransformersMissing(model) from None
    return transformers


@contextlib.contextmanager
def _quiet(tf) -> Iterator[None]:
    """HF's advisory log lines (deprecations, generation defaults) off while we build and run."""
    level = tf.utils.logging.get_verbosity()
    tf.utils.logging.set_verbosity_error()
    try:
        yield
    finally:
        tf.utils.logging.set_verbosity(level)


def hf_config(config: LlmConfig):
    """The transformers config object of `config` (every field of its config.json)."""
    tf = transformers_module(config.name)
    fields = config.fields()
    model_type = fields.pop("model_type")
    with _quiet(tf):
        try:
            return tf.AutoConfig.for_model(model_type, **fields)
        except (ValueError, KeyError, TypeError) as exc:
            raise LlmConfigError(f"{config.source}: transformers {tf.__version__} cannot read it: "
                                 f"{str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None


def build_llm(config: LlmConfig, dtype: str = "float32", device: str | torch.device = "meta",
              seed: int | None = None) -> torch.nn.Module:
    """The HF causal LM of `config` in eval mode with SDPA attention, its tensors created on
    `device` in `dtype` (random weights from HF's initializer, seeded when `seed` is given)."""
    tf = transformers_module(config.name)
    hf = hf_config(config)
    if seed is not None:
        torch.manual_seed(seed)
    with _quiet(tf), torch.device(device):
        try:
            model = tf.AutoModelForCausalLM.from_config(hf, dtype=DTYPES[dtype], attn_implementation="sdpa")
        except ValueError as exc:
            raise LlmConfigError(f"{config.source}: transformers {tf.__version__} cannot build a causal LM "
                                 f"from it: {str(exc).splitlines()[0]}") from None
    return model.eval()


def matrix_counts(model: torch.nn.Module) -> tuple[int, int]:
    """(parameters, output channels) of the weight matrices GEMMs read: parameters of 2 or more
    dimensions that are not embedding tables. The reduction length K is the last dimension
    (nn.Linear, stacked experts), the first for GPT-2's Conv1D (x @ W); channels = numel / K."""
    tables = {id(m.weight) for m in model.modules() if isinstance(m, torch.nn.Embedding)}
    seen: set[int] = set()
    params = channels = 0
    for module in model.modules():
        for p in module.parameters(recurse=False):
            if p.dim() < 2 or id(p) in tables or id(p) in seen:
                continue
            seen.add(id(p))
            k = p.shape[0] if type(module).__name__ == "Conv1D" else p.shape[-1]
            params += p.numel()
            channels += p.numel() // k
    return params, channels


def _split(rows: int, parts: int) -> list[int]:
    return [rows // parts + (i < rows % parts) for i in range(parts)]


def _experts_forward(config: LlmConfig):
    """An experts-module forward that routes evenly over the expected experts (module docstring)."""

    def forward(self, hidden_states, top_k_index, top_k_weights):
        tokens = top_k_index.shape[0]
        out = torch.zeros_like(hidden_states)
        flat_weights = top_k_weights.reshape(-1)
        for j, n in enumerate(_split(config.routed_rows(tokens), expected_experts_rounded(config, tokens))):
            token_idx = torch.empty(n, dtype=torch.long, device=hidden_states.device)
            gate, up = F.linear(hidden_states[token_idx], self.gate_up_proj[j]).chunk(2, dim=-1)
            h = F.linear(self.act_fn(gate) * up, self.down_proj[j])
            h = h * flat_weights[token_idx, None]
            out.index_add_(0, token_idx, h.to(out.dtype))
        return out

    return forward


def _route_evenly(model: torch.nn.Module, config: LlmConfig) -> None:
    """Give every experts module of `model` the even-routing forward (capture only)."""
    patched = 0
    for module in model.modules():
        if all(isinstance(getattr(module, n, None), torch.nn.Parameter) and getattr(module, n).dim() == 3
               for n in ("gate_up_proj", "down_proj")) and hasattr(module, "act_fn"):
            module.forward = types.MethodType(_experts_forward(config), module)
            patched += 1
    if patched != config.layers:
        raise LlmConfigError(f"{config.name}: {config.experts} experts per layer, but {patched} of "
                             f"{config.layers} layers hold them as stacked gate_up_proj/down_proj weights "
                             "(transformers >= 5); this mixture-of-experts layout cannot be counted")


def cache_argument(model: torch.nn.Module) -> str:
    """Name of the forward's KV-cache argument: `cache` (transformers >= 5.24), else past_key_values."""
    return "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"


def make_cache(model: torch.nn.Module, config: LlmConfig, kind: str, batch: int, cached: int, capacity: int,
               dtype: torch.dtype, device: str | torch.device):
    """A DynamicCache, or a StaticCache of `capacity` tokens, holding `cached` tokens (empty
    tensors of the cache's shape; built outside any recording)."""
    tf = transformers_module(config.name)
    hf = model.config
    shape = (batch, config.kv_heads, cached, config.head_dim)
    if kind == "dynamic":
        cache = tf.DynamicCache(config=hf)
        extra = {}
    else:
        cache = tf.StaticCache(config=hf, max_cache_len=capacity)
        extra = {"cache_position": torch.arange(cached, device=device)}
    if cached:
        for layer in range(config.layers):
            cache.update(torch.zeros(shape, dtype=dtype, device=device),
                         torch.zeros(shape, dtype=dtype, device=device), layer, extra)
    return cache


class Forward(torch.nn.Module):
    """One forward as generate runs it: the ids of the new tokens with the cache, logits of the
    last position only (`logits_to_keep=1`)."""

    def __init__(self, model: torch.nn.Module):
        super().__init__()
        self.model = model
        self.cache_arg = cache_argument(model)

    def forward(self, input_ids, cache):
        return self.model(input_ids=input_ids, use_cache=True, logits_to_keep=1,
                          **{self.cache_arg: cache}).logits


def characterize_step(key: StepKey) -> LlmStep:
    """Characterize the forward `key` names on the meta device (module docstring): a deep model
    from traces of llm_layers.TRACED layers, its layers repeated (llm_layers.expanded_step)."""
    return expanded_step(key, trace_step)


def trace_step(key: StepKey) -> LlmStep:
    """The forward `key` names, every layer traced."""
    config = key.config
    tf = transformers_module(config.name)
    dtype = DTYPES[key.dtype]
    model = build_llm(config, key.dtype, "meta")
    if config.experts:
        _route_evenly(model, config)
    cache = make_cache(model, config, "static" if key.capacity else "dynamic", key.batch, key.cached,
                       key.capacity, dtype, "meta")
    ids = torch.zeros((key.batch, key.tokens), dtype=torch.long, device="meta")
    with _quiet(tf):
        workload = characterize(Forward(model), (ids, cache), model_name=config.name, capture="dispatch",
                                execution="meta", fuse=key.fuse, codegen=key.codegen)
    matrices, channels = matrix_counts(model)
    return LlmStep(workload=replace(workload, dtype=key.dtype), phase=key.phase, tokens=key.tokens,
                   cached=key.cached, capacity=key.capacity, params=workload.params, matrix_params=matrices,
                   matrix_channels=channels,
                   experts_touched=expected_experts_rounded(config, key.batch * key.tokens))
