"""Validation corpus schema and split, the comparison arithmetic, `chipcal validate`, and the
documented figures (docs/validation.md) reproduced from the packaged corpus."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_mapping import REGISTRY, mlp

from chipcal.cli import validate as validate_cli
from chipcal.measure import workloads
from chipcal.model.estimate.prediction import predict
from chipcal.validate import corpus as validate
from chipcal.validate.corpus import COLUMNS, CorpusError, load_corpus, summarize

DOCS = Path(__file__).resolve().parents[1] / "docs" / "validation.md"
RESULTS = DOCS.with_name("validation_results.md")


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "cache"))


# --- the packaged corpus -------------------------------------------------------------------------


def test_packaged_corpus_meets_the_size_and_spread_asked_for():
    rows = load_corpus()
    assert len(rows) >= 40
    assert len({m.source for m in rows}) >= 4
    chips = {m.chip for m in rows}
    assert len({c.partition("@")[0] for c in chips}) >= 8
    for chip in chips:
        REGISTRY.get(chip)                    # every chip is a registry chip (raises otherwise)
    assert len({m.runtime for m in rows}) >= 3
    assert min(m.batch for m in rows) == 1 and max(m.batch for m in rows) >= 64
    assert all(m.source_url.startswith(("https://", validate.REPOSITORY_SOURCE)) and m.source_date and m.source_title
               for m in rows)
    # this project's own measurements name the repository file that holds them
    for m in rows:
        if m.source_url.startswith(validate.REPOSITORY_SOURCE):
            assert (Path(__file__).parents[1] / m.source_url.removeprefix(validate.REPOSITORY_SOURCE)).is_file()
    from chipcal.model.workload.models import classification_models

    assert {m.model for m in rows} <= set(classification_models())


def test_published_runtimes_name_autocast_and_paddle_trt():
    # AMP rows run under torch.autocast (weights cast at every call); Paddle-TRT rows are TensorRT
    # engines inside Paddle Inference, kept apart from stand-alone TensorRT (MLPerf, trtexec)
    rows = load_corpus()
    amp = [m for m in rows if "torch.cuda.amp" in m.note]
    assert len(amp) == 16 and all(m.runtime == "pytorch-eager-amp" and m.autocast for m in amp)
    assert not any(m.autocast for m in rows if m not in amp)
    paddle_trt = [m for m in rows if m.runtime == "paddle-trt"]
    assert len(paddle_trt) == 12 and all("Paddle-TRT" in m.note and m.model_runtime == "fused" for m in paddle_trt)


def test_split_is_by_source_and_recorded_in_the_file():
    rows = load_corpus()
    by_source: dict[str, set[str]] = {}
    for m in rows:
        by_source.setdefault(m.source, set()).add(m.split)
    assert all(len(s) == 1 for s in by_source.values())
    assert {m.split for m in rows} == {"fit", "test"}
    with open(validate.default_corpus(), newline="") as f:
        assert tuple(csv.DictReader(f).fieldnames) == COLUMNS


def _write(tmp_path, rows, name="c.csv"):
    path = tmp_path / name
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        for r in rows:
            w.writerow({k: r.get(k, "") for k in COLUMNS})
    return path


def _row(**kw):
    base = dict(model="mlp1024", chip="v100-sxm2", batch="1", precision="fp16", runtime="tensorrt", value="1",
                unit="ms", source="s1", source_title="a title", source_url="https://example.org/a",
                source_date="2024-01", split="test")
    return {**base, **kw}


@pytest.mark.parametrize("change, says", [
    ({"unit": "fps"}, "unit 'fps' is not one of ms, s, samples/s"),
    ({"runtime": "onnx"}, "runtime 'onnx' is not one of"),
    ({"precision": "fp12"}, "precision 'fp12'"),
    ({"batch": "0"}, "batch"),
    ({"value": "-3"}, "value"),
    ({"source_url": "example.org"}, "is neither a URL"),
    ({"source_date": ""}, "source_date '' is empty"),
    ({"split": "train"}, "split 'train'"),
])
def test_schema_errors_name_the_row(tmp_path, change, says):
    path = _write(tmp_path, [_row(), _row(**change)])
    with pytest.raises(CorpusError, match=re.escape(says)) as exc:
        load_corpus(path)
    assert "c.csv row 2" in str(exc.value)


def test_a_source_split_across_fit_and_test_is_refused(tmp_path):
    path = _write(tmp_path, [_row(), _row(split="fit")])
    with pytest.raises(CorpusError, match="both splits"):
        load_corpus(path)


def test_missing_columns_are_named(tmp_path):
    path = tmp_path / "c.csv"
    path.write_text("model,chip\nresnet50,t4\n")
    with pytest.raises(CorpusError, match="missing columns batch"):
        load_corpus(path)


def test_published_values_become_seconds_per_batch(tmp_path):
    rows = load_corpus(_write(tmp_path, [_row(unit="samples/s", value="96", batch="1"),
                                         _row(unit="samples/s", value="1200", batch="64"),
                                         _row(unit="ms", value="0.346"), _row(unit="s", value="0.02")]))
    assert rows[0].latency_s == pytest.approx(1 / 96)          # 10.42 ms
    assert rows[1].latency_s == pytest.approx(64 / 1200)       # 53.3 ms
    assert rows[2].latency_s == pytest.approx(0.346e-3)
    assert rows[3].latency_s == pytest.approx(0.02)


# --- comparison and summary ----------------------------------------------------------------------


def _mlp_source(model, batch, partition="fused"):
    assert model == "mlp1024"
    return mlp(batch)


def test_error_is_predicted_over_published_minus_one(tmp_path):
    predicted = predict(mlp(1), REGISTRY.get("v100-sxm2"), "fp16").latency_s
    # publish twice the predicted time: the model is 50 % fast, error -0.5
    rows = load_corpus(_write(tmp_path, [_row(value=str(predicted * 2 * 1e3))]))
    (c,) = validate.compare(rows, _mlp_source, REGISTRY)
    assert c.error == pytest.approx(-0.5) and c.model_runtime == "fused"
    assert c.predicted_latency_s == pytest.approx(predicted)


def test_eager_rows_carry_the_host_cost(tmp_path):
    rows = load_corpus(_write(tmp_path, [_row(runtime="pytorch-eager", value="10")]))
    (c,) = validate.compare(rows, _mlp_source, REGISTRY)
    fused = predict(mlp(1), REGISTRY.get("v100-sxm2"), "fp16").latency_s
    assert c.model_runtime == "eager" and c.predicted_latency_s > fused and c.bottleneck == "host"


def _c(chip, runtime, error, model="m"):
    return SimpleNamespace(chip=chip, runtime=runtime, model=model, error=error, abs_error=abs(error))


def test_summary_median_p90_and_bias_by_hand():
    cs = [_c("a", "x", 0.1), _c("a", "x", -0.2), _c("b", "y", 0.3), _c("b", "y", -0.4), _c("b", "y", 0.5),
          _c("b", "y", math.nan)]
    s = summarize(cs)
    # |errors| sorted 0.1 0.2 0.3 0.4 0.5: median 0.3; p90 (linear) = 0.4 + 0.6 x 0.1 = 0.46
    assert s.overall.n == 5 and s.unsupported == 1
    assert s.overall.median_abs_error == pytest.approx(0.3)
    assert s.overall.p90_abs_error == pytest.approx(0.46)
    assert s.overall.median_error == pytest.approx(0.1)         # signed: -0.4 -0.2 0.1 0.3 0.5
    by_chip = {x.group: x for x in s.by_chip}
    assert by_chip["a"].median_error == pytest.approx(-0.05) and by_chip["b"].n == 3
    assert {x.group for x in s.by_runtime} == {"x", "y"}


def test_summary_groups_by_model_by_hand():
    cs = [_c("a", "x", 0.6, "small"), _c("b", "x", 0.5, "small"), _c("a", "x", 0.1, "large"),
          _c("b", "y", -0.1, "large"), _c("b", "y", 0.2, "large")]
    by_model = {x.group: x for x in summarize(cs).by_model}
    assert by_model["small"].n == 2 and by_model["small"].median_error == pytest.approx(0.55)
    # large: signed -0.1 0.1 0.2 -> bias 0.1; |errors| 0.1 0.1 0.2 -> p90 = 0.1 + 0.8 x 0.1 = 0.18
    assert by_model["large"].median_error == pytest.approx(0.1)
    assert by_model["large"].p90_abs_error == pytest.approx(0.18)


# --- the CLI -------------------------------------------------------------------------------------


def validate_main(argv):
    return validate_cli.main(argv, prog="chipcal validate")


@pytest.mark.parametrize("argv, says", [
    (["--split", "train"], "invalid choice: 'train'"),
    (["--corpus", "/nonexistent.csv"], "cannot read corpus"),
    (["--plot", "x.pdf"], "must end in .png or .svg"),
])
def test_usage_errors_exit_2_with_one_line(cli, argv, says):
    rc, _, err = cli(validate_main, argv)
    assert rc == 2 and says in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_cli_json_plot_and_markdown_on_a_small_corpus(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(workloads.WorkloadSource, "get", lambda self, m, b, f=True: _mlp_source(m, b, f))
    predicted = predict(mlp(1), REGISTRY.get("v100-sxm2"), "fp16").latency_s
    corpus = _write(tmp_path, [_row(value=str(predicted * 1e3)),
                               _row(source="s2", split="fit", value=str(predicted * 1e3 / 1.25))])
    rc, out, err = cli(validate_main, ["--corpus", str(corpus), "--split", "all", "--json"])
    assert rc == 0, err
    rows = json.loads(out)
    assert [r["split"] for r in rows] == ["test", "fit"]
    assert rows[0]["error"] == pytest.approx(0.0) and rows[1]["error"] == pytest.approx(0.25)
    md, png = tmp_path / "v.md", tmp_path / "v.png"
    rc, out, err = cli(validate_main, ["--corpus", str(corpus), "--markdown", str(md), "--plot", str(png)])
    assert rc == 0, err
    assert "median_abs_err" in out and png.stat().st_size > 0
    text = md.read_text()
    assert "### Split `fit` (1 rows)" in text and "median |error| **25%**" in text
    assert "### Split `test` (1 rows)" in text and "median |error| **0%**" in text


def test_validate_from_a_warm_cache_imports_no_torch(tmp_path):
    """The issue asks that `chipcal validate` never import torch when the workload cache is warm:
    a fresh process compares a torchvision model's fused and eager rows from the private cache
    (characterized here first) and its import log names no torch module."""
    import subprocess
    import sys

    source = workloads.WorkloadSource(use_cache=True)
    for partition in ("fused", "eager"):
        source.get("resnet18", 1, partition)
    corpus = _write(tmp_path, [_row(model="resnet18", value="1"),
                               _row(model="resnet18", runtime="pytorch-eager", value="8")])
    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "chipcal.cli.main", "validate", "--corpus",
                          str(corpus), "--json"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert "chipcal.measure.workloads" in imported          # the cache lookup ran in this process
    assert not {m for m in imported if m.split(".")[0] in ("torch", "torchvision", "fvcore")}
    rows = json.loads(run.stdout)
    assert [r["runtime"] for r in rows] == ["tensorrt", "pytorch-eager"]
    assert all(math.isfinite(r["error"]) for r in rows)


# --- the documented figures ----------------------------------------------------------------------


def _documented(split: str) -> tuple[str, str]:
    """(median, p90) |error| of `split` as docs/validation.md states them; the generated tables
    (docs/validation_results.md) must say the same."""
    pattern = r"median \|error\| \*\*(\d+%)\*\*, p90 \|error\| \*\*(\d+%)\*\*"
    headline = re.search(rf"Headline, {split} split: {pattern}", DOCS.read_text())
    generated = re.search(rf"### Split `{split}` \(\d+ rows\)\s+Overall: {pattern}", RESULTS.read_text())
    assert headline and generated, f"no documented summary for split {split}"
    assert headline.groups() == generated.groups()
    return headline.group(1), headline.group(2)


@pytest.mark.slow
def test_validate_reproduces_the_documented_figures(cli):
    # characterizes the corpus's workloads into a private cache (~1-2 min), then compares
    for split in ("fit", "test"):
        rc, out, err = cli(validate_main, ["--split", split, "--json"])
        assert rc == 0, err
        s = summarize([SimpleNamespace(chip=r["chip"], runtime=r["runtime"], model=r["model"],
                                       error=r["error"], abs_error=abs(r["error"])) for r in json.loads(out)])
        assert (f"{s.overall.median_abs_error * 100:.0f}%", f"{s.overall.p90_abs_error * 100:.0f}%") \
            == _documented(split)
        if split == "fit":
            _check_h100_measure_model_efficiency_rows(json.loads(out))


def _check_h100_measure_model_efficiency_rows(rows):
    """The H100 SXM5's measure_model_efficiency.json (torch 2.11 eager; fp32 strict as timed, bf16
    cast), predicted with default flags: ResNet-50, ViT-B/16 and MobileNet-V2 at batch 1, 8, 64 in
    fp32 and bf16, within 25 % at the median (issue 36)."""
    import numpy as np

    mme = [r for r in rows if r["source"] == "chipcal-h100-mme-20261126"]
    assert {(r["model"], r["batch"], r["precision"]) for r in mme} == {
        (m, b, p) for m in ("resnet50", "vit_b_16", "mobilenet_v2") for b in (1, 8, 64) for p in ("fp32", "bf16")}
    assert np.median([abs(r["error"]) for r in mme]) <= 0.25


# PyTorch 2.11 eager FP16 (channels-last) replayed as one CUDA graph on the lent H100 SXM5, median of
# 30 x 20 replays, ms per batch (docs/findings/2026-11-24-h100-cuda-graph-replays.md): no host cost, so the
# device side of the model alone is compared. Measured, not published: not a corpus row.
H100_CUDA_GRAPH_MS = {("resnet50", 1): 0.935, ("resnet50", 8): 1.229, ("mobilenet_v2", 1): 0.700,
                      ("mobilenet_v2", 8): 0.918, ("efficientnet_b0", 1): 1.101, ("efficientnet_b0", 8): 1.510}


def test_device_side_matches_the_h100_cuda_graph_replays():
    source = workloads.WorkloadSource()
    h100 = REGISTRY.get("h100-sxm5")
    errors = {}
    for (model, batch), measured_ms in H100_CUDA_GRAPH_MS.items():
        p = predict(source.get(model, batch, "eager"), h100, "fp16", runtime="eager", host_overhead_s=0.0,
                    memory_format="channels_last")
        errors[model, batch] = p.latency_s * 1e3 / measured_ms - 1
    # PyTorch's kernels at 8.8k cycles each, fitted on these six and an H200's eight compiled rows
    # (params.PYTORCH_OVERHEAD_CYCLES; findings/2026-11-30-compiled-weight-layout.md): batch 1 within
    # 10 % (+1.9 to +3.4 %; +19 to +22 % at the corpus's 10.5k), batch 8 within 20 % (-19.6 to +1.2 %)
    assert all(abs(e) < 0.20 for (_, b), e in errors.items() if b == 8), errors
    assert all(abs(e) < 0.10 for (_, b), e in errors.items() if b == 1), errors
