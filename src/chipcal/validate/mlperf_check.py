"""MLPerf Inference rows predicted: per-accelerator throughput at saturation (Offline) and the
latency of one sample (SingleStream), each against what the submission measured.

What is predicted, and how (MLPerf Inference rules, "Scenarios"):
- Offline: all samples are available at once, so a serving engine runs at saturation. The
  prediction is the highest per-device throughput over batch sizes OFFLINE_BATCHES whose peak
  memory fits the device, under the fused runtime (one kernel per fused subgraph, as TensorRT,
  MIGraphX, XLA and OpenVINO compile a network) at the precision submitted, at the clock the
  chip's TDP allows. The measured figure is the system's divided by its accelerators (a CPU-only
  system: its sockets).
- SingleStream: one sample at a time; the prediction is batch 1's latency, against LoadGen's
  90th-percentile latency.
A row is excluded, with its reason, where chipcal cannot characterize the benchmark's network, where
the scenario is not predicted (Server: the load at a latency limit; MultiStream), where its chip
lacks the precision, or where it ran at a power cap (a MaxQ row: the cap each submitter set is not
in the results, and a prediction at the TDP is not the same question). No efficiency is fitted to these rows here: the figures are the physics with
the family defaults, so the error is an honest out-of-sample one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chipcal.calibrate.accuracy import abs_quantile
from chipcal.model.estimate.prediction import Prediction, predict
from chipcal.model.registry import Registry
from chipcal.validate.mlperf import (
    NOT_IN_REGISTRY,
    MlperfRow,
    chip_of,
    device_name,
    per_accelerator,
)

# benchmark -> (chipcal's network, the precision the closed division submits it at)
NETWORKS = {"resnet50": ("resnet50", "int8"), "retinanet": ("retinanet_800", "int8")}
# why the other v4.1 benchmarks are not predicted yet
NOT_CHARACTERIZED = {
    "bert-99": "BERT-Large is an encoder: chipcal builds decoder LLMs from configs only",
    "bert-99.9": "BERT-Large is an encoder: chipcal builds decoder LLMs from configs only",
    "3d-unet-99": "3D U-Net (KiTS19 volumes) is not among the characterized networks",
    "3d-unet-99.9": "3D U-Net (KiTS19 volumes) is not among the characterized networks",
    "stable-diffusion-xl": "the SDXL UNet needs diffusers, which chipcal does not build",
    "dlrm-v2-99": "DLRM v2's embedding tables are not characterized",
    "dlrm-v2-99.9": "DLRM v2's embedding tables are not characterized",
    "gptj-99": "LLM serving (continuous batching, many devices) is the LLM-serving issue's",
    "gptj-99.9": "LLM serving (continuous batching, many devices) is the LLM-serving issue's",
    "llama2-70b-99": "LLM serving (continuous batching, many devices) is the LLM-serving issue's",
    "llama2-70b-99.9": "LLM serving (continuous batching, many devices) is the LLM-serving issue's",
    "mixtral-8x7b": "LLM serving (continuous batching, many devices) is the LLM-serving issue's",
}
PREDICTED_SCENARIOS = ("Offline", "SingleStream")
SCENARIO_NOT_PREDICTED = {
    "Server": "Server: the highest load within a latency limit is not predicted yet",
    "MultiStream": "MultiStream: the latency of 8-sample queries is not predicted yet",
}
OFFLINE_BATCHES = (1, 8, 32, 64, 128, 256, 512, 1024, 2048)

Workloads = Callable[[str, int, str], object]      # (network, batch, partition) -> Workload


@dataclass(frozen=True)
class Checked:
    """A row predicted: per-accelerator measured and predicted (samples/s, or seconds for a
    latency), the batch the prediction ran at, and its relative error (predicted / measured - 1)."""

    row: MlperfRow
    chip: str
    batch: int
    measured: float
    predicted: float
    bottleneck: str

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1

    def record(self) -> dict:
        """A flat record: the row's provenance, measured and predicted per accelerator (SI units)."""
        return {**_provenance(self.row), "chip": self.chip, "status": "predicted", "batch": self.batch,
                "measured": self.measured, "predicted": self.predicted, "error": self.error,
                "bottleneck": self.bottleneck, "reason": None}


