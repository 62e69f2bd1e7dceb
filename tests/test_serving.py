"""Continuous batching at saturation (model.estimate.serving): the KV cache's batch and the
steady-state iteration, worked by hand; the CLI's --scenario offline."""

from __future__ import annotations

import json

import pytest
from tiny_llm import TINY, TINY_MOE, write_config

from chipcal.model.estimate.llm import LlmPrediction
from chipcal.model.estimate.llm_parallel import predict_on_layout
from chipcal.model.estimate.parallel import Layout
from chipcal.model.estimate.serving import NoRoomForKvCache, kv_batch_limit, offline
from chipcal.model.registry import load_registry
from chipcal.model.workload.llm_config import parse_config


def _first(capacity: float, weights: float, activations: float, kv_per_token: float) -> LlmPrediction:
    return LlmPrediction(model="m", chip="c", kind="gpu", phase="decode", batch=1, context=256, new_tokens=294,
                         precision="fp8", compute_precision="fp8", weight_format="fp8", runtime="compiled",
                         status="ok", memory_capacity_bytes=capacity, weight_bytes=weights,
                         activation_peak_bytes=activations, kv_bytes_per_token=kv_per_token)


def test_the_kv_cache_bounds_the_running_batch_by_hand():
    """80 GB at 90 %, 60 GB of weights, 1 GB of activations: 11 GB of KV cache. llama-2-70b in
    fp8 keeps 2 x 80 layers x 8 heads x 128 x 1 byte = 163,840 bytes a token; a sequence of 256 + 294
    holds 256 + 147 tokens on average: 66,027,520 bytes, so 166 sequences."""
    first = _first(80e9, 60e9, 1e9, 2 * 80 * 8 * 128)
    assert kv_batch_limit(first, 256, 294) == 166
    assert kv_batch_limit(_first(80e9, 75e9, 1e9, 2 * 80 * 8 * 128), 256, 294) == 0


def test_beams_share_the_prompt_s_kv_cache_by_hand():
    """GPT-J-6B in fp8 on 80 GB: 2 x 28 layers x 4,096 x 1 byte = 229,376 bytes a token; 72 GB less
    6.05 GB of weights and 1 GB of activations leave 64.95 GB. Greedy, a request of 890 + 69 holds
    924.5 tokens: 212,058,112 bytes, 306 requests. Four beams share the prompt and each keep their
    own 34.5 tokens: 890 + 138 = 1,028 tokens, 235,798,528 bytes, 275 requests of 4 beams."""
    first = _first(80e9, 6.05e9, 1e9, 2 * 28 * 4096)
    assert kv_batch_limit(first, 890, 69) == 306
    assert kv_batch_limit(first, 890, 69, beams=4) == 275


def test_a_beam_re_reads_the_rest_of_its_prompt_on_chip(source):
    """A decode step of 8 beams traced at 8 of a 16-token prompt: each attention kernel re-reads the
    other 8 tokens of every beam, 8 x 8 x (2 x 2 KV heads x 16 dims x 2 bytes, bf16) = 8,192 bytes;
    nothing else changes, and a prefill is left as traced."""
    from chipcal.model.estimate.serving import with_prompt_rereads
    from chipcal.model.workload.llm_config import step_key

    config = parse_config(TINY, "tiny", "tests/tiny_llm.py")
    decode = step_key(config, "compiled", "decode", 8, 8, 8, "bf16")
    plain, reread = source.llm_step(decode), with_prompt_rereads(source.llm_step, 8)(decode)
    pairs = list(zip(plain.workload.subgraphs, reread.workload.subgraphs, strict=True))
    assert [b.onchip_reread_bytes for a, b in pairs if a.op_class == "attention"] == [8192, 8192]
    assert all(b == a for a, b in pairs if a.op_class != "attention")
    prefill = step_key(config, "compiled", "prefill", 8, 8, 8, "bf16")
    assert with_prompt_rereads(source.llm_step, 8)(prefill) == source.llm_step(prefill)


