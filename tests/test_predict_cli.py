"""`chipcal predict`: bad input exits 2 with the valid names, unsupported rows, outputs, real models."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
from recorded import REFERENCE_RUN
from test_mapping import custom_params, mlp

from chipcal.calibrate.document import SCHEMA as CALIBRATION_SCHEMA
from chipcal.cli import predict as predict_cli
from chipcal.measure import workloads
from chipcal.measure.device import CPU
from chipcal.measure.system import local_chip


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    """No user cache is read: neither workloads nor measurements (e.g. the bandwidth
    `--hardware local` would otherwise take from this host's last run) — one root for both."""
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def hand_mlp(monkeypatch):
    """'mlp1024' resolves to the hand-built seed MLP at any batch (no torch characterization)."""
    original = workloads.WorkloadSource.get

    def get(self, model, batch, partition="fused"):
        return mlp(batch) if model == "mlp1024" else original(self, model, batch, partition)

    monkeypatch.setattr(workloads.WorkloadSource, "get", get)


@pytest.mark.parametrize("argv, says", [
    (["--model", "mlp1024", "--hardware", "h100-sxm6"], "valid: a100-pcie-80gb"),
    (["--model", "mlp1024", "--hardware", "h100-sxm5", "--precision", "fp12"], "valid: fp64"),
    (["--model", "mlp1024", "--hardware", "h100-sxm5", "--batch", "0"], "must be a positive integer"),
    (["--model", "mlp1024", "--hardware", "h100-sxm5", "--batch", "8,-1"], "must be a positive integer"),
    (["--model", "mlp1024", "--hardware", "all,h100-sxm5"], "'all' cannot be combined"),
    (["--model", "mlp1024", "--hardware", "jetson-agx-orin-64gb@20W"], "valid: 15W, 30W, 50W, MAXN"),
    (["--model", "mlp1024", "--hardware", "h100-sxm5", "--calibration", "/nonexistent"], "no calibration.json"),
    (["--hardware", "h100-sxm5"], "--model"),
    (["--model", "mlp1024", "--hardware", "h100-sxm5", "--runtime", "eager", "--host-overhead-s", "-1"],
     "must be a number >= 0"),
    (["--model", "mlp1024", "--hardware", "h100-sxm5", "--runtime", "jit"], "compiled"),
    (["--model", "mlp1024", "--hardware", "h100-sxm5", "--power-limit-w", "0"], "must be a positive number"),
    (["--model", "mlp1024", "--hardware", "h100-sxm5", "--usd-per-hour", "-2"], "must be a positive number"),
    (["--model", "mlp1024", "--hardware", "h100-sxm5", "--devices", "2"], "--devices is for LLMs"),
])
def test_usage_errors_exit_2_with_one_line(cli, hand_mlp, argv, says):
    rc, out, err = cli(predict_main, argv)
    assert rc == 2
    assert says in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def predict_main(argv):
    return predict_cli.main(argv, prog="chipcal predict")


def test_unknown_model_names_the_valid_ones(cli):
    rc, _, err = cli(predict_main, ["--model", "resnet51", "--hardware", "h100-sxm5"])
    assert rc == 2
    assert "unknown model 'resnet51'" in err and "resnet50" in err and "valid:" in err


def test_fp8_on_v100_is_an_unsupported_row(cli, hand_mlp):
    rc, out, _ = cli(predict_main, ["--model", "mlp1024", "--hardware", "v100-sxm2", "--precision", "fp8,fp16",
                                    "--batch", "16", "--json"])
    assert rc == 0
    rows = json.loads(out)
    by_precision = {r["precision"]: r for r in rows}
    assert by_precision["fp8"]["status"] == "unsupported"
    assert by_precision["fp8"]["latency_s"] is None and "fp8" in by_precision["fp8"]["reason"]
    assert by_precision["fp16"]["status"] == "ok" and by_precision["fp16"]["latency_s"] > 0
    rc, out, _ = cli(predict_main, ["--model", "mlp1024", "--hardware", "v100-sxm2", "--precision", "fp8"])
    assert rc == 0 and "unsupported" in out and "v100-sxm2 has no engine for fp8" in out
    # --explain of an unsupported pair says why and explains nothing (it once ended in a traceback)
    rc, out, err = cli(predict_main, ["--model", "mlp1024", "--hardware", "v100-sxm2", "--precision", "fp8",
                                      "--explain"])
    assert rc == 0 and "Traceback" not in err
    assert out.rstrip().splitlines()[-4:] == ["mlp1024 on v100-sxm2, batch 1, fp8",
                                              "  unsupported: v100-sxm2 has no engine for fp8; it runs fp64, fp32, fp16",
                                              "",
                                              "No cost for v100-sxm2: the registry holds no dated price; give --usd-per-hour"]


REQUIRED = ("latency_s", "throughput_per_s", "energy_j", "avg_power_w", "peak_memory_bytes",
            "attained_flop_per_s", "compute_utilization", "bandwidth_utilization", "arithmetic_intensity",
            "units_allocated", "units_total", "bottleneck")


def test_a_price_per_device_hour_gives_the_cost_per_1000_inferences(cli, hand_mlp):
    """$7.2 per device-hour is $0.002 a second: 1,000 inferences cost 2 / (inferences per second);
    an unsupported row costs nothing."""
    argv = ["--model", "mlp1024", "--hardware", "h100-sxm5,v100-sxm2", "--precision", "fp8", "--usd-per-hour", "7.2"]
    rows = {r["chip"]: r for r in json.loads(cli(predict_main, [*argv, "--json"])[1])}
    h100, v100 = rows["h100-sxm5"], rows["v100-sxm2"]
    assert h100["usd_per_hour"] == 7.2 and h100["usd_per_1000_inferences"] == pytest.approx(2 / h100["throughput_per_s"])
    assert v100["status"] == "unsupported" and v100["usd_per_1000_inferences"] is None
    assert h100["price_basis"] == "given"
    rc, out, _ = cli(predict_main, argv)
    assert rc == 0 and "h100-sxm5: given" in out and "$/1k inferences" in out


def test_without_a_price_the_registry_dated_price_is_used_and_named(cli, hand_mlp):
    """AWS's capacity-block table: p5.48xlarge $39.33 an hour for 8 H100s. The V100 has no price
    in the registry, so no cost, and the output says so."""
    argv = ["--model", "mlp1024", "--hardware", "h100-sxm5,v100-sxm2", "--precision", "fp16"]
    rows = {r["chip"]: r for r in json.loads(cli(predict_main, [*argv, "--json"])[1])}
    h100, v100 = rows["h100-sxm5"], rows["v100-sxm2"]
    assert h100["usd_per_hour"] == pytest.approx(39.33 / 8, abs=5.01e-4)
    assert h100["price_basis"] == "capacity-block, p5.48xlarge (8 x H100), US East (N. Virginia), as of 2024-12-31"
    assert h100["usd_per_1000_inferences"] == pytest.approx(1000 * h100["usd_per_hour"] / 3600 / h100["throughput_per_s"])
    assert "usd_per_hour" not in v100 and "usd_per_1000_inferences" not in v100
    rc, out, _ = cli(predict_main, argv)
    assert rc == 0 and "h100-sxm5: capacity-block, p5.48xlarge (8 x H100), US East (N. Virginia), as of 2024-12-31" in out
    assert "No cost for v100-sxm2: the registry holds no dated price; give --usd-per-hour" in out


def test_json_rows_sweep_batch_and_precision_and_are_deterministic(cli, hand_mlp):
    argv = ["--model", "mlp1024", "--hardware", "h100-sxm5,kpu-t256,jetson-agx-orin-64gb-cpu",
            "--batch", "1,16", "--precision", "fp32,int8", "--json"]
    rc, out, _ = cli(predict_main, argv)
    assert rc == 0
    rows = json.loads(out)
    assert len(rows) == 3 * 2 * 2
    assert all(k in r for r in rows for k in REQUIRED)
    assert cli(predict_main, argv)[1] == out
    h100 = {(r["batch"], r["precision"]): r for r in rows if r["chip"] == "h100-sxm5"}
    # batch 16 keeps more SMs busy than batch 1
    assert h100[(16, "int8")]["compute_utilization"] > h100[(1, "int8")]["compute_utilization"]
    assert h100[(16, "int8")]["throughput_per_s"] == pytest.approx(16 / h100[(16, "int8")]["latency_s"])


def test_text_comparison_layers_explain_csv_and_plot(cli, hand_mlp, tmp_path):
    csv, png = tmp_path / "rows.csv", tmp_path / "roofline.png"
    rc, out, err = cli(predict_main, ["--model", "mlp1024", "--hardware", "h100-sxm5,tpu-edge-pro,kpu-t256",
                                      "--precision", "int8", "--batch", "16", "--by-layer", "--explain",
                                      "--csv", str(csv), "--plot", str(png)])
    assert rc == 0, err
    assert "recommendations:" in out and "best latency (batch 16)" in out and "best energy" in out
    assert "per subgraph" in out and "fc1" in out
    assert "opportunity (batch)" in out and "opportunity (fusion)" not in out  # no ops in the hand MLP
    assert "memory timeline" in out
    assert png.stat().st_size > 10_000
    header = csv.read_text().splitlines()[0].split(",")
    assert "explanation" in header and "bottleneck" in header  # --by-layer writes per-subgraph records


def test_calibration_flag_applies_to_its_chip(cli, hand_mlp, tmp_path):
    fitted = custom_params("gpu", efficiency=0.1, overhead_s=1e-3, source="calibration: test")
    (tmp_path / "calibration.json").write_text(json.dumps(
        {"schema": CALIBRATION_SCHEMA, "parameters": {"chip": "h100-sxm5", "family_params": fitted.to_dict()}}))
    rc, out, _ = cli(predict_main, ["--model", "mlp1024", "--hardware", "h100-sxm5,a100-sxm4-80gb",
                                    "--calibration", str(tmp_path), "--json"])
    rows = {r["chip"]: r for r in json.loads(out)}
    assert rows["h100-sxm5"]["params_source"] == "calibration: test"
    assert rows["a100-sxm4-80gb"]["params_source"].startswith("default:")


def test_an_asked_runtime_applies_to_the_calibrated_chip_too(cli, hand_mlp, tmp_path):
    """A calibration fitted under eager: without --runtime its chip is predicted eager (the others
    fused); `--runtime compiled` predicts every chip compiled, the calibrated one with its
    calibrated parameters (it once kept the calibration's runtime, whatever was asked)."""
    fitted = custom_params("gpu", efficiency=0.1, overhead_s=1e-3, source="calibration: test")
    (tmp_path / "calibration.json").write_text(json.dumps(
        {"schema": CALIBRATION_SCHEMA, "parameters": {"chip": "h100-sxm5", "runtime": "eager",
                                                      "family_params": fitted.to_dict()}}))
    argv = ["--model", "mlp1024", "--hardware", "h100-sxm5,a100-sxm4-80gb", "--calibration", str(tmp_path), "--json"]
    rows = {r["chip"]: r for r in json.loads(cli(predict_main, argv)[1])}
    assert (rows["h100-sxm5"]["runtime"], rows["a100-sxm4-80gb"]["runtime"]) == ("eager", "fused")
    rows = {r["chip"]: r for r in json.loads(cli(predict_main, [*argv, "--runtime", "compiled"])[1])}
    assert {r["runtime"] for r in rows.values()} == {"compiled"}
    assert rows["h100-sxm5"]["params_source"] == "calibration: test"


def test_resnet50_over_the_whole_registry(cli):
    rc, out, err = cli(predict_main, ["--model", "resnet50", "--hardware", "all", "--json"])
    assert rc == 0, err
    rows = {r["chip"]: r for r in json.loads(out)}
    from test_mapping import REGISTRY

    assert set(rows) == set(REGISTRY.names)
    assert rows["tpu-v4"]["status"] == "unsupported"      # bf16/int8 MXUs only
    ok = [r for r in rows.values() if r["status"] == "ok"]
    assert all(r["latency_s"] > 0 and math.isfinite(r["energy_j"]) for r in ok)
    # resnet50: 4.1 GMAC = 8.2 GFLOP at batch 1 (torchvision's "4.09 GFLOPS" are MACs)
    assert rows["h100-sxm5"]["flop"] == pytest.approx(8.2e9, rel=0.02)
    assert rows["h100-sxm5"]["latency_s"] < rows["jetson-agx-orin-64gb-cpu"]["latency_s"]


@pytest.mark.slow
def test_resnet50_on_h100_utilization_grows_with_batch(cli):
    rc, out, err = cli(predict_main, ["--model", "resnet50", "--hardware", "h100-sxm5", "--batch", "1,8,64",
                                      "--precision", "fp16", "--json"])
    assert rc == 0, err
    util = {r["batch"]: r["compute_utilization"] for r in json.loads(out)}
    assert util[1] < 0.5
    assert util[1] < util[8] < util[64]


def test_local_chip_with_explain_json(cli, hand_mlp):
    rc, out, err = cli(predict_main, ["--model", "mlp1024", "--hardware", "local,kpu-t64", "--batch", "16",
                                      "--explain", "--json"])
    assert rc == 0, err
    rows = {r["chip"]: r for r in json.loads(out)}
    assert rows["local-cpu"]["kind"] == "cpu" and rows["local-cpu"]["status"] == "ok"
    # no measurement in the (private) cache: the documented assumed bandwidth, whatever this host ran before
    assert rows["local-cpu"]["bandwidth_bytes_per_s"] == local_chip().memory.bandwidth_bytes_per_s
    # opportunities flattened into the same flat record
    assert rows["kpu-t64"]["opportunity_batch_batch"] >= 16
    assert "opportunity_checkpointing_saved_bytes" in rows["kpu-t64"]


REFERENCE_SCHEMA = json.loads(REFERENCE_RUN.read_text())["schema"]     # an older tag, read through its upgrade


def reference_run_of(tmp_path, cpu_model: str | None = None) -> Path:
    """The reference run as if measured on this machine (its fingerprint's CPU identity made this
    host's, as `chipcal calibrate` here would record it), or on a machine with CPU `cpu_model`."""
    from chipcal.measure.cpu import detect_cpu
    from chipcal.measure.system import local_host_identity

    doc = json.loads(REFERENCE_RUN.read_text())
    here = local_host_identity(detect_cpu())
    doc["fingerprint"].update(cpu_model=cpu_model or here["cpu_model"], physical_cores=here["physical_cores"],
                              logical_cores=here["logical_cores"], memory_bytes=here["memory_gib"] * 2**30,
                              cpu_features=here["cpu_features"])
    (tmp_path / "calibration.json").write_text(json.dumps(doc))
    return tmp_path


@pytest.mark.parametrize("edit, says", [
    (lambda t: t.replace(f'"schema": "{REFERENCE_SCHEMA}"', '"schema": "chipcal.calibration/0"'), "schema"),
    (lambda t: t.replace(f'"schema": "{REFERENCE_SCHEMA}",', ""), f"expected '{CALIBRATION_SCHEMA}'"),
    (lambda t: re.sub(r'"memory_bandwidth_bytes_per_s": [0-9.e+]+', '"memory_bandwidth_bytes_per_s": NaN', t),
     "NaN is not a JSON number"),
    (lambda t: re.sub(r'"memory_bandwidth_bytes_per_s": [0-9.e+]+', '"memory_bandwidth_bytes_per_s": null', t),
     "needs chip.memory_bandwidth_bytes_per_s"),
    (lambda t: re.sub(r'"memory_bandwidth_bytes_per_s": [0-9.e+]+', '"memory_bandwidth_bytes_per_s": 1e999', t),
     "finite number"),
    (lambda t: "[" + t + "]", "a JSON list"),
])
def test_old_or_foreign_calibration_is_refused_not_half_applied(cli, hand_mlp, tmp_path, edit, says):
    """Once a foreign file was applied without its bandwidth and the table said 'bw nan%'."""
    text = REFERENCE_RUN.read_text()
    assert '"memory_bandwidth_bytes_per_s": ' in text and f'"schema": "{REFERENCE_SCHEMA}",' in text
    (tmp_path / "calibration.json").write_text(edit(text))
    rc, out, err = cli(predict_main, ["--model", "mlp1024", "--hardware", "local", "--calibration", str(tmp_path)])
    assert rc == 2 and says in err and len(err.strip().splitlines()) == 1 and "nan" not in out


def test_reference_calibration_applies_its_measured_bandwidth(cli, hand_mlp, tmp_path):
    bandwidth = json.loads(REFERENCE_RUN.read_text())["chip"]["memory_bandwidth_bytes_per_s"]
    rc, out, _ = cli(predict_main, ["--model", "mlp1024", "--hardware", "local", "--calibration",
                                    str(reference_run_of(tmp_path)), "--json"])
    (row,) = json.loads(out)
    assert rc == 0 and row["params_source"].startswith("calibration")
    assert row["bandwidth_bytes_per_s"] == pytest.approx(bandwidth)   # the chip model's DRAM figure


def test_another_machines_local_calibration_is_refused(cli, hand_mlp, tmp_path):
    """Every machine's CPU is 'local-cpu': a run measured elsewhere (a results/ folder copied from a
    colleague) was once applied here without a word, its bandwidth and fitted costs on this CPU."""
    argv = ["--model", "mlp1024", "--hardware", "local", "--calibration"]
    rc, out, err = cli(predict_main, argv + [str(reference_run_of(tmp_path, cpu_model="Other CPU 9000"))])
    assert rc == 2 and out == "" and len(err.strip().splitlines()) == 1
    assert "measured on another machine" in err and "cpu_model: 'Other CPU 9000'" in err
    # the same file for a registry chip: no machine to check, the local-cpu parameters just do not apply
    rc, out, err = cli(predict_main, ["--model", "mlp1024", "--hardware", "h100-sxm5", "--calibration",
                                      str(tmp_path), "--json"])
    assert rc == 0 and json.loads(out)[0]["params_source"].startswith("default:")


def test_a_hand_written_local_calibration_without_a_fingerprint_applies(cli, hand_mlp, tmp_path):
    fitted = custom_params("cpu", efficiency=0.2, overhead_s=1e-4, source="calibration: by hand")
    (tmp_path / "calibration.json").write_text(json.dumps(
        {"schema": CALIBRATION_SCHEMA, "parameters": {"chip": "local-cpu", "family_params": fitted.to_dict()},
         "chip": {"memory_bandwidth_bytes_per_s": 20e9}}))
    rc, out, _ = cli(predict_main, ["--model", "mlp1024", "--hardware", "local", "--calibration", str(tmp_path),
                                    "--json"])
    (row,) = json.loads(out)
    assert rc == 0 and row["params_source"] == "calibration: by hand" and row["bandwidth_bytes_per_s"] == 20e9


def test_eager_batch_1_on_a_gpu_says_host_bound(cli, hand_mlp):
    # 3 kernels of the 1024-wide MLP at batch 1 take microseconds on a V100; issuing each from the
    # host at 1 ms leaves the GPU idle ~3 ms: host-bound, and the text says so.
    argv = ["--model", "mlp1024", "--hardware", "v100-sxm2", "--runtime", "eager", "--host-overhead-s", "1e-3"]
    rc, out, _ = cli(predict_main, argv + ["--json"])
    row = json.loads(out)[0]
    assert rc == 0 and row["bottleneck"] == "host" and row["runtime"] == "eager"
    assert row["host_per_op_s"] == 1e-3 and row["latency_s"] > 3e-3
    rc, out, _ = cli(predict_main, argv)
    assert rc == 0 and "host-bound: v100-sxm2" in out
    rc, out, _ = cli(predict_main, argv[:-4] + ["--runtime", "compiled", "--json"])
    assert json.loads(out)[0]["bottleneck"] != "host" and json.loads(out)[0]["latency_s"] < 1e-3


def test_a_run_over_the_tdp_is_predicted_at_the_power_limited_clock(cli, hand_mlp):
    # The 1024-wide MLP at batch 16,384 keeps a T4's 2560 FP32 lanes busy: over 70 W at 1590 MHz
    argv = ["--model", "mlp1024", "--hardware", "t4", "--batch", "16384"]
    rc, out, _ = cli(predict_main, argv + ["--json"])
    row = json.loads(out)[0]
    assert rc == 0 and row["bottleneck"] == "power" and row["exceeds_tdp"]
    assert row["listed_clock_power_w"] > 70 and row["avg_power_w"] == pytest.approx(70, rel=1e-3)
    assert 0 < row["clock_fraction"] < 1 and row["latency_s"] > row["listed_clock_latency_s"]
    rc, out, _ = cli(predict_main, argv)
    assert rc == 0 and "power-limited: t4 at batch 16384 fp32" in out
    # held to 40 W instead of its 70 W TDP (--power-limit-w): the clock falls further
    rc, out, _ = cli(predict_main, argv + ["--power-limit-w", "40", "--json"])
    capped = json.loads(out)[0]
    assert rc == 0 and capped["tdp_w"] == 40 and capped["avg_power_w"] == pytest.approx(40, rel=1e-3)
    assert capped["clock_fraction"] < row["clock_fraction"]
    rc, out, _ = cli(predict_main, argv + ["--power-limit-w", "40"])
    assert rc == 0 and "> its 40 W power limit" in out


def test_autocast_adds_a_host_issued_cast_per_op_with_weights(cli, hand_mlp):
    # fc1 and fc2 carry weights: under autocast at fp16 the host issues 6 ops, not 3, 1 ms each
    # (two weight casts, and the fp32 input cast before fc1); at fp32 there is nothing to cast
    argv = ["--model", "mlp1024", "--hardware", "v100-sxm2", "--runtime", "eager", "--host-overhead-s", "1e-3",
            "--json"]
    rows = {}
    for extra in ([], ["--autocast"]):
        rc, out, _ = cli(predict_main, argv + ["--precision", "fp16"] + extra)
        assert rc == 0
        rows["fp16", bool(extra)] = json.loads(out)[0]
    assert rows["fp16", True]["autocast"] and rows["fp16", True]["host_s"] == pytest.approx(6e-3)
    assert rows["fp16", False]["host_s"] == pytest.approx(3e-3)
    assert rows["fp16", True]["latency_s"] - rows["fp16", False]["latency_s"] == pytest.approx(3e-3)
    rc, _, err = cli(predict_main, argv + ["--precision", "fp32", "--autocast"])
    assert rc == 2 and "autocast" in err and err.count("\n") == 1


@pytest.mark.slow
def test_resnet50_eager_batch_1_on_v100_is_host_bound_near_the_published_latency(cli):
    # NVIDIA DeepLearningExamples, PyTorch ResNet50 v1.5 README (NGC 21.03), DGX-1 1x V100 16GB,
    # FP32 batch 1: 96 img/s = 10.4 ms per image, flat up to batch 4: the host issues the ops.
    rc, out, err = cli(predict_main, ["--model", "resnet50", "--hardware", "v100-sxm2", "--runtime", "eager",
                                      "--framework", "pytorch1", "--json"])
    assert rc == 0, err
    row = json.loads(out)[0]
    assert row["bottleneck"] == "host" and row["host_wait_s"] > row["latency_s"] / 2
    assert row["latency_s"] == pytest.approx(1 / 96, rel=0.3) and row["framework"] == "pytorch1"
    rc, out, err = cli(predict_main, ["--model", "resnet50", "--hardware", "v100-sxm2", "--runtime", "compiled",
                                      "--json"])
    assert json.loads(out)[0]["bottleneck"] != "host" and json.loads(out)[0]["latency_s"] < 1 / 96 / 2


@pytest.mark.parametrize("runtime, partition", [("eager", "eager"), ("fused", "fused"), ("compiled", "codegen")])
def test_explain_characterizes_the_workload_of_the_runtime(cli, monkeypatch, runtime, partition):
    """--explain once always took the fused workload, even for an eager prediction; the record
    says which workload was predicted."""
    asked = []

    def get(self, model, batch, partition="fused"):
        asked.append(partition)
        return dataclasses.replace(mlp(batch), fused=partition != "eager", codegen=partition == "codegen")

    monkeypatch.setattr(workloads.WorkloadSource, "get", get)
    rc, out, _ = cli(predict_main, ["--model", "mlp1024", "--hardware", "v100-sxm2", "--runtime", runtime,
                                    "--host-overhead-s", "1e-3", "--explain", "--json"])
    row = json.loads(out)[0]
    assert rc == 0 and row["runtime"] == runtime and row["fused"] is (partition != "eager")
    assert len(asked) > 2 and set(asked) == {partition}      # the prediction, --explain, its batch sweep


def test_local_prediction_from_a_warm_cache_imports_no_torch(tmp_path, monkeypatch):
    """`predict --hardware local` once built a torch fingerprint to find the cached bandwidth. With
    the workload and a (planted, steady 12.5 GB/s) bandwidth measurement in a private cache, a
    fresh process predicts from them and never imports torch."""
    import subprocess
    import sys

    from chipcal.measure import bandwidth
    from chipcal.measure.cpu import detect_cpu
    from chipcal.measure.system import fingerprint
    from chipcal.measure.timing import Measurement

    rate = 12.5e9

    def steady(kernel, size, device, *_):
        moved = bandwidth.KERNELS[kernel] * size
        return bandwidth.BandwidthPoint(kernel, size, moved, moved, Measurement.from_samples([moved / rate] * 6), rate)

    monkeypatch.setattr(bandwidth, "_measure_bandwidth_point", steady)
    bandwidth.measure_bandwidth(CPU, [1 << 20, 1 << 22], fp=fingerprint())
    workloads.WorkloadSource(use_cache=True).get("resnet18", 1)      # warm the workload cache
    assert bandwidth.cached_cpu_bandwidth(detect_cpu()).sustained_bytes_per_s["triad"] == pytest.approx(rate)

    run = subprocess.run([sys.executable, "-X", "importtime", "-m", "chipcal.cli.main", "predict", "--model",
                          "resnet18", "--hardware", "local", "--json"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    imported = {line.split("|")[-1].strip() for line in run.stderr.splitlines() if line.startswith("import time:")}
    assert "chipcal.measure.bandwidth" in imported          # the local chip's cache lookup ran here
    assert not {m for m in imported if m == "torch" or m.startswith("torch.")}
    row = json.loads(run.stdout)[0]
    assert row["bandwidth_bytes_per_s"] == local_chip(rate).memory.bandwidth_bytes_per_s
    assert row["bandwidth_bytes_per_s"] != local_chip().memory.bandwidth_bytes_per_s
