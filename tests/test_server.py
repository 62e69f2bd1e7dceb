"""Serving under latency limits (model.estimate.server, MLPerf's Server scenario): the queue's
formulas worked by hand, the search's result within its limits, and the CLI's --scenario server."""

from __future__ import annotations

import json
import math

import pytest
from tiny_llm import TINY, write_config

from chipcal.model.estimate.parallel import Layout
from chipcal.model.estimate.server import (
    Limits,
    LimitsUnmet,
    erlang_c,
    highest_rate,
    server,
    wait_p99_s,
)
from chipcal.model.registry import load_registry
from chipcal.model.workload.llm_config import parse_config


def test_erlang_c_by_hand():
    """M/M/1: an arrival waits with probability rho (0.5). M/M/2 at a = 1: (a^2/2! x 2/(2-a)) /
    (1 + a + a^2/2! x 2/(2-a)) = 1 / 3. At capacity every arrival waits."""
    assert erlang_c(1, 0.5) == pytest.approx(0.5)
    assert erlang_c(2, 1.0) == pytest.approx(1 / 3)
    assert erlang_c(4, 4.0) == 1.0


def test_the_p99_wait_and_its_inverse_by_hand():
    """M/M/1, 1 s a request, 0.5 arriving a second: P(W > t) = 0.5 e^(-0.5 t), so the p99 wait is
    ln(50) / 0.5 = 7.824 s; the highest rate whose p99 wait fits 7.824 s is 0.5 a second. 100
    servers at 10 % load: an arrival waits with probability far below 1 %, so the p99 wait is 0."""
    assert wait_p99_s(1, 1.0, 0.5) == pytest.approx(math.log(50) / 0.5)
    assert highest_rate(1, 1.0, math.log(50) / 0.5) == pytest.approx(0.5, rel=1e-6)
    assert wait_p99_s(100, 1.0, 10.0) == 0.0 and wait_p99_s(2, 1.0, 2.0) == math.inf


@pytest.fixture(scope="module")
def tiny_on_h100():
    return parse_config(TINY, "tiny", "tests/tiny_llm.py"), load_registry().get("h100-sxm5")


def test_the_load_found_meets_both_limits(tiny_on_h100, source):
    """Output tokens/s = replicas x queries/s x output tokens; p99 TTFT and TPOT within the limits;
    a TPOT limit between the engine's iteration at one slot and at its fullest gives fewer slots."""
    config, h100 = tiny_on_h100
    loose = server(config, h100, "bf16", "compiled", 16, 8, source.llm_step, Limits(0.05, 0.01), layout=Layout(1, 2),
                   max_batch=64)
    assert loose.ttft_p99_s <= 0.05 and loose.tpot_s <= 0.01 and loose.dp == 2
    assert loose.tokens_per_s == pytest.approx(loose.queries_per_s * 8) and 0 < loose.occupancy < 1
    tight = server(config, h100, "bf16", "compiled", 16, 8, source.llm_step, Limits(0.05, loose.tpot_s * 0.999),
                   layout=Layout(1, 2), max_batch=64)
    assert tight.slots < loose.slots and tight.tpot_s < loose.tpot_s


def test_a_query_s_latency_limit_leaves_the_first_token_what_the_longest_output_does_not_take():
    """gptj's 20 s (mlperf.conf) for up to 128 tokens: at 50 ms an iteration, the other 127 tokens
    take 6.35 s, so the first may take 13.65 s; a TTFT limit below that binds instead."""
    gptj = Limits(latency_s=20.0, longest_tokens=128)
    assert gptj.first_token_budget_s(0.05) == pytest.approx(13.65)
    assert Limits(10.0, latency_s=20.0, longest_tokens=128).first_token_budget_s(0.05) == 10.0
    assert Limits(2.0, 0.2).first_token_budget_s(99.0) == 2.0
    assert gptj.tpot_met(1e9) and Limits(2.0, 0.2).tpot_met(0.2) and not Limits(2.0, 0.2).tpot_met(0.21)
    assert str(gptj) == "latency 20 s (128 tokens generated)" and str(Limits(2.0, 0.2)) == "TPOT 0.2 s and TTFT 2 s"
    with pytest.raises(LimitsUnmet, match="needs a TTFT, TPOT or query-latency limit"):
        Limits()


def test_the_load_found_meets_a_query_s_latency_limit(tiny_on_h100, source):
    """The p99 query: its TTFT and the longest output's other tokens, one iteration each, within
    the limit; beams run on the same search (serving.py)."""
    config, h100 = tiny_on_h100
    limit = Limits(latency_s=0.05, longest_tokens=12)
    load = server(config, h100, "bf16", "compiled", 16, 8, source.llm_step, limit, layout=Layout(), max_batch=64,
                  beams=2)
    assert load.ttft_p99_s + 11 * load.tpot_s <= 0.05 and load.beams == 2
    assert (load.ttft_limit_s, load.tpot_limit_s, load.latency_limit_s) == (None, None, 0.05)


def test_limits_no_slot_count_meets_are_refused(tiny_on_h100, source):
    config, h100 = tiny_on_h100
    with pytest.raises(LimitsUnmet, match="no slot count meets TPOT 1e-09 s"):
        server(config, h100, "bf16", "compiled", 16, 8, source.llm_step, Limits(1.0, 1e-9), layout=Layout())


def test_cli_serves_under_limits(cli, tmp_path, monkeypatch, source):
    from chipcal.cli import predict

    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(source._directory().parent))
    argv = ["--model", write_config(tmp_path), "--hardware", "h100-sxm5", "--context", "16", "--new-tokens", "8",
            "--scenario", "server", "--ttft-s", "0.05", "--tpot-s", "0.01", "--max-batch", "32"]
    main = lambda a: predict.main(a, prog="chipcal predict")  # noqa: E731
    rc, out, err = cli(main, [*argv, "--json"])
    assert rc == 0, err
    (row,) = json.loads(out)
    assert row["ttft_p99_s"] <= 0.05 and row["tpot_s"] <= 0.01 and row["slots"] <= 32
    rc, out, _ = cli(main, argv)
    assert rc == 0 and "the highest Poisson load" in out
    rc, _, err = cli(main, argv[:-4])
    assert rc == 2 and "--scenario server takes both --ttft-s and --tpot-s" in err
