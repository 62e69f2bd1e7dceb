"""LLMs (issues 37, 55): counts worked out by hand from each config, the KV cache, mixture of experts,
weight-only bytes, the runtimes' kernels, predictions against published measurements, and generate timed end
to end (the time per token by hand, the CLI's rows and refusals)."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from tiny_llm import TINY, TINY_MOE, write_config

pytest.importorskip("transformers")

from chipcal.measure.device import CPU
from chipcal.model.estimate.llm import (  # noqa: E402
    GENERATE_LOOP_OPS,
    predict_llm,
    step_counts,
    stored_weight_bytes,
)
from chipcal.model.registry import load_registry  # noqa: E402
from chipcal.model.workload.llm import build_llm  # noqa: E402
from chipcal.model.workload.llm_config import (  # noqa: E402
    PRESETS,
    LlmConfigError,
    load_llm_config,
    parse_config,
    step_key,
)


def tiny(fields=TINY, name="tiny"):
    return parse_config(fields, name, "test")


@pytest.fixture(scope="module")
def registry():
    return load_registry()


# --- parameters, by hand from the configs -------------------------------------------------------

def gpt2_params():
    v, p, d, layers = 50257, 1024, 768, 12          # vocab, positions, n_embd, n_layer
    per_layer = (2 * d                               # ln_1
                 + d * 3 * d + 3 * d                 # c_attn (Conv1D, bias)
                 + d * d + d                         # attn c_proj
                 + 2 * d                             # ln_2
                 + d * 4 * d + 4 * d                 # mlp c_fc
                 + 4 * d * d + d)                    # mlp c_proj
    return v * d + p * d + layers * per_layer + 2 * d    # wte (tied lm_head) + wpe + blocks + ln_f


def llama_params(vocab, hidden, inter, layers, heads, kv_heads, experts=0):
    head_dim = hidden // heads
    attn = hidden * hidden * 2 + hidden * kv_heads * head_dim * 2      # q, o; k, v
    mlp = 3 * hidden * inter
    per_layer = attn + (experts * mlp + experts * hidden if experts else mlp) + 2 * hidden   # (+ router) + norms
    return 2 * vocab * hidden + layers * per_layer + hidden             # embeddings, lm_head, final norm


def gptj_params(vocab, hidden, inner, layers):
    per_layer = 4 * hidden * hidden + 2 * hidden * inner + inner + hidden + 2 * hidden   # q k v out; fc_in, fc_out; ln_1
    return vocab * hidden + layers * per_layer + 2 * hidden + vocab * hidden + vocab      # wte; ln_f; lm_head + bias


@pytest.mark.parametrize("name, by_hand", [
    ("gpt2", gpt2_params()),
    ("gpt-j-6b", gptj_params(50400, 4096, 16384, 28)),
    ("llama-3-8b", llama_params(128256, 4096, 14336, 32, 32, 8)),
    ("mixtral-8x7b", llama_params(32000, 4096, 14336, 32, 32, 8, experts=8)),
    ("llama-3.1-405b", llama_params(128256, 16384, 53248, 126, 128, 8)),
])
def test_parameters_match_the_hand_count_and_the_published_figure(name, by_hand):
    model = build_llm(load_llm_config(name), "bfloat16", "meta")
    counted = sum(p.numel() for p in model.parameters())       # tied tensors once
    assert counted == by_hand
    assert counted == pytest.approx(PRESETS[name].published_params, rel=1e-3)


def test_llama_2_70b_is_the_shapes_it_publishes():
    """MLPerf's llama2-70b: 80 layers of hidden 8192, 64 heads, 8 KV heads, 28,672 MLP channels,
    32,000 tokens; its preset's parameter count is the hand count of those shapes."""
    config = load_llm_config("llama-2-70b")
    assert (config.layers, config.hidden, config.heads, config.kv_heads, config.vocab) == (80, 8192, 64, 8, 32000)
    assert PRESETS["llama-2-70b"].published_params == llama_params(32000, 8192, 28672, 80, 64, 8)


