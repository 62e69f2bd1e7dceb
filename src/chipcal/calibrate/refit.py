"""Fit a calibration again from the raw observations a calibration document recorded.

The document keeps every timed micro-layer and chain (median, IQR, samples) and every held-out
model timing; this module rebuilds the layer observations (each case characterized again, no
timing) and runs the same fits as the calibration run, so a document from another machine can be
re-fitted with today's model and fit code and its recorded whole-model timings predicted. The
tests use it on recorded runs of several CPUs and of an H100.

`refit_document` makes of it a whole calibration document, which `chipcal calibrate --refit`
writes beside the source run so that old runs can be re-fitted after an upgrade: every
measurement is the source's, copied unchanged; the chip, the fits, the parameters, every
prediction, the validation and the flags that follow from them are today's code's, among them
whether the timing noise explains the new validation median (`noise_rechecked`). Nothing here
needs the measured device: a GPU run is re-fitted on any machine.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

from chipcal.calibrate import document as cd
from chipcal.calibrate import noise
from chipcal.calibrate.accuracy import Checked, CheckedSet
from chipcal.calibrate.crossval import CrossValidation, folds
from chipcal.calibrate.document import CalibrationDocument, LayerRow
from chipcal.calibrate.fits import FitResult
from chipcal.calibrate.layer_fits import RUNTIME, gemm_fits, gemm_informed, host_in_overheads
from chipcal.calibrate.micro import MicroFit, fit_micro
from chipcal.measure.timing import Measurement
from chipcal.model.errors import ChipcalError
from chipcal.model.local import LOCAL_CHIP_NAME

# flags a refit works out again (from the fits, the validation, today's chip and the power fit);
# every other flag is about the measurements and stays as the run wrote it
RECOMPUTED_FLAGS = frozenset({"fitted_class_reverted", "calibration_worse_than_defaults", "spec_peak_unsustainable",
                              "measured_energy_exceeds_tdp", "spec_beyond_tdp", "run_to_run_drift",
                              "error_within_noise"})


class RefitError(ChipcalError):
    """A recorded run that today's code cannot re-fit here; the message says why."""


@dataclass(frozen=True)
class ModelCheck(Checked):
    model: str
    batch: int
    measured_s: float
    predicted_s: float
    predicted_default_s: float
    predicted_serial_s: float | None = None


@dataclass(frozen=True)
class Refit(CheckedSet):
    fit: MicroFit                    # the layer fit, its self-check and the switch fit
    models: tuple[ModelCheck, ...]
    gemm: dict[str, FitResult] = dataclasses.field(default_factory=dict)   # today's fits of the recorded sweep
    layers: tuple = ()               # the recorded micro-layers and chains as LayerObservations
    chains: tuple = ()

    @property
    def params(self):
        """The fitted FamilyParams."""
        return self.fit.params

    @property
    def crossval(self) -> CrossValidation:
        return self.fit.crossval

    @property
    def checks(self) -> tuple[ModelCheck, ...]:
        return self.models


def _measurement(row: LayerRow) -> Measurement:
    """The recorded timing of one row: its median, IQR, sample count and CV as recorded."""
    base = Measurement.from_samples([row.median_s] * 3, method=row.method)
    return dataclasses.replace(base, n=row.n, iqr_s=float(row.iqr_s), cv=float(row.cv), unstable=row.unstable)


def _observations(rows: Sequence[LayerRow], cases, step) -> list:
    from chipcal.measure import layers

    by_label = {c.label: c for c in cases}
    out = []
    for row in rows:
        case = by_label.get(row.case)
        if case is None:
            raise RefitError(f"the recorded case {row.case!r} is not one of today's micro-layers or chains")
        out.append(layers.LayerObservation(case.label, case.op_class, layers.case_workload(case), _measurement(row)))
        step(row.case)
    return out


def recorded_bandwidth(doc: CalibrationDocument):
    """The run's bandwidth probe read again from its recorded points with today's code (DRAM
    figure, cache knee: measure.bandwidth), as a measure.bandwidth.Bandwidth."""
    from chipcal.measure.bandwidth import KERNELS, BandwidthPoint, bandwidth_from_points

    points = [BandwidthPoint(r.kernel, r.working_set_bytes // KERNELS[r.kernel], r.working_set_bytes,
                             r.working_set_bytes, _measurement(r), r.bytes_per_s)
              for r in doc.observations.bandwidth]
    return bandwidth_from_points(str(doc.device), doc.machine_slug, points, True, [], _os_llc(doc), None)


