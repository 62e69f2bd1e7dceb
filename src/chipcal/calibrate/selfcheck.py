"""The self-check's records, as the calibration document keeps them (calibrate.crossval runs it).

Kept apart from the fitting code so that reading a calibration (predict, report) does not load
scipy: a held-out micro-benchmark, the per-class verdict on whether the fitted values of a class
beat its defaults, and the section that gathers them.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from chipcal.calibrate.accuracy import Checked
from chipcal.calibrate.records import OMIT_NONE, Record

REVERT_MARGIN = 0.05     # |error| points the defaults must win by: the fit's per-layer
                         # uncertainty floor (layer_fits.MODEL_SIGMA_FLOOR), so a tie is no verdict
REVERT_MIN_LAYERS = 3


@dataclass(frozen=True)
class HeldOut(Checked, Record):
    """One micro-benchmark predicted by a fit that did not see it."""

    kind: str                     # layer | chain
    case: str
    op_class: str
    fold: int
    measured_s: float
    predicted_s: float            # the fold's calibrated parameters
    predicted_default_s: float    # the family defaults


@dataclass(frozen=True)
class ClassVerdict(Record):
    """Held-out layers that run one op class: |error| with the fold's fitted parameters, and
    with the same parameters but this class's efficiency and overhead at their defaults; the
    median over the layers, and the mean weighted by each layer's measured time, which decides."""

    op_class: str
    n: int                      # held-out layers that run the class
    own_layers: int             # micro-layers of the suite that are of this class
    median_abs_error: float
    reverted_median_abs_error: float
    # Σ measured × |error| / Σ measured; None in documents written before 2026-11-25 (the median decided)
    weighted_abs_error: float | None = field(default=None, metadata=OMIT_NONE)
    reverted_weighted_abs_error: float | None = field(default=None, metadata=OMIT_NONE)

    @property
    def keeps_defaults(self) -> bool:
        """The class's fitted values predict its held-out layers clearly worse than its defaults:
        by more than REVERT_MARGIN in time-weighted mean |error|, for a class with at least
        REVERT_MIN_LAYERS micro-layers of its own. Weighted by time because a network's latency
        is the sum of its layers' times: by the median, the 1x1 convolutions with 16-24 input or
        output channels (0.1-0.4 ms at batch 1, 27-46% off either way) outvoted the bottleneck
        ones, the class went back to its prior and ResNeXt-50 came out 62-74% too slow
        (docs/findings/2026-11-25-self-check-time-weighted.md).
        With fewer own layers, each fold fits the class's efficiency and overhead on one layer or
        none: the fold's fit is weaker than the full fit, and the comparison would judge the fold,
        not the calibration (the quick suite's 2-layer classes)."""
        if self.own_layers < REVERT_MIN_LAYERS:
            return False
        if self.weighted_abs_error is None or self.reverted_weighted_abs_error is None:
            return self.reverted_median_abs_error < self.median_abs_error - REVERT_MARGIN
        return self.reverted_weighted_abs_error < self.weighted_abs_error - REVERT_MARGIN


@dataclass(frozen=True, kw_only=True)
class CrossValSection(Record):
    """The self-check as the calibration document records it (calibrate.document)."""

    folds: int
    median_abs_error: float | None
    p90_abs_error: float | None
    default_median_abs_error: float | None
    default_p90_abs_error: float | None
    classes_keeping_defaults: tuple[str, ...]
    classes: tuple[ClassVerdict, ...]
    held_out: tuple[HeldOut, ...]
