"""The last phases of a calibration: fit the micro-benchmarks, validate on the held-out models,
and write the calibration document (calibrate.document) from every phase's result.

Fit data and validation data never mix: the fits see the GEMM sweep, the bandwidth probe, the
micro-layers and the chains; the whole models are only predicted (calibrated and default) and
compared with their timings.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

from chipcal.calibrate import document as cd
from chipcal.calibrate import flags as gap
from chipcal.calibrate import noise
from chipcal.calibrate.accuracy import error_summary
from chipcal.calibrate.context import RunContext
from chipcal.calibrate.crossval import folds
from chipcal.calibrate.heldout import (
    fit_flags,
    layer_predictions,
    model_predictions,
    validation_errors,
)
from chipcal.calibrate.micro import MicroFit, fit_micro
from chipcal.calibrate.probes import UNSTABLE_CV, Host, Machine, Memory, Power, Sweep
from chipcal.calibrate.rounds import Rounds


@dataclass(frozen=True)
class Fitted:
    """The micro-benchmark fits and the document's rows of the layers and chains they predict."""

    micro: MicroFit
    layer_rows: tuple[cd.LayerRow, ...]
    chain_rows: tuple[cd.LayerRow, ...]


@dataclass(frozen=True)
class Validated:
    """The held-out models predicted against their timings."""

    model_rows: tuple[cd.ModelRow, ...]
    validation: cd.ValidationSection


def fit(run: RunContext, chip, host: Host, rounds: Rounds) -> Fitted:
    """Per-op-class efficiency and overhead and the switch cost, fitted on the micro-layers and
    chains with a self-check and k-fold cross-validation (calibrate.micro)."""
    from chipcal.model.mapping.params import default_params

    precision, defaults = run.config.precision, default_params(chip.kind)
    run.clock.start("fits and cross-validation")
    k = folds(run.config.quick, run.config.smoke)
    run.progress.phase("fitting op-class efficiency, overhead and switch cost; cross-validation", k + 1)
    micro = fit_micro(list(rounds.layers), list(rounds.chains), chip, precision, host.base, defaults, k, host.floor,
                      on_fold=lambda f: run.step(f"cross-validation fold {f + 1}/{k}"))
    run.step("fits")

    def rows(obs, p):
        return tuple(cd.LayerRow(
            case=o.case, op_class=o.op_class, flop=o.workload.flop,
            bytes=o.workload.bytes_read + o.workload.bytes_written, kernels=len(o.workload.subgraphs),
            **layer_predictions(o.workload, chip, precision, p, defaults),
            **cd.timing(o.measurement)) for o in obs)

    return Fitted(micro, rows(rounds.layers, micro.params.alone()), rows(rounds.chains, micro.params))


def validate(run: RunContext, chip, sweep: Sweep, rounds: Rounds, fitted: Fitted) -> Validated:
    """The held-out models predicted with the calibrated and the default parameters against
    their pooled timings; the noise verdict; the fit and spec flags."""
    from chipcal.measure.models import MODEL_FP32_MODE
    from chipcal.model.mapping.params import default_params

    config, params, crossval = run.config, fitted.micro.params, fitted.micro.crossval
    defaults = default_params(chip.kind)
    run.clock.start("validation")
    model_rows = []
    for entry in rounds.plan:
        workload, m = entry.workload, entry.measurement(rounds.rounds)
        model_rows.append(cd.ModelRow(model=entry.name, batch=entry.batch, flop=workload.flop,
                                      bytes=workload.bytes_read + workload.bytes_written,
                                      delivered_flop_per_s=workload.flop / m.median_s,
                                      **model_predictions(workload, chip, config.precision, params, defaults,
                                                          m.median_s, MODEL_FP32_MODE),
                                      **cd.timing(m)))
        if m.cv > UNSTABLE_CV:
            run.flags.append(gap.unstable_timing(f"{entry.name} batch {entry.batch}", m.cv, UNSTABLE_CV))
    errors = error_summary([r.error for r in model_rows], "")
    verdict = noise.verdict([e.timings() for e in rounds.plan], config.rounds, rounds.rounds,
                            errors["median_abs_error"], errors["p90_abs_error"])
    validation = cd.ValidationSection(
        fit_data=_fit_data(sweep, rounds), validation_data=_validation_data(config),
        n=len(model_rows),
        n_models=len({r.model for r in model_rows}),
        noise_rel=_finite(verdict.round_noise), rounds=verdict.rounds, median_ci_rel=_finite(verdict.median_ci),
        noise_permits=_finite(verdict.permitted), explained_by_noise=verdict.explained_by_noise,
        noise_permits_p90=_finite(verdict.permitted_p90), p90_explained_by_noise=verdict.p90_explained_by_noise,
        **validation_errors(model_rows, crossval),
    )
    run.flags.extend(gap.noise_flags(verdict, config.extra_rounds_time_s, validation.median_abs_error)
                     + fit_flags(validation, crossval) + gap.spec_flags(chip))
    return Validated(tuple(model_rows), validation)


