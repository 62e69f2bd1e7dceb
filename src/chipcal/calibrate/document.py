"""The calibration document: what `chipcal calibrate` writes to calibration.json, as typed records.

`CalibrationDocument` is built section by section by calibrate.run and read by the report, the
CLI summary and the refit; calibrate.store reads and writes it (`to_dict`/`from_dict`,
calibrate.records). Prediction needs only `ParametersDocument`, the part a hand-written file
may hold alone (`{"schema", "parameters", "chip"?}`); it hands the model a CalibrationParams.

Schema: SCHEMA. Sections added to it later (`skipped`,
`dispatch`, `first_touch`, `layout`, `throttle_note`, `crossval`, `rerun`, `threads`, `refit`, `phases`, the chains, a peak's `support`, a fit's
`unconstrained`, the validation's noise and model count) have defaults, so older files still
load. A change that old files cannot meet by a default gets a new tag and a migration function
from the old one: `upgrade` reads SCHEMA_1 files (before 2026-11-26), whose power section held
one energy per FLOP fitted over every precision's rows (the fp32 CUDA-core GEMMs set it); /2
holds one per precision at its sustained point (`PrecisionEnergy`), and the figures of the old
fit are dropped on reading (UPGRADE_1_DROPS). Their raw power rows stay, and
calibrate.refit.refit_power fits them again.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from pathlib import Path

from chipcal.calibrate.flags import Flag
from chipcal.calibrate.host_records import (
    DispatchSection,
    FirstTouchSection,
    GemvSection,
    LayoutSection,
    ThreadsSection,
)
from chipcal.calibrate.phases import PhaseTime
from chipcal.calibrate.power_records import HoldRow, PowerRow, PowerSection
from chipcal.calibrate.records import LAST, OMIT_NONE, Record, record
from chipcal.calibrate.selfcheck import CrossValSection
from chipcal.measure.device import Device
from chipcal.measure.node import Node
from chipcal.measure.system import Fingerprint
from chipcal.model.local import LOCAL_CHIP_NAME
from chipcal.model.mapping.params import RUNTIMES, CalibrationError, CalibrationParams, FamilyParams

SCHEMA_1 = "chipcal.calibration/1"
SCHEMA = "chipcal.calibration/2"
READABLE_SCHEMAS = (SCHEMA_1, SCHEMA)
# the /1 power section's fields /2 no longer has: the one energy fit over all precisions
UPGRADE_1_DROPS = ("j_per_flop", "physics_j_per_flop", "sustain_note", "sustain")


def upgrade(data: object) -> object:
    """A parsed document in the current schema's shape: a SCHEMA_1 document's power section
    without the figures of its all-precision fit (UPGRADE_1_DROPS), tagged SCHEMA. Anything else
    is returned as it is (the typed reading then judges it)."""
    if not isinstance(data, dict) or data.get("schema") != SCHEMA_1:
        return data
    power = data.get("power")
    if isinstance(power, dict):
        power = {k: v for k, v in power.items() if k not in UPGRADE_1_DROPS}
    return {**data, "schema": SCHEMA, "power": power}



@record
class ChipSection(Record):
    """The chip model the run calibrated: registry match or the locally built chip."""

    name: str
    display_name: str
    kind: str
    origin: str                  # how the chip was chosen
    process_nm: float | None
    tdp_w: float | None
    physics_peak_flop_per_s: dict[str, float | None]
    spec_peak_flop_per_s: dict[str, float | None]
    memory_bandwidth_bytes_per_s: float | None     # the DRAM bandwidth bandwidth_efficiency is relative to
    memory_source: str
    assumed_memory_bandwidth_bytes_per_s: float | None   # before the bandwidth probe replaced it
    l3_bytes: int | None
    microarch_source: str | None


@record
class PeakRow(Record):
    """One precision's GEMM peak: measured, physics and spec, or why it was not measured."""

    precision: str
    support: str = "native"      # native, emulated or unsupported
    measured_flop_per_s: float | None
    physics_flop_per_s: float | None
    fraction_of_physics: float | None
    spec_flop_per_s: float | None
    fraction_of_spec: float | None
    best_shape: tuple[int, ...] | None
    n: int
    cv: float | None
    note: str | None = field(default=None, metadata=OMIT_NONE)          # why emulated
    unsupported: str | None = field(default=None, metadata=OMIT_NONE)   # why not measured
    cached: bool | None = field(default=None, metadata=OMIT_NONE)       # True: read from the measurement cache


