"""The fleet report's plots: per class of nodes, each figure's distribution over the nodes as the
deviation of each node from the class median, one row per figure, outliers marked and named.
One picture per class shows which figures spread and which node lies off."""

from __future__ import annotations

import io

import numpy as np

from chipcal.fleet import outliers as judge
from chipcal.fleet.report import FleetReport
from chipcal.report.plots import compact, new_figure, place_labels, save_png


def _classes(report: FleetReport) -> dict[tuple[str, str, str], list]:
    out: dict[tuple[str, str, str], list] = {}
    for row in report.nodes:
        out.setdefault(judge.class_key(row.latest), []).append(row)
    return out


def plot_name(key: tuple[str, str, str]) -> str:
    machine, device, mode = key
    return f"fleet-{machine}-{device.replace(':', '')}-{mode}.png"


def plot_names(report: FleetReport) -> list[str]:
    return [plot_name(k) for k in _classes(report)]


def draw_class(key: tuple[str, str, str], rows: list, spreads: list[judge.Spread]):
    """Each figure's nodes as dots at 100 × (value / class median - 1); outliers red and named."""
    medians = {s.figure: s.median for s in spreads if (s.machine, s.device, s.mode) == key and s.median}
    names = list(medians)
    fig, ax = new_figure((8.0, 0.45 * len(names) + 1.6))
    rng = np.random.default_rng(0)            # a fixed jitter: the same store draws the same picture
    labelled, labels = [], []
    for y, name in enumerate(names):
        for row in rows:
            f = next((f for f in row.latest.figures if f.name == name), None)
            if f is None:
                continue
            x, yj = 100 * (f.value / medians[name] - 1), y + rng.uniform(-0.15, 0.15)
            flagged = any(o.figure == name for o in row.outliers)
            ax.plot(x, yj, "o", color="tab:red" if flagged else "tab:blue", ms=6 if flagged else 4, alpha=0.8)
            if flagged:
                labelled.append((x, yj))
                labels.append(row.node)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_yticks(range(len(names)), names, fontsize=8)
    ax.set_ylim(-0.6, len(names) - 0.4)
    ax.set_xlabel("deviation from the class median (%)")
    ax.set_title(f"{key[0]} ({key[1]}, {key[2]}): {len(rows)} nodes", fontsize=9)
    ax.grid(axis="x", alpha=0.3)
    if labelled:
        place_labels(ax, labelled, labels)
    return fig


def png_bytes(report: FleetReport) -> dict[str, bytes]:
    """{file name: compact PNG bytes} of each class's plot, for embedding."""
    out = {}
    for key, rows in _classes(report).items():
        buffer = io.BytesIO()
        save_png(draw_class(key, rows, list(report.spreads)), buffer)
        out[plot_name(key)] = compact(buffer.getvalue())
    return out
