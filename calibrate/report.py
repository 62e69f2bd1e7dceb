"""Human-readable calibration report (markdown) and its plots, rendered from the document.

Everything here reads the CalibrationDocument only, so a checked-in report can be re-rendered
from its calibration.json (calibrate.store.load) without re-measuring.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from chipcal.calibrate.document import CalibrationDocument, FitRecord, PowerSection
from chipcal.calibrate.fits import UNCONSTRAINED_SE_LOG, saturating
from chipcal.calibrate.selfcheck import REVERT_MARGIN, REVERT_MIN_LAYERS, CrossValSection
from chipcal.measure.bandwidth import DRAM_WINDOW

PLOTS = {
    "gemm_efficiency.png": "GEMM efficiency vs problem size with the fitted saturating curve",
    "predicted_vs_measured.png": "Predicted vs measured latency per validation model",
    "roofline.png": "Local roofline with measured GEMM, layer and model points",
    "power.png": "SM clock and power while each kernel is held (only when a power source exists)",
}


def _si(value: float | None, unit: str, digits: int = 3) -> str:
    if value is None or not np.isfinite(value):
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""),
                           (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"), (1e-12, "p")):
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def _pct(value: float | None) -> str:
    return "-" if value is None or not np.isfinite(value) else f"{100 * value:.1f}%"


def _r2(fit: FitRecord) -> str:
    return "-" if fit.r2 is None else f"{fit.r2:.3f}"


def _status(fit: FitRecord, name: str) -> str:
    """How far a fitted value can be trusted: the fit's reason where it kept a prior, and a warning
    where a parameter without a prior came out with a 1-sigma at least its value (beyond a factor e
    in log space, the fits' UNCONSTRAINED_SE_LOG): the data allow it anywhere from ~0 to twice it."""
    if name in fit.unconstrained:
        return f"unconstrained: {fit.unconstrained[name]}"
    value, sigma = fit.parameters[name], fit.stderr.get(name)
    if sigma is not None and value > 0 and sigma / value >= UNCONSTRAINED_SE_LOG:
        return "fitted, barely constrained: 1σ is at least the value (consistent with 0)"
    return "fitted"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(out)


def render_markdown(doc: CalibrationDocument) -> str:
    """report.md: summary, peaks, bandwidth, fits with uncertainties, validation, flags."""
    chip, val = doc.chip, doc.validation
    lines = [
        f"# Calibration: {doc.machine_slug} ({doc.device})",
        "",
        f"Created {doc.created_utc} by `{doc.command}`"
        + (" (quick mode: fewer shapes, shorter timing budgets)" if doc.quick else "") + ".",
        "",
        "## Machine",
        "",
        _table(["field", "value"], [[k, str(v)] for k, v in doc.environment_summary.items()]),
        "",
        f"Modelled as **{chip.name}** ({chip.origin}). Physics peaks are derived from its "
        "microarchitecture (units × MAC/clock × 2 × clock); spec peaks are the vendor's dense figures "
        "(none exist for a locally built chip).",
        "",
        "## Peaks",
        "",
    ]
    peak_rows = [[p.precision, p.support, _si(p.measured_flop_per_s, "FLOP/s"),
                  _si(p.physics_flop_per_s, "FLOP/s"), _pct(p.fraction_of_physics),
                  _si(p.spec_flop_per_s, "FLOP/s"), _pct(p.fraction_of_spec),
                  str(p.n), _pct(p.cv)] for p in doc.peaks]
    lines += [_table(["precision", "unit", "measured GEMM peak", "physics peak", "of physics", "spec peak",
                      "of spec", "samples", "CV"], peak_rows), ""]
    lines += [f"- {p.precision}: {p.note}" for p in doc.peaks if p.note]
    if t := doc.threads:
        lines += [f"- threads (measure.threads): {t.threads} torch threads ran a GEMM {t.speedup:.2f}x as fast as "
                  f"one ({_si(t.one_thread_s, 's')} → {_si(t.all_threads_s, 's')}; ideal {t.threads}x) when this run "
                  "timed it"]
    lines += [f"- {p.precision}: {p.unsupported}" for p in doc.peaks if p.unsupported]
    if cached := [p.precision for p in doc.peaks if p.cached]:
        lines += [f"- {', '.join(cached)}: read from the measurement cache of this machine's fingerprint "
                  "(timed by an earlier run; `--remeasure` times them again)"]
    lines += [f"- skipped {s.precision} GEMM {'x'.join(map(str, s.shape))}: one call predicted at "
              f"{s.predicted_call_s:.3g} s, over the {s.limit_s:.3g} s bound" for s in doc.skipped.gemm_shapes]
    lines += [f"- skipped validation model {s.model} batch {s.batch}: one forward pass predicted at "
              f"{s.predicted_call_s:.3g} s, over the {s.limit_s:.3g} s bound" for s in doc.skipped.models]
    if doc.throttle_note:
        lines += [f"- {doc.throttle_note}"]
    lines += [""]
    bw = doc.bandwidth
    lines += [
        f"Memory bandwidth (median of copy and triad over the working sets within {DRAM_WINDOW}x of "
        f"the largest, beyond the last-level cache): "
        f"**{_si(bw.measured_bytes_per_s, 'B/s')}** vs {_si(bw.spec_bytes_per_s, 'B/s')} in the chip "
        f"model ({_pct(bw.fraction)}; {bw.spec_source}). Last-level cache plateau: "
        f"{_si(bw.onchip_bytes_per_s, 'B/s')} (sets onchip_bandwidth_ratio).",
        "",
        "## Fitted parameters",
        "",
        "Fitted on micro-benchmarks only (GEMM sweep, bandwidth kernels, the timed micro-layers below). "
        "Uncertainties are 1σ from the fit's covariance; `-` means the data cannot constrain it.",
        "",
    ]
    for fit in doc.fits.values():
        if fit is None:
            continue
        rows = [[k, f"{v:.4g}", "-" if fit.stderr.get(k) is None else f"{fit.stderr[k]:.2g}", _status(fit, k)]
                for k, v in fit.parameters.items()]
        lines += [f"**{fit.name}**: `{fit.model}` — n = {fit.n}, R² = {_r2(fit)} "
                  f"(residuals in {fit.residual_space})", "",
                  _table(["parameter", "value", "± 1σ", "status"], rows), ""]
    params = doc.parameters.family_params
    lines += [
        "Resulting parameter set (`chipcal predict --calibration <this directory>` applies it to "
        f"`{doc.parameters.chip}`):",
        "",
        _table(["op class", "efficiency", "overhead"],
               [[c, f"{params.efficiency[c]:.3f}", _si(params.overhead_s[c], "s")] for c in params.efficiency]),
        "",
        f"half_efficiency_flop = {params.half_efficiency_flop:.3g} FLOP, "
        f"bandwidth_efficiency = {params.bandwidth_efficiency:.3f}, "
        f"onchip_bandwidth_ratio = {params.onchip_bandwidth_ratio:.2f}, "
        f"switch_overhead_s = {_si(params.switch_overhead_s, 's')} per kernel, "
        f"network_memory_factor = {params.network_memory_factor:.2f}"
        + (f", overhead_cycles = {params.overhead_cycles:.3g} per kernel" if params.overhead_cycles else "")
        + (f", k_loop_cycles_per_byte = {params.k_loop_cycles_per_byte:g} (family default, not fitted)"
           if params.k_loop_cycles_per_byte else "") + ".",
        "",
        "## Micro-layers (fit data)",
        "",
        "Each micro-layer is timed alone, call after call, and predicted the same way: without the "
        "in-network terms that the chains below calibrate (switch cost 0, memory factor 1).",
        "",
        _table(["case", "class", "FLOP", "measured", "IQR", "n", "predicted (default)", "predicted (calibrated)"],
               [[r.case, r.op_class, _si(r.flop, "FLOP"), _si(r.median_s, "s"), _si(r.iqr_s, "s"),
                 str(r.n), _si(r.predicted_default_s, "s"), _si(r.predicted_s, "s")]
                for r in doc.observations.layers]),
        "",
        "## Chains (fit data for switch_overhead_s and network_memory_factor)",
        "",
        "Hand-built small networks, timed whole; the gap to their kernels predicted as if timed alone is "
        "the extra cost of running different kernels back to back: a cost per kernel and a factor on "
        "the time of data the cache serves.",
        "",
        _table(["chain", "kernels", "FLOP", "measured", "IQR", "n", "predicted (calibrated)"],
               [[r.case, str(r.kernels), _si(r.flop, "FLOP"), _si(r.median_s, "s"), _si(r.iqr_s, "s"),
                 str(r.n), _si(r.predicted_s, "s")] for r in doc.observations.chains]),
        "",
        *_crossval_lines(doc.crossval),
        "## Validation: whole models (never used in the fit)",
        "",
        f"{val.fit_data} {val.validation_data}",
        "",
        _table(["model", "batch", "FLOP", "measured", "IQR", "n", "delivered", "predicted", "error",
                "predicted (defaults)"],
               [[r.model, str(r.batch), _si(r.flop, "FLOP"), _si(r.median_s, "s"), _si(r.iqr_s, "s"),
                 str(r.n), _si(r.delivered_flop_per_s, "FLOP/s"), _si(r.predicted_s, "s"),
                 f"{100 * r.error:+.1f}%", _si(r.predicted_default_s, "s")]
                for r in doc.observations.models]),
        "",
        f"Absolute latency error, calibrated: median **{_pct(val.median_abs_error)}**, "
        f"p90 **{_pct(val.p90_abs_error)}**, max {_pct(val.max_abs_error)} over {val.n} cases "
        f"({'?' if val.n_models is None else val.n_models} models × batch sizes; with the uncalibrated defaults: "
        f"median {_pct(val.default_median_abs_error)}, p90 {_pct(val.default_p90_abs_error)}). "
        f"Noise between the interleaved rounds of the same model: {_pct(val.noise_rel)}, "
        "the accuracy that this host's noise alone permits."
        + (f" Cross-validated error on the held-out micro-benchmarks: median {_pct(val.crossval_median_abs_error)}, "
           f"p90 {_pct(val.crossval_p90_abs_error)}." if val.crossval_median_abs_error is not None else ""),
        *([_rerun_line(doc.rerun)] if doc.rerun else []),
        *([f"Host dispatch cost per eager op (measure.dispatch): {doc.dispatch.per_op_s * 1e6:.1f} µs "
           f"(IQR {doc.dispatch.iqr_s * 1e6:.1f} µs, n = {doc.dispatch.n})."] if doc.dispatch else []),
        *([f"Layout passes and weight reorders charged around each convolution (measure.layout): "
           f"{doc.layout.passes:g} passes; "
           f"{doc.layout.detail}."] if doc.layout else []),
        "",
        "## Power",
        "",
    ]
    lines += _power_lines(doc.power)
    lines += ["", "## Flags", ""]
    if doc.flags:
        lines += [f"- **{f.code}** ({f.severity}): {f.message}" for f in doc.flags]
    else:
        lines.append("None: measurements, datasheet and physics model agree within the thresholds.")
    lines += ["", "## Plots", ""]
    lines += [f"- [{name}]({name}): {desc}" for name, desc in PLOTS.items() if name in doc.plots]
    return "\n".join(lines) + "\n"


def _pj(joules: float | None) -> str:
    return "-" if joules is None else f"{joules * 1e12:.3g}"


def _power_lines(power: PowerSection) -> list[str]:
    """The power section: static power, energy per byte, and each precision's sustained point
    with its energy per FLOP beside the physics model's (calibrate.sustain)."""
    if not power.available:
        return [f"No power source: {power.reason}. Energy figures are physics-model estimates only."]
    lines = [f"Source: {power.source}. Static power (idle) {_si(power.idle_w, 'W')}"
             + (f"; DRAM {_pj(power.j_per_byte)} pJ/byte from the triad (physics model "
                f"{_pj(power.physics_j_per_byte)} pJ/byte)" if power.j_per_byte is not None else "") + "."]
    if power.note:
        lines.append(f"No energy fit: {power.note}.")
    if not power.precisions:
        return lines
    lines += [
        "",
        "Each precision's GEMM held back to back until clock and power settled (its second half is the "
        "sustained point); energy per FLOP fitted as P = static·V(f) + e·FLOP/s·V(f)² + pJ/byte·byte/s "
        "with the model's V(f), at boost voltage and at the spec clock's voltage (with the GEMM's DRAM "
        "bytes), beside the physics model's energy at the spec clock.",
        "",
        _table(["precision", "engine", "sustained", "of spec", "burst", "SM clock", "of boost", "power",
                "clock events", "settled", "pJ/FLOP at boost", "at spec clock", "physics at spec"],
               [[e.precision, e.engine or "-", _si(e.sustained_flop_per_s, "FLOP/s"), _pct(e.fraction_of_spec),
                 _si(e.burst_flop_per_s, "FLOP/s"), _si(e.sustained_clock_hz, "Hz"), _pct(e.clock_fraction),
                 _si(e.sustained_power_w, "W"), ", ".join(e.clock_events) or "-",
                 {True: "yes", False: "no", None: e.source}[e.settled], _pj(e.j_per_flop_at_boost),
                 _pj(e.j_per_flop_at_spec_clock), _pj(e.physics_j_per_flop_at_spec)] for e in power.precisions]),
    ]
    return lines


def _crossval_lines(cv: CrossValSection | None) -> list[str]:
    """The self-check section: k-fold cross-validation of the micro-benchmark fits (absent from
    documents written before it existed)."""
    if cv is None:
        return []
    kept = cv.classes_keeping_defaults
    return [
        "## Self-check: cross-validation of the fits",
        "",
        f"The layer fit was run again {cv.folds} times, each without one fold of the micro-layers, and "
        "the switch fit once without each chain; the held-out micro-benchmarks were predicted by the fit "
        f"that did not see them. Held-out median |error| **{_pct(cv.median_abs_error)}**, p90 "
        f"{_pct(cv.p90_abs_error)} (defaults: {_pct(cv.default_median_abs_error)}, "
        f"{_pct(cv.default_p90_abs_error)}).",
        "",
        "Per op class, over the held-out layers that run it: the fold's fitted parameters against the same "
        "parameters with this class's efficiency and overhead at their defaults. A class keeps its defaults "
        f"where they are better by more than {100 * REVERT_MARGIN:.0f} points in |error| weighted by each "
        f"layer's measured time (a network's latency is the sum of its layers'), if it has at least "
        f"{REVERT_MIN_LAYERS} micro-layers of its own.",
        "",
        _table(["op class", "own layers", "held-out layers running it", "median |error| fitted",
                "with its defaults", "time-weighted fitted", "with its defaults", "kept"],
               [[v.op_class, str(v.own_layers), str(v.n), _pct(v.median_abs_error), _pct(v.reverted_median_abs_error),
                 _pct(v.weighted_abs_error), _pct(v.reverted_weighted_abs_error),
                 "defaults" if v.keeps_defaults else "fitted"] for v in cv.classes]),
        "",
        f"Classes that keep their defaults: {', '.join(kept) if kept else 'none'}.",
        "",
    ]


def _figure(size: tuple[float, float], **subplots):
    """A matplotlib figure and axes (Agg backend: no display needed); `subplots` as for plt.subplots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=size, **subplots)


def _save(fig, ax, path: Path, title: str, xlabel: str, ylabel: str, log: str = "", legend_size: int | None = 8,
          grid: str = "both") -> None:
    """Label the axes (log scale on the axes named in `log`), add grid and legend, write and close."""
    import matplotlib.pyplot as plt

    for axis in log:
        getattr(ax, f"set_{axis}scale")("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    if grid:
        ax.grid(True, which=grid, alpha=0.3)
    if legend_size:
        ax.legend(fontsize=legend_size)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


def plot_gemm_efficiency(doc: CalibrationDocument, path: Path) -> None:
    fig, ax = _figure((7, 5))
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
            ax.plot(grid, saturating(grid, fit.parameters["e_max"], fit.parameters["w_half_flop"]),
                    color=points.get_facecolor()[0], label=f"{p.precision} fit (R²={_r2(fit)})")
    _save(fig, ax, path, "GEMM efficiency vs size", "GEMM work (FLOP, 2 per MAC)", "achieved / physics peak", "x")


def plot_predicted_vs_measured(doc: CalibrationDocument, path: Path) -> None:
    fig, ax = _figure((6, 6))
    models, layers = doc.observations.models, doc.observations.layers
    ax.scatter([r.median_s for r in layers], [r.predicted_s for r in layers], marker=".", color="grey",
               label="micro-layers (fit)")
    ax.scatter([r.median_s for r in models], [r.predicted_s for r in models], color="tab:blue",
               label="models (validation)")
    for r in models:
        ax.annotate(f"{r.model}/{r.batch}", (r.median_s, r.predicted_s), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    values = [r.median_s for r in models + layers] + [r.predicted_s for r in models + layers]
    lo, hi = min(values) / 2, max(values) * 2
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.fill_between([lo, hi], [lo * 0.75, hi * 0.75], [lo * 1.25, hi * 1.25], color="k", alpha=0.07, label="±25%")
    _save(fig, ax, path, "Calibrated prediction vs measurement", "measured latency (s)", "predicted latency (s)",
          "xy", grid="")


def plot_roofline(doc: CalibrationDocument, path: Path) -> None:
    fig, ax = _figure((7, 5))
    bw = doc.bandwidth.measured_bytes_per_s
    intensity = np.logspace(-2, 3, 200)
    for p in doc.peaks:
        for peak, style, label in ((p.measured_flop_per_s, "-", "measured"), (p.physics_flop_per_s, ":", "physics")):
            if peak:
                ax.plot(intensity, np.minimum(peak, bw * intensity), style, label=f"{p.precision} {label} roof")
    layers = [r for r in doc.observations.layers if r.bytes > 0]
    ax.scatter([r.flop / r.bytes for r in layers], [r.flop / r.median_s for r in layers],
               marker=".", color="grey", label="micro-layers")
    models = doc.observations.models
    ax.scatter([r.flop / r.bytes for r in models], [r.delivered_flop_per_s for r in models],
               color="tab:red", label="models")
    _save(fig, ax, path, f"Roofline, measured bandwidth {bw / 1e9:.1f} GB/s",
          "arithmetic intensity (FLOP/byte, unfused DRAM traffic)", "FLOP/s", "xy", legend_size=7)


def plot_power(doc: CalibrationDocument, path: Path) -> None:
    """The holds' power and SM clock over time (a SCHEMA_1 run: its power curve, power against
    throughput)."""
    holds = doc.observations.holds
    if holds:
        fig, (clock_ax, ax) = _figure((7, 8), nrows=2, sharex=True)
        for h in holds:
            ax.plot(h.sample_t_s, [np.nan if p is None else p for p in h.sample_power_w], label=h.label)
            clock_ax.plot(h.sample_t_s, [np.nan if c is None else c / 1e9 for c in h.sample_sm_clock_hz])
        clock_ax.set_ylabel("SM clock (GHz)")
        clock_ax.set_title("SM clock and power while each kernel is held")
        clock_ax.grid(True, alpha=0.3)
        _save(fig, ax, path, "", "time since the hold began (s)", "power (W)", legend_size=7, grid="major")
        return
    fig, ax = _figure((7, 5))
    rows = doc.observations.power
    ax.scatter([r.flop_per_s for r in rows], [r.avg_power_w for r in rows])
    _save(fig, ax, path, "Power vs throughput", "throughput (FLOP/s)", "average power (W)", legend_size=None,
          grid="major")


def plot_writers(doc: CalibrationDocument) -> dict:
    """{file name: writer(path)} for the plots this document has data for."""
    writers = {
        "gemm_efficiency.png": lambda p: plot_gemm_efficiency(doc, p),
        "predicted_vs_measured.png": lambda p: plot_predicted_vs_measured(doc, p),
        "roofline.png": lambda p: plot_roofline(doc, p),
    }
    if doc.observations.power or doc.observations.holds:
        writers["power.png"] = lambda p: plot_power(doc, p)
    return writers


def _rerun_line(r) -> str:
    """The held-out models against the previous run on this machine (calibrate.rerun)."""
    return (f"Against the previous run on this machine ({r.previous_run}, `{r.previous_command}`): the same "
            f"{r.n} model × batch cases moved by median {_pct(r.median_abs_change)}, max {_pct(r.max_abs_change)}, "
            "the drift between runs that the rounds of one run do not see"
            + ("." if r.same_software else " (torch or the allocator setting differ between the two runs)."))
