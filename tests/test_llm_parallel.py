"""An LLM on many devices (model.estimate.parallel, model.estimate.llm_parallel,
model.workload.llm_shard): the all-reduce, the layouts, a shard's config and the joined
prediction, each against figures worked by hand."""

from __future__ import annotations

import json

import pytest
from tiny_llm import TINY, TINY_MOE, write_config

from chipcal.model.estimate.llm import LlmPrediction
from chipcal.model.estimate.llm_parallel import joined, predict_on_layout
from chipcal.model.estimate.parallel import (
    ALLREDUCE_FLOOR_S,
    Layout,
    LayoutError,
    allreduce_s,
    choose_layout,
    parse_layout,
    pipelines,
)
from chipcal.model.registry import load_registry
from chipcal.model.workload.llm_config import LlmConfigError, load_llm_config, parse_config
from chipcal.model.workload.llm_shard import expert_shard, tensor_shard


@pytest.fixture(scope="module")
def registry():
    return load_registry()


def tiny():
    return parse_config(TINY, "tiny", "tests/tiny_llm.py")


def test_a_ring_all_reduce_over_nvlink_by_hand(registry):
    """1 MB over 8 H100s: each sends 2 x 7/8 MB each way at 450 GB/s (900 GB/s both ways), plus
    the 10 us floor; one device needs none."""
    h100 = registry.get("h100-sxm5")
    assert allreduce_s(1e6, 8, h100) == pytest.approx(2 * 7 / 8 * 1e6 / 450e9 + ALLREDUCE_FLOOR_S)
    assert allreduce_s(1e6, 1, h100) == 0.0
    with pytest.raises(LayoutError, match="domain of 8"):
        allreduce_s(1e6, 16, h100)
    with pytest.raises(LayoutError, match="no scale-up interconnect"):
        allreduce_s(1e6, 2, registry.get("xeon-6980p"))


@pytest.mark.parametrize("text, devices, layout", [
    ("tp=8", 8, Layout(8, 1)), ("tp=2", 8, Layout(2, 4)), ("tp=4,dp=2", 8, Layout(4, 2)), ("dp=8", 8, Layout(1, 8))])
def test_layouts_parse(text, devices, layout):
    assert parse_layout(text, devices) == layout and layout.devices == devices


@pytest.mark.parametrize("text, says", [("tp=3", "does not divide"), ("tp=4,dp=4", "16 devices"),
                                        ("xp=2", "give tp=N"), ("tp=2,tp=4", "give tp=N"), ("tp=2,ep=4", "give ep=2")])
def test_a_bad_layout_says_why(text, says):
    with pytest.raises(LayoutError, match=says):
        parse_layout(text, 8)


def test_the_engine_picks_the_fewest_shards_that_fit(registry):
    h100 = registry.get("h100-sxm5")
    assert choose_layout(8, 64, h100, lambda tp: tp >= 4) == Layout(4, 2)
    assert choose_layout(8, 64, h100, lambda tp: True) == Layout(1, 8)
    with pytest.raises(LayoutError, match="no tensor-parallel split"):
        choose_layout(8, 6, h100, lambda tp: tp >= 4)           # 4 and 8 do not divide 6 heads


def test_a_shard_is_the_same_architecture_split_by_hand():
    """Tiny (4 heads of 16, 2 KV heads, 128 MLP channels, 256 rows) over 2 devices: 2 heads, 1 KV
    head, 64 channels, 128 rows; llama-3-70b over 8: 8 heads of 128, 1 KV head, 3584, 16032 rows."""
    shard = tensor_shard(tiny(), 2)
    assert (shard.heads, shard.kv_heads, shard.head_dim, shard.vocab, shard.fields()["intermediate_size"]) == (
        2, 1, 16, 128, 64)
    big = tensor_shard(load_llm_config("llama-3-70b"), 8)
    assert (big.heads, big.kv_heads, big.head_dim, big.vocab, big.fields()["intermediate_size"]) == (
        8, 1, 128, 16032, 3584)
    assert tensor_shard(tiny(), 1) == tiny()
    with pytest.raises(LlmConfigError, match="does not divide"):
        tensor_shard(tiny(), 8)
    with pytest.raises(LlmConfigError, match="modelled for"):
        tensor_shard(load_llm_config("gpt2"), 2)


def test_a_shard_counts_its_share_of_the_parameters(source, registry):
    """Per layer q 64x32, k and v 64x16, o 32x64, gate, up and down 64x64, two norms of 64 = 18,560;
    two layers, the embedding and LM head's 128 rows of 64 each, the final norm: 53,568."""
    p = predict_on_layout(tiny(), registry.get("h100-sxm5"), "bf16", "compiled", "decode", 1, 16, 4,
                          source.llm_step, 2, Layout(2, 1))
    assert p.params == 2 * 18_560 + 2 * 128 * 64 + 64 and (p.tp, p.dp, p.devices) == (2, 1, 2)


