"""`chipcal validate --plot`: every corpus row's predicted latency against the published one; the
reference lines and the log-log axes the MLPerf plot (mlperf_plot.py) shares.

The figure is a bare matplotlib Figure (no pyplot state to close); the caller saves it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from chipcal.validate.corpus import Comparison, CorpusError


class NothingPredicted(CorpusError):
    """No row of the comparison has a prediction to plot."""


def reference_lines(ax, lo: float, hi: float, label: str) -> None:
    """The line predicted = measured (`label`) and the ±20 % and ±50 % bands around it, from lo to hi."""
    ax.plot([lo, hi], [lo, hi], color="black", lw=1, label=label)
    for f, style in ((0.2, ":"), (0.5, "--")):
        for k in (1 + f, 1 - f):
            ax.plot([lo, hi], [lo * k, hi * k], color="gray", lw=0.8, ls=style,
                    label=f"±{f:.0%}" if k > 1 else None)


def log_log(fig, ax, lo: float, hi: float, xlabel: str, ylabel: str, title: str):
    """Both axes logarithmic over the same range, so that the reference lines are diagonals;
    labelled, the legend in the upper left, laid out: the figure, finished."""
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return fig


def predicted_vs_published_figure(comparisons: Sequence[Comparison]):
    """Predicted vs published latency per row, log-log, coloured by runtime, fit rows as circles
    and test rows as squares; ±20 % and ±50 % bands. NothingPredicted when no row has a prediction."""
    from matplotlib.figure import Figure

    shown = [c for c in comparisons if math.isfinite(c.error)]
    if not shown:
        raise NothingPredicted("nothing to plot: no row could be predicted")
    fig = Figure(figsize=(6, 5.5))
    ax = fig.subplots()
    lo = min(min(c.published_latency_s, c.predicted_latency_s) for c in shown) * 1e3 / 2
    hi = max(max(c.published_latency_s, c.predicted_latency_s) for c in shown) * 1e3 * 2
    reference_lines(ax, lo, hi, "predicted = published")
    for runtime in sorted({c.runtime for c in shown}):
        for split, marker in (("fit", "o"), ("test", "s")):
            pts = [(c.published_latency_s * 1e3, c.predicted_latency_s * 1e3) for c in shown
                   if c.runtime == runtime and c.split == split]
            if pts:
                ax.scatter(*zip(*pts, strict=True), s=22, marker=marker, alpha=0.8, label=f"{runtime} ({split})")
    return log_log(fig, ax, lo, hi, "published latency per batch (ms)", "predicted latency per batch (ms)",
                   "chipcal predictions vs published measurements")
