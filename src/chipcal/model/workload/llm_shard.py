"""One device's share of a decoder LLM split by tensor parallelism, as a config of its own.

Megatron-LM's split (Shoeybi et al. 2019, arXiv:1909.08053, section 3), which vLLM and
TensorRT-LLM apply to Llama-family models: the attention heads are divided among the `tp`
devices (q, k, v column-parallel, the output projection row-parallel), so are the MLP's (or every
expert's) intermediate channels (gate and up column-parallel, down row-parallel), and so are the
vocabulary's rows of the embedding and the LM head (vocab-parallel, padded up). The hidden size,
the norms and the layer count stay. Where there are fewer KV heads than devices, each device keeps
one (vLLM replicates them: `QKVParallelLinear`, "num_kv_head_replicas").

An expert-parallel shard (`expert_shard`; vLLM's `--enable-expert-parallel`) splits the attention
and the vocabulary the same way but keeps each expert whole: E / n experts a device, of the full
intermediate width, computing the tokens x k / n (token, expert) rows routed to them. The
attention's all-reduce gives every device every token, and the experts' partial sums are reduced
the same way, so the joins are the same two all-reduces a layer.

So a shard is the same architecture with num_attention_heads / tp heads of the same head_dim,
max(1, num_key_value_heads / tp) KV heads, intermediate_size / tp and ceil(vocab_size / tp) rows:
characterized as any config (model.workload.llm), it counts one device's MACs, weights and KV
cache. What joins the shards, two all-reduces of the hidden state per layer, is
model.estimate.parallel's.
"""

from __future__ import annotations

import math

from chipcal.model.workload.llm_config import (
    EXPERT_SHARDS,
    EXPERTS_PER_TOKEN,
    LlmConfig,
    LlmConfigError,
    parse_config,
)

SHARDABLE = ("llama", "mistral", "mixtral", "qwen2")     # the Llama-style field names below


def tensor_shard(config: LlmConfig, tp: int) -> LlmConfig:
    """The config of one of `tp` tensor-parallel shards of `config` (module docstring);
    LlmConfigError where the split does not divide the model or the architecture is not one of
    SHARDABLE."""
    if tp == 1:
        return config
    if config.model_type not in SHARDABLE:
        raise LlmConfigError(f"{config.name}: tensor parallelism is modelled for {', '.join(SHARDABLE)} "
                             f"models, not {config.model_type}")
    raw = config.fields()
    intermediate = raw.get("intermediate_size")
    divides = config.heads % tp == 0 and isinstance(intermediate, int) and intermediate % tp == 0
    if not divides or not (config.kv_heads % tp == 0 or tp % config.kv_heads == 0):
        raise LlmConfigError(f"{config.name}: tp={tp} does not divide its {config.heads} heads, "
                             f"{config.kv_heads} KV heads and {intermediate} MLP channels")
    raw.update(num_attention_heads=config.heads // tp, num_key_value_heads=max(1, config.kv_heads // tp),
               head_dim=config.head_dim, intermediate_size=intermediate // tp,
               vocab_size=math.ceil(config.vocab / tp))
    return parse_config(raw, f"{config.name}@tp{tp}", config.source)


def expert_shard(config: LlmConfig, n: int) -> LlmConfig:
    """The config of one of `n` expert-parallel shards of a mixture of experts (module docstring):
    the attention split as tensor_shard splits it, config.experts / n whole experts. The router
    keeps min(k, experts / n) picks (it must pick among its own experts); the rows routed to the
    shard stay tokens x k / n. LlmConfigError where n does not divide the experts."""
    if not config.experts or config.experts % n:
        raise LlmConfigError(f"{config.name}: ep={n} needs a mixture of experts whose experts it divides "
                             f"({config.experts} experts)")
    split = tensor_shard(config, n)
    raw = split.fields()
    local = config.experts // n
    raw.update({"intermediate_size": config.fields()["intermediate_size"], "num_local_experts": local,
                "num_experts_per_tok": min(config.experts_per_token, local),
                EXPERTS_PER_TOKEN: config.experts_per_token, EXPERT_SHARDS: n})
    return parse_config(raw, f"{config.name}@ep{n}", config.source)
