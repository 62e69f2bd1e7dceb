"""The calibration report's plots, drawn from the document: PNG files beside report.md, PNG bytes
embedded in report.html.

Every axis is labelled with its quantity and unit, the legend sits outside the axes, and named
points (models, power windows) carry their names placed by `place_labels` so that no two labels,
and no label and a named point, overlap.
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from chipcal.calibrate.document import CalibrationDocument
from chipcal.calibrate.fits import saturating

DPI = 110
LABEL_SIZE = 7                   # points
_DIRECTIONS = ((1, 0), (1, 1), (0, 1), (-1, 1), (-1, 0), (-1, -1), (0, -1), (1, -1))
_RADII_PX = (3, 8, 16, 28, 44, 64, 90, 120, 160, 210)
_POINT_PX = 5                    # half the side of the box a named point keeps free


def new_figure(size: tuple[float, float], **subplots):
    """A matplotlib figure and axes (Agg backend: no display needed); `subplots` as for plt.subplots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=size, **subplots)


def _axes(ax, title: str, xlabel: str, ylabel: str, log: str = "", grid: str = "both") -> None:
    """Title, labelled axes (log scale on the axes named in `log`) and grid; limits fixed now so
    that labels are placed against the final scale."""
    for axis in log:
        getattr(ax, f"set_{axis}scale")("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if grid:
        ax.grid(True, which=grid, alpha=0.3)
    ax.autoscale_view()
    ax.set_xlim(ax.get_xlim())
    ax.set_ylim(ax.get_ylim())


def _legend(ax, size: int = 8) -> None:
    """The legend outside the axes, right of them: it covers no point and no label."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=size, loc="upper left", bbox_to_anchor=(1.02, 1.0), borderaxespad=0.0)


def _overlaps(a: tuple[float, float, float, float], b: tuple[float, float, float, float]) -> bool:
    return a[0] < b[2] and b[0] < a[2] and a[1] < b[3] and b[1] < a[3]


def place_labels(ax, points: Sequence[tuple[float, float]], labels: Sequence[str], size: int = LABEL_SIZE) -> list:
    """Name each point without overlaps: each label goes at the nearest of 8 directions × growing
    distances where its box meets no placed label, no named point and stays inside the axes; one
    placed further than a few pixels gets a leader line to its point. Returns the text artists.
    A label that finds no free place inside the axes is not drawn on them but listed under the
    axes (the returned artists include that list)."""
    fig = ax.figure
    renderer = fig.canvas.get_renderer()
    px = ax.transData.transform(np.asarray(points, dtype=float))
    frame = ax.get_window_extent(renderer)
    bounds = (frame.x0, frame.y0, frame.x1, frame.y1)
    taken = [(x - _POINT_PX, y - _POINT_PX, x + _POINT_PX, y + _POINT_PX) for x, y in px]
    texts, unplaced = [], []
    order = sorted(range(len(labels)), key=lambda i: (-px[i][1], px[i][0]))
    for i in order:
        probe = ax.text(0, 0, labels[i], fontsize=size)
        extent = probe.get_window_extent(renderer)
        probe.remove()
        w, h = extent.width + 2, extent.height + 1
        x, y = px[i]
        spot = None
        for r in _RADII_PX:
            for dx, dy in _DIRECTIONS:
                norm = math.hypot(dx, dy)
                cx = x + dx / norm * r + dx * w / 2
                cy = y + dy / norm * r + dy * h / 2
                box = (cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2)
                inside = box[0] >= bounds[0] and box[1] >= bounds[1] and box[2] <= bounds[2] and box[3] <= bounds[3]
                if inside and not any(_overlaps(box, t) for t in taken):
                    spot = (cx, cy, r, box)
                    break
            if spot:
                break
        if spot is None:
            unplaced.append(labels[i])
            continue
        cx, cy, r, box = spot
        taken.append(box)
        scale = 72.0 / fig.dpi
        texts.append(ax.annotate(
            labels[i], points[i], xytext=((cx - x) * scale, (cy - y) * scale), textcoords="offset points",
            ha="center", va="center", fontsize=size,
            arrowprops={"arrowstyle": "-", "lw": 0.5, "color": "0.4", "shrinkA": 0, "shrinkB": 2} if r > 12 else None))
    if unplaced:
        texts.append(ax.text(0.0, -0.14, "not labelled for want of room: " + ", ".join(unplaced),
                             transform=ax.transAxes, fontsize=size, va="top", wrap=True))
    return texts


def draw_gemm_efficiency(doc: CalibrationDocument):
    fig, ax = new_figure((7, 5))
    for p in doc.peaks:
        rows = [g for g in doc.observations.gemm if g.precision == p.precision]
        if not rows or not p.physics_flop_per_s:
            continue
        w = np.array([g.flop for g in rows])
        eff = np.array([g.flop_per_s for g in rows]) / p.physics_flop_per_s
        points = ax.scatter(w, eff, label=f"{p.precision} measured")
        fit = doc.fits.get(f"gemm_efficiency_{p.precision}")
        if fit:
            grid = np.logspace(np.log10(w.min()), np.log10(w.max()), 100)
            r2 = "-" if fit.r2 is None else f"{fit.r2:.3f}"
            ax.plot(grid, saturating(grid, fit.parameters["e_max"], fit.parameters["w_half_flop"]),
                    color=points.get_facecolor()[0], label=f"{p.precision} fit (R²={r2})")
    _axes(ax, "GEMM efficiency vs size", "GEMM work per call (FLOP, 2 per MAC)",
          "achieved / physics peak FLOP/s", "x")
    _legend(ax)
    return fig


def draw_predicted_vs_measured(doc: CalibrationDocument):
    fig, ax = new_figure((7, 6.5))
    models, layers = doc.observations.models, doc.observations.layers
    ax.scatter([r.median_s for r in layers], [r.predicted_s for r in layers], marker=".", color="grey",
               label="micro-layers (fit)")
    ax.scatter([r.median_s for r in models], [r.predicted_s for r in models], color="tab:blue",
               label="models (validation)")
    values = [v for r in models + layers for v in (r.median_s, r.predicted_s) if v]
    lo, hi = min(values) / 2, max(values) * 2
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="predicted = measured")
    ax.fill_between([lo, hi], [lo * 0.75, hi * 0.75], [lo * 1.25, hi * 1.25], color="k", alpha=0.07, label="±25%")
    ax.set_xlim(lo, hi)
    ax.set_ylim(lo, hi)
    _axes(ax, "Calibrated prediction vs measurement", "measured latency (s)", "predicted latency (s)", "xy", grid="")
    named = [r for r in models if r.predicted_s]
    place_labels(ax, [(r.median_s, r.predicted_s) for r in named], [f"{r.model}/{r.batch}" for r in named])
    _legend(ax)
    return fig


def draw_roofline(doc: CalibrationDocument):
    fig, ax = new_figure((8, 5.5))
    bw = doc.bandwidth.measured_bytes_per_s
    intensity = np.logspace(-2, 3, 200)
    for p in doc.peaks:
        for peak, style, label in ((p.measured_flop_per_s, "-", "measured"), (p.physics_flop_per_s, ":", "physics")):
            if peak and bw:
                ax.plot(intensity, np.minimum(peak, bw * intensity), style, label=f"{p.precision} {label} roof")
    layers = [r for r in doc.observations.layers if r.bytes > 0 and r.median_s]
    ax.scatter([r.flop / r.bytes for r in layers], [r.flop / r.median_s for r in layers],
               marker=".", color="grey", label="micro-layers")
    models = [r for r in doc.observations.models if r.bytes > 0 and r.delivered_flop_per_s]
    ax.scatter([r.flop / r.bytes for r in models], [r.delivered_flop_per_s for r in models],
               color="tab:red", label="models (batch after /)")
    title = f"Roofline, measured bandwidth {bw / 1e9:.1f} GB/s" if bw else "Roofline"
    _axes(ax, title, "arithmetic intensity (FLOP/byte, unfused DRAM traffic)", "attained FLOP/s", "xy")
    place_labels(ax, [(r.flop / r.bytes, r.delivered_flop_per_s) for r in models],
                 [f"{r.model}/{r.batch}" for r in models])
    _legend(ax, 7)
    return fig


def draw_power(doc: CalibrationDocument):
    """The holds' power and SM clock over time (a run with holds, calibrate.sustain); an older run:
    its power windows against throughput, each named."""
    if holds := doc.observations.holds:
        fig, (clock_ax, ax) = new_figure((7, 8), nrows=2, sharex=True)
        for h in holds:
            ax.plot(h.sample_t_s, [np.nan if p is None else p for p in h.sample_power_w], label=h.label)
            clock_ax.plot(h.sample_t_s, [np.nan if c is None else c / 1e9 for c in h.sample_sm_clock_hz])
        clock_ax.set_ylabel("SM clock (GHz)")
        clock_ax.set_title("SM clock and power while each kernel is held")
        clock_ax.grid(True, alpha=0.3)
        _axes(ax, "", "time since the hold began (s)", "power (W)", grid="major")
        _legend(ax, 7)
        return fig
    fig, ax = new_figure((7, 5))
    rows = [r for r in doc.observations.power if r.avg_power_w is not None]
    ax.scatter([r.flop_per_s for r in rows], [r.avg_power_w for r in rows])
    _axes(ax, "Power vs throughput", "throughput (FLOP/s)", "average power (W)", grid="major")
    place_labels(ax, [(r.flop_per_s, r.avg_power_w) for r in rows], [r.label for r in rows])
    return fig


def _drawers(doc: CalibrationDocument) -> dict[str, Callable]:
    drawers = {"gemm_efficiency.png": draw_gemm_efficiency, "predicted_vs_measured.png": draw_predicted_vs_measured,
               "roofline.png": draw_roofline}
    if doc.observations.power or doc.observations.holds:
        drawers["power.png"] = draw_power
    return drawers


def save_png(fig, target) -> None:
    import matplotlib.pyplot as plt

    fig.savefig(target, dpi=DPI, bbox_inches="tight", format="png", metadata={"Software": None})
    plt.close(fig)


def plot_writers(doc: CalibrationDocument) -> dict[str, Callable[[Path], None]]:
    """{file name: writer(path)} for the plots this document has data for."""
    return {name: (lambda path, draw=draw: save_png(draw(doc), path)) for name, draw in _drawers(doc).items()}


def compact(png: bytes) -> bytes:
    """A plot's PNG with its colours reduced to a 64-colour palette (Pillow, which matplotlib
    installs): a third of the bytes, no visible change on these line-and-dot plots. For embedding
    in report.html, where base64 adds a third again."""
    from PIL import Image

    out = io.BytesIO()
    Image.open(io.BytesIO(png)).convert("RGB").quantize(colors=64).save(out, format="PNG", optimize=True)
    return out.getvalue()


def png_bytes(doc: CalibrationDocument) -> dict[str, bytes]:
    """{file name: compact PNG bytes} of the same plots, for embedding."""
    out = {}
    for name, draw in _drawers(doc).items():
        buffer = io.BytesIO()
        save_png(draw(doc), buffer)
        out[name] = compact(buffer.getvalue())
    return out
