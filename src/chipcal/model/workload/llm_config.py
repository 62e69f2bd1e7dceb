"""Decoder LLMs described by a Hugging Face config.json: the shipped presets, the user's own file,
and what prediction needs from a config without torch (KV-cache bytes, positions, experts).

A model is named by a preset (`PRESETS`: the published config.json of each model, shipped in
llm_configs/) or by a path ending in .json (the config.json users already hold). Only the fields
below are read here; the whole file goes to `transformers.AutoConfig.for_model` when the model
is built (src/chipcal/model/workload/llm.py), so every field HF reads keeps its meaning.

    KV-cache bytes per token = 2 (K and V) × layers × kv_heads × head_dim × bytes per element
    cached tokens            = min(tokens, sliding_window) when the layers attend to a window
                               (Mistral 7B v0.1: 4096), else tokens
    expected experts touched = E × (1 − (1 − k/E)^T) for T tokens, each routed to k of E experts,
                               uniformly and independently (mixture of experts; an assumption:
                               real routers are not uniform)

Field aliases (GPT-2's names beside Llama's): n_layer, n_head, n_embd, n_positions;
head_dim defaults to hidden / heads and kv_heads to heads (multi-head attention).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from chipcal.model.errors import ChipcalError, UnknownName

PRESET_DIR = Path(__file__).with_name("llm_configs")
INSTALL_LINE = "pip install 'chipcal[llm]' (Hugging Face transformers)"


@dataclass(frozen=True)
class Preset:
    file: str               # in llm_configs/: the published config.json
    published_params: int   # parameter count as published (source)
    source: str


PRESETS: dict[str, Preset] = {
    "gpt2": Preset("gpt2.json", 124_439_808,
                   "https://huggingface.co/openai-community/gpt2/blob/main/config.json; 124M parameters "
                   "(model card), 124,439,808 exact: the tensors of model.safetensors without the 12 "
                   "attn.bias causal-mask buffers"),
    "llama-3.2-1b": Preset("llama-3.2-1b.json", 1_235_814_400,
                           "https://huggingface.co/meta-llama/Llama-3.2-1B/blob/main/config.json; 1.23B "
                           "parameters (model card; safetensors total 1,235,814,400)"),
    "llama-3-8b": Preset("llama-3-8b.json", 8_030_261_248,
                         "https://huggingface.co/meta-llama/Meta-Llama-3-8B/blob/main/config.json; 8.03B "
                         "parameters (safetensors total 8,030,261,248)"),
    "llama-2-70b": Preset("llama-2-70b.json", 68_976_648_192,
                          "https://huggingface.co/meta-llama/Llama-2-70b-hf/blob/main/config.json (MLPerf "
                          "Inference's llama2-70b benchmark runs its chat variant, the same shapes); 70B (model "
                          "card), 68,976,648,192 derived from the shapes: 80 x 855,654,400 per layer + 2 x 32,000 "
                          "x 8,192 (embedding, LM head) + 8,192"),
    "llama-3-70b": Preset("llama-3-70b.json", 70_553_706_496,
                          "https://huggingface.co/meta-llama/Meta-Llama-3-70B/blob/main/config.json; 70.6B "
                          "parameters (safetensors total 70,553,706,496)"),
    "llama-3.1-405b": Preset("llama-3.1-405b.json", 405_853_388_800,
                             "https://huggingface.co/meta-llama/Llama-3.1-405B-Instruct/blob/main/config.json "
                             "(MLPerf Inference's llama3.1-405b benchmark, from v5.0, runs it); 405B (model card), "
                             "405,853,388,800 derived from the shapes: 126 x 3,187,703,808 per layer + 2 x 128,256 "
                             "x 16,384 (embedding, LM head) + 16,384"),
    "gpt-j-6b": Preset("gpt-j-6b.json", 6_050_882_784,
                       "https://huggingface.co/EleutherAI/gpt-j-6b/blob/main/config.json (MLPerf Inference's gptj "
                       "benchmark runs it, fine-tuned on CNN-DailyMail: the same shapes); 6B (model card), "
                       "6,050,882,784 derived from the shapes: 28 x 201,355,264 per layer + 50,400 x 4,096 "
                       "(embedding) + 50,400 x 4,097 (LM head with its bias) + 8,192 (final norm)"),
    "mistral-7b": Preset("mistral-7b.json", 7_241_732_096,
                         "https://huggingface.co/mistralai/Mistral-7B-v0.1/blob/main/config.json; 7.24B "
                         "parameters (safetensors total 7,241,732,096)"),
    "qwen2.5-7b": Preset("qwen2.5-7b.json", 7_615_616_512,
                         "https://huggingface.co/Qwen/Qwen2.5-7B/blob/main/config.json; 7.61B parameters "
                         "(model card; safetensors total 7,615,616,512)"),
    "mixtral-8x7b": Preset("mixtral-8x7b.json", 46_702_792_704,
                           "https://huggingface.co/mistralai/Mixtral-8x7B-v0.1/blob/main/config.json; 46.7B "
                           "parameters, 2 of 8 experts per token (safetensors total 46,702,792,704)"),
}


class UnknownLlmError(UnknownName):
    kind = "LLM"


LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")     # a config.json's layer count, by architecture
# an expert-parallel shard's own keys (llm_shard.expert_shard): the experts a token picks among all
# devices' experts, and the devices; Hugging Face keeps unknown keys as attributes and reads neither
EXPERTS_PER_TOKEN, EXPERT_SHARDS = "chipcal_experts_per_token", "chipcal_expert_shards"


class LlmConfigError(ChipcalError, ValueError):
    """A config.json that cannot describe a decoder LLM; says which field and why."""


class TransformersMissing(ChipcalError, ImportError):
    """Building an LLM needs Hugging Face transformers, which is not installed."""

    def __init__(self, model: str):
        super().__init__(f"{model} is a Hugging Face LLM: building it needs transformers; {INSTALL_LINE}")


def is_llm(name: str) -> bool:
    """A preset name or a path to a config.json (anything ending in .json)."""
    return name.lower() in PRESETS or name.lower().endswith(".json")


def _int(raw: dict, where: str, *keys: str, default: int | None = None) -> int:
    for key in keys:
        value = raw.get(key)
        if value is not None:
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise LlmConfigError(f"{where}: {key} must be a positive integer, got {value!r}")
            return value
    if default is None:
        raise LlmConfigError(f"{where}: no {' / '.join(keys)}; a decoder LLM's config.json names it")
    return default


@dataclass(frozen=True)
class LlmConfig:
    """The facts of one decoder LLM that prediction uses; `text` is the whole config.json."""

    name: str
    model_type: str
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    max_positions: int
    experts: int                # 0: dense MLPs
    experts_per_token: int      # k of a mixture of experts (0: dense)
    sliding_window: int | None  # tokens each layer's cache keeps; None: all of them
    source: str
    published_params: int | None
    text: str                   # canonical JSON (sorted keys) of the config.json
    expert_shards: int = 1      # devices its experts are spread over, whole (llm_shard.expert_shard)

    @property
    def digest(self) -> str:
        """First 12 hex digits of the SHA-256 of the canonical config: names its cache entries."""
        return hashlib.sha256(self.text.encode()).hexdigest()[:12]

    def fields(self) -> dict:
        return json.loads(self.text)

    def kv_bytes_per_token(self, bytes_per_element: float) -> float:
        """2 × layers × kv_heads × head_dim × bytes: the keys and values one token adds."""
        return 2 * self.layers * self.kv_heads * self.head_dim * bytes_per_element

    def cached_tokens(self, tokens: int) -> int:
        """Tokens each layer's cache holds after `tokens` tokens (a sliding window caps it)."""
        return min(tokens, self.sliding_window) if self.sliding_window else tokens

    def expected_experts(self, tokens: int) -> float:
        """Expected distinct experts per layer that `tokens` tokens touch (uniform routing). On an
        expert-parallel shard (`expert_shards` devices of `experts` each), tokens x k / shards of
        the (token, expert) rows land on its experts, each on one of them at random."""
        if not self.experts:
            return 0.0
        e, k = self.experts, self.experts_per_token
        if self.expert_shards > 1:
            return e * (1.0 - (1.0 - 1.0 / e) ** self.routed_rows(tokens))
        return e * (1.0 - (1.0 - k / e) ** tokens)

    def routed_rows(self, tokens: int) -> int:
        """(token, expert) rows of `tokens` tokens this config's experts compute: tokens x k, over
        the expert shards (rounded up)."""
        return -(-tokens * self.experts_per_token // self.expert_shards)

    def check_positions(self, tokens: int) -> None:
        if tokens > self.max_positions:
            raise LlmConfigError(f"{self.name} holds at most {self.max_positions:,} positions "
                                 f"(max_position_embeddings); {tokens:,} asked (context + new tokens)")


def _window(raw: dict) -> int | None:
    """The sliding window every layer attends to, if the config turns one on for all layers."""
    window = raw.get("sliding_window")
    if not window or not raw.get("use_sliding_window", True):
        return None
    types = raw.get("layer_types")
    if types is not None and any(t != "sliding_attention" for t in types):
        return None     # mixed layers: the full-attention ones keep every token
    return int(window)


def parse_config(raw: object, name: str, source: str, published_params: int | None = None) -> LlmConfig:
    """LlmConfig from a config.json's content; LlmConfigError for anything that is not a decoder LLM."""
    if not isinstance(raw, dict):
        raise LlmConfigError(f"{source}: a config.json holds a JSON object, got {type(raw).__name__}")
    if "text_config" in raw:
        raise LlmConfigError(f"{source}: a multimodal config (text_config); give the text model's config.json")
    if not isinstance(raw.get("model_type"), str):
        raise LlmConfigError(f"{source}: no model_type (Hugging Face needs it to pick the architecture)")
    layers = _int(raw, source, *LAYER_KEYS)
    hidden = _int(raw, source, "hidden_size", "n_embd", "d_model")
    heads = _int(raw, source, "num_attention_heads", "n_head")
    kv_heads = _int(raw, source, "num_key_value_heads", default=1 if raw.get("multi_query") else heads)
    head_dim = _int(raw, source, "head_dim", default=hidden // heads)
    experts = _int(raw, source, "num_local_experts", "num_experts", default=0) if any(
        raw.get(k) for k in ("num_local_experts", "num_experts")) else 0
    top_k = _int(raw, source, EXPERTS_PER_TOKEN, "num_experts_per_tok", default=1) if experts else 0
    return LlmConfig(
        name=name, model_type=raw["model_type"], layers=layers, hidden=hidden, heads=heads,
        kv_heads=kv_heads, head_dim=head_dim, vocab=_int(raw, source, "vocab_size"),
        max_positions=_int(raw, source, "max_position_embeddings", "n_positions", "n_ctx"),
        experts=experts, experts_per_token=top_k, sliding_window=_window(raw), source=source,
        published_params=published_params, text=json.dumps(raw, sort_keys=True, separators=(",", ":")),
        expert_shards=_int(raw, source, EXPERT_SHARDS, default=1))


def load_llm_config(name: str) -> LlmConfig:
    """The preset `name`, or the config.json at path `name`."""
    preset = PRESETS.get(name.lower())
    if preset is not None:
        raw = json.loads((PRESET_DIR / preset.file).read_text())
        return parse_config(raw, name.lower(), preset.source, preset.published_params)
    if not name.lower().endswith(".json"):
        raise UnknownLlmError(name, sorted(PRESETS))
    path = Path(name).expanduser()
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        raise LlmConfigError(f"{name}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise LlmConfigError(f"{name}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    except json.JSONDecodeError as exc:
        raise LlmConfigError(f"{name}: not JSON ({exc.msg} at line {exc.lineno})") from None
    return parse_config(raw, path.stem if path.stem != "config" else path.parent.name or "config", str(path))


# --- how each runtime runs a step ---------------------------------------------------------------

LLM_RUNTIMES = ("eager", "compiled")
PHASES = ("prefill", "decode")


@dataclass(frozen=True)
class StepPlan:
    """How `runtime` runs one forward of `phase` (docs/llm.md, "Runtimes").

    eager:    Hugging Face generate in PyTorch eager: DynamicCache (torch.cat appends each step),
              one kernel per op issued by the host, prefill and decode alike.
    compiled: static KV cache (StaticCache: index_copy_ into a buffer of context + new tokens,
              attention over the whole buffer with a mask) and a decode step captured in a CUDA
              graph of the kernels TorchInductor generates; the prefill runs eager (its shape
              changes with the prompt; HF and gpt-fast do not compile it by default).
    """

    cache: str          # "dynamic" | "static"
    fuse: bool          # False: one kernel per op
    codegen: bool       # True: TorchInductor's kernels (fusion.py)
    host_issued: bool   # the host issues every kernel (per-op host cost, estimate/host.py)


def step_plan(runtime: str, phase: str) -> StepPlan:
    if runtime not in LLM_RUNTIMES:
        raise LlmConfigError(f"LLM runtime must be one of {', '.join(LLM_RUNTIMES)}, got {runtime!r}")
    if phase not in PHASES:
        raise LlmConfigError(f"phase must be one of {', '.join(PHASES)}, got {phase!r}")
    if runtime == "eager":
        return StepPlan("dynamic", fuse=False, codegen=False, host_issued=True)
    if phase == "prefill":
        return StepPlan("static", fuse=False, codegen=False, host_issued=True)
    return StepPlan("static", fuse=True, codegen=True, host_issued=False)


def decode_cached(runtime: str, context: int, new_tokens: int) -> int:
    """Tokens in the cache at the decode step that stands for all `new_tokens` steps.

    Step i (0 ≤ i < M) of a cache growing from N tokens attends to N + i + 1 of them, and its
    attention and cache copy cost is affine in i, so the mean over the M steps is the cost at
    N + (M − 1)/2 (exact for the linear terms; the step is evaluated at the integer below it,
    at most half a token off). A static cache attends to its whole buffer (N + M) at every step,
    so any step stands for all: the first, with N tokens.
    """
    return context + (new_tokens - 1) // 2 if step_plan(runtime, "decode").cache == "dynamic" else context


def trace_dtype(precision: str) -> str:
    """torch dtype the model is built in for `precision`: fp32/tf32 in float32, fp16 in float16,
    everything else (bf16, fp8, fp4, the weight-only int8/int4 that compute in bf16) in bfloat16 (the
    ops a runtime issues depend on it: RMSNorm casts to float32 and back in bf16)."""
    return {"fp32": "float32", "tf32": "float32", "fp16": "float16"}.get(precision, "bfloat16")


@dataclass(frozen=True)
class StepKey:
    """Identifies one characterized LLM forward (a cache entry)."""

    config: LlmConfig
    phase: str
    batch: int
    tokens: int         # new tokens per sequence in this forward (prefill: the prompt; decode: 1)
    cached: int         # tokens already in the cache
    capacity: int       # static cache length (0: a dynamic cache)
    dtype: str
    fuse: bool
    codegen: bool

    @property
    def slug(self) -> str:
        part = "codegen" if self.codegen else ("fused" if self.fuse else "eager")
        return (f"llm-{self.config.digest}-{self.phase}-b{self.batch}-t{self.tokens}-c{self.cached}"
                f"-s{self.capacity}-{self.dtype}-{part}")


def step_key(config: LlmConfig, runtime: str, phase: str, batch: int, context: int, new_tokens: int,
             precision: str) -> StepKey:
    """The forward that stands for `phase` of a request (`context` prompt tokens, `new_tokens`
    generated) at `batch` under `runtime` (StepPlan, decode_cached)."""
    if batch <= 0 or context <= 0 or new_tokens <= 0:
        raise LlmConfigError("batch, context and new tokens must be positive integers")
    config.check_positions(context + new_tokens)
    plan = step_plan(runtime, phase)
    capacity = context + new_tokens if plan.cache == "static" else 0
    if phase == "prefill":
        tokens, cached = context, 0
    else:
        tokens, cached = 1, decode_cached(runtime, context, new_tokens)
    return StepKey(config, phase, batch, tokens, cached, capacity, trace_dtype(precision), plan.fuse,
                   plan.codegen)


def counting_key(config: LlmConfig, phase: str, batch: int, context: int, new_tokens: int) -> StepKey:
    """The forward `chipcal workload` counts: traced in float32 as every model it counts, with a
    dynamic cache (the decode step at the mean context) and the fused partition."""
    key = step_key(config, "eager", phase, batch, context, new_tokens, "fp32")
    return StepKey(config, phase, batch, key.tokens, key.cached, 0, "float32", fuse=True, codegen=False)


def expected_experts_rounded(config: LlmConfig, tokens: int) -> int:
    """Whole experts a capture routes `tokens` tokens to: the expected count, rounded, at least k."""
    if not config.experts:
        return 0
    least = config.experts_per_token if config.expert_shards == 1 else 1
    return min(config.experts, max(least, round(config.expected_experts(tokens))))