def _fit_data(sweep: Sweep, rounds: Rounds) -> str:
    classes = ", ".join(sorted({o.op_class for o in rounds.layers}))
    return (f"Fit data: the GEMM sweep ({len(sweep.rows)} shapes), the bandwidth probe, "
            f"{len(rounds.layers)} micro-layers ({classes}) "
            f"and {len(rounds.chains)} hand-built chains of layers (not torchvision models).")


def _validation_data(config) -> str:
    return (f"Validation only: {len(config.models)} whole torchvision models "
            f"({', '.join(config.models)}) at batch {', '.join(map(str, config.batches))}, "
            f"{config.precision}, weights=None, measured in the same run.")


def bandwidth_flag(memory: Memory) -> gap.Flag | None:
    """A registry chip whose measured DRAM bandwidth is well below its spec."""
    from chipcal.model.local import LOCAL_CHIP_NAME

    measured, spec = memory.bw.memory_bytes_per_s, memory.chip.memory.bandwidth_bytes_per_s
    if spec and measured < gap.MEASURED_VS_SPEC_MIN * spec and memory.chip.name != LOCAL_CHIP_NAME:
        return gap.Flag("bandwidth_below_spec", "warning",
                        f"measured {measured / 1e9:.1f} GB/s is {measured / spec:.0%} of the "
                        f"spec {spec / 1e9:.1f} GB/s", {"measured": measured, "spec": spec})
    return None


@dataclass(frozen=True)
class Phases:
    """Every phase's result, as `write` assembles them."""

    machine: Machine
    sweep: Sweep
    memory: Memory
    power: Power
    host: Host
    rounds: Rounds
    fitted: Fitted
    validated: Validated
    users_run: cd.UsersRunSection | None = None


def write(run: RunContext, done: Phases, created: str) -> cd.CalibrationDocument:
    """The calibration document of the run, stamped `created`."""
    from chipcal.calibrate.layer_fits import RUNTIME
    from chipcal.measure.models import MODEL_FP32_MODE
    from chipcal.measure.node import this_node
    from chipcal.measure.resident import peak_rss_bytes

    config, fp, chip, bw = run.config, done.machine.fp, done.memory.chip, done.memory.bw
    peak_rss = peak_rss_bytes()
    micro = done.fitted.micro
    params = dataclasses.replace(micro.params, source=f"calibration: {fp.slug} {config.device} {created}")
    model_bw = chip.memory.bandwidth_bytes_per_s
    return cd.CalibrationDocument(
        created_utc=created, command=config.command, machine_slug=fp.slug, device=config.device,
        quick=config.quick, precision=config.precision, fingerprint=fp,
        environment_summary={**fp.summary(), "allocator": done.machine.allocator.detail,
                             **({"peak resident memory": f"{peak_rss / 1e9:.2f} GB (measurements and fits)"}
                                if peak_rss else {})},
        chip=chip_section(chip, done.memory.origin, done.memory.assumed_bw),
        peaks=done.sweep.peaks,
        bandwidth=cd.BandwidthSection(
            measured_bytes_per_s=bw.memory_bytes_per_s, spec_bytes_per_s=model_bw,
            onchip_bytes_per_s=done.memory.onchip_bw, fraction=bw.memory_bytes_per_s / model_bw,
            spec_source=chip.memory.source, knee_bytes=dict(bw.knee_bytes),
            sustained_bytes_per_s=dict(bw.sustained_bytes_per_s)),
        observations=cd.Observations(
            gemm=done.sweep.rows,
            bandwidth=tuple(cd.BandwidthRow(kernel=pt.kernel, working_set_bytes=pt.working_set_bytes,
                                            bytes_per_s=pt.bytes_per_s, **cd.timing(pt.measurement))
                            for pt in bw.points),
            layers=done.fitted.layer_rows, chains=done.fitted.chain_rows, models=done.validated.model_rows,
            holds=done.power.holds),
        fits={**{k: cd.FitRecord.of(v) for k, v in done.sweep.fits.items()}, "power": done.power.fit,
              "op_class_latency": cd.FitRecord.of(micro.layer_fit), "switch_overhead": cd.FitRecord.of(micro.switch_fit)},
        parameters=cd.ParametersSection(chip=chip.name, runtime=RUNTIME, family_params=params),
        validation=done.validated.validation, power=done.power.section, flags=tuple(run.flags),
        skipped=cd.Skipped(gemm_shapes=done.sweep.skipped, models=done.rounds.skipped),
        dispatch=done.host.dispatch, threads=done.host.threads, first_touch=done.host.first_touch, gemv=done.host.gemv,
        layout=done.host.layout, throttle_note=done.sweep.gemm.throttle_note, crossval=micro.crossval.section(),
        model_fp32_mode=MODEL_FP32_MODE, peak_rss_bytes=peak_rss, phases=run.clock.times(),
        node=this_node(), smoke=config.smoke or None, users_run=done.users_run,
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
