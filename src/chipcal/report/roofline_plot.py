"""`chipcal predict --plot`: one log-log roofline per prediction, min(peak, AI × bandwidth) at the
spec figures, with each subgraph at its arithmetic intensity and attained FLOP/s, coloured by
what bounds it.

The figure is a bare matplotlib Figure (no pyplot state to close); the caller saves it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from chipcal.model.errors import ChipcalError
from chipcal.model.estimate.prediction import Prediction

COLOURS = {"compute": "tab:blue", "memory": "tab:red", "overhead": "tab:gray"}


class NothingToPlot(ChipcalError, ValueError):
    """No prediction has a roofline to draw: every (chip, precision) pair is unsupported."""


def _roofline(ax, p: Prediction) -> None:
    """The spec roofline of `p`'s chip and its subgraphs; those with no DRAM traffic (infinite
    intensity) at the right edge."""
    bw = p.bandwidth_bytes_per_s
    finite = [e.arithmetic_intensity for e in p.subgraphs if math.isfinite(e.arithmetic_intensity) and e.flop]
    hi = max(finite + [p.peak_flop_per_s / bw]) * 4
    lo = min(finite + [0.1]) / 2
    xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
    ax.plot(xs, [min(p.peak_flop_per_s, x * bw) for x in xs], color="black", lw=1.2, label="roofline (spec)")
    for kind, colour in COLOURS.items():
        for on_chip in (False, True):
            pts = [(min(e.arithmetic_intensity, hi), e.attained_flop_per_s) for e in p.subgraphs
                   if e.bottleneck == kind and e.flop > 0 and math.isinf(e.arithmetic_intensity) == on_chip]
            if pts:
                ax.scatter(*zip(*pts, strict=True), s=14, color=colour, alpha=0.8, marker=">" if on_chip else "o",
                           label=f"{kind} (no DRAM traffic, at right edge)" if on_chip else kind)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_title(f"{p.chip} ({p.precision}, b{p.batch})", fontsize=9)
    ax.set_xlabel("FLOP per DRAM byte", fontsize=8)
    ax.set_ylabel("FLOP/s", fontsize=8)
    ax.tick_params(labelsize=7)
    ax.legend(fontsize=6, loc="lower right")


def roofline_figure(preds: Sequence[Prediction]):
    """A grid of rooflines, one per supported prediction (NothingToPlot when there is none)."""
    from matplotlib.figure import Figure

    shown = [p for p in preds if p.supported]
    if not shown:
        raise NothingToPlot("nothing to plot: no supported (chip, precision) pair")
    cols = math.ceil(math.sqrt(len(shown)))
    rows = math.ceil(len(shown) / cols)
    fig = Figure(figsize=(4.2 * cols, 3.4 * rows))
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, p in zip(axes.flat, shown, strict=False):
        _roofline(ax, p)
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    fig.suptitle(f"{', '.join(sorted({p.model for p in shown}))}: subgraphs on each chip's roofline")
    fig.tight_layout()
    return fig
