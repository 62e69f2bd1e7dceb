"""The calibration's self-check: k-fold cross-validation of the micro-benchmark fits.

The layer fit is run again k times, each time without one fold of the micro-layers; the held-out
layers are predicted with that fold's parameters and with the family defaults. The switch fit is
checked the same way, leaving one chain out at a time (with the layer parameters of the full
fit). Per op class, the held-out layers that run the class are also predicted with the fold's
parameters but that class's efficiency and overhead put back to their defaults: where that
predicts them better, the fitted values of the class spoil predictions and the class keeps its
defaults (`keep_defaults`). The cross-validated error is reported next to the whole-model error:
it is the accuracy the fit has on data it did not see, measured before any model is looked at.

Folds are dealt round-robin within each op class (cases sorted by label), so every fold holds a
mix of classes and no class loses all its layers at once unless it has only one; such a class is
predicted from the prior alone when held out, which the comparison shows as a tie.
"""

from __future__ import annotations

import dataclasses
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from chipcal.calibrate.accuracy import CheckedSet, abs_quantile
from chipcal.calibrate.layer_fits import fit_layer_params, fit_network_costs, timed_latency_s
from chipcal.calibrate.selfcheck import ClassVerdict, CrossValSection, HeldOut


def folds(quick: bool, smoke: bool = False) -> int:
    """Folds of the layer cross-validation: 4 for the quick suite's 16 layers, 5 for the full 37
    (each fold fits on 75-80 % of the layers; the quick run's time limit bounds the count); 3 in
    --smoke, whose figures are a check that the run works, not a verdict."""
    return 3 if smoke else 4 if quick else 5


@dataclass(frozen=True)
class ClassAblation:
    """One held-out layer predicted with one class of the fold's parameters put back to defaults."""

    case: str
    op_class: str
    error: float            # the fold's parameters
    reverted_error: float   # the same with op_class at its defaults
    measured_s: float       # the layer's measured median: its weight in the verdict


@dataclass(frozen=True)
class CrossValidation(CheckedSet):
    folds: int
    layers: tuple[HeldOut, ...]
    chains: tuple[HeldOut, ...]
    ablations: tuple[ClassAblation, ...]

    @property
    def held_out(self) -> tuple[HeldOut, ...]:
        return self.layers + self.chains

    @property
    def checks(self) -> tuple[HeldOut, ...]:
        return self.held_out

    def verdicts(self) -> tuple[ClassVerdict, ...]:
        by_class: dict[str, list[ClassAblation]] = defaultdict(list)
        for a in self.ablations:
            by_class[a.op_class].append(a)
        own = {c: sum(1 for h in self.layers if h.op_class == c) for c in by_class}
        return tuple(ClassVerdict(c, len(abl), own[c], abs_quantile((a.error for a in abl), 50),
                                  abs_quantile((a.reverted_error for a in abl), 50),
                                  _time_weighted(abl, [a.error for a in abl]),
                                  _time_weighted(abl, [a.reverted_error for a in abl]))
                     for c, abl in sorted(by_class.items()))

    @property
    def classes_keeping_defaults(self) -> tuple[str, ...]:
        return tuple(v.op_class for v in self.verdicts() if v.keeps_defaults)

    def section(self) -> CrossValSection:
        """What the calibration document keeps of it."""
        return CrossValSection(
            folds=self.folds, median_abs_error=self.median_abs_error, p90_abs_error=self.p90_abs_error,
            default_median_abs_error=self.default_median_abs_error,
            default_p90_abs_error=self.default_p90_abs_error,
            classes_keeping_defaults=self.classes_keeping_defaults, classes=self.verdicts(), held_out=self.held_out)


def _time_weighted(ablations: Sequence[ClassAblation], errors: Sequence[float]) -> float:
    """Σ measured_s × |error| / Σ measured_s: the relative error of the layers' summed time if
    no two errors cancelled (an upper bound on what a network of them would see)."""
    weights = [a.measured_s for a in ablations]
    return sum(w * abs(e) for w, e in zip(weights, errors, strict=True)) / sum(weights)


