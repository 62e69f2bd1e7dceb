"""The fits on the micro-benchmarks, in the calibration's order: the layer fit, its self-check
(calibrate.crossval), the classes whose fitted values spoil held-out layers put back to their
prior, the switch fit on the chains. One sequence, shared by the calibration run and by the refit
of a recorded run, so that a refit tests what the run does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chipcal.calibrate.crossval import CrossValidation, cross_validate, keep_defaults
from chipcal.calibrate.fits import FitResult
from chipcal.calibrate.layer_fits import PREDICTED_KEPT, fit_layer_params, fit_network_costs
from chipcal.model.chip import Chip
from chipcal.model.memo import Recent


@dataclass(frozen=True)
class MicroFit:
    """One pass of the micro-benchmark fits."""

    params: object                  # FamilyParams: layer fit, classes reverted, switch fit
    layer_fit: FitResult
    crossval: CrossValidation
    switch_fit: FitResult


def fit_micro(layers: Sequence, chains: Sequence, chip: Chip, precision: str, base, defaults, k: int,
              overhead_floor_s: float = 0.0, on_fold: Callable[[int], None] | None = None) -> MicroFit:
    """Layer fit from `base`, its k-fold self-check against `defaults`, the classes whose fitted
    values spoil held-out layers put back to `base` (the prior the fit is centred on), then the
    switch fit on the chains."""
    predicted = Recent(PREDICTED_KEPT)      # the folds' grids retrace much of the full fit's
    params, layer_fit = fit_layer_params(layers, chip, precision, base, overhead_floor_s, predicted)
    crossval = cross_validate(layers, chains, chip, precision, base, defaults, params, k, on_fold=on_fold,
                              overhead_floor_s=overhead_floor_s, prior=base, predicted=predicted)
    params = keep_defaults(params, base, crossval.classes_keeping_defaults)
    params, switch_fit = fit_network_costs(chains, chip, precision, params)
    return MicroFit(params, layer_fit, crossval, switch_fit)