def test_a_beam_search_iteration_is_every_beam_s_step_and_one_prefill_a_request(source):
    """4 requests of 2 beams, 16 + 8 tokens: the decode step runs 8 sequences, each reading its
    request's 16-token prompt from DRAM once between 2 beams (8 a beam) and the rest on chip; one
    prompt is prefilled every other iteration. tok/s = 4 / (step + prefill / 2); energy per output
    token = 2 beams' step energy + half a prefill over the 4 requests."""
    from chipcal.model.estimate.serving import with_prompt_rereads

    h100, config = load_registry().get("h100-sxm5"), parse_config(TINY, "tiny", "tests/tiny_llm.py")
    s = offline(config, h100, "bf16", "compiled", 16, 8, source.llm_step, layout=Layout(), max_batch=4, beams=2)
    assert (s.batch, s.beams, s.prefill_group) == (4, 2, 1)
    step = predict_on_layout(config, h100, "bf16", "compiled", "decode", 8, 8, 8,
                             with_prompt_rereads(source.llm_step, 8), 1, Layout())
    one = predict_on_layout(config, h100, "bf16", "compiled", "decode", 1, 16, 8, source.llm_step, 1, Layout())
    assert s.decode_step_s == step.time_per_output_token_s
    assert s.tokens_per_s == pytest.approx(4 / (step.time_per_output_token_s + one.time_to_first_token_s / 2))
    assert s.energy_per_token_j == pytest.approx(2 * step.energy_per_token_j + one.prefill.energy_j / 2 / 4)


def test_an_iteration_is_a_decode_step_and_its_share_of_prefill(source):
    """4 running sequences of 8 output tokens: one finishes every other iteration, so a prefill of
    one prompt runs every other iteration. tok/s = dp x 4 / (decode step at 4 + prefill at 1 / 2);
    energy per token adds half a batch-1 prefill's energy (x tp) over the 4 tokens."""
    h100, config = load_registry().get("h100-sxm5"), parse_config(TINY, "tiny", "tests/tiny_llm.py")
    s = offline(config, h100, "bf16", "compiled", 16, 8, source.llm_step, devices=4, layout=Layout(2, 2), max_batch=4)
    assert (s.tp, s.dp, s.batch, s.max_batch, s.prefill_group) == (2, 2, 4, 4, 1) and s.kv_batch_limit > 4
    p, one = (predict_on_layout(config, h100, "bf16", "compiled", "decode", b, 16, 8, source.llm_step, 4, Layout(2, 2))
              for b in (4, 1))
    assert s.decode_step_s == p.time_per_output_token_s and s.prefill_share_s == pytest.approx(one.time_to_first_token_s / 2)
    assert s.tokens_per_s == pytest.approx(2 * 4 / (p.time_per_output_token_s + one.time_to_first_token_s / 2))
    assert s.energy_per_token_j == pytest.approx(p.energy_per_token_j + 2 * one.prefill.energy_j / 2 / 4)


def test_a_prefill_forward_holds_the_prompts_of_one_iteration():
    """batch / output tokens sequences finish an iteration: 1,500 running of 294 tokens free 5.1 a
    step (5 prompts a forward); 8 of 34 free 0.24 (one prompt a forward, every 4th iteration)."""
    from chipcal.model.estimate.serving import prefill_group

    assert (prefill_group(1500, 294), prefill_group(8, 34), prefill_group(64, 2)) == (5, 1, 32)


