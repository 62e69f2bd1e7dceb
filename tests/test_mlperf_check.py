"""MLPerf v4.1 rows predicted against what the submissions measured (validate.mlperf_check), and
the pieces it rests on, each against figures worked out by hand or by a second tool."""

from __future__ import annotations

import csv
import math
from dataclasses import replace

import pytest

from chipcal.model.registry import load_registry
from chipcal.validate import mlperf
from chipcal.validate.mlperf_benchmarks import KITS19_WINDOWS, benchmarks, kits19_windows
from chipcal.validate.mlperf_power import node_power_w
from chipcal.validate.mlperf_scenarios import server_choice
from chipcal.validate.mlperf_stack import Observed, factor, family_of, held_out_factor, stack_of

ITEM_3 = ("resnet50", "retinanet", "bert", "3d-unet", "stable-diffusion-xl", "dlrm-v2")   # issue 52's benchmarks


# the two tests of every v4.1 row share one worker, so that the fixture runs once (about 9 CPU-s)
V41_ROWS = pytest.mark.xdist_group("mlperf-v41-rows")


@pytest.fixture(scope="module")
def checked_v41():
    from chipcal.measure.workloads import WorkloadSource
    from chipcal.validate import mlperf_check

    rows = mlperf.read_csv(mlperf.PACKAGED)
    checked, excluded = mlperf_check.check(rows, load_registry(), WorkloadSource().get)
    return rows, checked, excluded


@pytest.mark.slow
@V41_ROWS
def test_v41_rows_against_mlperf(checked_v41):
    """Issue 52's targets on MLPerf v4.1's closed division, per accelerator:
    - at least 80 % of the single-node Offline rows of its benchmarks predicted, each other row
      excluded with its reason;
    - Offline within median 15 %, p90 35 % with the stack's efficiency fitted on the other
      accelerators (leave-one-accelerator-out), SingleStream and MultiStream within the same with
      nothing fitted;
    - MaxQ rows: system power within 15 % each, throughput within median 15 %.
    resnet50's physics alone (no stack factor) holds its earlier median 15 %, p90 35 %."""
    from chipcal.calibrate.accuracy import abs_quantile

    rows, checked, excluded = checked_v41
    assert len(checked) + len(excluded) == len(rows) and all(e.reason for e in excluded)
    in_scope = [r for r in rows if r.scenario == "Offline" and family_of(r.benchmark) in ITEM_3]
    offline = [c for c in checked if c.row.scenario == "Offline"]
    assert len(offline) >= 0.8 * len(in_scope)
    held_out = [c.held_out_error for c in offline]
    assert abs_quantile(held_out, 50) <= 0.15 and abs_quantile(held_out, 90) <= 0.35
    single = [c.error for c in checked if c.row.scenario == "SingleStream"]
    assert len(single) >= 5 and abs_quantile(single, 50) <= 0.15 and abs_quantile(single, 90) <= 0.35
    # MultiStream: a query of 8 samples at batch 8, against LoadGen's 99th percentile (L4 and
    # L40S under TensorRT: 0.751, 0.525, 42.0, 32.2 and 10.4 ms measured); speedAI240's excluded
    multi = {(c.row.system, c.row.benchmark): c for c in checked if c.row.scenario == "MultiStream"}
    assert multi[("Lenovo_2xL4_TRT", "resnet50")].measured == pytest.approx(0.751e-3, rel=2e-3)
    assert {c.batch for c in multi.values()} == {8} and len(multi) == 5
    errors = [c.error for c in multi.values()]
    assert abs_quantile(errors, 50) <= 0.15 and max(map(abs, errors)) <= 0.35
    # SDXL: a pipeline of three networks a sample (validate.mlperf_benchmarks), TensorRT's factor held out
    sdxl = [c.held_out_error for c in offline if c.row.benchmark == "stable-diffusion-xl"]
    assert len(sdxl) >= 25 and abs_quantile(sdxl, 50) <= 0.15
    maxq = [c for c in offline if c.power_error is not None]
    assert len(maxq) == 9 and max(abs(c.power_error) for c in maxq) <= 0.15      # SDXL's at 450 W since 11-30
    assert abs_quantile([c.held_out_error for c in maxq], 50) <= 0.15
    resnet = [c.error for c in offline if c.row.benchmark == "resnet50"]
    assert abs_quantile(resnet, 50) <= 0.15 and abs_quantile(resnet, 90) <= 0.35


