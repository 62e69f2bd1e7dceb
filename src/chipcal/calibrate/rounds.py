"""The timing phase of a calibration: micro-layers, hand-built chains and the held-out models,
timed in interleaved rounds so that a slow minute of a shared host spoils one round of each, not a
whole phase; then more rounds while the host is too noisy for the target (calibrate.noise).

Each round goes to the journal as `round-<r>` as soon as it is timed; a resumed run pools the
journaled rounds and times the rest.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from chipcal.calibrate import document as cd
from chipcal.calibrate import noise
from chipcal.calibrate.config import MODEL_MIN_SAMPLES
from chipcal.calibrate.context import RunContext
from chipcal.calibrate.layer_fits import timed_latency_s
from chipcal.calibrate.noise import ModelPlan


@dataclass(frozen=True)
class Rounds:
    """The timings of every round: micro-layer and chain observations, the models' plans with
    their pooled samples, the models not run (predicted too long), and how many rounds ran."""

    layers: tuple            # measure.layers observations of the micro-layers
    chains: tuple            # ... and of the chains
    plan: tuple[ModelPlan, ...]
    skipped: tuple[cd.SkippedModel, ...]
    rounds: int


def plan_models(run: RunContext, chip) -> tuple[list[ModelPlan], list[cd.SkippedModel]]:
    """Each (model, batch) characterized (eager: one kernel per op) and given its share of the
    validation budget: at least MODEL_MIN_SAMPLES calls at 1.5x the predicted call, within the
    share; one whose predicted call exceeds config.max_call_s is skipped."""
    from chipcal.measure.models import MODEL_FP32_MODE
    from chipcal.model.mapping.params import default_params
    from chipcal.model.workload import characterize_model

    config = run.config
    defaults = default_params(chip.kind)
    plan, skipped = [], []
    for name in config.models:
        for batch in config.batches:
            workload = characterize_model(name, batch=batch, partition="eager")  # eager: one kernel per op
            call_s = timed_latency_s(workload, chip, config.precision, defaults, MODEL_FP32_MODE)
            if call_s > config.max_call_s:
                skipped.append(cd.SkippedModel(model=name, batch=batch, predicted_call_s=call_s,
                                               limit_s=config.max_call_s))
                continue
            plan.append(ModelPlan(name, batch, workload, call_s))
    share = config.validation_time_s / max(len(plan), 1)
    for entry in plan:
        entry.budget_s = min(max(config.model_time_s, MODEL_MIN_SAMPLES * 1.5 * entry.budget_s), share)
    return plan, skipped


def time_rounds(run: RunContext, chip) -> Rounds:
    """The planned rounds, then more while the host is too noisy for the target."""
    from chipcal.measure.layers import LayerSet, default_cases, default_chains

    run.clock.start("characterizing the models")
    layer_set = LayerSet(default_cases(run.device.kind), run.device)
    chain_set = LayerSet(default_chains(), run.device)
    plan, skipped = plan_models(run, chip)
    per_round = len(layer_set) + len(chain_set) + len(plan)
    config = run.config
    run.progress.phase("timing rounds: micro-layers, chains, models", config.rounds * per_round)
    started = time.monotonic()
    for r in range(config.rounds):
        _time_round(run, r, layer_set, chain_set, plan, per_round)
    rounds, extra_start = config.rounds, time.monotonic()
    while noise.another_round([e.timings() for e in plan], rounds, (extra_start - started) / config.rounds,
                              config.extra_rounds_time_s - (time.monotonic() - extra_start)):
        run.progress.phase(f"timing round {rounds + 1}: the host is noisier than the target allows", per_round)
        _time_round(run, rounds, layer_set, chain_set, plan, per_round)
        rounds += 1
    return Rounds(tuple(layer_set.observations()), tuple(chain_set.observations()), tuple(plan), tuple(skipped),
                  rounds)


def _time_round(run: RunContext, r: int, layer_set, chain_set, plan: list[ModelPlan], per_round: int) -> None:
    """Round `r`: read back from the journal, or timed (micro-layers, chains, then each model) and
    journaled."""
    if (recorded := run.journal.get(f"round-{r}")) is not None:
        layer_set.add_round(recorded["layers"])
        chain_set.add_round(recorded["chains"])
        for entry in plan:
            entry.add(recorded["models"][entry.key])
        for _ in range(per_round):
            run.step(f"round {r + 1} (journaled)")
        return
    config, clock = run.config, run.clock
    clock.start("micro-layers")
    layer_times = layer_set.time_round(config.layer_time_s / config.rounds, max(3, 10 // config.rounds), run.step)
    clock.start("chains")
    chain_times = chain_set.time_round(2 * config.layer_time_s / config.rounds, max(3, 10 // config.rounds), run.step)
    clock.start("models")
    timings = {"layers": layer_times, "chains": chain_times, "models": {}}
    for entry in plan:
        timings["models"][entry.key] = _time_model(run, entry)
        entry.add(timings["models"][entry.key])
        run.step(f"{entry.name} batch {entry.batch}")
    run.journal.put(f"round-{r}", timings)


def _time_model(run: RunContext, entry: ModelPlan) -> dict:
    """One round's timing of a held-out model (its share of the samples and of the budget), with
    the model and the heap it freed given back afterwards: one model alive at a time."""
    from chipcal.measure.allocator import release_freed_memory
    from chipcal.measure.models import MODEL_FP32_MODE, measure_model

    config = run.config
    mm = measure_model(entry.name, batch=entry.batch, precision=config.precision, device=run.device,
                       flop=entry.workload.flop, max_time_s=entry.budget_s / config.rounds,
                       fp32_mode=MODEL_FP32_MODE, min_samples=-(-MODEL_MIN_SAMPLES // config.rounds))
    timing = mm.latency.to_dict()
    release_freed_memory()
    return timing