def test_without_a_layout_the_one_of_most_tokens_wins(source):
    h100, config = load_registry().get("h100-sxm5"), parse_config(TINY, "tiny", "tests/tiny_llm.py")
    best = offline(config, h100, "bf16", "compiled", 16, 8, source.llm_step, devices=2, max_batch=4)
    each = [offline(config, h100, "bf16", "compiled", 16, 8, source.llm_step, 2, Layout(tp, 2 // tp), 4)
            for tp in (1, 2)]
    assert best.tokens_per_s == max(s.tokens_per_s for s in each)


def test_no_room_for_one_sequence_says_so(monkeypatch):
    """Weights of 30 GB on a 24 GB device leave no KV cache: refused, naming the model and layout."""
    from chipcal.model.estimate import serving

    monkeypatch.setattr(serving, "predict_on_layout", lambda *a, **k: _first(24e9, 30e9, 1e9, 1000.0))
    config = parse_config(TINY, "tiny", "tests/tiny_llm.py")
    with pytest.raises(NoRoomForKvCache, match="tiny on c .tp=1,dp=1.: weights and activations leave no KV-cache room"):
        offline(config, load_registry().get("l4"), "bf16", "compiled", 16, 8, lambda key: None, 1, Layout())


def test_cli_serves_offline(cli, tmp_path, monkeypatch, source):
    from chipcal.cli import predict

    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(source._directory().parent))
    argv = ["--model", write_config(tmp_path), "--hardware", "h100-sxm5", "--context", "16", "--new-tokens", "8",
            "--devices", "2", "--scenario", "offline", "--max-batch", "4", "--usd-per-hour", "3.6"]
    main = lambda a: predict.main(a, prog="chipcal predict")  # noqa: E731
    rc, out, err = cli(main, [*argv, "--json"])
    assert rc == 0, err
    (row,) = json.loads(out)
    assert row["batch"] == 4 and row["devices"] == 2
    # the search's progress on stderr: two layouts of 2 devices (tp=2; tp=1,dp=2), each at a running batch of 1
    # and 4 (its prefill group, round(4 / 8) -> 1, is batch 1 again), each a prefill and a decode step
    assert "LLM steps (cache or trace): 8step" in err.replace("\r", "\n"), err
    assert row["usd_per_million_tokens"] == pytest.approx(1e6 * 2 * 0.001 / row["tokens_per_s"])
    rc, out, _ = cli(main, argv)
    assert rc == 0 and "continuous batching at saturation" in out
    for extra, says in ((["--batch", "8"], "drop --batch"), (["--phase", "prefill"], "drop --phase")):
        rc, _, err = cli(main, [*argv, *extra])
        assert rc == 2 and says in err
    rc, _, err = cli(main, ["--model", "llama-3-8b", "--max-batch", "4"])
    assert rc == 2 and "--max-batch, --beams, --ttft-s and --tpot-s are for --scenario offline or server" in err
    # beam search: the library's own serving of the same requests, 2 beams a request
    rc, out, err = cli(main, [*argv, "--layout", "tp=1,dp=2", "--beams", "2", "--json"])
    assert rc == 0, err
    (row,) = json.loads(out)
    config = parse_config(TINY, "tiny", "tests/tiny_llm.py")
    same = offline(config, load_registry().get("h100-sxm5"), "bf16", "compiled", 16, 8, source.llm_step, 2,
                   Layout(1, 2), 4, beams=2)
    assert (row["beams"], row["batch"], row["tokens_per_s"]) == (2, 4, pytest.approx(same.tokens_per_s))


def test_cli_serves_a_forced_pipeline_and_refuses_one_outside_serving(cli, tmp_path, monkeypatch, source):
    """Two stages of the 2-layer tiny model on two H100s: the batch the KV cache holds is every
    micro-batch's, and the layout is printed as --layout takes it."""
    from chipcal.cli import predict

    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(source._directory().parent))
    main = lambda a: predict.main(a, prog="chipcal predict")  # noqa: E731
    argv = ["--model", write_config(tmp_path), "--hardware", "h100-sxm5", "--context", "16", "--new-tokens", "8"]
    rc, out, err = cli(main, [*argv, "--scenario", "offline", "--layout", "tp=1,pp=2", "--max-batch", "8", "--json"])
    assert rc == 0, err
    (row,) = json.loads(out)
    assert (row["tp"], row["pp"], row["dp"], row["devices"], row["batch"]) == (1, 2, 1, 2, 8)
    rc, out, _ = cli(main, [*argv, "--scenario", "offline", "--layout", "tp=1,pp=2", "--max-batch", "8"])
    assert rc == 0 and "tp=1,pp=2,dp=1" in out
    rc, _, err = cli(main, [*argv, "--layout", "tp=1,pp=2"])
    assert rc == 2 and "pipelines and expert parallelism are modelled for serving" in err
    # experts kept whole over the two devices of a mixture of experts; a dense model has none
    (tmp_path / "moe").mkdir()
    moe = ["--model", write_config(tmp_path / "moe", TINY_MOE), *argv[2:]]
    rc, out, err = cli(main, [*moe, "--scenario", "offline", "--layout", "tp=2,ep=2", "--max-batch", "8", "--json"])
    assert rc == 0, err
    (row,) = json.loads(out)
    assert (row["tp"], row["ep"], row["devices"]) == (2, 2, 2)
    rc, _, err = cli(main, [*argv, "--scenario", "offline", "--layout", "tp=2,ep=2"])
    assert rc == 2 and "needs a mixture of experts" in err and len(err.strip().splitlines()) == 1


def test_cli_serving_takes_the_calibration_and_host_cost(cli, tmp_path, monkeypatch):
    """--scenario offline predicts with --calibration and --host-overhead-s as every LLM row does
    (it once dropped both: a calibrated CPU served at its uncalibrated speed)."""
    from chipcal.cli import predict
    from chipcal.model.estimate import serving

    seen = {}

    def capture(*args, **kwargs):
        seen.update(kwargs)
        raise NoRoomForKvCache("captured")
    monkeypatch.setattr(serving, "offline", capture)
    rc, _, err = cli(lambda a: predict.main(a, prog="chipcal predict"),
                     ["--model", write_config(tmp_path), "--hardware", "h100-sxm5", "--scenario", "offline",
                      "--host-overhead-s", "7e-6"])
    assert rc == 2 and "captured" in err
    assert seen["host_overhead_s"] == 7e-6 and "calibration" in seen and seen["host_source"]
