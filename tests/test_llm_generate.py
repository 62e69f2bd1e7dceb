"""Hugging Face generate timed end to end (issue 55): the time per token worked out by hand, the
CLI's rows and refusals (tests/test_llm.py has the step; tests/test_runtimes_recorded.py the
recorded runs against their predictions)."""

from __future__ import annotations

import json

import pytest
from tiny_llm import write_config

pytest.importorskip("transformers")

from chipcal.measure.llm import GenerateTooShort, per_token  # noqa: E402
from chipcal.measure.timing import Measurement  # noqa: E402


@pytest.fixture
def tiny_config(tmp_path):
    return write_config(tmp_path)


def test_time_per_token_is_the_call_less_its_prefill_over_the_decode_forwards():
    """Calls of 1.0, 1.2 and 1.1 s for 10 tokens with a 0.1 s prefill: 9 decode forwards each,
    so 0.9 / 9 = 0.1, 1.1 / 9 and 1.0 / 9 s per token; the median is the 1.1 s call's."""
    m = per_token(Measurement.from_samples([1.0, 1.2, 1.1]), 0.1, 10)
    assert m.samples_s == pytest.approx((0.1, 1.1 / 9, 1.0 / 9))
    assert m.median_s == pytest.approx(1.0 / 9) and m.n == 3


def test_a_call_no_longer_than_its_prefill_is_refused():
    with pytest.raises(GenerateTooShort, match="no longer than its prefill"):
        per_token(Measurement.from_samples([0.5, 0.6]), 0.55, 4)


@pytest.mark.timing
def test_measure_model_efficiency_times_generate_end_to_end(cli, tiny_config, monkeypatch, tmp_path):
    """A tiny Llama's generate of 6 tokens after a 16-token prompt: the row is per output token,
    its prefill recorded beside it, and the whole call is longer than the prefill by the 5 decode
    forwards the per-token time stands for."""
    from chipcal.cli import measure_model_efficiency as mme

    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path))
    rc, out, err = cli(lambda a: mme.main(a), ["--model", tiny_config, "--generate", "--context", "16",
                                               "--new-tokens", "6", "--max-time", "0.5", "--no-power",
                                               "--peak", "spec", "--json"])
    assert rc == 0, err
    (row,) = json.loads(out)
    assert row["runtime"] == "generate" and row["phase"] == "decode" and row["n"] >= 3
    assert row["tokens_per_s"] == pytest.approx(1 / row["latency_s"])
    assert 0 < row["prefill_s"] and row["compile_s"] is None and row["power_source"] == "unavailable"


@pytest.mark.parametrize("argv, says", [
    (["--phase", "prefill", "--generate"], "--generate times an LLM's decode"),
    (["--generate", "--new-tokens", "1"], "--new-tokens of at least 2"),
    (["--runtime", "compiled"], "--runtime compiled: torchvision and user models only"),
])
def test_generate_and_compiled_usage_errors_exit_2_with_one_line(cli, tiny_config, argv, says):
    from chipcal.cli import measure_model_efficiency as mme

    rc, out, err = cli(lambda a: mme.main(a), ["--model", tiny_config, *argv, "--no-power"])
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1 and not out


def test_by_layer_needs_the_eager_runtime(cli):
    from chipcal.cli import measure_model_efficiency as mme

    rc, _, err = cli(lambda a: mme.main(a), ["--model", "resnet18", "--runtime", "compiled", "--by-layer"])
    assert rc == 2 and "hooks would split a compiled graph" in err