@pytest.mark.slow
@V41_ROWS
def test_v41_server_and_maxq_predictions_follow_the_measurements(checked_v41):
    """Server rows (the load at the latency limit) within median 20 % held out; a MaxQ run at its
    power limit is predicted slower than the same system without one, as measured (H200 MaxQ
    against MaxP: 0.73 to 0.79 of the throughput on these benchmarks)."""
    from chipcal.calibrate.accuracy import abs_quantile

    _, checked, _ = checked_v41
    server = [c.held_out_error for c in checked if c.row.scenario == "Server"]
    assert len(server) >= 150 and abs_quantile(server, 50) <= 0.20
    offline = {(c.row.system, c.row.benchmark): c for c in checked if c.row.scenario == "Offline"}
    for (system, benchmark), capped in offline.items():
        if system == "H200-SXM-141GBx8_TRT_MaxQ":
            full = offline[("H200-SXM-141GBx8_TRT", benchmark)]
            assert 0.6 < capped.predicted / full.predicted < 0.95
            assert capped.device_power_w == pytest.approx(capped.power_limit_w, rel=0.02)


# --- the pieces ------------------------------------------------------------------------------------

def test_a_stacks_factor_never_sees_the_chip_it_corrects():
    """Hand-made rows: the factor is exp(median log ratio) of the same stack, benchmark and
    precision on other chips; else the stack's other rows; else 1."""
    rows = [Observed("a", "tensorrt", "bert", "int8", math.log(0.5)),
            Observed("b", "tensorrt", "bert", "int8", math.log(0.8)),
            Observed("c", "tensorrt", "bert", "int8", math.log(0.6)),
            Observed("c", "tensorrt", "bert", "fp8", math.log(0.9)),
            Observed("d", "pytorch", "resnet50", "int8", math.log(2.0))]
    assert held_out_factor(rows, "a", "tensorrt", "bert", "int8") == pytest.approx(math.sqrt(0.8 * 0.6))
    assert held_out_factor(rows, "b", "tensorrt", "bert", "int8") == pytest.approx(math.sqrt(0.5 * 0.6))
    assert held_out_factor(rows, "c", "tensorrt", "bert", "fp8") == pytest.approx(math.sqrt(0.5 * 0.8))  # stack
    assert held_out_factor(rows, "d", "pytorch", "resnet50", "int8") == 1.0                             # alone
    assert factor(rows, "tensorrt", "bert", "int8") == pytest.approx(0.6)


def test_stack_and_family_names():
    row = mlperf.read_csv(mlperf.PACKAGED)[0]
    assert stack_of(replace(row, framework="TensorRT 10.2.0, CUDA 12.4")) == "tensorrt"
    assert stack_of(replace(row, framework="PyTorch")) == "pytorch"
    # MLCommons' reference harness calling vLLM (NeuralMagic, v4.1) is not AMD's vLLM harness
    reference = replace(row, framework="vLLM 0.5.2", system="vLLM_8xL40S-reference-cpu-pytorch-v2.3.1-default_config")
    assert stack_of(reference) == "reference"
    assert stack_of(replace(reference, system="8xMI300X_2xEPYC-9374F")) == "vllm"
    assert stack_of(replace(row, system="Preferences_H100x8", framework="TensorRT 10.2")) == "tensorrt"  # a word
    assert [family_of(b) for b in ("bert-99.9", "bert-99", "3d-unet-99.9", "dlrm-v2-99", "resnet50")] == [
        "bert", "bert", "3d-unet", "dlrm-v2", "resnet50"]


def test_server_picks_the_fastest_batch_that_runs_within_half_the_limit():
    options = [(1, 0.004, 250.0), (8, 0.010, 800.0), (32, 0.030, 1067.0)]
    assert server_choice(options, 0.025) == (8, 0.010, 800.0)              # 2 x 30 ms > 25 ms
    assert server_choice(options, 0.025, speed=2.0) == (8, 0.005, 1600.0)  # 2 x 15 ms > 25 ms still
    assert server_choice(options, 0.060, speed=2.0) == (32, 0.015, 2134.0)
    assert server_choice(options, 0.005) == (1, 0.004, 250.0)              # none within: the quickest


def test_node_power_is_fitted_on_the_systems_other_benchmarks():
    others = [("s", "bert", 2000.0), ("s", "dlrm-v2", 2200.0), ("s", "resnet50", 1900.0), ("t", "bert", 900.0)]
    assert node_power_w("s", "bert", others) == 2050.0           # median of 2200 and 1900
    assert node_power_w("t", "bert", others) is None             # nothing else of t


