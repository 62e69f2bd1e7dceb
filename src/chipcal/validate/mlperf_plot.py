"""`chipcal validate --mlperf --plot`: each predicted MLPerf Offline row's per-accelerator
throughput against the measured one, log-log, one colour per vendor, one marker per benchmark.

A bare matplotlib Figure (no pyplot state to close); the caller saves it.
"""

from __future__ import annotations

from collections.abc import Sequence

from chipcal.model.registry import Registry
from chipcal.validate.mlperf import MlperfError
from chipcal.validate.mlperf_check import Checked
from chipcal.validate.mlperf_stack import family_of
from chipcal.validate.plot import log_log, reference_lines


def offline_figure(checked: Sequence[Checked], registry: Registry):
    """Predicted vs measured samples/s (an LLM's tokens/s) per accelerator of the Offline rows,
    coloured by the chip's vendor (from `registry`), one marker per benchmark; ±20 % and ±50 %
    bands. Two panels: the physics alone, and with each row's stack efficiency fitted on the
    other accelerators (validate.mlperf_stack). MlperfError when no Offline row was predicted."""
    from matplotlib.figure import Figure

    shown = [c for c in checked if c.row.scenario == "Offline"]
    if not shown:
        raise MlperfError("nothing to plot: no Offline row was predicted")
    vendor = {c.chip: registry.get(c.chip).vendor for c in shown}
    fig = Figure(figsize=(12, 5.5))
    panels = zip(fig.subplots(1, 2), (lambda c: c.predicted, lambda c: c.predicted * c.stack_factor),
                 ("the physics, nothing fitted", "with the stack's efficiency, held out"), strict=True)
    lo = min(min(c.measured, c.predicted, c.predicted * c.stack_factor) for c in shown) / 2
    hi = max(max(c.measured, c.predicted, c.predicted * c.stack_factor) for c in shown) * 2
    colours = {v: f"C{i}" for i, v in enumerate(sorted(set(vendor.values())))}
    markers = dict(zip(sorted({family_of(c.row.benchmark) for c in shown}), "osD^v<>pPX*h", strict=False))
    for ax, predicted, title in panels:
        reference_lines(ax, lo, hi, "predicted = measured")
        for v in sorted(colours):
            for family, marker in markers.items():
                pts = [(c.measured, predicted(c)) for c in shown
                       if vendor[c.chip] == v and family_of(c.row.benchmark) == family]
                if pts:
                    ax.scatter(*zip(*pts, strict=True), s=26, alpha=0.8, color=colours[v], marker=marker,
                               label=f"{v}, {family}")
        log_log(fig, ax, lo, hi, "measured samples/s (LLMs: tokens/s) per accelerator (MLPerf Offline)",
                "predicted samples/s (LLMs: tokens/s) per accelerator", f"chipcal vs MLPerf Inference, Offline: {title}")
    return fig
