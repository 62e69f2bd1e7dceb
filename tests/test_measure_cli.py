"""measure_peak / measure_model_efficiency: bad input (exit 2, one line), Ctrl-C, JSON records."""

from __future__ import annotations

import csv
import json

import pytest
import torch

from chipcal.cli import measure_model_efficiency as mme
from chipcal.cli import measure_peak as mp
from chipcal.measure import bandwidth as bw_mod
from chipcal.measure import identify as identify_mod
from chipcal.measure import models as models_mod
from chipcal.measure import peak as peak_mod
from chipcal.measure.models import measure_module

PEAK_BAD = [
    ["--device", "tpu"],
    ["--device", "cuda"],             # no CUDA here (forced below)
    ["--device", "cuda:x"],
    ["--precision", "fp33"],
    ["--precision", ""],
    ["--plot", "/no/such/dir/peak.png"],
    ["--csv", "/no/such/dir/rows.csv"],
    ["--frobnicate"],
]
MODEL_BAD = [
    ["--model", "resnet5"],
    ["--model", ","],
    ["--device", "cuda"],
    ["--device", "gpu"],
    ["--batch", "0"],
    ["--batch", "x"],
    ["--batch", ""],
    ["--precision", "int8"],           # a precision, but not one models run at
    ["--peak", "vendor"],
    ["--max-time", "-1"],
    ["--csv", "/no/such/dir/rows.csv"],
]


def one_line_usage_error(rc, out, err):
    assert rc == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert "error:" in err


@pytest.fixture(autouse=True)
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


@pytest.mark.parametrize("argv", PEAK_BAD, ids=" ".join)
def test_measure_peak_bad_input(cli, argv):
    rc, out, err = cli(mp.main, argv)
    one_line_usage_error(rc, out, err)


def test_cuda_without_gpu_says_why(cli):
    rc, _, err = cli(mp.main, ["--device", "cuda"])
    assert rc == 2 and "no CUDA device" in err and "valid here: cpu" in err


@pytest.mark.parametrize("argv", MODEL_BAD, ids=" ".join)
def test_measure_model_efficiency_bad_input(cli, argv):
    rc, out, err = cli(mme.main, argv)
    one_line_usage_error(rc, out, err)


def test_unknown_model_suggests(cli):
    _, _, err = cli(mme.main, ["--model", "resnet5"])
    assert "resnet50" in err


@pytest.fixture
def tiny_sweep(tmp_path, monkeypatch):
    """Small GEMM shapes and bandwidth sizes, a private cache dir, and no registry match: the host
    CPU may be a registry chip (Xeon 8480+, EPYC 9654, i7-12700K), which would give it a vendor
    spec; these tests are about the local-CPU path, on any host."""
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(identify_mod, "match_registry_chip", lambda *a, **k: None)
    monkeypatch.setattr(peak_mod, "default_shapes", lambda device: ((64, 64, 64), (128, 64, 32)))
    monkeypatch.setitem(bw_mod.DEFAULT_BANDWIDTH_SIZES, "cpu", (64 * 1024, 256 * 1024))
    real = peak_mod.measure_gemm_peak
    monkeypatch.setattr(peak_mod, "measure_gemm_peak",
                        lambda *a, **k: real(*a, **{**k, "max_time_s": 0.05, "min_samples": 3}))
    real_bw = bw_mod.measure_bandwidth
    monkeypatch.setattr(bw_mod, "measure_bandwidth",
                        lambda *a, **k: real_bw(*a, **{**k, "max_time_s": 0.05, "min_samples": 3}))


ISSUE_PEAK_FIELDS = {"device", "precision", "peak_flop_per_s", "spec_peak_flop_per_s", "physics_peak_flop_per_s",
                     "fraction_of_spec", "fraction_of_physics", "bandwidth_bytes_per_s", "n", "cv"}


def test_measure_peak_json_records(cli, tiny_sweep, tmp_path):
    plot = tmp_path / "peak.png"
    rc, out, err = cli(mp.main, ["--precision", "fp32,tf32", "--json", "--plot", str(plot)])
    assert rc == 0, err
    rows = json.loads(out)
    assert all(ISSUE_PEAK_FIELDS <= set(r) for r in rows)
    fp32 = next(r for r in rows if r["precision"] == "fp32")
    assert fp32["fraction_of_physics"] == pytest.approx(fp32["peak_flop_per_s"] / fp32["physics_peak_flop_per_s"])
    assert fp32["spec_peak_flop_per_s"] is None and fp32["fraction_of_spec"] is None   # local CPU: no vendor spec
    tf32 = next(r for r in rows if r["precision"] == "tf32")
    assert tf32["peak_flop_per_s"] is None and tf32["note"].startswith("unsupported:")
    kernels = {r["kernel"] for r in rows if r["kind"] == "bandwidth"}
    assert kernels == {"copy", "triad"}
    assert all(r["bandwidth_bytes_per_s"] > 0 for r in rows if r["kind"] == "bandwidth")
    assert plot.stat().st_size > 0


