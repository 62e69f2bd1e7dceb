"""The power `chipcal predict` prints, against NVML board power measured on the lent H100 SXM5
(`chipcal calibrate --device cuda`, 2026-11-24, tests/machines/nvidia-h100-sxm5): a dense fp32
GEMM and a STREAM triad, each run for 2 s with power and SM clock sampled (measure/power.py).
docs/findings/2026-11-25-h100-power-vs-nvml.md gives the figures."""

from __future__ import annotations

import json
import statistics

import pytest
from recorded import MACHINES
from test_mapping import chip, elementwise_subgraph, gemm_subgraph, workload

from chipcal.model.estimate.prediction import predict

RUN = json.loads((MACHINES / "nvidia-h100-sxm5" / "calibration-full.json").read_text())


def _measured(kind: str):
    """(median board power W, FLOP/s, bytes/s, median SM clock Hz) of the power probe's `kind` runs."""
    rows = [r for r in RUN["observations"]["power"] if r["kind"] == kind]
    assert rows, kind
    clocks = [c for r in rows for c in r.get("sm_clock_hz") or ()]
    return (statistics.median(r["avg_power_w"] for r in rows), rows[0]["flop_per_s"], rows[0]["bytes_per_s"],
            statistics.median(clocks) if clocks else None)


def test_fp32_gemm_power_on_h100_within_20_percent_of_nvml():
    # 8192^3 fp32 SGEMM, 8 sustained 2 s windows: 686-723 W at 51.8 TFLOP/s, SM clock 1.98 GHz
    # (boost) throughout. The model at the listed clock draws 817 W (+19%: its 32 pJ/FLOP at 80% of
    # the peak, against the 8.3 pJ/FLOP over a 258 W baseline the calibration fitted on this run),
    # so it lowers the clock to 92% to hold 700 W, where the H100 did not; its throughput,
    # 49.4 TFLOP/s, is 5% under the measured.
    watts, flop_per_s, _, clock = _measured("sustained")
    assert clock == 1.98e9 and watts < 700
    p = predict(workload([gemm_subgraph(0, 8192, 8192, 8192)]), chip("h100-sxm5"), "fp32")
    assert p.listed_clock_power_w == pytest.approx(watts, rel=0.20)
    assert p.flop / p.latency_s == pytest.approx(flop_per_s, rel=0.06)


@pytest.mark.parametrize("n", [1024, 2048, 4096, 8192])
def test_fp32_gemm_power_on_h100_by_size_within_25_percent_of_nvml(n):
    # the sweep's 2 s runs of n^3 fp32 SGEMM: 579, 637, 677, 685 W at 38.2, 50.6, 51.8, 51.5 TFLOP/s;
    # the model at the listed clock is +24%, +24%, +20%, +19% (too hot by a steady margin)
    row = next(r for r in RUN["observations"]["power"] if r["kind"] == "gemm" and r["label"] == f"gemm {n}^3 fp32")
    p = predict(workload([gemm_subgraph(0, n, n, n)]), chip("h100-sxm5"), "fp32")
    assert 1.0 < p.listed_clock_power_w / row["avg_power_w"] < 1.25


def test_memory_bound_power_on_h100_within_10_percent_of_nvml():
    # STREAM triad a = b + s*c, fp32: 509 W at 3.04 TB/s on the H100 (idle 129 W). The model has
    # 523 W at its 2.83 TB/s: DRAM and L2 energy per byte, static power, and the clock and control
    # power of 132 SMs kept busy waiting on memory (charged per busy unit-second, not per
    # operation: power.clock_power_w). Charged per operation, as before, it was 253 W.
    watts, _, bytes_per_s, _ = _measured("bandwidth")
    n = 2**28
    p = predict(workload([elementwise_subgraph(0, n, inputs=2, flop_per_element=2)]), chip("h100-sxm5"), "fp32")
    assert p.dram_bytes == 12 * n and p.dram_bytes / p.latency_s == pytest.approx(bytes_per_s, rel=0.1)
    assert p.avg_power_w == pytest.approx(watts, rel=0.10)
