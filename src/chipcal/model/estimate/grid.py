"""Every prediction `chipcal predict` asks for, the grid of (model, batch, chip, precision): each workload
characterized once per (model, batch, runtime) and shared by the chips, not once per chip.

The workloads come from a callable (chipcal.measure.workloads.WorkloadSource in the CLI, which
caches them on disk), so this module needs no torch and no cache of its own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chipcal.model.chip import Chip
from chipcal.model.estimate.llm import LlmPrediction
from chipcal.model.estimate.llm_parallel import predict_on_layout
from chipcal.model.estimate.opportunities import Opportunity, opportunities
from chipcal.model.estimate.parallel import Layout
from chipcal.model.estimate.prediction import Prediction, predict
from chipcal.model.mapping.params import CalibrationParams, params_for, runtime_partition
from chipcal.model.workload.llm_config import StepKey, load_llm_config
from chipcal.model.workload.types import LlmStep, Workload

Workloads = Callable[[str, int, str], Workload]     # (model, batch, partition) -> Workload


def predict_all(models: Sequence[str], chips: Sequence[Chip], batches: Sequence[int],
                precisions: Sequence[str], calibration: CalibrationParams | None,
                workload: Workloads, runtime: str | None = None,
                host_overhead_s: float | None = None, autocast: bool = False,
                **launch) -> list[tuple[Chip, Prediction]]:
    """Every (model, batch, chip, precision) prediction with its chip; each model characterized
    once per batch and runtime, not once per chip. Every chip is predicted under `runtime`; None
    (not asked for): the calibrated chip under the runtime its calibration was fitted on, every
    other chip under `fused`. The calibration's parameters apply to its chip under either.
    `autocast` and `launch` (fp32_mode, memory_format, framework, host_source):
    estimate/prediction.predict."""
    out = []
    for model in models:
        for batch in batches:
            for chip in chips:
                calibrated = calibration is not None and calibration.applies_to(chip.name, chip.active_mode)
                chip_runtime = runtime or (calibration.runtime if calibrated else "fused")
                w = workload(model, batch, runtime_partition(chip_runtime))
                for precision in precisions:
                    out.append((chip, predict(w, chip, precision, calibration=calibration,
                                              runtime=chip_runtime, host_overhead_s=host_overhead_s,
                                              autocast=autocast, **launch)))
    return out


def opportunities_all(pairs: Sequence[tuple[Chip, Prediction]], calibration: CalibrationParams | None,
                      workload: Workloads, target_utilization: float) -> dict[int, tuple[Opportunity, ...]]:
    """The opportunities of each prediction of `predict_all`, by its index; the batch
    opportunity characterizes the model at other batches through `workload`."""
    found = {}
    for i, (chip, p) in enumerate(pairs):
        params = params_for(chip.name, chip.kind, calibration, chip.active_mode, p.runtime, p.framework)
        part = runtime_partition(p.runtime)
        found[i] = opportunities(p, workload(p.model, p.batch, part), chip, params,
                                 workload_at=lambda b, m=p.model, f=part: workload(m, b, f),
                                 target_utilization=target_utilization)
    return found


@dataclass(frozen=True)
class LlmRequest:
    """What an LLM prediction serves: `context` prompt tokens and `new_tokens` generated per
    sequence under `runtime`; `phase` prefill (time to first token) or decode (tokens/s)."""

    runtime: str
    phase: str
    context: int
    new_tokens: int


def predict_all_llm(models: Sequence[str], chips: Sequence[Chip], batches: Sequence[int],
                    precisions: Sequence[str], request: LlmRequest, llm_step: Callable[[StepKey], LlmStep],
                    calibration: CalibrationParams | None = None, host_overhead_s: float | None = None,
                    devices: int = 1, layout: Layout | None = None, **launch) -> list[LlmPrediction]:
    """Every (model, batch, precision, chip) LLM prediction on `devices` devices in `layout` (None:
    the engine's pick, estimate/parallel.py); each forward (prefill, decode step) of a shard
    characterized once through `llm_step` and shared by the chips.
    `host_overhead_s` None: the default per-op host cost; `launch` (host_source, framework,
    fp32_mode): estimate/llm.predict_llm."""
    out = []
    for name in models:
        config = load_llm_config(name)
        for batch in batches:
            for precision in precisions:
                out += [predict_on_layout(config, chip, precision, request.runtime, request.phase, batch,
                                          request.context, request.new_tokens, llm_step, devices, layout,
                                          calibration=calibration, host_overhead_s=host_overhead_s, **launch)
                        for chip in chips]
    return out