def test_measure_peak_table(cli, tiny_sweep):
    rc, out, _ = cli(mp.main, ["--precision", "fp32", "--no-bandwidth"])
    assert rc == 0 and "fp32" in out and "TFLOP/s" in out and "local-cpu" in out


def test_measure_peak_ctrl_c_keeps_rows(cli, tiny_sweep, tmp_path, monkeypatch):
    real = peak_mod.measure_gemm_peak
    calls = []

    def interrupt_second(*a, **k):
        calls.append(a)
        if len(calls) == 2:
            raise KeyboardInterrupt
        return real(*a, **k)

    monkeypatch.setattr(peak_mod, "measure_gemm_peak", interrupt_second)
    rows_csv = tmp_path / "rows.csv"
    rc, out, err = cli(mp.main, ["--precision", "fp32,bf16", "--json", "--csv", str(rows_csv)])
    assert rc == 130 and "interrupted" in err and "Traceback" not in err
    assert [r["precision"] for r in json.loads(out)] == ["fp32"]
    with open(rows_csv) as f:
        assert [r["precision"] for r in csv.DictReader(f)] == ["fp32"]


def tiny_measurement(name, batch, precision, device, **kw):
    layer = torch.nn.Linear(32, 16)
    return measure_module(layer, torch.randn(batch, 32), 2 * batch * 32 * 16, name=name, batch=batch,
                          precision=precision, device=device, power=kw.get("power"), max_time_s=0.05,
                          min_samples=2)


ISSUE_MODEL_FIELDS = {"model", "batch", "precision", "device", "flop", "latency_s", "latency_iqr_s", "n",
                      "delivered_flop_per_s", "spec_peak_flop_per_s", "measured_peak_flop_per_s",
                      "efficiency_vs_spec", "efficiency_vs_measured", "energy_j", "avg_power_w", "power_source"}


def test_measure_model_efficiency_json_and_ctrl_c(cli, tiny_sweep, tmp_path, monkeypatch):
    calls = []

    def fake(*a, **k):
        calls.append(a)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return tiny_measurement(*a, **k)

    monkeypatch.setattr(models_mod, "measure_model", fake)
    monkeypatch.setattr(peak_mod, "cached_peak_flop_per_s", lambda *a: 1e12)
    rows_csv = tmp_path / "rows.csv"
    rc, out, err = cli(mme.main, ["--model", "resnet50,vit_b_16", "--batch", "1,8", "--json",
                                  "--csv", str(rows_csv)])
    assert rc == 130 and "interrupted; 2 row(s) kept" in err
    rows = json.loads(out)
    assert [(r["model"], r["batch"]) for r in rows] == [("resnet50", 1), ("resnet50", 8)]
    for r in rows:
        assert ISSUE_MODEL_FIELDS <= set(r)
        assert r["flop"] == 2 * r["batch"] * 32 * 16
        assert r["delivered_flop_per_s"] == pytest.approx(r["flop"] / r["latency_s"])
        assert r["efficiency_vs_measured"] == pytest.approx(r["delivered_flop_per_s"] / 1e12)
        assert r["energy_j"] is None and r["avg_power_w"] is None
        assert r["power_source"] == "unavailable" and r["power_note"]
    with open(rows_csv) as f:
        assert len(list(csv.DictReader(f))) == 2


def test_unsupported_model_precision_is_a_row(cli, tiny_sweep, monkeypatch):

    def unsupported(name, batch, precision, device, **kw):
        raise models_mod.UnsupportedPrecision(f"unsupported: {name} at {precision} on {device}: no kernel")

    monkeypatch.setattr(models_mod, "measure_model", unsupported)
    monkeypatch.setattr(peak_mod, "cached_peak_flop_per_s", lambda *a: None)
    rc, out, _ = cli(mme.main, ["--model", "resnet50", "--precision", "fp16", "--peak", "spec", "--no-power"])
    assert rc == 0 and "unsupported: resnet50 at fp16" in out
