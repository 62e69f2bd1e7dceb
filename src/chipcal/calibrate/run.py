"""The calibration run: measure this machine, fit the model, validate on held-out models, flag.

Order (fit data and validation data never mix):
1. fingerprint and the chip model (registry match, else the locally built chip);
2. GEMM peak sweep per precision  -> saturating efficiency fit per precision;
3. bandwidth probe                -> bandwidth_efficiency = measured / model bandwidth;
4. power (where a source exists)  -> idle, triad and each native GEMM precision held until clock and
   power settle (measure.sustained) -> static power, pJ/byte and pJ/FLOP per precision (calibrate.sustain);
5. timing rounds, interleaved: micro-layers, layer chains, whole torchvision models;
6. fits on the micro-layers and chains -> per-op-class efficiency and overhead, switch cost;
7. validation: the models predicted (calibrated and default) vs measured; gap flags.
Every step's observations go to the journal as they are measured (calibrate.journal); the wall and
CPU seconds of each phase go to the document (calibrate.phases).
The result is a typed CalibrationDocument (calibrate.document; docs/calibration.md has its fields).
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import time
from typing import Protocol

import numpy as np

from chipcal.calibrate import document as cd
from chipcal.calibrate import flags as gap
from chipcal.calibrate import noise
from chipcal.calibrate.accuracy import error_summary
from chipcal.calibrate.config import MODEL_MIN_SAMPLES, CalibrationConfig
from chipcal.calibrate.crossval import folds
from chipcal.calibrate.heldout import (
    fit_flags,
    layer_predictions,
    model_predictions,
    validation_errors,
)
from chipcal.calibrate.journal import NoJournal, same_machine
from chipcal.calibrate.layer_fits import (
    RUNTIME,
    as_timed,
    gemm_fits,
    gemm_informed,
    host_in_overheads,
)
from chipcal.calibrate.micro import fit_micro
from chipcal.calibrate.noise import ModelPlan
from chipcal.calibrate.phases import PhaseClock
from chipcal.calibrate.power_fit import power_section
from chipcal.calibrate.power_records import HoldRow
from chipcal.calibrate.threads import thread_section
from chipcal.model.mapping.params import CalibrationError

UNSTABLE_CV = 0.10


class Progress(Protocol):
    """Where the run reports progress: phases of known length, one step at a time."""

    def phase(self, name: str, total: int) -> None: ...

    def step(self, label: str) -> None: ...


class SilentProgress:
    def phase(self, name: str, total: int) -> None:
        pass

    def step(self, label: str) -> None:
        pass


# --- the run ---------------------------------------------------------------------------------------

def run_calibration(config: CalibrationConfig, progress: Progress | None = None,
                    journal=None) -> cd.CalibrationDocument:
    """Measure, fit, validate and flag; returns the calibration document."""
    from chipcal.measure.allocator import pin_allocator, release_freed_memory
    from chipcal.measure.bandwidth import (
        DEFAULT_BANDWIDTH_SIZES,
        KERNELS,
        bandwidth_from_dict,
        bandwidth_to_dict,
        local_overrides,
        measure_bandwidth,
        measure_first_touch,
        onchip_bandwidth,
    )
    from chipcal.measure.device import device_kind
    from chipcal.measure.dispatch import probe_dispatch
    from chipcal.measure.identify import identify
    from chipcal.measure.layers import LayerSet, default_cases, default_chains
    from chipcal.measure.layout import conv_layout_passes
    from chipcal.measure.models import MODEL_FP32_MODE, measure_model
    from chipcal.measure.peak import (
        default_precisions,
        default_shapes,
        gemm_peak_from_dict,
        gemm_peak_to_dict,
        measure_gemm_peak,
    )
    from chipcal.measure.power import open_power_source
    from chipcal.measure.power_phase import power_phase
    from chipcal.measure.resident import peak_rss_bytes
    from chipcal.measure.sustained import FULL_LIMITS, QUICK_LIMITS
    from chipcal.measure.system import fingerprint, local_chip
    from chipcal.model.local import LOCAL_CHIP_NAME
    from chipcal.model.mapping.params import default_params
    from chipcal.model.workload import characterize_model

    progress = progress or SilentProgress()
    journal = journal or NoJournal()      # each step's observations are recorded as soon as measured
    step = progress.step
    phases = PhaseClock()       # where the time goes, phase by phase (the report's last section)
    phases.start("identify")
    fp = fingerprint()
    same_machine(journal, fp.slug, fp.torch_version)
    allocator = pin_allocator()     # page faults of eager forward passes independent of the process's history
    identity = identify(fp, config.device)
    chip, origin = identity.chip, identity.origin
    cases = default_cases(device_kind(config.device))
    flags: list[gap.Flag] = []

    # 2. GEMM peak sweep
    phases.start("GEMM sweep")
    gemm_precisions = config.gemm_precisions or default_precisions(config.device, fp)
    progress.phase("GEMM peak sweep", len(gemm_precisions) * len(default_shapes(config.device)))
    if (recorded := journal.get("gemm")) is not None:
        gemm = gemm_peak_from_dict(recorded)
    else:
        gemm = measure_gemm_peak(config.device, gemm_precisions, remeasure=config.remeasure, fp=fp, on_shape=step)
        journal.put("gemm", gemm_peak_to_dict(gemm))
        release_freed_memory()      # the pinned heap keeps what a phase freed; give it back between phases
    fits: dict[str, cd.FitRecord | None] = {}
    gemm_fit = gemm_fits({p: gemm.curve(p) for p in gemm.native_precisions}, chip)
    peaks, gemm_rows = [], []
    for p in gemm.precisions:
        best = gemm.best(p)
        emulated = gemm.emulated.get(p)
        # an emulated precision has no hardware unit: its rate is reported, never judged against a peak
        physics = None if emulated else chip.peak_flop_per_s(p)
        spec = chip.stated_peak_flop_per_s.get(p)
        peaks.append(cd.PeakRow(precision=p, support="emulated" if emulated else "native",
                                measured_flop_per_s=best.flop_per_s, physics_flop_per_s=physics,
                                fraction_of_physics=best.flop_per_s / physics if physics else None,
                                spec_flop_per_s=spec, fraction_of_spec=best.flop_per_s / spec if spec else None,
                                best_shape=(best.m, best.n, best.k), n=best.measurement.n,
                                cv=best.measurement.cv, note=emulated or None,
                                cached=(p in gemm.cached) or None))
        gemm_rows += [cd.GemmRow(precision=p, m=pt.m, k=pt.k, flop=pt.flop, flop_per_s=pt.flop_per_s,
                                 **cd.timing(pt.measurement)) for pt in gemm.curve(p)]
        if gemm.throttle.get(p):
            flags.append(gap.Flag("throttled", "warning",
                                  f"{p} GEMM sweep ran throttled: {', '.join(gemm.throttle[p])}",
                                  {"reasons": float(len(gemm.throttle[p]))}))
        if emulated:
            continue
        clock = chip.engine_for(p).clock_hz if physics else None
        flags += [f for f in (gap.measured_below_spec(p, best.flop_per_s, spec),
                              gap.measured_below_physics(p, best.flop_per_s, physics),
                              gap.measured_above_physics(p, best.flop_per_s, physics, clock),
                              gap.sag(f"{p} GEMM clock", best.measurement.clocks_hz, "Hz"),
                              gap.unstable_timing(f"{p} GEMM peak", best.measurement.cv, UNSTABLE_CV)) if f]
    for p, reason in gemm.unsupported.items():
        peaks.append(cd.PeakRow(precision=p, support="unsupported", measured_flop_per_s=None,
                                physics_flop_per_s=chip.peak_flop_per_s(p), fraction_of_physics=None,
                                spec_flop_per_s=chip.stated_peak_flop_per_s.get(p), fraction_of_spec=None,
                                best_shape=None, n=0, cv=None, unsupported=reason))
    fits.update({k: cd.FitRecord.of(v) for k, v in gemm_fit.items()})

    skipped_shapes = tuple(cd.SkippedShape(precision=sk.precision, shape=(sk.m, sk.n, sk.k),
                                           predicted_call_s=sk.predicted_call_s, limit_s=sk.limit_s)
                           for sk in gemm.skipped)

    # 3. bandwidth
    phases.start("bandwidth")
    progress.phase("memory bandwidth", len(KERNELS) * len(DEFAULT_BANDWIDTH_SIZES[device_kind(config.device)]))
    if (recorded := journal.get("bandwidth")) is not None:
        bw = bandwidth_from_dict(recorded, fp.l3_bytes if device_kind(config.device) == "cpu" else None)
    else:
        bw = measure_bandwidth(config.device, remeasure=config.remeasure, fp=fp, on_point=lambda pt: step(pt.kernel))
        journal.put("bandwidth", bandwidth_to_dict(bw))
        release_freed_memory()
    measured_bw = bw.memory_bytes_per_s
    assumed_bw = chip.memory.bandwidth_bytes_per_s
    if chip.name == LOCAL_CHIP_NAME:
        # a locally built chip takes measured figures where it only had assumptions
        chip = local_chip(**local_overrides(bw, fp.cpu), support=fp.cpu_precisions, cpu=fp.cpu)
        origin += "; DRAM bandwidth and last-level cache from the bandwidth probe"
    model_bw = chip.memory.bandwidth_bytes_per_s
    precision_fit = gemm_fit.get(f"gemm_efficiency_{config.precision}")
    base = gemm_informed(default_params(chip.kind), precision_fit)     # the layer fit's prior centre
    onchip_bw = onchip_bandwidth(bw, fp.l3_bytes if device_kind(config.device) == "cpu" else None)
    base = dataclasses.replace(
        base,
        # seed only: the layer fit refits it through the predictor
        half_efficiency_flop=(precision_fit.parameters["w_half_flop"]
                              if precision_fit and "w_half_flop" not in precision_fit.unconstrained
                              else base.half_efficiency_flop),
        bandwidth_efficiency=measured_bw / model_bw,
        onchip_bandwidth_ratio=(onchip_bw / model_bw if onchip_bw else base.onchip_bandwidth_ratio),
        source="calibration",
    )

    # 4. power: idle, the triad and each native GEMM precision, held until clock and power settle
    phases.start("power")
    source = open_power_source(config.device)
    held = gemm.native_precisions if source.available else ()
    progress.phase("power: idle, triad and each GEMM precision held until clock and power settle",
                   2 + len(held) if source.available else 1)
    if (holds := _journaled_holds(journal.get("power"))) is None:
        holds = ()
        if source.available:
            limits = QUICK_LIMITS if config.quick else FULL_LIMITS
            holds = tuple(HoldRow.of(h) for h in power_phase(source, config.device, held, limits,
                                                                  on_hold=lambda h: step(h.label)))
        journal.put("power", [h.to_dict() for h in holds])
        release_freed_memory()
    if not source.available:
        step(source.name)
    power_doc, fits["power"], power_flags = power_section(source.name, source.available, source.reason, holds, (),
                                                          chip, fp, config.precision)
    flags += power_flags

    # 4b. first touch of freshly mapped memory (CPU eager: outputs above the mmap threshold)
    phases.start("host probes: first touch, layout, dispatch, threads")
    first_touch = layout = None
    if device_kind(config.device) == "cpu":
        if (recorded := journal.get("first_touch")) is None:
            ft = measure_first_touch()
            recorded = {"bytes_per_s": ft.bytes_per_s, "size_bytes": ft.size_bytes,
                        "fresh_median_s": ft.fresh.median_s, "reused_median_s": ft.reused.median_s,
                        "fresh_iqr_s": ft.fresh.iqr_s, "n": ft.fresh.n,
                        "mmap_threshold_bytes": allocator.mmap_threshold_bytes}
            journal.put("first_touch", recorded)
        first_touch = cd.FirstTouchSection(**recorded)
        base = first_touch.charged_in(base)
        # 4c. layout reorders around each oneDNN convolution (measure.layout)
        if (recorded := journal.get("layout")) is None:
            found = conv_layout_passes()
            recorded = {"passes": found.passes, "detail": found.detail, "weight_bytes_per_s": found.weight_bytes_per_s,
                        "pointwise_weight_bytes_per_s": found.pointwise_weight_bytes_per_s,
                        "call_overhead_s": found.call_overhead_s}
            journal.put("layout", recorded)
        layout = cd.LayoutSection(**recorded)
        base = layout.charged_in(base)

    # 4d. eager host side: per-op dispatch cost (measure.dispatch); on a GPU it seeds the overheads
    if (recorded := journal.get("dispatch")) is None:
        cost = probe_dispatch(max_time_s=1.0, device=config.device)
        recorded = {"per_op_s": cost.per_op_s, "iqr_s": cost.per_op.iqr_s, "n": cost.per_op.n, "method": cost.method}
        journal.put("dispatch", recorded)
    dispatch = cd.DispatchSection(**recorded)
    release_freed_memory()
    base, floor = host_in_overheads(base, config.device, dispatch.per_op_s)
    threads = thread_section(journal) if device_kind(config.device) == "cpu" else None
    if threads and (flag := gap.threads_not_scaling(threads.threads, threads.speedup)):
        flags.append(flag)

    # 5. timing rounds: micro-layers, chains and the held-out models, interleaved so that a slow
    # minute of the shared host spoils one round of each, not a whole phase (fits come after)
    phases.start("characterizing the models")
    defaults = default_params(chip.kind)
    layer_set, chain_set = LayerSet(cases, config.device), LayerSet(default_chains(), config.device)
    plan, skipped_models = [], []
    for name in config.models:
        for batch in config.batches:
            workload = characterize_model(name, batch=batch, fuse=False)  # eager: one kernel per op
            call_s = as_timed(workload, chip, config.precision, defaults, MODEL_FP32_MODE).latency_s
            if call_s > config.max_call_s:
                skipped_models.append(cd.SkippedModel(model=name, batch=batch, predicted_call_s=call_s,
                                                      limit_s=config.max_call_s))
                continue
            plan.append(ModelPlan(name, batch, workload, call_s))
    # budget: at least MODEL_MIN_SAMPLES calls at 1.5x the predicted call, within the phase's share
    share = config.validation_time_s / max(len(plan), 1)
    for entry in plan:
        entry.budget_s = min(max(config.model_time_s, MODEL_MIN_SAMPLES * 1.5 * entry.budget_s), share)
    per_round = len(layer_set) + len(chain_set) + len(plan)
    progress.phase("timing rounds: micro-layers, chains, models", config.rounds * per_round)

    def time_round(r: int) -> None:
        if (recorded := journal.get(f"round-{r}")) is not None:
            layer_set.add_round(recorded["layers"])
            chain_set.add_round(recorded["chains"])
            for entry in plan:
                entry.add(recorded["models"][entry.key])
            for _ in range(per_round):
                step(f"round {r + 1} (journaled)")
            return
        phases.start("micro-layers")
        layer_times = layer_set.time_round(config.layer_time_s / config.rounds, max(3, 10 // config.rounds), step)
        phases.start("chains")
        chain_times = chain_set.time_round(2 * config.layer_time_s / config.rounds, max(3, 10 // config.rounds), step)
        phases.start("models")
        timings = {"layers": layer_times, "chains": chain_times, "models": {}}
        for entry in plan:
            mm = measure_model(entry.name, batch=entry.batch, precision=config.precision, device=config.device,
                               flop=entry.workload.flop, max_time_s=entry.budget_s / config.rounds,
                               fp32_mode=MODEL_FP32_MODE,
                               min_samples=-(-MODEL_MIN_SAMPLES // config.rounds))
            timings["models"][entry.key] = mm.latency.to_dict()
            entry.add(timings["models"][entry.key])
            release_freed_memory()      # one model alive at a time: measure_model freed it; the heap too
            step(f"{entry.name} batch {entry.batch}")
        journal.put(f"round-{r}", timings)

    # the planned rounds, then more while the host is too noisy for the target (calibrate.noise)
    started = time.monotonic()
    for r in range(config.rounds):
        time_round(r)
    rounds, extra_start = config.rounds, time.monotonic()
    while noise.another_round([e.timings() for e in plan], rounds, (extra_start - started) / config.rounds,
                              config.extra_rounds_time_s - (time.monotonic() - extra_start)):
        progress.phase(f"timing round {rounds + 1}: the host is noisier than the target allows", per_round)
        time_round(rounds)
        rounds += 1
    observations, chains = layer_set.observations(), chain_set.observations()

    # 6. fits on the micro-benchmarks (calibrate.micro): op classes, self-check, switch cost
    phases.start("fits and cross-validation")
    k = folds(config.quick)
    progress.phase("fitting op-class efficiency, overhead and switch cost; cross-validation", k + 1)
    micro = fit_micro(observations, chains, chip, config.precision, base, defaults, k, floor,
                      on_fold=lambda f: step(f"cross-validation fold {f + 1}/{k}"))
    params, crossval = micro.params, micro.crossval
    fits["op_class_latency"] = cd.FitRecord.of(micro.layer_fit)
    fits["switch_overhead"] = cd.FitRecord.of(micro.switch_fit)
    step("fits")

    def rows(obs, p):
        return tuple(cd.LayerRow(
            case=o.case, op_class=o.op_class, flop=o.workload.flop,
            bytes=o.workload.bytes_read + o.workload.bytes_written, kernels=len(o.workload.subgraphs),
            **layer_predictions(o.workload, chip, config.precision, p, defaults),
            **cd.timing(o.measurement)) for o in obs)

    layer_rows, chain_rows = rows(observations, params.alone()), rows(chains, params)

    # 7. validation: the held-out models, predicted with the calibrated and the default parameters
    phases.start("validation")
    model_rows = []
    for entry in plan:
        name, batch, workload = entry.name, entry.batch, entry.workload
        m = entry.measurement(rounds)
        model_rows.append(cd.ModelRow(model=name, batch=batch, flop=workload.flop,
                                      bytes=workload.bytes_read + workload.bytes_written,
                                      delivered_flop_per_s=workload.flop / m.median_s,
                                      **model_predictions(workload, chip, config.precision, params, defaults,
                                                          m.median_s, MODEL_FP32_MODE),
                                      **cd.timing(m)))
        if m.cv > UNSTABLE_CV:
            flags.append(gap.unstable_timing(f"{name} batch {batch}", m.cv, UNSTABLE_CV))

    errors = error_summary([r.error for r in model_rows], "")
    verdict = noise.verdict([e.timings() for e in plan], config.rounds, rounds,
                            errors["median_abs_error"], errors["p90_abs_error"])
    validation = cd.ValidationSection(
        fit_data=(f"Fit data: the GEMM sweep ({len(gemm_rows)} shapes), the bandwidth probe, "
                  f"{len(observations)} micro-layers ({', '.join(sorted({o.op_class for o in observations}))}) "
                  f"and {len(chains)} hand-built chains of layers (not torchvision models)."),
        validation_data=(f"Validation only: {len(config.models)} whole torchvision models "
                         f"({', '.join(config.models)}) at batch {', '.join(map(str, config.batches))}, "
                         f"{config.precision}, weights=None, measured in the same run."),
        n=len(model_rows),
        n_models=len({r.model for r in model_rows}),
        noise_rel=_finite(verdict.round_noise), rounds=verdict.rounds, median_ci_rel=_finite(verdict.median_ci),
        noise_permits=_finite(verdict.permitted), explained_by_noise=verdict.explained_by_noise,
        noise_permits_p90=_finite(verdict.permitted_p90), p90_explained_by_noise=verdict.p90_explained_by_noise,
        **validation_errors(model_rows, crossval),
    )
    flags += (gap.noise_flags(verdict, config.extra_rounds_time_s, validation.median_abs_error)
              + fit_flags(validation, crossval) + gap.spec_flags(chip))
    if model_bw and measured_bw < gap.MEASURED_VS_SPEC_MIN * model_bw and chip.name != LOCAL_CHIP_NAME:
        flags.append(gap.Flag("bandwidth_below_spec", "warning",
                              f"measured {measured_bw / 1e9:.1f} GB/s is {measured_bw / model_bw:.0%} of the "
                              f"spec {model_bw / 1e9:.1f} GB/s", {"measured": measured_bw, "spec": model_bw}))

    created = now_utc()
    peak_rss = peak_rss_bytes()
    params = dataclasses.replace(params, source=f"calibration: {fp.slug} {config.device} {created}")
    return cd.CalibrationDocument(
        created_utc=created,
        command=config.command,
        machine_slug=fp.slug,
        device=config.device,
        quick=config.quick,
        precision=config.precision,
        fingerprint=fp,
        environment_summary={**fp.summary(), "allocator": allocator.detail,
                             **({"peak resident memory": f"{peak_rss / 1e9:.2f} GB (measurements and fits)"}
                                if peak_rss else {})},
        chip=chip_section(chip, origin, assumed_bw),
        peaks=tuple(peaks),
        bandwidth=cd.BandwidthSection(
            measured_bytes_per_s=measured_bw, spec_bytes_per_s=model_bw, onchip_bytes_per_s=onchip_bw,
            fraction=measured_bw / model_bw, spec_source=chip.memory.source,
            knee_bytes=dict(bw.knee_bytes), sustained_bytes_per_s=dict(bw.sustained_bytes_per_s)),
        observations=cd.Observations(
            gemm=tuple(gemm_rows),
            bandwidth=tuple(cd.BandwidthRow(kernel=pt.kernel, working_set_bytes=pt.working_set_bytes,
                                            bytes_per_s=pt.bytes_per_s, **cd.timing(pt.measurement))
                            for pt in bw.points),
            layers=layer_rows,
            chains=chain_rows,
            models=tuple(model_rows),
            holds=holds,
        ),
        fits=fits,
        parameters=cd.ParametersSection(chip=chip.name, runtime=RUNTIME, family_params=params),
        validation=validation,
        power=power_doc,
        flags=tuple(flags),
        skipped=cd.Skipped(gemm_shapes=skipped_shapes, models=tuple(skipped_models)),
        dispatch=dispatch,
        threads=threads,
        first_touch=first_touch,
        layout=layout,
        throttle_note=gemm.throttle_note,
        crossval=crossval.section(),
        model_fp32_mode=MODEL_FP32_MODE,
        peak_rss_bytes=peak_rss,
        phases=phases.times(),
    )


def chip_section(chip, origin: str, assumed_bw: float | None) -> cd.ChipSection:
    """The document's account of the chip a run modelled; `assumed_bw` is its DRAM bandwidth
    before the bandwidth probe replaced it (a locally built chip)."""
    return cd.ChipSection(
        name=chip.name, display_name=chip.display_name, kind=chip.kind, origin=origin,
        process_nm=chip.process_nm, tdp_w=chip.tdp_w,
        physics_peak_flop_per_s={p: chip.peak_flop_per_s(p) for p in chip.precisions},
        spec_peak_flop_per_s=dict(chip.stated_peak_flop_per_s),
        memory_bandwidth_bytes_per_s=chip.memory.bandwidth_bytes_per_s, memory_source=chip.memory.source,
        assumed_memory_bandwidth_bytes_per_s=assumed_bw,
        l3_bytes=chip.microarch.get("l3_bytes"), microarch_source=chip.microarch.get("source"))


def _finite(value: float) -> float | None:
    """`value`, or None where it could not be determined (nan: too few rounds or samples)."""
    return value if np.isfinite(value) else None


def _journaled_holds(recorded) -> tuple[HoldRow, ...] | None:
    """The power phase's holds as the journal has them; None when it has none, or has the power
    curve of older code (a list of windows, not holds: the phase is measured again)."""
    if not isinstance(recorded, list):
        return None
    try:
        return tuple(HoldRow.from_dict(d) for d in recorded)
    except CalibrationError:
        return None


def now_utc() -> str:
    """The time a run or refit is stamped with (created_utc; its directory's name)."""
    return _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
