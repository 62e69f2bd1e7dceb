"""The power `chipcal predict` prints, against NVML board power recorded on the lent H100 SXM5
(tests/machines/nvidia-h100-sxm5): the calibration's 2 s GEMM sweep and STREAM triad (2026-11-24),
and measure_model_efficiency's energy per call of ResNet-50, ViT-B/16 and MobileNet-V2 at batch
1, 8 and 64 in fp32 (TF32 off) and bf16 (2026-11-26). docs/findings/2026-11-25-h100-power-vs-nvml.md
has the first figures."""

from __future__ import annotations

import json
import statistics

import numpy as np
import pytest
from recorded import MACHINES
from test_mapping import chip, elementwise_subgraph, gemm_subgraph, workload

from chipcal.measure.workloads import WorkloadSource
from chipcal.model.estimate.prediction import predict

H100 = MACHINES / "nvidia-h100-sxm5"
RUN = json.loads((H100 / "calibration-full.json").read_text())
MME = json.loads((H100 / "measure_model_efficiency.json").read_text())


def _measured(kind: str):
    """(median board power W, FLOP/s, bytes/s, median SM clock Hz) of the power probe's `kind` runs."""
    rows = [r for r in RUN["observations"]["power"] if r["kind"] == kind]
    assert rows, kind
    clocks = [c for r in rows for c in r.get("sm_clock_hz") or ()]
    return (statistics.median(r["avg_power_w"] for r in rows), rows[0]["flop_per_s"], rows[0]["bytes_per_s"],
            statistics.median(clocks) if clocks else None)


@pytest.mark.parametrize("n", [1024, 2048, 4096, 8192])
def test_fp32_gemm_power_on_h100_by_size_within_15_percent_of_nvml(n):
    # the sweep's 2 s runs of n^3 fp32 SGEMM: 579, 637, 677, 685 W at 38.2, 50.6, 51.8, 51.5 TFLOP/s
    # at the 1.98 GHz boost; the model at that clock, with the constants fitted on the sustained runs
    # (src/chipcal/model/fitted_constants.toml), is +12 %, +11 %, +8 %, +7 %
    row = next(r for r in RUN["observations"]["power"] if r["kind"] == "gemm" and r["label"] == f"gemm {n}^3 fp32")
    p = predict(workload([gemm_subgraph(0, n, n, n)]), chip("h100-sxm5"), "fp32")
    assert p.listed_clock_power_w == pytest.approx(row["avg_power_w"], rel=0.15)


def test_fp32_gemm_throughput_and_clock_on_h100():
    # 8192^3 fp32 SGEMM, 8 sustained 2 s windows at 1.98 GHz: the model holds 96 % of the clock to
    # stay inside 700 W and delivers the measured throughput within 3 %
    watts, flop_per_s, _, clock = _measured("sustained")
    assert clock == 1.98e9 and watts < 700
    p = predict(workload([gemm_subgraph(0, 8192, 8192, 8192)]), chip("h100-sxm5"), "fp32")
    assert p.flop / p.latency_s == pytest.approx(flop_per_s, rel=0.03)
    assert p.clock_fraction > 0.9 and p.avg_power_w <= 700 * 1.001


def test_memory_bound_power_on_h100_within_12_percent_of_nvml():
    # STREAM triad a = b + s*c, fp32: 509 W at 3.04 TB/s on the H100 (idle 129 W). The model has
    # 558 W at its 2.83 TB/s: DRAM and L2 energy per byte, static power, and the clock and control
    # power of 132 SMs kept busy waiting on memory (charged per busy unit-second, not per
    # operation: power.clock_power_w). Charged per operation it was 253 W.
    watts, _, bytes_per_s, _ = _measured("bandwidth")
    n = 2**28
    p = predict(workload([elementwise_subgraph(0, n, inputs=2, flop_per_element=2)]), chip("h100-sxm5"), "fp32")
    assert p.dram_bytes == 12 * n and p.dram_bytes / p.latency_s == pytest.approx(bytes_per_s, rel=0.1)
    assert p.avg_power_w == pytest.approx(watts, rel=0.12)


@pytest.mark.slow
def test_model_power_against_the_recorded_energy_per_call():
    # Issue 35: chipcal predict's average power of the 18 recorded networks (eager, as they ran:
    # fp32 with TF32 off, bf16 with the model cast) against NVML's energy per call / latency:
    # median |error| <= 15 %, p90 <= 30 %, and never below the chip's idle power nor above its limit
    source = WorkloadSource()
    h100 = chip("h100-sxm5")
    errors = []
    for row in MME:
        p = predict(source.get(row["model"], row["batch"], "eager"), h100, row["precision"], runtime="eager",
                    fp32_mode="strict", repeated=True)
        assert h100.idle_w <= p.avg_power_w <= h100.tdp_w * 1.001, (row["model"], row["batch"], p.avg_power_w)
        errors.append(abs(p.avg_power_w / row["avg_power_w"] - 1))
    assert len(errors) == 18
    assert np.median(errors) <= 0.15 and np.percentile(errors, 90) <= 0.30