def test_kv_bytes_per_token_is_2_layers_kv_heads_head_dim_bytes():
    assert load_llm_config("llama-3-8b").kv_bytes_per_token(2) == 2 * 32 * 8 * 128 * 2 == 131072
    assert load_llm_config("llama-3-70b").kv_bytes_per_token(2) == 2 * 80 * 8 * 128 * 2
    assert load_llm_config("gpt2").kv_bytes_per_token(4) == 2 * 12 * 12 * 64 * 4         # no GQA: kv = heads
    assert load_llm_config("gpt-j-6b").kv_bytes_per_token(1) == 2 * 28 * 16 * 256 == 229_376
    assert load_llm_config("llama-3.2-1b").kv_bytes_per_token(2) == 2 * 16 * 8 * 64 * 2   # head_dim given
    mistral = load_llm_config("mistral-7b")
    assert mistral.sliding_window == 4096 and mistral.cached_tokens(10_000) == 4096
    assert load_llm_config("qwen2.5-7b").sliding_window is None      # use_sliding_window false


def test_config_mistakes_are_one_line_errors(tmp_path):
    with pytest.raises(LlmConfigError, match="no num_hidden_layers"):
        parse_config({"model_type": "llama", "hidden_size": 64}, "x", "x.json")
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(LlmConfigError, match="not JSON"):
        load_llm_config(str(bad))
    with pytest.raises(LlmConfigError, match="holds at most 1,024 positions"):
        step_key(load_llm_config("gpt2"), "eager", "decode", 1, 1000, 100, "fp32")


# --- the captured forwards ----------------------------------------------------------------------

def attention_ops(workload):
    return [op for op in workload.ops if op.kind == "attention"]


@pytest.mark.parametrize("runtime", ["eager", "compiled"])
def test_attention_reads_the_kv_cache_the_formula_says(source, runtime):
    config, batch, context, new = tiny(), 3, 40, 9
    step = source.llm_step(step_key(config, runtime, "decode", batch, context, new, "fp32"))
    # eager: a dynamic cache at the mean context N + (M-1)//2 = 44, plus the new token;
    # compiled: a static buffer of N + M = 49 tokens, attended whole (masked)
    attended = context + (new - 1) // 2 + 1 if runtime == "eager" else context + new
    kv = [t for op in attention_ops(step.workload) for t in op.inputs if t.shape == (batch, 2, attended, 16)]
    assert len(kv) == 2 * 2                                   # K and V of 2 layers
    by_hand = batch * attended * (2 * 2 * 2 * 16 * 4)          # B x tokens x 2 x layers x kv x head_dim x 4 B
    assert sum(t.nbytes for t in kv) == by_hand
    counts = step_counts(config, step, step.workload, "fp32")
    assert counts.kv_read_bytes == by_hand
    assert counts.kv_written_bytes == batch * 1 * 2 * 2 * 2 * 16 * 4


def test_attention_grows_with_the_context(source):
    config, batch = tiny(), 2
    short = source.llm_step(step_key(config, "eager", "decode", batch, 100, 1, "fp32")).workload
    long = source.llm_step(step_key(config, "eager", "decode", batch, 300, 1, "fp32")).workload
    # one new query per head attends to 200 more keys: Q.K^T and P.V, 16 MACs each, in 2 layers
    assert long.macs - short.macs == batch * 2 * 4 * 200 * 16 * 2


def test_a_decode_step_reads_embedding_rows_not_the_table(source):
    config, batch = tiny(), 4
    step = source.llm_step(step_key(config, "eager", "decode", batch, 8, 1, "fp32"))
    read = sum(s.weight_bytes for s in step.workload.subgraphs)
    # every parameter once, the table's rows of the 4 tokens, and the rotary embedding's buffer of
    # head_dim / 2 = 8 inverse frequencies
    assert read == (step.params - 256 * 64 + batch * 64 + 8) * 4