def test_each_benchmark_submits_the_precision_its_configs_say():
    registry = load_registry()
    by = benchmarks()
    assert by["bert-99.9"].precision_on(registry.get("h100-sxm5"), "tensorrt") == "fp8"
    assert by["bert-99.9"].precision_on(registry.get("a100-sxm4-80gb"), "tensorrt") == "fp16"
    assert by["dlrm-v2-99.9"].precision_on(registry.get("h100-sxm5"), "tensorrt") == "fp16"
    assert by["dlrm-v2-99.9"].precision_on(registry.get("xeon-platinum-8592-plus"), "pytorch") == "int8"
    assert {by[b].server_latency_s for b in ("resnet50", "retinanet", "bert-99", "dlrm-v2-99")} == {
        0.015, 0.100, 0.130, 0.060}


def _windows_by_hand(dims: tuple[int, ...], spacing: tuple[float, ...]) -> int:
    """NVIDIA's preprocessing, worked per axis: resample to (1.6, 1.2, 1.2) mm (scipy's zoom
    rounds the size), at least 128, then to the nearest multiple of 64 (a remainder under 32 is
    cropped, else padded); 128-wide windows at a stride of 64."""
    windows = 1
    for n, mm, target in zip(dims, spacing, (1.6, 1.2, 1.2), strict=True):
        size = max(round(n * mm / target), 128)
        size = max(64 * (size // 64) if size % 64 < 32 else 64 * (size // 64 + 1), 128)
        windows *= (size - 128) // 64 + 1
    return windows


def test_kits19_windows_follow_the_preprocessing_rules():
    with KITS19_WINDOWS.open(newline="") as fh:
        cases = list(csv.DictReader(fh))
    assert len(cases) == 43 and len(kits19_windows()) == 43
    for case in cases:
        dims = tuple(int(case[f"dim_{a}"]) for a in "zyx")
        spacing = tuple(float(case[f"spacing_{a}_mm"]) for a in "zyx")
        assert int(case["windows"]) == _windows_by_hand(dims, spacing), case["case"]
    by_case = {c["case"]: c["windows"] for c in cases}
    assert by_case["case_00400"] == by_case["case_00185"]        # NVIDIA's download script copies 185 to 400
    assert sum(kits19_windows()) == 2761
    assert by_case["case_00000"] == "50"   # 611 x 512 x 512 at 0.5 x 0.92 mm: 191 x 392 x 392 -> 192 x 384 x 384: 2 x 5 x 5


def test_a_pipeline_sample_runs_each_stage_at_its_own_batch(monkeypatch):
    """SDXL's 32 samples (NVIDIA's Offline batch on Hopper): the text encoders 32 times on 2
    prompts, the UNet 20 times on 64 latents, the VAE 4 times on 8 images (at most 8 a call). With a
    stand-in prediction of 1 ms per item and 100 W, 200 W and 300 W per stage: 32 x 2 + 20 x 64 +
    4 x 8 = 1,376 ms for 32 samples; power is energy over time; a chip without fp16 runs the half
    stages in bf16."""
    from types import SimpleNamespace

    from chipcal.validate import mlperf_scenarios
    from chipcal.validate.mlperf_benchmarks import SDXL_PIPELINE

    bench = benchmarks()["stable-diffusion-xl"]
    assert bench.pipeline == SDXL_PIPELINE
    assert [stage.runs(32) for stage in SDXL_PIPELINE] == [(32, 2), (20, 64), (4, 8)]
    watts = {"sdxl_text_encoders": 100.0, "sdxl_unet": 200.0, "sdxl_vae_decoder": 300.0}
    seen = []

    def stand_in(workload, chip, precision):
        network, size = workload
        seen.append((network, precision))
        return SimpleNamespace(latency_s=size * 1e-3, avg_power_w=watts[network], bottleneck=network,
                               fits_in_memory=True)

    monkeypatch.setattr(mlperf_scenarios, "predict", stand_in)
    tpu = SimpleNamespace(supports=lambda p: p in ("bf16", "int8"))
    run = mlperf_scenarios.pipeline_run(bench, tpu, "int8", lambda net, size, part: (net, size), 32)
    assert run.latency_s == pytest.approx(1.376) and run.throughput_per_s == pytest.approx(32 / 1.376)
    energy = 32 * 0.002 * 100 + 20 * 0.064 * 200 + 4 * 0.008 * 300
    assert run.avg_power_w == pytest.approx(energy / 1.376) and run.bottleneck == "sdxl_unet"
    assert seen == [("sdxl_text_encoders", "bf16"), ("sdxl_unet", "int8"), ("sdxl_vae_decoder", "bf16")]
    assert [stage.runs(1) for stage in SDXL_PIPELINE] == [(1, 2), (20, 2), (1, 1)]     # SingleStream
