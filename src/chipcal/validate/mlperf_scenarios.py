"""How a serving engine runs each MLPerf scenario, given the predictions of a network at the
batches it picks among (validate.mlperf_benchmarks): pure choices over those predictions.

- Offline (`saturation`): the batch of highest throughput.
- Server (`server_choice`): LoadGen issues queries as a Poisson process and the run is valid if
  the 99th percentile of their latencies is within the benchmark's limit (MLPerf Inference rules,
  "Scenarios"; LoadGen's `target_latency`). A query that arrives while a batch runs waits for it,
  then runs in the next batch, so under load its latency approaches twice a batch's run time; the
  engine's choice is the batch of highest throughput whose run time is at most half the limit.
  NVIDIA's v4.1 logs are of that order: BERT on an H100 at its 130 ms limit ran batches whose
  median latency was 67 ms and 99th percentile 81 ms
  (`closed/NVIDIA/results/H100-SXM-80GBx8_TRT/bert-99/Server/performance/run_1/mlperf_log_summary.txt`).
  Where no batch is that fast, the smallest batch's latency is the engine's best (the row is
  then predicted at it, and says so by its batch).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chipcal.model.estimate.prediction import Prediction, predict

Workloads = Callable[[str, int, str], object]      # (network, batch, partition) -> Workload
Option = tuple[int, float, float]                  # (batch, latency_s, throughput per s)


@dataclass(frozen=True)
class PipelineRun:
    """A batch of pipeline samples (validate.mlperf_benchmarks.Stage): its stages' calls one after
    another. It answers what the scenarios read of a Prediction: the time, the bottleneck of the
    stage that takes longest, average power (energy over time), and whether every stage fits."""

    batch: int
    latency_s: float
    bottleneck: str
    avg_power_w: float
    fits_in_memory: bool

    @property
    def throughput_per_s(self) -> float:
        return self.batch / self.latency_s


def pipeline_run(bench, chip, precision: str, workloads: Workloads, batch: int) -> PipelineRun:
    """`batch` samples of a pipeline benchmark: each stage's calls at its own batch (Stage.runs),
    at its precision (Stage.precision_on)."""
    parts = []
    for stage in bench.pipeline:
        calls, size = stage.runs(batch)
        workload = workloads(stage.network, size, "fused")
        parts.append((calls, predict(workload, chip, stage.precision_on(chip, precision))))
    latency_s = sum(calls * p.latency_s for calls, p in parts)
    longest = max(parts, key=lambda part: part[0] * part[1].latency_s)[1]
    return PipelineRun(batch, latency_s, longest.bottleneck,
                       sum(calls * p.latency_s * p.avg_power_w for calls, p in parts) / latency_s,
                       all(p.fits_in_memory for _, p in parts))


def fitting(bench, chip, precision: str, workloads: Workloads) -> list[Prediction | PipelineRun]:
    """The predictions at the benchmark's batches whose peak memory fits the device."""
    if bench.pipeline:
        runs = (pipeline_run(bench, chip, precision, workloads, b) for b in bench.batches)
    else:
        runs = (predict(workloads(bench.network, b, "fused"), chip, precision) for b in bench.batches)
    return [p for p in runs if p.fits_in_memory]


def saturation(fits: Sequence[Prediction], most: int | None = None) -> Prediction | None:
    """The prediction of highest throughput (among batches up to `most`)."""
    return max((p for p in fits if most is None or p.batch <= most), key=lambda p: p.throughput_per_s, default=None)


def server_choice(options: Sequence[Option], limit_s: float, speed: float = 1.0) -> Option:
    """The Server choice (module docstring) among `options`, on an engine `speed` times as fast as
    they say (a stack's efficiency): (batch, latency_s, throughput per s) at that speed."""
    scaled = [(b, latency / speed, throughput * speed) for b, latency, throughput in options]
    within = [o for o in scaled if 2 * o[1] <= limit_s]
    if within:
        return max(within, key=lambda o: o[2])
    return min(scaled, key=lambda o: o[1])
