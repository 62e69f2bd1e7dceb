"""Serving under latency limits (model.estimate.server, MLPerf's Server scenario): the queue's
formulas worked by hand, the search's result within its limits, and the CLI's --scenario server."""

from __future__ import annotations

import json
import math

import pytest
from tiny_llm import TINY, write_config

from chipcal.model.estimate.parallel import Layout
from chipcal.model.estimate.server import LimitsUnmet, erlang_c, highest_rate, server, wait_p99_s
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
    loose = server(config, h100, "bf16", "compiled", 16, 8, source.llm_step, 0.05, 0.01, layout=Layout(1, 2),
                   max_batch=64)
    assert loose.ttft_p99_s <= 0.05 and loose.tpot_s <= 0.01 and loose.dp == 2
    assert loose.tokens_per_s == pytest.approx(loose.queries_per_s * 8) and 0 < loose.occupancy < 1
    tight = server(config, h100, "bf16", "compiled", 16, 8, source.llm_step, 0.05, loose.tpot_s * 0.999,
                   layout=Layout(1, 2), max_batch=64)
    assert tight.slots < loose.slots and tight.tpot_s < loose.tpot_s


def test_limits_no_slot_count_meets_are_refused(tiny_on_h100, source):
    config, h100 = tiny_on_h100
    with pytest.raises(LimitsUnmet, match="no slot count meets TPOT 1e-09 s"):
        server(config, h100, "bf16", "compiled", 16, 8, source.llm_step, 1.0, 1e-9, layout=Layout())


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