@record
class BandwidthSection(Record):
    measured_bytes_per_s: float | None
    spec_bytes_per_s: float | None
    onchip_bytes_per_s: float | None = None
    fraction: float | None
    spec_source: str
    knee_bytes: dict[str, int | None]
    sustained_bytes_per_s: dict[str, float | None]


@record
class Timed(Record):
    """A timing distribution's summary (measure.timing.Measurement), after the row's own fields."""

    median_s: float | None = field(metadata=LAST)
    iqr_s: float | None = field(metadata=LAST)
    ci_low_s: float | None = field(metadata=LAST)
    ci_high_s: float | None = field(metadata=LAST)
    n: int = field(metadata=LAST)
    cv: float | None = field(metadata=LAST)
    unstable: bool = field(metadata=LAST)
    method: str = field(metadata=LAST)
    # the mean beside the median, with its CI, and the shape where the two disagree
    # (measure.timing.distribution_shape); absent in files written before they were recorded
    mean_s: float | None = field(default=None, metadata=LAST | OMIT_NONE)
    mean_ci_low_s: float | None = field(default=None, metadata=LAST | OMIT_NONE)
    mean_ci_high_s: float | None = field(default=None, metadata=LAST | OMIT_NONE)
    distribution: str | None = field(default=None, metadata=LAST | OMIT_NONE)


def timing(m) -> dict:
    """The Timed fields of a measure.timing.Measurement, for a row's constructor."""
    return {"median_s": m.median_s, "iqr_s": m.iqr_s, "ci_low_s": m.ci_low_s, "ci_high_s": m.ci_high_s,
            "n": m.n, "cv": m.cv, "unstable": m.unstable, "method": m.method, "mean_s": m.mean_s,
            "mean_ci_low_s": m.mean_ci_low_s, "mean_ci_high_s": m.mean_ci_high_s,
            "distribution": m.distribution or None}


@record
class GemmRow(Timed):
    """One GEMM shape of the sweep. Its `n` is the timing's sample count: the shape's n has never
    been recorded (run.py wrote it under the key the timing's count then replaced)."""

    precision: str
    m: int
    k: int
    flop: float
    flop_per_s: float | None


@record
class BandwidthRow(Timed):
    kernel: str
    working_set_bytes: int
    bytes_per_s: float | None


@record
class LayerRow(Timed):
    """A timed micro-layer or chain with its predictions (defaults and calibrated)."""

    case: str
    op_class: str
    flop: float
    bytes: float
    kernels: int
    predicted_default_s: float | None
    predicted_s: float | None


@record
class ModelRow(Timed):
    """A held-out whole model: measured, predicted calibrated and with the defaults."""

    model: str
    batch: int
    flop: float
    bytes: float
    delivered_flop_per_s: float | None
    predicted_s: float | None
    predicted_serial_s: float | None
    predicted_default_s: float | None
    error: float | None
    default_error: float | None


@record
class Observations(Record):
    """Every raw figure the fits and the validation used."""

    gemm: tuple[GemmRow, ...]
    bandwidth: tuple[BandwidthRow, ...]
    layers: tuple[LayerRow, ...]
    chains: tuple[LayerRow, ...] = ()
    models: tuple[ModelRow, ...]
    power: tuple[PowerRow, ...] = ()          # SCHEMA_1 runs
    holds: tuple[HoldRow, ...] = ()