@dataclass(frozen=True)
class Excluded:
    row: MlperfRow
    reason: str

    def record(self) -> dict:
        return {**_provenance(self.row), "chip": chip_of(self.row), "status": "excluded", "batch": None,
                "measured": per_accelerator(self.row), "predicted": None, "error": None, "bottleneck": None,
                "reason": self.reason}


def _provenance(row: MlperfRow) -> dict:
    """Where a row comes from, and the unit of its per-accelerator figures (a latency: one sample's)."""
    unit = "latency_s" if row.unit == "latency_s" else f"{row.unit}_per_accelerator"
    return {"round": row.round, "submitter": row.submitter, "system": row.system, "accelerator": device_name(row),
            "accelerators": row.accelerators, "benchmark": row.benchmark, "scenario": row.scenario, "path": row.path,
            "unit": unit}


def check(rows: Sequence[MlperfRow], registry: Registry, workloads: Workloads,
          on_row: Callable[[], None] = lambda: None) -> tuple[list[Checked], list[Excluded]]:
    """Every row predicted or excluded with its reason (module docstring), in the rows' order."""
    checked, excluded = [], []
    known: dict[tuple[str, str, str], Prediction | None] = {}     # every row of a chip shares its saturation

    def saturation(network: str, chip, precision: str) -> Prediction | None:
        key = (network, chip.name, precision)
        if key not in known:
            known[key] = _saturation(network, chip, precision, workloads)
        return known[key]

    for row in rows:
        outcome = _one(row, registry, workloads, saturation)
        (checked if isinstance(outcome, Checked) else excluded).append(outcome)
        on_row()
    return checked, excluded


def _one(row: MlperfRow, registry: Registry, workloads: Workloads,
         saturation: Callable[[str, object, str], Prediction | None]) -> Checked | Excluded:
    if row.benchmark not in NETWORKS:
        return Excluded(row, NOT_CHARACTERIZED.get(row.benchmark, f"benchmark {row.benchmark} is not characterized"))
    if row.scenario not in PREDICTED_SCENARIOS:
        return Excluded(row, SCENARIO_NOT_PREDICTED[row.scenario])
    if row.avg_power_w is not None:
        return Excluded(row, "a power submission (MaxQ): run at a power cap the results do not record")
    name = chip_of(row)
    if name is None or name not in registry.names:
        return Excluded(row, NOT_IN_REGISTRY.get(name, f"{device_name(row)}: no registry chip"))
    chip = registry.get(name)
    network, precision = NETWORKS[row.benchmark]
    if not chip.supports(precision):
        return Excluded(row, f"{chip.name} has no {precision} engine")
    if row.scenario == "SingleStream":
        p = predict(workloads(network, 1, "fused"), chip, precision)
        return Checked(row, chip.name, 1, row.value, p.latency_s, p.bottleneck)
    best = saturation(network, chip, precision)
    if best is None:
        return Excluded(row, f"{network} fits {chip.name}'s memory at no batch of {OFFLINE_BATCHES}")
    return Checked(row, chip.name, best.batch, per_accelerator(row), best.throughput_per_s, best.bottleneck)


def _saturation(network: str, chip, precision: str, workloads: Workloads) -> Prediction | None:
    """The prediction of highest throughput among the batches whose peak memory fits the device."""
    fits = [p for p in (predict(workloads(network, b, "fused"), chip, precision) for b in OFFLINE_BATCHES)
            if p.fits_in_memory]
    return max(fits, key=lambda p: p.throughput_per_s, default=None)


def error_figures(checked: Sequence[Checked]) -> tuple[int, float | None, float | None]:
    """(n, median |error|, p90 |error|) of the predicted rows (None with no row)."""
    return (len(checked), abs_quantile((c.error for c in checked), 50),
            abs_quantile((c.error for c in checked), 90))
