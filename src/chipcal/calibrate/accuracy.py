"""Relative prediction errors and their summaries, shared by the calibration's checks.

error = predicted / measured − 1 (+: the prediction is too slow); summaries are quantiles of
|error|: the median and the p90 the reports and the issue's targets quote.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


def relative_error(predicted: float, measured: float) -> float:
    """predicted / measured − 1: + where the prediction is above the measurement."""
    return predicted / measured - 1


class Checked:
    """Mixin of a record with `measured_s`, `predicted_s` (calibrated) and `predicted_default_s`."""

    measured_s: float
    predicted_s: float
    predicted_default_s: float

    @property
    def error(self) -> float:
        return relative_error(self.predicted_s, self.measured_s)

    @property
    def default_error(self) -> float:
        return relative_error(self.predicted_default_s, self.measured_s)


def _abs_error_quantile(q: float, default: bool = False) -> property:
    """A CheckedSet property: the q-th percentile of |error| over its checks, calibrated or with
    the defaults; None when it holds no check."""
    return property(lambda self: abs_quantile(
        ((c.default_error if default else c.error) for c in self.checks), q))


class CheckedSet:
    """Mixin of a result holding `checks` (Checked records): their |error| medians and p90s."""

    median_abs_error = _abs_error_quantile(50)
    p90_abs_error = _abs_error_quantile(90)
    default_median_abs_error = _abs_error_quantile(50, default=True)
    default_p90_abs_error = _abs_error_quantile(90, default=True)

    @property
    def checks(self) -> tuple[Checked, ...]:
        raise NotImplementedError


def abs_quantile(errors: Iterable[float], q: float) -> float | None:
    """The q-th percentile of |error|; None when there is no error to summarise."""
    values = np.abs(np.fromiter(errors, dtype=float))
    return float(np.percentile(values, q)) if values.size else None


def error_summary(errors: list[float], prefix: str = "") -> dict[str, float | None]:
    """Median, p90 and max of |relative error| under `prefix`-ed keys; None when there are none."""
    return {f"{prefix}{k}": abs_quantile(errors, q) for k, q in
            (("median_abs_error", 50), ("p90_abs_error", 90), ("max_abs_error", 100))}
