"""The physics TDP charts: `estimate_tdp --plot` (estimated TDP against the number of MAC units,
one line per swept value) and `compare_tdp_registry --plot` (all-in GEMM power at the spec clock
against each chip's spec TDP).

The figures are bare matplotlib Figures (no pyplot state to close); the caller saves them.
"""

from __future__ import annotations

from collections.abc import Sequence

from chipcal.model.tdp import VERDICT_UNCERTAIN, VERDICT_UNSUSTAINABLE, estimate_tdp

GHZ = 1e9


def tdp_vs_alus_figure(swept: str, values: Sequence, base: dict):
    """Log-log estimated TDP over 100 to 1e6 MAC units, one line per value of parameter `swept`;
    `base`: estimate_tdp's other arguments."""
    import numpy as np
    from matplotlib.figure import Figure

    alus = np.logspace(2, 6, 25).astype(int)
    fig = Figure(figsize=(7, 5))
    ax = fig.subplots()
    for v in values:
        tdp = [estimate_tdp(**{**base, swept: v, "alus": int(a)}).tdp_w for a in alus]
        ax.loglog(alus, tdp, label=f"{swept}={v}")
    ax.set_xlabel("MAC units (ALUs)")
    ax.set_ylabel("estimated TDP (W)")
    ax.set_title(f"Physics TDP at {base['frequency_hz'] / GHZ:g} GHz")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def tdp_vs_spec_figure(records: Sequence[dict]):
    """Each chip's power at the spec clock with its band against its spec TDP (compare_tdp_registry
    records; unsupported ones left out), coloured by verdict, hypothetical designs as crosses."""
    from matplotlib.figure import Figure

    rows = [r for r in records if r["power_at_spec_w"] is not None]
    fig = Figure(figsize=(8, 6))
    ax = fig.subplots()
    for r in rows:
        colour = {VERDICT_UNSUSTAINABLE: "tab:red", VERDICT_UNCERTAIN: "tab:orange"}.get(r["verdict"], "tab:green")
        y = r["power_at_spec_w"]
        ax.errorbar(r["spec_tdp_w"], y, yerr=[[y - r["power_at_spec_low_w"]], [r["power_at_spec_high_w"] - y]],
                    color=colour, fmt="x" if r["hypothetical"] else "o", elinewidth=0.6, capsize=2)
        ax.annotate(r["hardware"], (r["spec_tdp_w"], y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    lo = min(min(r["spec_tdp_w"], r["power_at_spec_low_w"]) for r in rows) / 1.5
    hi = max(max(r["spec_tdp_w"], r["power_at_spec_high_w"]) for r in rows) * 1.5
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="estimate = spec")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("spec TDP (W)")
    ax.set_ylabel("all-in GEMM power at the spec clock (W), with band")
    ax.set_title("Power at spec peak vs TDP (red: exceeds even optimistic; orange: uncertain; x: hypothetical)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    return fig
