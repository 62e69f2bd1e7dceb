"""MLPerf's LLM benchmarks served as a serving engine serves them: continuous batching at
saturation for Offline (model.estimate.serving), the highest Poisson load within the latency
limits for Server (model.estimate.server), on all of a system's accelerators in the layout of
most tokens/s, with the datasets' mean lengths.

A benchmark maps to a Hugging Face config by name (LLM_BENCHMARKS; the presets of
model/workload/llm_config.py cite their config.json):
- llama2-70b (-99, -99.9): Llama-2-70b-chat-hf on OpenOrca, 24,576 samples;
- mixtral-8x7b: Mixtral-8x7B-Instruct-v0.1 on 5,000 each of OpenOrca, GSM8K and MBXP;
- from v5.0, llama2-70b-interactive: llama2-70b's model and data under tighter limits;
- from v5.0, llama3.1-405b (results spell it so, mlperf.conf llama3_1-405b): Llama-3.1-405B-Instruct
  on 8,313 long-context samples;
- gptj (-99, -99.9): GPT-J-6B on CNN-DailyMail's 13,368 validation articles, 4 beams a sample (below).
The lengths are the dataset's means, rounded to a token:
- prompt tokens from a published per-sample summary of the MLCommons pickles
  (openshift-psap/performance-dashboard at 71007029, `mlperf-data/summaries/`: llama2-70b 222.33,
  mixtral 427.39, llama3-1-405b 9,428.64);
- generated tokens from the reference implementations' READMEs (mlcommons/inference v4.1 tag,
  `language/llama2-70b/README.md` L245: 294.45; `language/mixtral-8x7b/README.md` L276: 145.9;
  v5.0 tag, `language/llama3.1-405b/README.md` L265: 684.68).
The Server limits are mlperf.conf's, p99 TTFT and TPOT: llama2-70b and mixtral 2 s and 200 ms (v4.1
tag, L68-69 and L72-73); llama3.1-405b 6 s and 175 ms (v5.0 tag, loadgen/mlperf.conf L84-85);
llama2-70b-interactive 450 ms and 40 ms (v5.1 tag, loadgen/mlperf.conf L95-96). From v5.1 the
Interactive scenario replaces that benchmark: a Server run of llama2-70b under 450 ms and 40 ms, of
llama3.1-405b under 4.5 s and 80 ms (v5.1 tag, tools/submission/submission_checker.py,
LLM_LATENCY_LIMITS). These are the benchmarks' definitions (mlcommons/inference), not any round's
results.
docs/findings/2026-11-29-mlperf-llm-first-rows.md has the derivation.

The runtime is "compiled": TensorRT-LLM and vLLM replay the decode step as a CUDA graph. The
precision is fp8 (weights, activations and KV cache, as NVIDIA's and AMD's v4.1 submissions ran
both models) where the chip has an fp8 engine, else fp16; TensorRT-LLM runs fp4 (NVFP4) where the
GPU has it (`closed/NVIDIA/documentation/calibration.md`, "LLM Quantization", v4.1 at 198fc467:
FP4 for selected linear and MLP layers and the KV cache on accelerators that support it; chipcal
runs every matrix product at fp4 there, attention's included). The engine's running batch is what
its KV cache holds (no submitter's batch setting is read: one parameter per system would be one per
row).

gptj. Beam search of 4 beams (NVIDIA's v4.1 `closed/NVIDIA/code/gptj/tensorrt/generation_config.json`:
runtime_beam_width 4, min 30 and max 128 output tokens; the reference's `backend_PyTorch.py`
num_beams 4: "only beam_size 4 is allowed for official submission"), served as
model.estimate.serving serves beams. Its fp8 covers the linear layers, attention's Q and K and the
KV cache (`closed/NVIDIA/documentation/calibration.md`, "When quantizing GPTJ").
- Output: 69 tokens, mlperf.conf's `gptj.*.token_latency_scaling_factor` (v4.1 tag, L65), by which
  LoadGen infers the tokens/s the rows publish from samples/s. The reference's generated text agrees:
  4,016,878 characters over 13,368 samples (submission_checker.py's gen_len) is 300.5 a sample,
  4.4 a token.
- Prompt: GPTJ_PROMPT_TOKENS = 890, derived. The per-sample prompt lengths published are the
  v5.1 llama3.1-8b benchmark's, the same 13,368 articles under Llama 3's tokenizer and a template
  of about 32 tokens (GPT-2's count and a BOS; performance-dashboard `llama3-1-8b-datacenter.csv`: mean 870.7). Scaled by r, each
  is r (L - 32) + 52 under GPT-J's (its template is 52 tokens under GPT-2's BPE) and truncated at
  1,919 (the reference's dataset.py). MLCommons counted 399 prompts over 1,919 tokens under GPT-J's
  tokenizer (mlcommons/inference issue #1384). Matching that count gives r = 1.002 and a mean of
  890.7 tokens; r 0.98 or 1.03 would put 334 or 478 prompts over, so the count pins the mean within
  a few tokens.
- Server: a query's p99 latency within 20 s (mlperf.conf v4.1 L58, target_latency 20000 ms), its
  longest output 128 tokens (server.Limits). SingleStream rows are not predicted: their p90
  latency needs the lengths' spread, and only the means are at hand.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from chipcal.model.chip import Chip
from chipcal.model.errors import ChipcalError
from chipcal.model.estimate import server, serving
from chipcal.model.estimate.parallel import Layout, LayoutError
from chipcal.model.estimate.server import Limits
from chipcal.model.workload.llm_config import LlmConfigError, StepKey, load_llm_config
from chipcal.model.workload.types import LlmStep

# gptj's mean prompt under GPT-J's tokenizer (GPT-2's BPE), derived: no per-sample count under it is
# published (module docstring, "gptj")
GPTJ_PROMPT_TOKENS = 890
RUNTIME = "compiled"
SCENARIOS = ("Offline", "Server", "Interactive")    # what `served` serves: the means stand for the lengths
PRECISIONS = ("fp8", "fp16")
FP4_STACKS = frozenset({"tensorrt"})     # stacks that run fp4 where the chip has it (module docstring)


@dataclass(frozen=True)
class LlmBenchmark:
    """One MLPerf LLM benchmark: its model's config, the dataset's mean lengths, the Server limits,
    and the beams a sample decodes (beam search)."""

    model: str              # a preset of model/workload/llm_config.py
    input_tokens: int
    output_tokens: int
    server: Limits          # p99 limits of the Server scenario
    interactive: Limits | None = None    # the Interactive scenario's; None: none
    beams: int = 1

    def limits(self, scenario: str) -> Limits:
        """The limits of a latency-bound scenario; NotServed where the benchmark has none."""
        if scenario == "Server":
            return self.server
        if scenario == "Interactive" and self.interactive is not None:
            return self.interactive
        raise NotServed(f"{self.model}: no {scenario} latency limits in MLPerf's definition")


class NotServed(ChipcalError, ValueError):
    """The model cannot be served on the system (no layout holds it, or none meets the limits)."""


LLM_BENCHMARKS = {
    "llama2-70b": LlmBenchmark("llama-2-70b", 222, 294, Limits(2.0, 0.2), interactive=Limits(0.45, 0.04)),
    "mixtral-8x7b": LlmBenchmark("mixtral-8x7b", 427, 146, Limits(2.0, 0.2)),
    "llama2-70b-interactive": LlmBenchmark("llama-2-70b", 222, 294, Limits(0.45, 0.04)),
    "llama3.1-405b": LlmBenchmark("llama-3.1-405b", 9429, 685, Limits(6.0, 0.175), interactive=Limits(4.5, 0.08)),
    "gptj": LlmBenchmark("gpt-j-6b", GPTJ_PROMPT_TOKENS, 69, Limits(latency_s=20.0, longest_tokens=128), beams=4),
}
LLM_BENCHMARKS["llama3_1-405b"] = LLM_BENCHMARKS["llama3.1-405b"]      # mlperf.conf's spelling


def llm_benchmark(benchmark: str) -> LlmBenchmark | None:
    """The LLM benchmark of an MLPerf benchmark name ("llama2-70b-99.9" -> llama2-70b), or None."""
    return LLM_BENCHMARKS.get(benchmark.removesuffix(".9").removesuffix("-99"))


@dataclass(frozen=True)
class Served:
    """A system's LLM row predicted: output tokens/s of all its accelerators, the engine's
    running batch per replica, its layout and bottleneck, and one accelerator's average power."""

    tokens_per_s: float
    batch: int
    layout: str
    bottleneck: str
    precision: str
    device_power_w: float