def test_compiled_decode_fuses_as_inductor(source):
    """RMSNorm (pow, mean, rsqrt, mul) is one generated kernel; every GEMM is a kernel of its own."""
    step = source.llm_step(step_key(tiny(), "compiled", "decode", 1, 8, 4, "bf16"))
    w = step.workload
    assert w.codegen
    for s in w.subgraphs:
        labels = {w.ops[i].terms[0].target.rsplit(".", 1)[-1] for i in s.op_indices if w.ops[i].terms}
        if "mean" in labels:
            assert {"pow", "rsqrt", "mul"} <= labels
        assert sum(w.ops[i].macs > 0 for i in s.op_indices) <= 1
    gemms = [s for s in w.subgraphs if s.op_class == "matmul"]
    assert len(gemms) == 2 * 7 + 1                           # q k v o gate up down per layer + lm_head
    eager = source.llm_step(step_key(tiny(), "eager", "decode", 1, 8, 4, "bf16")).workload
    assert len(w.subgraphs) < len(eager.subgraphs) / 2


def test_mixture_of_experts_counts_k_experts_per_token(source):
    config = tiny(TINY_MOE, "tiny-moe")
    expert = 3 * 64 * 128                                    # gate, up, down of one expert
    one = source.llm_step(step_key(config, "eager", "decode", 1, 8, 1, "fp32"))
    assert one.experts_touched == 2
    linear = sum(op.macs for op in one.workload.ops if op.kind == "linear")
    attention, router, lm_head = 64 * 64 * 2 + 64 * 32 * 2, 64 * 4, 64 * 256
    assert linear == 2 * (attention + router + 2 * expert) + lm_head    # k = 2 experts x 1 token per layer
    # weights read: everything but the other 2 experts of each layer and the embedding table (one
    # row read), and the 8 rotary inverse frequencies
    read = sum(s.weight_bytes for s in one.workload.subgraphs)
    assert read == (one.params - 2 * 2 * expert - 256 * 64 + 64 + 8) * 4
    # batch 3: E(1 - (1 - k/E)^3) = 4 x (1 - 1/8) = 3.5 expected experts, rounded to 4
    assert config.expected_experts(3) == pytest.approx(3.5)
    assert source.llm_step(step_key(config, "eager", "decode", 3, 8, 1, "fp32")).experts_touched == 4


def test_weight_only_bytes_by_hand(source):
    step = source.llm_step(step_key(tiny(), "compiled", "prefill", 1, 8, 4, "int4"))
    matrices = 2 * (64 * 64 * 2 + 64 * 32 * 2 + 3 * 64 * 128) + 256 * 64     # layers + lm_head
    assert step.matrix_params == matrices
    rest = step.params - matrices                              # embedding table, norms
    assert stored_weight_bytes(step, "int4") == pytest.approx(rest * 2 + matrices * 0.5 + matrices / 128 * 4)
    channels = 2 * (64 + 32 + 32 + 64 + 128 * 2 + 64) + 256    # output features of every matrix
    assert stored_weight_bytes(step, "int8") == pytest.approx(rest * 2 + matrices + 2 * channels)
    assert stored_weight_bytes(step, "bf16") == step.params * 2


