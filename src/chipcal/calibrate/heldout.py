"""The fit judged on what it did not see: the predictions of timed micro-layers, chains and
held-out models with the calibrated parameters and with the defaults, the validation's error
figures, and the flags a fit earns (a class put back to its prior, a calibration worse than the
defaults). Used by a calibration run (calibrate.run) and by a refit of a recorded one
(calibrate.refit), so both judge a fit the same way."""

from __future__ import annotations

from chipcal.calibrate import document as cd
from chipcal.calibrate import flags as gap
from chipcal.calibrate.accuracy import error_summary
from chipcal.calibrate.layer_fits import as_timed, timed_latency_s


def layer_predictions(workload, chip, precision: str, params, defaults) -> dict:
    """A timed micro-layer's or chain's LayerRow predictions: with the defaults and with `params`."""
    return {"predicted_default_s": timed_latency_s(workload, chip, precision, defaults),
            "predicted_s": timed_latency_s(workload, chip, precision, params)}


def model_predictions(workload, chip, precision: str, params, defaults, measured_s: float,
                      fp32_mode: str) -> dict:
    """A held-out model's ModelRow predictions (calibrated, its serial sum, defaults) and their
    relative errors against the measured median: predicted / measured - 1, in the math mode the
    model was timed in (`fp32_mode`; the micro-layers ran in PyTorch's defaults)."""
    predicted = as_timed(workload, chip, precision, params, fp32_mode)
    default = as_timed(workload, chip, precision, defaults, fp32_mode)
    return {"predicted_s": predicted.latency_s, "predicted_serial_s": predicted.serial_latency_s,
            "predicted_default_s": default.latency_s, "error": predicted.latency_s / measured_s - 1,
            "default_error": default.latency_s / measured_s - 1}


def validation_errors(model_rows, crossval) -> dict:
    """The ValidationSection's error figures: |error| quantiles of the held-out models, calibrated
    and with the defaults, and the self-check's on the held-out micro-benchmarks."""
    return {**error_summary([r.error for r in model_rows], ""),
            **error_summary([r.default_error for r in model_rows], "default_"),
            "crossval_median_abs_error": crossval.median_abs_error,
            "crossval_p90_abs_error": crossval.p90_abs_error,
            "crossval_default_median_abs_error": crossval.default_median_abs_error}


def fit_flags(validation: cd.ValidationSection, crossval) -> list[gap.Flag]:
    """The flags on the fits: op classes put back to their prior by the self-check, and a
    calibration worse than the defaults on the held-out micro-benchmarks or models (it must earn
    its place)."""
    flags = []
    if crossval.classes_keeping_defaults:
        flags.append(gap.Flag(
            "fitted_class_reverted", "info",
            f"op classes {', '.join(crossval.classes_keeping_defaults)}: their fitted efficiency and overhead "
            "predicted held-out micro-layers worse than their prior values (cross-validation); those are kept",
            {"classes": float(len(crossval.classes_keeping_defaults))}))
    if crossval.held_out and crossval.median_abs_error > crossval.default_median_abs_error:
        flags.append(gap.Flag(
            "calibration_worse_than_defaults", "warning",
            f"held-out micro-benchmarks ({crossval.folds}-fold cross-validation): calibrated median |error| "
            f"{crossval.median_abs_error:.1%} > {crossval.default_median_abs_error:.1%} with the defaults",
            {"crossval_median_abs_error": crossval.median_abs_error,
             "crossval_default_median_abs_error": crossval.default_median_abs_error}))
    if validation.n and validation.median_abs_error > validation.default_median_abs_error:
        permits = validation.noise_permits if validation.noise_permits is not None else validation.noise_rel
        flags.append(gap.Flag(
            "calibration_worse_than_defaults", "warning",
            f"held-out models: calibrated median |error| {validation.median_abs_error:.1%} > "
            f"{validation.default_median_abs_error:.1%} with the uncalibrated defaults "
            f"(p90 {validation.p90_abs_error:.1%} vs {validation.default_p90_abs_error:.1%}); "
            f"the timing noise alone permits about {permits:.1%}",
            {"median_abs_error": validation.median_abs_error,
             "default_median_abs_error": validation.default_median_abs_error,
             "noise_rel": permits}))
    return flags