@record
class FitRecord(Record):
    """A calibrate.fits.FitResult as written: undetermined numbers are null."""

    name: str
    model: str
    parameters: dict[str, float]
    stderr: dict[str, float | None]
    residuals: tuple[float | None, ...]
    residual_space: str
    r2: float | None
    r2_note: str | None = field(default=None, metadata=OMIT_NONE)
    n: int
    unconstrained: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, fit) -> FitRecord:
        """From a FitResult of this run (unchecked: NaN stays NaN until calibrate.store writes it)."""
        d = fit.to_dict()
        return cls(**{**d, "residuals": tuple(d["residuals"])})


@record
class ParametersSection(Record):
    """The fitted parameter set and the chip it applies to."""

    chip: str
    runtime: str = "fused"       # the runtime they were fitted under (model.mapping.params.RUNTIMES)
    family_params: FamilyParams


@record
class ValidationSection(Record):
    """Held-out whole models: |relative error| with the calibrated and the default parameters."""

    fit_data: str
    validation_data: str
    n: int
    n_models: int | None = None
    noise_rel: float | None = None        # spread between the interleaved rounds of a model
    # calibrate.noise: rounds timed (planned + added for noise), the pooled medians' CI, the
    # accuracy the noise permits and whether it explains the validation error; absent before
    rounds: int | None = field(default=None, metadata=OMIT_NONE)
    median_ci_rel: float | None = field(default=None, metadata=OMIT_NONE)
    noise_permits: float | None = field(default=None, metadata=OMIT_NONE)
    explained_by_noise: bool | None = field(default=None, metadata=OMIT_NONE)
    # the same at the 90th percentile over the models, checked against the p90 |error|
    noise_permits_p90: float | None = field(default=None, metadata=OMIT_NONE)
    p90_explained_by_noise: bool | None = field(default=None, metadata=OMIT_NONE)
    median_abs_error: float | None
    p90_abs_error: float | None
    max_abs_error: float | None
    default_median_abs_error: float | None
    default_p90_abs_error: float | None
    default_max_abs_error: float | None = None
    # the same fit data held out k-fold (calibrate.crossval); absent before the self-check existed
    crossval_median_abs_error: float | None = field(default=None, metadata=OMIT_NONE)
    crossval_p90_abs_error: float | None = field(default=None, metadata=OMIT_NONE)
    crossval_default_median_abs_error: float | None = field(default=None, metadata=OMIT_NONE)


@record
class RerunSection(Record):
    """The held-out models' timings against the previous run on this machine (calibrate.rerun)."""

    previous_run: str              # the previous run's created_utc
    previous_command: str
    n: int                         # (model, batch) cases timed in both runs
    median_abs_change: float       # median over the cases of |this run's median / the previous one's - 1|
    max_abs_change: float
    same_software: bool            # torch version and allocator setting as in this run


@record
class RefitSection(Record):
    """Set when the document is a refit (`chipcal calibrate --refit`, calibrate.refit): every
    measurement is the source run's, copied unchanged; the fits, parameters, predictions,
    validation and the flags that follow from them were worked out again by the code named."""

    source_run: str                # the run directory re-fitted, as given
    source_created_utc: str
    source_command: str
    code: str                      # chipcal's version and the checkout's `git describe` that re-fitted


@record
class SkippedShape(Record):
    precision: str
    shape: tuple[int, int, int]
    predicted_call_s: float
    limit_s: float


@record
class SkippedModel(Record):
    model: str
    batch: int
    predicted_call_s: float
    limit_s: float


@record
class Skipped(Record):
    """What the time bounds left out: GEMM shapes and validation models."""

    gemm_shapes: tuple[SkippedShape, ...] = ()
    models: tuple[SkippedModel, ...] = ()