def assign_folds(cases: Sequence[tuple[str, str]], k: int) -> list[int]:
    """Fold of each (label, op_class): round-robin within each class, labels sorted."""
    folds = [0] * len(cases)
    by_class: dict[str, list[int]] = defaultdict(list)
    for i, (_, op_class) in enumerate(cases):
        by_class[op_class].append(i)
    start = 0
    for op_class in sorted(by_class):
        for j, i in enumerate(sorted(by_class[op_class], key=lambda i: cases[i][0])):
            folds[i] = (start + j) % k
        start += len(by_class[op_class])     # staggered, so one-layer classes spread over the folds
    return folds


def cross_validate(layers: Sequence, chains: Sequence, chip, precision: str, base, defaults,
                   params, k: int, on_fold: Callable[[int], None] | None = None,
                   overhead_floor_s: float = 0.0, prior=None, predicted=None) -> CrossValidation:
    """k-fold cross-validation of the layer fit and leave-one-out of the switch fit.

    `layers` and `chains` are LayerObservations; `base` is what the layer fit starts from (the
    measured bandwidth, first touch, ...), `defaults` the family defaults (what the calibration
    is compared with), `prior` what a class's fitted values are put back to in the ablation (the
    fit's prior centre, layer_fits.gemm_informed; the defaults when None), `params` the full
    fit's result (its layer parameters serve the chain check). `on_fold(f)` is called after each fold;
    `overhead_floor_s` and `predicted` (the full fit's model.memo.Recent of layer latencies) go to the layer fit.
    """
    def latency(o, p) -> float:
        return timed_latency_s(o.workload, chip, precision, p)

    folds = assign_folds([(o.case, o.op_class) for o in layers], k)
    held: list[HeldOut] = []
    ablations: list[ClassAblation] = []
    for f in range(k):
        train = [o for o, g in zip(layers, folds, strict=True) if g != f]
        test = [o for o, g in zip(layers, folds, strict=True) if g == f]
        if not test:
            continue
        fold_params, _ = fit_layer_params(train, chip, precision, base, overhead_floor_s, predicted)
        for o in test:
            m = o.measurement.median_s
            fitted = latency(o, fold_params)
            held.append(HeldOut("layer", o.case, o.op_class, f, m, fitted, latency(o, defaults)))
            for c in sorted({sg.op_class for sg in o.workload.subgraphs if sg.flop > 0 or sg.bytes_written > 0}):
                reverted = latency(o, keep_defaults(fold_params, prior or defaults, [c]))
                ablations.append(ClassAblation(o.case, c, fitted / m - 1, reverted / m - 1, m))
        if on_fold:
            on_fold(f)
    chain_held: list[HeldOut] = []
    if len(chains) >= 2:
        for i, c in enumerate(chains):     # fit_network_costs starts from the kernels as if alone itself
            fold_params, _ = fit_network_costs([o for j, o in enumerate(chains) if j != i], chip, precision, params)
            chain_held.append(HeldOut("chain", c.case, c.op_class, i, c.measurement.median_s,
                                      latency(c, fold_params), latency(c, defaults)))
    return CrossValidation(k, tuple(held), tuple(chain_held), tuple(ablations))


def keep_defaults(params, defaults, classes: Sequence[str]):
    """`params` with the efficiency and overhead of `classes` put back to `defaults`."""
    if not classes:
        return params
    eff, over = dict(params.efficiency), dict(params.overhead_s)
    tensor = dict(params.tensor_efficiency) if params.tensor_efficiency is not None else None
    for c in classes:
        eff[c], over[c] = defaults.efficiency[c], defaults.overhead_s[c]
        if tensor is not None:
            tensor[c] = defaults.class_efficiency(c, "tensor_core")
    return dataclasses.replace(params, efficiency=eff, overhead_s=over, tensor_efficiency=tensor)