def _os_llc(doc: CalibrationDocument) -> int | None:
    """The last-level cache the OS reported to the run (CPU runs only), as calibrate.run uses it."""
    return None if doc.device.is_cuda else doc.fingerprint.l3_bytes


def recorded_gemm_fits(doc: CalibrationDocument, chip) -> dict[str, FitResult]:
    """Today's GEMM efficiency fits (calibrate.layer_fits.gemm_fits) of the run's recorded sweep,
    for the precisions it swept on a hardware unit."""
    native = [p.precision for p in doc.peaks if p.support == "native"]
    return gemm_fits({p: [r for r in doc.observations.gemm if r.precision == p and r.flop_per_s]
                      for p in native}, chip)


def refit(doc: CalibrationDocument, chip, progress=None) -> Refit:
    """Fit the layer and switch parameters of `chip` from `doc`'s recorded observations (the
    calibration run's sequence, calibrate.micro) and predict its recorded held-out models (eager,
    as they were timed). The prior's GEMM efficiency and the bandwidth figures come from the
    recorded sweep and probe points (`recorded_gemm_fits`, `recorded_bandwidth`); a local `chip`
    should carry the same bandwidth (measure.bandwidth.local_overrides, `refit_chip`). `progress`
    is a calibrate.context.Progress."""
    from chipcal.calibrate.context import SilentProgress
    from chipcal.calibrate.heldout import model_predictions
    from chipcal.measure.bandwidth import onchip_bandwidth
    from chipcal.measure.layers import default_cases, default_chains
    from chipcal.model.mapping.params import default_params
    from chipcal.model.workload import characterize_model

    precision = doc.precision
    progress = progress or SilentProgress()
    defaults = default_params(chip.kind)
    gemm = recorded_gemm_fits(doc, chip)
    prior = gemm_informed(defaults, gemm.get(f"gemm_efficiency_{precision}"))
    model_bw = chip.memory.bandwidth_bytes_per_s
    bw = recorded_bandwidth(doc)
    onchip = onchip_bandwidth(bw, _os_llc(doc))
    base = dataclasses.replace(
        prior, bandwidth_efficiency=bw.memory_bytes_per_s / model_bw,
        onchip_bandwidth_ratio=onchip / model_bw if onchip else defaults.onchip_bandwidth_ratio, source="refit")
    base = doc.first_touch.charged_in(base) if doc.first_touch else base
    base = doc.layout.charged_in(base) if doc.layout else base
    base = doc.gemv.charged_in(base) if doc.gemv else base
    recorded = doc.observations
    progress.phase("characterizing the recorded layers, chains and models",
                   len(recorded.layers) + len(recorded.chains) + len(recorded.models))
    layers = _observations(recorded.layers, default_cases(doc.device.kind), progress.step)
    chains = _observations(recorded.chains, default_chains(), progress.step)
    workloads = []
    for row in recorded.models:
        workloads.append(characterize_model(row.model, batch=row.batch, partition="eager"))
        progress.step(f"{row.model} batch {row.batch}")
    base, floor = host_in_overheads(base, doc.device, doc.dispatch.per_op_s if doc.dispatch else None)
    k = folds(doc.quick, bool(doc.smoke))
    progress.phase("fitting op-class efficiency, overhead and switch cost; cross-validation", k + 1)
    fit = fit_micro(layers, chains, chip, precision, base, defaults, k, floor,
                    on_fold=lambda f: progress.step(f"cross-validation fold {f + 1}/{k}"))
    progress.step("fits")
    checks = []
    for row, workload in zip(recorded.models, workloads, strict=True):
        p = model_predictions(workload, chip, precision, fit.params, defaults, row.median_s, doc.models_fp32_mode)
        checks.append(ModelCheck(row.model, row.batch, row.median_s, p["predicted_s"], p["predicted_default_s"],
                                 p["predicted_serial_s"]))
    return Refit(fit, tuple(checks), gemm, tuple(layers), tuple(chains))