@record
class UsersRunKernel(Record):
    """One of the largest kernels of a compiled row's pass, or of the same pass run eager, or of a
    decoder row's output token (measure.kernel_profile): its own device time and calls, per pass."""

    runtime: str                  # "compiled" | "eager" | the decoder's "step" | "generate"
    name: str
    calls: float
    self_s: float


@record
class UsersRunRow(Record):
    """One row of what users run (calibrate.users_run): measured and predicted seconds per call
    (compiled: a forward pass; step and generate: per output token)."""

    kind: str                     # "compiled" | "step" | "generate"
    model: str
    batch: int
    mode: str                     # compiled: "bf16" weights or "autocast"; the decoder: "bf16"
    measured_s: float
    n: int
    cv: float
    predicted_s: float
    error: float                  # predicted / measured - 1
    context: int | None = field(default=None, metadata=OMIT_NONE)
    new_tokens: int | None = field(default=None, metadata=OMIT_NONE)
    compile_s: float | None = field(default=None, metadata=OMIT_NONE)
    # a row profiled (measure.kernel_profile): its kernels' device time per pass (per output token for
    # the decoder); a compiled row at the largest batch run eager too, timed and profiled; the largest
    # kernels of each
    kernels_s: float | None = field(default=None, metadata=OMIT_NONE)
    eager_measured_s: float | None = field(default=None, metadata=OMIT_NONE)
    eager_kernels_s: float | None = field(default=None, metadata=OMIT_NONE)
    kernels: tuple[UsersRunKernel, ...] | None = field(default=None, metadata=OMIT_NONE)


@record
class UsersRunSection(Record):
    """What users run on a GPU, within the phase's wall budget; `skipped` the rows that did not fit."""

    rows: tuple[UsersRunRow, ...]
    skipped: tuple[str, ...]
    budget_s: float


@record
class NonFiniteValues(Record):
    """Written by calibrate.store when a number was NaN/inf: where, and why it is null."""

    reason: str
    paths: tuple[str, ...]


def _calibration_params(parameters: ParametersSection, chip: ChipSection | ChipMemory | None,
                        path: Path, host: dict | None) -> CalibrationParams:
    """What prediction applies, checked: a local-cpu calibration must carry its DRAM bandwidth."""
    name = parameters.chip.strip().lower()
    if not name:
        raise CalibrationError(f"{path}: 'parameters.chip' must name the calibrated chip")
    if parameters.runtime not in RUNTIMES:
        raise CalibrationError(f"{path}: 'parameters.runtime' {parameters.runtime[:40]!r} is not one of "
                               f"{', '.join(RUNTIMES)}")
    bandwidth = chip.memory_bandwidth_bytes_per_s if chip else None
    l3 = chip.l3_bytes if chip else None
    if bandwidth is not None and bandwidth <= 0:
        raise CalibrationError(f"{path}: chip.memory_bandwidth_bytes_per_s must be a finite number > 0, "
                               f"got {bandwidth!r}")
    if l3 is not None and l3 <= 0:
        raise CalibrationError(f"{path}: chip.l3_bytes must be a positive integer, got {l3}")
    if name == LOCAL_CHIP_NAME and bandwidth is None:
        raise CalibrationError(f"{path}: a calibration of {LOCAL_CHIP_NAME} needs chip.memory_bandwidth_bytes_per_s "
                               "(the bandwidth its bandwidth_efficiency was fitted against)")
    return CalibrationParams(chip=name, params=parameters.family_params, path=path, runtime=parameters.runtime,
                             memory_bandwidth_bytes_per_s=bandwidth, l3_bytes=l3, host=host)


@record
class ChipMemory(Record):
    """The chip table as prediction reads it: the memory the parameters were fitted against."""

    memory_bandwidth_bytes_per_s: float | None = None
    l3_bytes: int | None = None