def step_of_a_shard() -> LlmPrediction:
    """A tp=2 shard's decode at batch 4: a 10 ms step, a 20 ms prefill, 0.5 J a token."""
    return LlmPrediction(model="tiny@tp2", chip="h100-sxm5", kind="gpu", phase="decode", batch=4, context=16,
                         new_tokens=4, precision="bf16", compute_precision="bf16", weight_format="bf16",
                         runtime="compiled", status="ok", tokens_per_s=400.0, step_tokens_per_s=400.0,
                         time_to_first_token_s=0.02, time_per_output_token_s=0.01, energy_per_token_j=0.5,
                         bandwidth_bound_tokens_per_s=800.0)


def test_joining_shards_adds_the_all_reduces_and_the_replicas_add_tokens(registry):
    """A shard step of 10 ms at batch 4 (hidden 64, 2 layers, bf16) on tp=2 over NVLink: each of
    the 2 x 2 all-reduces moves 4 x 64 x 2 bytes; dp=3 replicas triple the tokens."""
    h100 = registry.get("h100-sxm5")
    shard = step_of_a_shard()
    one = 2 * 1 / 2 * (4 * 64 * 2) / 450e9 + ALLREDUCE_FLOOR_S
    out = joined(shard, tiny(), h100, Layout(2, 3), "bfloat16")
    assert out.allreduce_s == pytest.approx(2 * 2 * one)
    assert out.time_per_output_token_s == pytest.approx(0.01 + 4 * one)
    assert out.tokens_per_s == pytest.approx(3 * 4 / (0.01 + 4 * one))
    prefill_one = 2 * 1 / 2 * (4 * 16 * 64 * 2) / 450e9 + ALLREDUCE_FLOOR_S
    assert out.time_to_first_token_s == pytest.approx(0.02 + 4 * prefill_one)
    assert (out.energy_per_token_j, out.bandwidth_bound_tokens_per_s, out.devices) == (1.0, 2400.0, 6)


def test_a_pipeline_passes_each_micro_batch_through_its_stages(registry):
    """The same 10 ms stage step at a micro-batch of 4 (a running batch of 8 over pp=2 stages of one
    layer each, tp=2, dp=3): a token passes both stages and one hand-over of 4 x 64 x 2 bytes at
    450 GB/s plus the 10 us floor; each stage's one layer makes two all-reduces; every shard of
    every stage spends its energy on each token."""
    h100 = registry.get("h100-sxm5")
    stage = step_of_a_shard()
    one = 2 * 1 / 2 * (4 * 64 * 2) / 450e9 + ALLREDUCE_FLOOR_S
    hop = 4 * 64 * 2 / 450e9 + ALLREDUCE_FLOOR_S
    out = joined(stage, tiny(), h100, Layout(2, 3, 2), "bfloat16", batch=8)
    tpot = 2 * (0.01 + 2 * one) + hop
    assert out.time_per_output_token_s == pytest.approx(tpot)
    assert out.tokens_per_s == pytest.approx(3 * 8 / tpot) and out.batch == 8
    prefill_hop = 4 * 16 * 64 * 2 / 450e9 + ALLREDUCE_FLOOR_S
    prefill_one = 2 * 1 / 2 * (4 * 16 * 64 * 2) / 450e9 + ALLREDUCE_FLOOR_S
    assert out.time_to_first_token_s == pytest.approx(2 * (0.02 + 2 * prefill_one) + prefill_hop)
    assert (out.energy_per_token_j, out.devices) == (0.5 * 2 * 2, 12)


def test_pipelines_are_powers_of_two_dividing_the_layers_within_the_link():
    registry = load_registry()
    h100, orin = registry.get("h100-sxm5"), registry.get("jetson-agx-orin-64gb")
    assert parse_layout("tp=2,pp=2", 8) == Layout(2, 2, 2) and Layout(2, 2, 2).label == "tp=2,pp=2,dp=2"
    assert Layout(4, 2).label == "tp=4,dp=2"          # no pipeline: the label as before
    with pytest.raises(LayoutError, match="tp x pp = 6"):
        parse_layout("tp=2,pp=3", 8)
    # 8 H100s (an NVLink domain of 8), 64 heads, 80 layers: (tp, pp) with tp x pp <= 8
    assert [(x.tp, x.pp, x.dp) for x in pipelines(8, 64, h100, 80)] == [
        (1, 2, 4), (2, 2, 2), (4, 2, 1), (1, 4, 2), (2, 4, 1), (1, 8, 1)]
    assert [x.pp for x in pipelines(8, 64, h100, 30)] == [2, 2, 2]      # 4 and 8 do not divide 30 layers
    assert pipelines(8, 64, orin, 80) == []                               # no scale-up link