def refit_chip(doc: CalibrationDocument):
    """(chip, origin) that a refit of `doc` models: today's registry entry of the chip the run
    matched; for a locally built CPU chip, this machine's CPU when it is the one the run measured,
    with the run's recorded bandwidth and cache knee (as calibrate.run builds it). A locally built
    chip of another machine cannot be rebuilt, the document not recording its caches and core
    layout: RefitError."""
    from chipcal.measure.bandwidth import local_overrides
    from chipcal.measure.cpu import detect_cpu
    from chipcal.measure.system import local_chip, local_host_identity
    from chipcal.model.registry import UnknownChipError, load_registry

    if doc.chip.name != LOCAL_CHIP_NAME:
        try:
            chip = load_registry().get(doc.chip.name)
        except UnknownChipError:
            raise RefitError(f"the run modelled chip {doc.chip.name!r}, which today's registry does not hold") from None
        return chip, f"today's registry entry for {chip.name} (the run's: {doc.chip.origin})"
    spec = detect_cpu()
    if local_host_identity(spec) != doc.fingerprint.host_identity:
        raise RefitError(f"the run was measured on another CPU ({doc.fingerprint.cpu_model}, "
                         f"{doc.fingerprint.physical_cores} cores) and modelled it as {LOCAL_CHIP_NAME}, whose caches "
                         "and core layout the document does not record: re-fit it on that machine")
    chip = local_chip(**local_overrides(recorded_bandwidth(doc), spec), support=doc.fingerprint.cpu_precisions,
                      cpu=spec)
    return chip, ("built from this CPU, the one the run measured (no registry match); DRAM bandwidth and "
                  "last-level cache from the run's recorded bandwidth probe")


def refit_document(doc: CalibrationDocument, chip, origin: str, *, source_run: str, code: str,
                   command: str, created_utc: str, progress=None) -> CalibrationDocument:
    """`doc` re-fitted by today's code as a whole calibration document (module docstring): its
    measurements (the timings, the GEMM sweep, the bandwidth and power rows, the fingerprint)
    unchanged; the chip `chip`, the fits, the parameters, every prediction and the validation
    worked out again; the flags about the measurements kept, those in RECOMPUTED_FLAGS replaced."""
    from chipcal.calibrate import flags as gap
    from chipcal.calibrate import heldout
    from chipcal.calibrate.outcome import chip_section
    from chipcal.model.mapping.params import default_params

    precision = doc.precision
    result = refit(doc, chip, progress)
    defaults, params = default_params(chip.kind), result.params

    def rows(recorded, observed, p):
        return tuple(dataclasses.replace(row, **heldout.layer_predictions(o.workload, chip, precision, p, defaults))
                     for row, o in zip(recorded, observed, strict=True))

    models = tuple(dataclasses.replace(row, predicted_s=c.predicted_s, predicted_serial_s=c.predicted_serial_s,
                                       predicted_default_s=c.predicted_default_s, error=c.error,
                                       default_error=c.default_error)
                   for row, c in zip(doc.observations.models, result.models, strict=True))
    validation = noise_rechecked(dataclasses.replace(doc.validation, **heldout.validation_errors(models, result.crossval)),
                                 models)
    power, power_fit, power_flags = refit_power(doc, chip)
    fits = {**doc.fits, **{k: cd.FitRecord.of(v) for k, v in result.gemm.items()},
            "power": power_fit, "op_class_latency": cd.FitRecord.of(result.fit.layer_fit),
            "switch_overhead": cd.FitRecord.of(result.fit.switch_fit)}
    drift = doc.rerun and gap.run_to_run_drift(doc.rerun.median_abs_change, doc.rerun.max_abs_change, doc.rerun.n,
                                               doc.rerun.previous_run, validation.median_abs_error)
    flags = ([f for f in doc.flags if f.code not in RECOMPUTED_FLAGS]
             + heldout.fit_flags(validation, result.crossval) + gap.spec_flags(chip)
             + power_flags
             + ([drift] if drift else [])
             + _within_noise(validation))
    model_bw = chip.memory.bandwidth_bytes_per_s
    measured_bw = doc.bandwidth.measured_bytes_per_s
    return dataclasses.replace(
        doc, created_utc=created_utc, command=command,
        chip=chip_section(chip, origin, doc.chip.assumed_memory_bandwidth_bytes_per_s),
        peaks=tuple(_peak(p, chip) for p in doc.peaks),
        bandwidth=dataclasses.replace(doc.bandwidth, spec_bytes_per_s=model_bw, spec_source=chip.memory.source,
                                      fraction=measured_bw / model_bw if measured_bw and model_bw else None),
        observations=dataclasses.replace(
            doc.observations, layers=rows(doc.observations.layers, result.layers, params.alone()),
            chains=rows(doc.observations.chains, result.chains, params), models=models),
        fits=fits,
        parameters=cd.ParametersSection(chip=chip.name, runtime=RUNTIME, family_params=dataclasses.replace(
            params, source=f"refit of calibration: {doc.machine_slug} {doc.device} {doc.created_utc}; {created_utc}")),
        validation=validation, power=power, flags=tuple(flags), crossval=result.crossval.section(),
        refit=cd.RefitSection(source_run=source_run, source_created_utc=doc.created_utc,
                              source_command=doc.command, code=code),
        plots=(), non_finite_values=None)