def test_generate_loop_op_count_matches_the_installed_transformers():
    """GENERATE_LOOP_OPS: ATen calls of HF generate outside the forward, per token, views excluded."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    model = build_llm(tiny(), "float32", "cpu", seed=0)
    depth = [0]
    model.register_forward_pre_hook(lambda *_: depth.__setitem__(0, depth[0] + 1))
    model.register_forward_hook(lambda *_: depth.__setitem__(0, depth[0] - 1))

    class Count(TorchDispatchMode):
        outside = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if not depth[0] and not func.is_view:
                Count.outside += 1
            return func(*args, **(kwargs or {}))

    ids = torch.randint(3, 256, (1, 8), generator=torch.Generator().manual_seed(0))
    counts = []
    for new in (4, 12):
        Count.outside = 0
        with Count():
            model.generate(ids, max_new_tokens=new, min_new_tokens=new, do_sample=False, pad_token_id=0,
                           eos_token_id=2)
        counts.append(Count.outside)
    per_token = (counts[1] - counts[0]) / 8
    assert per_token == pytest.approx(GENERATE_LOOP_OPS, rel=0.25)


# --- predictions --------------------------------------------------------------------------------

def predict_llama(source, registry, runtime, batch, context=2048, new=128, precision="bf16", chip="h100-sxm5",
                  model="llama-3-8b"):
    config = load_llm_config(model)
    steps = [source.llm_step(step_key(config, runtime, phase, batch, context, new, precision))
             for phase in ("prefill", "decode")]
    return predict_llm(config, *steps, registry.get(chip), precision, runtime, context, new)


LLAMA_3_8B = pytest.mark.xdist_group("llama-3-8b-steps")    # one worker characterizes its steps once


@pytest.mark.slow
@LLAMA_3_8B
@pytest.mark.parametrize("batch", [1, 8])
def test_llama_3_8b_decode_on_h100_compiled_is_near_the_bandwidth_bound_eager_host_bound(source, registry, batch):
    compiled = predict_llama(source, registry, "compiled", batch)
    # the bound by hand: bf16 weights without the embedding table (one row read per sequence), the
    # static cache of 2048 + 128 tokens read, one token per sequence written, at 3.35 TB/s
    weights = (8_030_261_248 - 128256 * 4096 + batch * 4096) * 2
    kv = batch * (2048 + 128 + 1) * 131072
    assert compiled.bandwidth_bound_tokens_per_s == pytest.approx(batch * 3.35e12 / (weights + kv), rel=1e-3)
    assert 0.5 <= compiled.tokens_per_s / compiled.bandwidth_bound_tokens_per_s <= 1.0
    assert math.isinf(compiled.host_bound_tokens_per_s)
    eager = predict_llama(source, registry, "eager", batch)
    assert eager.bottleneck == "host"
    assert eager.tokens_per_s <= eager.host_bound_tokens_per_s * 1.001
    assert eager.tokens_per_s < 0.5 * eager.bandwidth_bound_tokens_per_s


@LLAMA_3_8B
@pytest.mark.parametrize("runtime", ["eager", "compiled"])
def test_the_step_alone_and_generate_are_both_predicted(source, registry, runtime):
    """Eager on an H100, host-bound: generate's 34 loop ops are issued after the forward's, so the
    step alone is faster, by less than 34 of the forward's mean op (a loop op is an empty kernel,
    cheaper to issue than the forward's GEMMs and attention); a captured graph issues no loop ops,
    and the two rates agree."""
    p = predict_llama(source, registry, runtime, 1)       # llama-3-8b, the steps the test above characterized
    if runtime == "compiled":
        assert p.step_tokens_per_s == p.tokens_per_s and p.generate_loop_ops == 0
        return
    assert p.bottleneck == "host" and p.generate_loop_ops == GENERATE_LOOP_OPS
    gap_s = 1 / p.tokens_per_s - 1 / p.step_tokens_per_s
    assert 0 < gap_s < GENERATE_LOOP_OPS * p.host_per_op_s


H200_DECODE = Path(__file__).parent / "machines" / "nvidia-h200" / "llm-decode.json"


@pytest.mark.slow
@pytest.mark.parametrize("row", json.loads(H200_DECODE.read_text()),
                         ids=lambda r: f"{r['model']}-b{r['batch']}")
def test_eager_decode_on_the_recorded_h200(source, registry, row):
    """`measure_model_efficiency --phase decode --context 2048 --batch 1,8 --precision bf16` on a lent
    H200 (torch 2.11, random weights, NVML energy), against the eager prediction for h200-sxm at
    the default PyTorch 2.x host cost. Eager decode is host-bound: the host issued an op in
    15-25 us there (the step's time over its op count), so time and energy are held to the 26 %
    the run first reached, not to the 10 % target (docs/findings/2026-11-26-h200-live.md)."""
    assert (row["device"], row["phase"], row["context"], row["new_tokens"]) == ("cuda:0", "decode", 2048, 128)
    pred = predict_llama(source, registry, "eager", row["batch"], chip="h200-sxm", model=row["model"])
    assert pred.bottleneck == "host"
    assert pred.time_per_output_token_s == pytest.approx(row["latency_s"], rel=0.26)
    assert pred.energy_per_token_j * row["batch"] == pytest.approx(row["energy_j"], rel=0.26)


# Published decode rates, batch 1, a prompt of a few tokens, torch.compile with CUDA graphs
# (gpt-fast's generate.py), Llama-3-8B or Llama-3.1-8B (the same shapes; rope scaling differs).
PUBLISHED = [
    ("h100-sxm5", "bf16", 126.90, "torchao quantization README, CUDA backend NVIDIA-H100, Llama-3.1-8B Base "
                                  "(github.com/pytorch/ao/blob/main/torchao/quantization/README.md)"),
    ("h100-sxm5", "int8", 198.85, "same table: int8wo"),
    ("h100-sxm5", "int4", 241.39, "same table: int4wo-64 (groups of 64; we price groups of 128)"),
    ("a100-sxm4-80gb", "bf16", 95.64, "torchao quantization README, NVIDIA-A100-80GB, Llama-3-8B Base"),
    ("a100-sxm4-80gb", "int8", 153.03, "same table: int8wo"),
]


@pytest.mark.slow
@pytest.mark.parametrize("chip, precision, published, source_text", PUBLISHED)
def test_compiled_decode_against_published_measurements(source, registry, chip, precision, published,
                                                        source_text):
    """Within 25 %: the GPU defaults were fitted on CNNs, not on these runs (docs/llm.md)."""
    pred = predict_llama(source, registry, "compiled", 1, context=8, new=200, precision=precision, chip=chip)
    assert pred.tokens_per_s == pytest.approx(published, rel=0.25), source_text


@pytest.mark.slow
def test_llama_3_70b_needs_two_h100s_in_bf16_and_one_in_int4(source, registry):
    config = load_llm_config("llama-3-70b")
    prefill = source.llm_step(step_key(config, "compiled", "prefill", 1, 512, 128, "bf16"))
    h100 = registry.get("h100-sxm5")
    bf16 = predict_llm(config, prefill, None, h100, "bf16", "compiled", 512, 128)
    assert bf16.weight_bytes == 70_553_706_496 * 2
    assert not bf16.fits_in_memory and bf16.devices_needed == 2
    int4 = predict_llm(config, prefill, None, h100, "int4", "compiled", 512, 128)
    assert int4.fits_in_memory and int4.devices_needed == 1


# --- the CLI ------------------------------------------------------------------------------------

@pytest.fixture
def tiny_config(tmp_path):
    return write_config(tmp_path)


def predict_main(argv):
    from chipcal.cli import predict

    return predict.main(argv, prog="chipcal predict")


def test_predict_an_llm_from_a_config_json(cli, source, tiny_config, monkeypatch):
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(source._directory().parent))
    rc, out, err = cli(predict_main, ["--model", tiny_config, "--hardware", "h100-sxm5,l4", "--batch", "1,4",
                                      "--context", "64", "--new-tokens", "16", "--precision", "bf16,int4",
                                      "--runtime", "eager", "--json", "--usd-per-hour", "3.6"])
    assert rc == 0, err
    rows = json.loads(out)
    assert len(rows) == 2 * 2 * 2
    for r in rows:
        assert r["status"] == "ok" and r["phase"] == "decode" and r["runtime"] == "eager"
        assert r["usd_per_million_tokens"] == pytest.approx(1e6 * 0.001 / r["tokens_per_s"])   # $3.6/h = $0.001/s
        assert r["tokens_per_s"] == pytest.approx(r["batch"] / r["time_per_output_token_s"])
        assert r["kv_cache_bytes"] == r["batch"] * 80 * (2 * 2 * 2 * 16 * 2)
        assert r["fits_in_memory"] and r["devices_needed"] == 1 and r["time_to_first_token_s"] > 0
        assert r["bandwidth_bound_tokens_per_s"] > r["tokens_per_s"] and r["bottleneck"] == "host"
    rc, out, _ = cli(predict_main, ["--model", tiny_config, "--hardware", "h100-sxm5", "--context", "64",
                                    "--usd-per-hour", "3.6"])
    assert rc == 0 and "of the bandwidth bound" in out and "no per-op host cost" in out
    assert "h100-sxm5: given" in out and "$/device-h" in out and "$/M tokens" in out


@pytest.mark.parametrize("argv, says", [
    (["--model", "llama-3-8b", "--runtime", "fused"], "eager or compiled"),
    (["--model", "llama-3-8b,resnet50"], "separate calls"),
    (["--model", "resnet50", "--context", "64"], "--context is for LLMs"),
    (["--model", "llama-3-8b", "--precision", "fp64"], "not an LLM precision"),
    (["--model", "llama-3-8b", "--by-layer"], "not available for LLMs"),
    (["--model", "gpt2", "--context", "1000", "--new-tokens", "100"], "at most 1,024 positions"),
    (["--model", "/nonexistent/config.json"], "no such file"),
    (["--model", "llama-3-8b", "--devices", "8", "--layout", "tp=3"], "does not divide the 8 devices"),
])
def test_llm_usage_errors_exit_2_with_one_line(cli, argv, says):
    rc, _, err = cli(predict_main, [*argv, "--hardware", "h100-sxm5"])
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1


def test_without_transformers_an_llm_exits_2_with_the_install_line(cli, tiny_config, monkeypatch, tmp_path):
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "empty"))
    monkeypatch.setitem(__import__("sys").modules, "transformers", None)     # import transformers fails
    rc, _, err = cli(predict_main, ["--model", tiny_config, "--hardware", "h100-sxm5"])
    assert rc == 2 and "pip install 'chipcal[llm]'" in err and len(err.strip().splitlines()) == 1


def test_workload_counts_an_llm_step(cli):
    from chipcal.cli import workload

    rc, out, err = cli(lambda a: workload.main(a, prog="chipcal workload"),
                       ["--model", "gpt2", "--phase", "decode", "--context", "100", "--new-tokens", "1", "--json"])
    assert rc == 0, err
    (row,) = json.loads(out)
    assert row["params"] == gpt2_params() and row["input_shape"] == "1x1"
    # 12 layers: q.K^T and P.V over 101 keys for 12 heads of 64, plus the 124M-parameter GEMMs less the
    # tables (wte is read whole by the tied lm_head: 50257 x 768 MACs)
    gemm = 12 * (768 * 2304 + 768 * 768 + 2 * 768 * 3072) + 50257 * 768
    assert row["macs"] == gemm + 12 * 12 * 101 * 64 * 2


# --- measured on this CPU -----------------------------------------------------------------------

@pytest.mark.slow
@pytest.mark.timing
def test_gpt2_decode_predicted_against_measured_on_this_cpu(source):
    """One thread for both the bandwidth probe and the decode steps, measured in the same minute,
    so that other processes on the machine slow both alike (a ratio, not an absolute time). Six
    steps are required (`ceiling_s`), not hoped for: an AVX2 EPYC timed one block of ten in the old
    one-second budget (issue 50).
    The tolerance is what uncalibrated CPU defaults can hold on any machine the suite runs on:
    bandwidth_efficiency 0.7 on the measured sustained bandwidth, which a calibration would fit,
    on a memory-bound step whose compute share differs by core. Seen: predicted 1.16-1.18x the
    measured step on the Xeon VM under a load of 14, 0.64x on the Zen 4 VM (2026-11-29: one thread
    streamed the weights at ~12.5 GB/s against the probe's 28), and the defaults' held-out p90 on the
    recorded CPU runs reaches 47 %. So within a factor 2 either way: a check against gross errors
    (a step predicted several-fold off), not of the defaults' own error, which a calibration fits."""
    from chipcal.measure.bandwidth import local_overrides, measure_bandwidth
    from chipcal.measure.cpu import detect_cpu
    from chipcal.measure.llm import measure_llm
    from chipcal.measure.system import local_chip
    from chipcal.measure.timing import fixed_threads

    config = load_llm_config("gpt2")
    steps = [source.llm_step(step_key(config, "eager", phase, 1, 256, 128, "fp32")) for phase in ("prefill", "decode")]
    with fixed_threads(1):
        bandwidth = measure_bandwidth(CPU, sizes=[256 * 2**20], use_cache=False, max_time_s=0.5)
        cpu = dataclasses.replace(detect_cpu(), cores=1)
        pred = predict_llm(config, *steps, local_chip(**local_overrides(bandwidth, cpu), cpu=cpu), "fp32", "eager",
                           256, 128)
        measured = measure_llm(config, "decode", 1, 256, 128, steps[1].workload.flop, "fp32", CPU,
                               max_time_s=1.0, min_samples=6, ceiling_s=30.0, threads=1)
    assert measured.latency.n >= 6
    ratio = pred.time_per_output_token_s / measured.latency.median_s
    assert 1 / 2 < ratio < 2, f"predicted {ratio:.2f}x the measured decode step"


# n >= 2 does not rest on the host's speed: a block is capped so that the 10 samples asked for fill
# half the 2 s budget (measure.timing.block_calls), and this tiny decoder's step would have to take
# about half a second, several hundred times longer, before fewer than two blocks fit
@pytest.mark.timing
def test_measure_model_efficiency_times_an_llm_from_a_config(cli, tiny_config, monkeypatch, source):
    from chipcal.cli import measure_model_efficiency as mme

    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(source._directory().parent))
    rc, out, err = cli(lambda a: mme.main(a), ["--model", tiny_config, "--phase", "decode", "--context", "32",
                                               "--new-tokens", "8", "--max-time", "2", "--no-power",
                                               "--peak", "spec", "--json"])
    assert rc == 0, err
    (row,) = json.loads(out)
    assert row["phase"] == "decode" and row["cached_tokens"] == 32 + 3 and row["n"] >= 2
    assert row["tokens_per_s"] == pytest.approx(1 / row["latency_s"])
    assert row["flop"] > 0 and row["delivered_flop_per_s"] == pytest.approx(row["flop"] / row["latency_s"])


def test_a_cached_llm_prediction_imports_neither_torch_nor_transformers(tmp_path, monkeypatch, capsys):
    """A decoder of 19 layers, deep enough to be built from its cached traces of 2, 3 and 4 layers
    (llm_layers.expanded_step), as a 70B one is: characterized here, then predicted from the cache
    by a process of its own."""
    import subprocess
    import sys

    from chipcal.model.workload.llm_layers import TRACED, with_layers

    root = tmp_path / "cache"
    deep = write_config(tmp_path, {**TINY, "num_hidden_layers": 19})
    argv = ["--model", deep, "--hardware", "h100-sxm5", "--context", "64", "--json"]
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(root))
    assert predict_main(argv) == 0                                    # characterizes and caches
    capsys.readouterr()
    code = ("import sys; from chipcal.cli import predict; rc = predict.main(sys.argv[1:]); "
            "print(rc, 'torch' in sys.modules, 'transformers' in sys.modules)")
    env = {**__import__("os").environ, "CHIPCAL_CACHE_DIR": str(root)}
    config = load_llm_config(deep)
    cached = " ".join(path.name for path in root.rglob("llm-*.json"))
    assert all(f"llm-{with_layers(config, n).digest}-" in cached for n in TRACED)
    assert f"llm-{config.digest}-" not in cached                     # the 19 layers are built, not traced
    again = subprocess.run([sys.executable, "-c", code, *argv], capture_output=True, text=True, env=env)
    assert again.stdout.strip().splitlines()[-1] == "0 False False", again.stderr
