"""Fit a calibration again from the raw observations a calibration document recorded.

The document keeps every timed micro-layer and chain (median, IQR, samples) and every held-out
model timing; this module rebuilds the layer observations (each case characterized again, no
timing) and runs the same fits as the calibration run, so a document from another machine can be
re-fitted with today's model and fit code and its recorded whole-model timings predicted. The
tests use it on recorded runs of two different CPUs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from chipcal.calibrate.accuracy import Checked, CheckedSet
from chipcal.calibrate.crossval import CrossValidation, folds
from chipcal.calibrate.document import CalibrationDocument, LayerRow
from chipcal.calibrate.layer_fits import as_timed, gemm_informed, host_in_overheads
from chipcal.calibrate.micro import MicroFit, fit_micro
from chipcal.measure.device import device_kind
from chipcal.measure.models import MODEL_FP32_MODE
from chipcal.measure.timing import Measurement


@dataclass(frozen=True)
class ModelCheck(Checked):
    model: str
    batch: int
    measured_s: float
    predicted_s: float
    predicted_default_s: float


@dataclass(frozen=True)
class Refit(CheckedSet):
    fit: MicroFit                    # the layer fit, its self-check and the switch fit
    models: tuple[ModelCheck, ...]

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


def _observations(rows: Sequence[LayerRow], cases) -> list:
    from chipcal.measure.layers import LayerObservation
    from chipcal.model.workload import characterize

    by_label = {c.label: c for c in cases}
    out = []
    for row in rows:
        case = by_label[row.case]
        module, inputs = case.build()
        workload = characterize(module, inputs, model_name=case.label, fuse=False)
        out.append(LayerObservation(case.label, case.op_class, workload, _measurement(row)))
    return out


def recorded_bandwidth(doc: CalibrationDocument):
    """The run's bandwidth probe read again from its recorded points with today's code (DRAM
    figure, cache knee: measure.bandwidth), as a measure.bandwidth.Bandwidth."""
    from chipcal.measure.bandwidth import KERNELS, BandwidthPoint, bandwidth_from_points

    points = [BandwidthPoint(r.kernel, r.working_set_bytes // KERNELS[r.kernel], r.working_set_bytes,
                             r.working_set_bytes, _measurement(r), r.bytes_per_s)
              for r in doc.observations.bandwidth]
    return bandwidth_from_points(doc.device, doc.machine_slug, points, True, [], _os_llc(doc), None)


def _os_llc(doc: CalibrationDocument) -> int | None:
    """The last-level cache the OS reported to the run (CPU runs only), as calibrate.run uses it."""
    return doc.fingerprint.l3_bytes if device_kind(doc.device) == "cpu" else None


def refit(doc: CalibrationDocument, chip) -> Refit:
    """Fit the layer and switch parameters of `chip` from `doc`'s recorded observations (the
    calibration run's sequence, calibrate.micro) and predict its recorded held-out models (eager,
    as they were timed). The bandwidth figures come from the recorded probe points
    (`recorded_bandwidth`); a local `chip` should carry the same (measure.bandwidth.local_overrides)."""
    from chipcal.calibrate.run import onchip_bandwidth
    from chipcal.measure.layers import default_cases, default_chains
    from chipcal.model.mapping.params import default_params
    from chipcal.model.workload import characterize_model

    precision = doc.precision
    defaults = default_params(chip.kind)
    prior = gemm_informed(defaults, doc.fits.get(f"gemm_efficiency_{precision}"))
    model_bw = chip.memory.bandwidth_bytes_per_s
    bw = recorded_bandwidth(doc)
    onchip = onchip_bandwidth(bw, _os_llc(doc))
    base = dataclasses.replace(
        prior, bandwidth_efficiency=bw.memory_bytes_per_s / model_bw,
        onchip_bandwidth_ratio=onchip / model_bw if onchip else defaults.onchip_bandwidth_ratio, source="refit")
    base = doc.first_touch.charged_in(base) if doc.first_touch else base
    base = doc.layout.charged_in(base) if doc.layout else base
    layers = _observations(doc.observations.layers, default_cases(device_kind(doc.device)))
    chains = _observations(doc.observations.chains, default_chains())
    base, floor = host_in_overheads(base, doc.device, doc.dispatch.per_op_s if doc.dispatch else None)
    fit = fit_micro(layers, chains, chip, precision, base, defaults, folds(doc.quick), floor)
    checks = []
    for row in doc.observations.models:
        workload = characterize_model(row.model, batch=row.batch, fuse=False)
        # models were timed by measure.models (MODEL_FP32_MODE), the micro-layers in PyTorch's defaults
        checks.append(ModelCheck(row.model, row.batch, row.median_s,
                                 as_timed(workload, chip, precision, fit.params, MODEL_FP32_MODE).latency_s,
                                 as_timed(workload, chip, precision, defaults, MODEL_FP32_MODE).latency_s))
    return Refit(fit, tuple(checks))


def refit_power(doc: CalibrationDocument, chip):
    """The power section fitted again from `doc`'s recorded holds, or a SCHEMA_1 run's power curve,
    with today's code (calibrate.power_fit): (power section, energy fit or None, flags)."""
    from chipcal.calibrate.power_fit import power_section

    return power_section(doc.power.source, doc.power.available, doc.power.reason, doc.observations.holds,
                         doc.observations.power, chip, doc.fingerprint, doc.precision)