def test_a_pipeline_stage_is_the_model_with_its_share_of_the_layers(source, registry):
    """Two stages of a 4-layer tiny model: each stage is the 2-layer model. A layer: q and o 64 x 64,
    k and v 64 x 32 (2 KV heads of 16), gate, up and down 64 x 128, two norms of 64 = 36,992; with
    the embedding's and the head's 256 x 64 and the final norm, 106,816."""
    config = parse_config({**TINY, "num_hidden_layers": 4}, "tiny4", "test")
    p = predict_on_layout(config, registry.get("h100-sxm5"), "bf16", "compiled", "decode", 8, 16, 4,
                          source.llm_step, 2, Layout(1, 1, 2))
    assert p.params == 2 * 36_992 + 2 * 256 * 64 + 64 and (p.tp, p.dp, p.devices, p.batch) == (1, 1, 2, 8)
    with pytest.raises(LayoutError, match="pp=3 does not divide"):
        predict_on_layout(config, registry.get("h100-sxm5"), "bf16", "compiled", "decode", 8, 16, 4,
                          source.llm_step, 3, Layout(1, 1, 3))


def test_an_expert_parallel_shard_keeps_its_experts_whole():
    """Mixtral over 2 devices, experts whole: 16 heads, 4 KV heads, 4 of the 8 experts at their
    14,336 channels; a token still picks 2 of all 8 (the router of a shard of 8 picks its only one)."""
    mixtral = load_llm_config("mixtral-8x7b")
    two = expert_shard(mixtral, 2)
    assert (two.heads, two.kv_heads, two.experts, two.fields()["intermediate_size"]) == (16, 4, 4, 14336)
    assert (two.experts_per_token, two.expert_shards) == (2, 2)
    eight = expert_shard(mixtral, 8)
    assert (eight.experts, eight.fields()["num_experts_per_tok"], eight.experts_per_token) == (1, 1, 2)
    with pytest.raises(LlmConfigError, match="ep=3"):
        expert_shard(mixtral, 3)
    # 4 experts, k = 2, over 2 devices of 2: one token sends 2 x 1 / 2 = 1 row to each device, on
    # one of its 2 experts; three tokens send 3 rows, touching 2 (1 - (1/2)^3) = 1.75 on average
    tiny_two = expert_shard(parse_config(TINY_MOE, "moe", "test"), 2)
    assert tiny_two.routed_rows(1) == 1 and tiny_two.expected_experts(1) == pytest.approx(1.0)
    assert tiny_two.expected_experts(3) == pytest.approx(1.75)


def test_an_expert_parallel_shard_holds_and_computes_what_a_channel_split_does(source, registry):
    """The tiny MoE (4 experts of 128 channels, k = 2) on 2 devices, decoding one token: split by
    channel each device holds 4 experts of 64 channels, split whole 2 experts of 128; the same
    expert weights (4 x 3 x 64 x 64 = 2 x 3 x 64 x 128), a router of 2 rows of 64 instead of 4 on
    each of the 2 layers, and the token's 2 experts' work halved either way."""
    config = parse_config(TINY_MOE, "moe", "test")
    h100 = registry.get("h100-sxm5")
    channel, whole = (predict_on_layout(config, h100, "bf16", "compiled", "decode", 1, 16, 4, source.llm_step, 2, layout)
                      for layout in (Layout(2, 1), Layout(2, 1, 1, 2)))
    assert whole.params == channel.params - 2 * (4 - 2) * 64
    router = 2 * 64 * (4 - 2)     # the two layers' routers: 64 x 4 MACs a token each, 64 x 2
    assert whole.step_macs == channel.step_macs - router


def test_a_mixtral_shard_splits_every_experts_channels():
    """Mixtral 8x7B over 2 devices: 16 heads of 128, 4 KV heads, each of the 8 experts 7,168 channels."""
    shard = tensor_shard(load_llm_config("mixtral-8x7b"), 2)
    assert (shard.heads, shard.kv_heads, shard.experts, shard.fields()["intermediate_size"]) == (16, 4, 8, 7168)


def test_cli_prints_the_layout_and_charges_every_device(cli, tmp_path, monkeypatch, source):
    from chipcal.cli import predict

    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(source._directory().parent))
    config = write_config(tmp_path)
    argv = ["--model", config, "--hardware", "h100-sxm5", "--batch", "2", "--context", "16", "--new-tokens", "4",
            "--devices", "4", "--layout", "tp=2", "--usd-per-hour", "3.6"]
    rc, out, err = cli(lambda a: predict.main(a, prog="chipcal predict"), [*argv, "--json"])
    assert rc == 0, err
    (row,) = json.loads(out)
    assert (row["tp"], row["dp"], row["devices"]) == (2, 2, 4) and row["allreduce_s"] > 0
    assert row["usd_per_million_tokens"] == pytest.approx(1e6 * 4 * 0.001 / row["tokens_per_s"])
    rc, out, _ = cli(lambda a: predict.main(a, prog="chipcal predict"), argv)
    assert rc == 0 and "tp=2,dp=2" in out and "4 x h100-sxm5 (tp=2 shards per replica, dp=2 replicas" in out
    alone = [*argv[:10], "--layout", "tp=2,dp=2", "--json"]          # no --devices: the layout gives them
    rc, out, _ = cli(lambda a: predict.main(a, prog="chipcal predict"), alone)
    assert rc == 0 and json.loads(out)[0]["devices"] == 4