def precision_on(chip: Chip, stack: str) -> str | None:
    """The precision `stack` serves the LLM at on `chip` (module docstring); None if none of them."""
    if stack in FP4_STACKS and chip.supports("fp4"):
        return "fp4"
    return next((p for p in PRECISIONS if chip.supports(p)), None)


def served(bench: LlmBenchmark, chip: Chip, devices: int, scenario: str, stack: str,
           llm_step: Callable[[StepKey], LlmStep]) -> Served:
    """`bench` on `devices` of `chip` in `scenario` (one of SCENARIOS) under `stack`
    (validate.mlperf_stack); NotServed with the reason where no layout serves it."""
    precision = precision_on(chip, stack)
    if precision is None:
        raise NotServed(f"{chip.name} has no {' or '.join(PRECISIONS)} engine, the precisions LLM rows are served at "
                        "(an LLM's int8 in chipcal is weight-only, not an INT8 W8A8 submission's)")
    limits = None if scenario == "Offline" else bench.limits(scenario)
    config = load_llm_config(bench.model)
    request = (config, chip, precision, RUNTIME, bench.input_tokens, bench.output_tokens, llm_step)
    try:
        if limits is not None:
            load = server.server(*request, limits, devices, beams=bench.beams)
            batch = load.slots
        else:
            load = serving.offline(*request, devices, beams=bench.beams)
            batch = load.batch
    except (serving.NoRoomForKvCache, server.LimitsUnmet, LayoutError, LlmConfigError) as exc:
        raise NotServed(str(exc)) from None
    return Served(tokens_per_s=load.tokens_per_s, batch=batch, layout=Layout(load.tp, load.dp, load.pp, load.ep).label,
                  bottleneck=load.bottleneck, precision=precision,
                  device_power_w=load.energy_per_token_j * load.tokens_per_s / devices)