def noise_rechecked(validation: cd.ValidationSection, models: Sequence[cd.ModelRow]) -> cd.ValidationSection:
    """`validation` (its errors re-fitted) with its noise verdict for the new median and p90
    (calibrate.noise): what the noise permits as the run worked it out; for a run recorded before
    calibrate.noise, from what it kept: its round noise (noise_rel: the rounds' own medians are not
    kept) and the median and 90th percentile over its models of the pooled median's relative CI
    half-width (each row's ci_low_s, ci_high_s). At p90 the round noise's median stands in for
    its 90th percentile, so such a run's p90 figure is a lower bound. Unchanged where neither was
    recorded."""
    widths = [(r.ci_high_s - r.ci_low_s) / 2 / r.median_s for r in models
              if r.median_s and r.ci_low_s is not None and r.ci_high_s is not None]
    ci = validation.median_ci_rel if validation.median_ci_rel is not None else noise.ci_percentile(widths)
    permits = (validation.noise_permits if validation.noise_permits is not None
               else noise.permitted_by(validation.noise_rel, ci))
    permits_p90 = (validation.noise_permits_p90 if validation.noise_permits_p90 is not None
                   else noise.permitted_by(validation.noise_rel, noise.ci_percentile(widths, 90)))
    if not math.isfinite(permits):
        return validation
    return dataclasses.replace(
        validation, median_ci_rel=ci if math.isfinite(ci) else None, noise_permits=permits,
        explained_by_noise=noise.explains(validation.median_abs_error, permits),
        noise_permits_p90=permits_p90 if math.isfinite(permits_p90) else None,
        p90_explained_by_noise=noise.explains(validation.p90_abs_error, permits_p90))


def _within_noise(validation: cd.ValidationSection) -> list:
    """The `error_within_noise` flag of a re-checked validation (noise_rechecked), if it holds."""
    if validation.noise_permits is None:
        return []
    from chipcal.calibrate import flags as gap

    values = {k: v for k, v in (("round_noise", validation.noise_rel), ("median_ci", validation.median_ci_rel))
              if v is not None}
    flag = gap.error_within_noise(validation.median_abs_error, validation.noise_permits, values)
    return [flag] if flag else []


def _peak(row: cd.PeakRow, chip) -> cd.PeakRow:
    """A recorded peak against today's chip: its physics and spec peaks and the fractions."""
    physics = None if row.support == "emulated" else chip.peak_flop_per_s(row.precision)
    spec = chip.stated_peak_flop_per_s.get(row.precision)
    measured = row.measured_flop_per_s
    return dataclasses.replace(row, physics_flop_per_s=physics, spec_flop_per_s=spec,
                               fraction_of_physics=measured / physics if measured and physics else None,
                               fraction_of_spec=measured / spec if measured and spec else None)


def refit_power(doc: CalibrationDocument, chip):
    """The power section fitted again from `doc`'s recorded holds, or a SCHEMA_1 run's power curve,
    with today's code (calibrate.power_fit): (power section, energy fit or None, flags)."""
    from chipcal.calibrate.power_fit import power_section

    return power_section(doc.power.source, doc.power.available, doc.power.reason, doc.observations.holds,
                         doc.observations.power, chip, doc.fingerprint, doc.precision)