@record
class ParametersDocument(Record):
    """The part of a calibration document prediction needs (a hand-written file may hold only it;
    without a fingerprint nothing says which machine a local-cpu calibration was measured on)."""

    schema: str
    parameters: ParametersSection
    chip: ChipMemory | None = None
    fingerprint: Fingerprint | None = None

    @property
    def models_fp32_mode(self) -> str:
        return self.model_fp32_mode or "strict"

    def calibration_params(self, path: Path) -> CalibrationParams:
        host = self.fingerprint.host_identity if self.fingerprint else None
        return _calibration_params(self.parameters, self.chip, path, host)


@record
class CalibrationDocument(Record):
    """One calibration run: provenance, chip, measurements, fits, parameters, validation, flags."""

    schema: str = SCHEMA
    created_utc: str
    command: str
    machine_slug: str
    device: Device                   # written as its text ("cpu", "cuda:N"), parsed on load
    quick: bool
    precision: str                # of the layer and model timings
    fingerprint: Fingerprint
    environment_summary: dict[str, str]
    chip: ChipSection
    peaks: tuple[PeakRow, ...]
    bandwidth: BandwidthSection
    observations: Observations
    fits: dict[str, FitRecord | None]
    parameters: ParametersSection
    validation: ValidationSection
    power: PowerSection
    flags: tuple[Flag, ...]
    skipped: Skipped = Skipped()
    dispatch: DispatchSection | None = None
    first_touch: FirstTouchSection | None = None
    layout: LayoutSection | None = field(default=None, metadata=OMIT_NONE)
    # None: a GPU run, or one from before the GEMV rate was measured (a GEMV streams at the DRAM rate)
    gemv: GemvSection | None = field(default=None, metadata=OMIT_NONE)
    # a GPU run's compiled and generate rows (calibrate.users_run); None: a CPU run, or an older one
    users_run: UsersRunSection | None = field(default=None, metadata=OMIT_NONE)
    throttle_note: str | None = None
    crossval: CrossValSection | None = field(default=None, metadata=OMIT_NONE)
    rerun: RerunSection | None = field(default=None, metadata=OMIT_NONE)
    threads: ThreadsSection | None = field(default=None, metadata=OMIT_NONE)
    refit: RefitSection | None = field(default=None, metadata=OMIT_NONE)
    plots: tuple[str, ...] = ()          # the plot files written beside it (report.calibration)
    non_finite_values: NonFiniteValues | None = field(default=None, metadata=OMIT_NONE)
    # what fp32 meant in the model timings (model.estimate.numerics.FP32_MODES); None: a run from
    # before it was recorded, which timed them with TF32 off (`models_fp32_mode`)
    model_fp32_mode: str | None = field(default=None, metadata=OMIT_NONE)
    peak_rss_bytes: int | None = field(default=None, metadata=OMIT_NONE)   # measure.resident, at the run's end
    # where the run's time went (calibrate.phases); None: a run from before it was recorded
    phases: tuple[PhaseTime, ...] | None = field(default=None, metadata=OMIT_NONE)
    # the node of a fleet that ran it (measure.node; machine_slug is its class); None: a run from
    # before it was recorded, whose node is named by its directory (fleet.store)
    node: Node | None = field(default=None, metadata=OMIT_NONE)
    smoke: bool | None = field(default=None, metadata=OMIT_NONE)     # True: a --smoke run (calibrate.config)

    @classmethod
    def from_dict(cls, data: object, where: str = "") -> CalibrationDocument:
        """A document read from JSON; a SCHEMA_1 one through `upgrade`."""
        return super().from_dict(upgrade(data), where)

    @property
    def models_fp32_mode(self) -> str:
        return self.model_fp32_mode or "strict"

    def calibration_params(self, path: Path) -> CalibrationParams:
        """The fitted parameters for prediction (`predict --calibration`)."""
        return _calibration_params(self.parameters, self.chip, path, self.fingerprint.host_identity)

    def with_plots(self, names) -> CalibrationDocument:
        return dataclasses.replace(self, plots=tuple(sorted(names)))
