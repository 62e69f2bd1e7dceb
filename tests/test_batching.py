"""The continuous-batching loop (measure.batching, issue 53 item 6): what it generates against
Hugging Face generate request by request, its schedule and saturated window worked by hand, and
the CLI's --scenario offline (tests/test_serving_recorded.py holds the recorded runs against their
predictions)."""

from __future__ import annotations

import json

import pytest
from tiny_llm import TINY, write_config

pytest.importorskip("transformers")

from chipcal.measure.batching import NoSaturatedWindow, Request, requests, serve  # noqa: E402
from chipcal.measure.device import CPU  # noqa: E402
from chipcal.model.workload.llm import build_llm, transformers_module  # noqa: E402
from chipcal.model.workload.llm_config import parse_config  # noqa: E402

# weights drawn wider than HF's 0.02 so that greedy picks are far apart: a padded batch sums in
# another order than one sequence alone, and near-ties could then flip on another CPU's kernels
SPREAD = {**TINY, "initializer_range": 0.5}


@pytest.fixture(scope="module")
def tiny():
    config = parse_config(SPREAD, "tiny", "tests/test_batching.py")
    return config, build_llm(config, "float32", "cpu", seed=0), transformers_module(config.name)


def test_every_request_gets_what_generate_gives_it_alone(tiny):
    """Requests of unequal prompts join and leave a batch of 2 (left-padded, masked, their own
    positions): each one's tokens are those greedy generate gives it on its own."""
    import torch

    config, model, tf = tiny
    queue = (Request(5, 6), Request(9, 4), Request(3, 7), Request(7, 5), Request(4, 3))
    run = serve(model, tf, queue, 2, config.vocab, CPU, seed=1)
    gen = torch.Generator().manual_seed(1)                  # the prompts serve draws, in queue order
    for request, tokens in zip(queue, run.outputs, strict=True):
        prompt = torch.randint(config.vocab, (1, request.prompt_tokens), generator=gen)
        with torch.inference_mode():
            alone = model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                   max_new_tokens=request.output_tokens, min_new_tokens=request.output_tokens,
                                   eos_token_id=None, pad_token_id=0)
        assert list(tokens) == alone[0, request.prompt_tokens:].tolist()


def test_the_schedule_and_its_saturated_window_by_hand(tiny):
    """Outputs 3, 5, 2, 4 with 2 slots. Iteration 1 prefills A and B (2 first tokens), then all
    slots run and C, D wait: the window opens. Decodes of 2 at iterations 1-3 (A leaves after 2,
    C after 1); C is prefilled at iteration 3, D at 4, which empties the queue and closes the
    window: 3 decodes of 2 + 2 first tokens = 8 tokens in it. Then B leaves after iteration 4's
    decode and D decodes alone twice: 6 iterations, 14 = 3 + 5 + 2 + 4 tokens."""
    config, model, tf = tiny
    queue = (Request(3, 3), Request(3, 5), Request(3, 2), Request(3, 4))
    run = serve(model, tf, queue, 2, config.vocab, CPU)
    assert (run.iterations, run.total_tokens, run.prefill_groups) == (6, 14, (2, 1, 1))
    assert (run.window_tokens, run.window_mean_batch) == (8, 2.0) and 0 < run.window_s < run.total_s
    assert [len(t) for t in run.outputs] == [3, 5, 2, 4]


def test_too_few_requests_never_saturate(tiny):
    config, model, tf = tiny
    with pytest.raises(NoSaturatedWindow, match="3 requests never keep 4 slots busy"):
        serve(model, tf, requests(3, 8, 4), 4, config.vocab, CPU)


def test_requests_spread_around_their_means():
    """Uniform within +-50 %: 400 requests of mean 64 + 32 lie in [32, 96] and [16, 48], means
    within 5 % of 64 and 32; the same seed, the same queue."""
    queue = requests(400, 64, 32, seed=3)
    prompts, outputs = [r.prompt_tokens for r in queue], [r.output_tokens for r in queue]
    assert 32 <= min(prompts) and max(prompts) <= 96 and 16 <= min(outputs) and max(outputs) <= 48
    assert sum(prompts) / 400 == pytest.approx(64, rel=0.05) and sum(outputs) / 400 == pytest.approx(32, rel=0.05)
    assert requests(400, 64, 32, seed=3) == queue


@pytest.mark.timing
def test_measure_model_efficiency_serves_offline(cli, monkeypatch, tmp_path):
    """--scenario offline: one row per slot count, per output token, with the queue's mean lengths."""
    from chipcal.cli import measure_model_efficiency as mme

    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path))
    config = write_config(tmp_path, SPREAD)
    rc, out, err = cli(lambda a: mme.main(a), ["--model", config, "--scenario", "offline", "--batch", "2",
                                               "--context", "8", "--new-tokens", "6", "--requests", "8",
                                               "--max-time", "0.3", "--no-power", "--peak", "spec", "--json"])
    assert rc == 0, err
    (row,) = json.loads(out)
    assert row["runtime"] == "offline" and row["batch"] == 2 and row["requests"] == 8 and row["n"] >= 3
    assert row["tokens_per_s"] == pytest.approx(1 / row["latency_s"]) and row["mean_batch"] == 2.0
    assert row["context"] == round(sum(r.prompt_tokens for r in requests(8, 8, 6)) / 8)


@pytest.mark.parametrize("argv, says", [
    (["--scenario", "offline", "--generate"], "--scenario offline serves LLMs"),
    (["--scenario", "offline", "--phase", "prefill"], "--scenario offline serves LLMs"),
    (["--requests", "8"], "--requests is the queue of --scenario offline"),
])
def test_offline_usage_errors_exit_2_with_one_line(cli, tmp_path, argv, says):
    from chipcal.cli import measure_model_efficiency as mme

    rc, out, err = cli(lambda a: mme.main(a), ["--model", write_config(tmp_path), *argv])
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1
