"""Human-readable calibration report: report.md and the single-file report.html, from the document.

Everything here reads the CalibrationDocument only, so a checked-in report can be re-rendered
from its calibration.json (calibrate.store.load) without re-measuring. The content is built once
as blocks (report.render); markdown and HTML are two renderings of them. The plots are
report.plots'.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from chipcal.calibrate import store
from chipcal.calibrate.document import CalibrationDocument, FitRecord
from chipcal.calibrate.fits import UNCONSTRAINED_SE_LOG
from chipcal.calibrate.host_records import GemvSection
from chipcal.calibrate.power_records import PowerSection
from chipcal.calibrate.selfcheck import REVERT_MARGIN, REVERT_MIN_LAYERS, CrossValSection
from chipcal.measure.bandwidth import DRAM_WINDOW
from chipcal.measure.kernel_profile import (
    GENERATE_PROFILE_CALLS,
    GENERATE_PROFILE_TOKENS,
    PROFILE_PASSES,
)
from chipcal.report import render
from chipcal.report.render import Block, Bullets, Figures, Heading, Paragraph, table

PLOTS = {
    "gemm_efficiency.png": "GEMM efficiency vs problem size with the fitted saturating curve",
    "predicted_vs_measured.png": "Predicted vs measured latency per validation model",
    "roofline.png": "Local roofline with measured GEMM, layer and model points",
    "power.png": "SM clock and power while each kernel is held (only when a power source exists)",
}


def si(value: float | None, unit: str, digits: int = 3) -> str:
    """`value` with an SI prefix ('1.23 GFLOP/s'); '-' for None or a non-finite number."""
    if value is None or not np.isfinite(value):
        return "-"
    for factor, prefix in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1, ""),
                           (1e-3, "m"), (1e-6, "µ"), (1e-9, "n"), (1e-12, "p")):
        if abs(value) >= factor:
            return f"{value / factor:.{digits}g} {prefix}{unit}"
    return f"{value:.{digits}g} {unit}"


def pct(value: float | None) -> str:
    return "-" if value is None or not np.isfinite(value) else f"{100 * value:.1f}%"


def r2_text(fit: FitRecord) -> str:
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


def _peak_notes(doc: CalibrationDocument) -> list[str]:
    notes = [f"{p.precision}: {p.note}" for p in doc.peaks if p.note]
    if t := doc.threads:
        notes += [f"threads (measure.threads): {t.threads} torch threads ran a GEMM {t.speedup:.2f}x as fast as "
                  f"one ({si(t.one_thread_s, 's')} → {si(t.all_threads_s, 's')}; ideal {t.threads}x) when this run "
                  "timed it"]
    notes += [f"{p.precision}: {p.unsupported}" for p in doc.peaks if p.unsupported]
    if cached := [p.precision for p in doc.peaks if p.cached]:
        notes += [f"{', '.join(cached)}: read from the measurement cache of this machine's fingerprint "
                  "(timed by an earlier run; `--remeasure` times them again)"]
    notes += [f"skipped {s.precision} GEMM {'x'.join(map(str, s.shape))}: one call predicted at "
              f"{s.predicted_call_s:.3g} s, over the {s.limit_s:.3g} s bound" for s in doc.skipped.gemm_shapes]
    notes += [f"skipped validation model {s.model} batch {s.batch}: one forward pass predicted at "
              f"{s.predicted_call_s:.3g} s, over the {s.limit_s:.3g} s bound" for s in doc.skipped.models]
    if doc.throttle_note:
        notes += [doc.throttle_note]
    return notes


def _fit_blocks(doc: CalibrationDocument) -> list[Block]:
    blocks: list[Block] = []
    for fit in doc.fits.values():
        if fit is None:
            continue
        rows = [[k, f"{v:.4g}", "-" if fit.stderr.get(k) is None else f"{fit.stderr[k]:.2g}", _status(fit, k)]
                for k, v in fit.parameters.items()]
        blocks += [Paragraph(f"**{fit.name}**: `{fit.model}` — n = {fit.n}, R² = {r2_text(fit)} "
                             f"(residuals in {fit.residual_space})"),
                   table(["parameter", "value", "± 1σ", "status"], rows)]
    params = doc.parameters.family_params
    blocks += [
        Paragraph("Resulting parameter set (`chipcal predict --calibration <this directory>` applies it to "
                  f"`{doc.parameters.chip}`):"),
        table(["op class", "efficiency", "tensor-core efficiency", "overhead"],
              [[c, f"{params.efficiency[c]:.3f}", _tensor_efficiency_text(params, c), si(params.overhead_s[c], "s")]
               for c in params.efficiency]),
        Paragraph(
            f"half_efficiency_flop = {params.half_efficiency_flop:.3g} FLOP, "
            f"bandwidth_efficiency = {params.bandwidth_efficiency:.3f}, "
            f"onchip_bandwidth_ratio = {params.onchip_bandwidth_ratio:.2f}, "
            f"switch_overhead_s = {si(params.switch_overhead_s, 's')} per kernel, "
            f"network_memory_factor = {params.network_memory_factor:.2f}"
            + (f", overhead_cycles = {params.overhead_cycles:.3g} per kernel" if params.overhead_cycles else "")
            + (f", host_call_s = {si(params.host_call_s, 's')} per call of a network" if params.host_call_s else "")
            + (f", k_loop_cycles_per_byte = {params.k_loop_cycles_per_byte:g} (family default, not fitted)"
               if params.k_loop_cycles_per_byte else "") + "."),
    ]
    return blocks


def _tensor_efficiency_text(params, op_class: str) -> str:
    """The class's tensor-core efficiency (FamilyParams.class_efficiency), '-' where it has none."""
    if params.tensor_efficiency is None or op_class not in params.tensor_efficiency:
        return "-"
    return f"{params.tensor_efficiency[op_class]:.3f}"


def _noise_line(val) -> str:
    """What the timing noise permits (calibrate.noise): rounds, spread between them, the pooled CI,
    and whether it explains the validation's median and p90 |error|."""
    if val.noise_permits is None:        # written before calibrate.noise
        return (f"Noise between the interleaved rounds of the same model: {pct(val.noise_rel)}, "
                "the accuracy that this host's noise alone permits.")
    from chipcal.calibrate.noise import allowed

    verdict = ("The validation error is within it: explained by noise alone." if val.explained_by_noise
               else "The validation error exceeds it.")
    if val.noise_permits_p90 is not None:
        verdict += (f" At p90 the noise permits **{pct(val.noise_permits_p90)}**; the validation p90 "
                    + ("is within it." if val.p90_explained_by_noise else "exceeds it."))
    rounds = f" over {val.rounds} interleaved rounds" if val.rounds else " (rounds not recorded)"
    return (f"Timing noise{rounds}: {pct(val.noise_rel)} between rounds, "
            f"CI of the median ±{pct(val.median_ci_rel)}; the accuracy the noise permits is "
            f"**{pct(val.noise_permits)}** (a check of the target needs at most {pct(allowed())}). {verdict}")


def _validation_text(doc: CalibrationDocument) -> str:
    val = doc.validation
    lines = [
        f"Absolute latency error, calibrated: median **{pct(val.median_abs_error)}**, "
        f"p90 **{pct(val.p90_abs_error)}**, max {pct(val.max_abs_error)} over {val.n} cases "
        f"({'?' if val.n_models is None else val.n_models} models × batch sizes; with the uncalibrated defaults: "
        f"median {pct(val.default_median_abs_error)}, p90 {pct(val.default_p90_abs_error)}). "
        + _noise_line(val)
        + (f" Cross-validated error on the held-out micro-benchmarks: median {pct(val.crossval_median_abs_error)}, "
           f"p90 {pct(val.crossval_p90_abs_error)}." if val.crossval_median_abs_error is not None else "")]
    if doc.rerun:
        lines.append(_rerun_line(doc.rerun))
    if doc.dispatch:
        lines.append(f"Host dispatch cost per eager op (measure.dispatch): {doc.dispatch.per_op_s * 1e6:.1f} µs "
                     f"(IQR {doc.dispatch.iqr_s * 1e6:.1f} µs, n = {doc.dispatch.n}).")
    if doc.layout:
        lines.append(f"Layout passes and weight reorders charged around each convolution (measure.layout): "
                     f"{doc.layout.passes:g} passes; {doc.layout.detail}.")
    if doc.gemv:
        lines.append(_gemv_line(doc.gemv))
    if doc.gemv and doc.gemv.packed_bytes_per_s:
        lines.append(f"A few-row GEMM's read and pack of the same weights (measure.gemv.measure_packed_gemm, "
                     f"{doc.gemv.packed_shape}, and 32 rows): {doc.gemv.packed_bytes_per_s / 1e9:.1f} GB/s (calls of "
                     f"{doc.gemv.packed_median_s * 1e3:.2f} and {doc.gemv.packed_more_median_s * 1e3:.2f} ms, medians "
                     f"of {doc.gemv.packed_n}, less their arithmetic), the rate at which a decode at batch 2 and "
                     "up reads its weights before its arithmetic.")
    return "\n".join(lines)


def _gemv_line(gemv: GemvSection) -> str:
    """The GEMV probe: the pair's rate, and the stream rate, cost per row and k-major rate that
    predictions price a one-row product with (runs before the split: the pair's rate)."""
    line = (f"A matrix-vector product's weight stream (measure.gemv.measure_gemv, {gemv.shape}): "
            f"{gemv.bytes_per_s / 1e9:.1f} GB/s over the two n-major matrices (medians of {gemv.n}+ calls, "
            f"{gemv.median_s * 1e3:.2f} ms together)")
    if gemv.stream_bytes_per_s is None:
        return line + ", the rate at which an LLM's decode at batch 1 reads its weights."
    line += (f". The wide one took {gemv.wide_median_s * 1e3:.2f} ms, the tall one {gemv.tall_median_s * 1e3:.2f}: "
             f"a stream at {gemv.stream_bytes_per_s / 1e9:.1f} GB/s plus {gemv.row_s * 1e9:.0f} ns per output "
             "row, as predictions price an LLM's decode at batch 1.")
    if gemv.k_major_bytes_per_s is None:
        return line
    return line + (f" Read k-major (x @ W, GPT-2's Conv1D) the tall one took {gemv.k_major_median_s * 1e3:.2f} ms: "
                   f"{gemv.k_major_bytes_per_s / 1e9:.1f} GB/s, no cost per row.")


def report_blocks(doc: CalibrationDocument, plots: tuple[str, ...] | None = None) -> list[Block]:
    """The report's content: summary, peaks, bandwidth, fits with uncertainties, validation, flags,
    and the plots named in `plots` (default: those the document says were written beside it)."""
    chip, val, bw = doc.chip, doc.validation, doc.bandwidth
    plots = doc.plots if plots is None else plots
    blocks: list[Block] = [
        Heading(f"Calibration: {doc.machine_slug} ({doc.device})", 1),
        Paragraph(f"Created {doc.created_utc} by `{doc.command}`"
                  + (" (quick mode: fewer shapes, shorter timing budgets)" if doc.quick else "") + "."),
        *([Paragraph(f"A refit of `{r.source_run}` (created {r.source_created_utc} by `{r.source_command}`) by "
                     f"{r.code}: the measurements are that run's, unchanged; the chip, fits, parameters, predictions, "
                     "validation and the flags that follow from them are this code's.")] if (r := doc.refit) else []),
        Heading("Machine"),
        table(["field", "value"], [[k, str(v)] for k, v in doc.environment_summary.items()]),
        Paragraph(f"Modelled as **{chip.name}** ({chip.origin}). Physics peaks are derived from its "
                  "microarchitecture (units × MAC/clock × 2 × clock); spec peaks are the vendor's dense figures "
                  "(none exist for a locally built chip)."),
        Heading("Peaks"),
        table(["precision", "unit", "measured GEMM peak", "physics peak", "of physics", "spec peak", "of spec",
               "samples", "CV"],
              [[p.precision, p.support, si(p.measured_flop_per_s, "FLOP/s"), si(p.physics_flop_per_s, "FLOP/s"),
                pct(p.fraction_of_physics), si(p.spec_flop_per_s, "FLOP/s"), pct(p.fraction_of_spec),
                str(p.n), pct(p.cv)] for p in doc.peaks]),
        Bullets(tuple(_peak_notes(doc))),
        Paragraph(f"Memory bandwidth (median of copy and triad over the working sets within {DRAM_WINDOW}x of "
                  f"the largest, beyond the last-level cache): "
                  f"**{si(bw.measured_bytes_per_s, 'B/s')}** vs {si(bw.spec_bytes_per_s, 'B/s')} in the chip "
                  f"model ({pct(bw.fraction)}; {bw.spec_source}). Last-level cache plateau: "
                  f"{si(bw.onchip_bytes_per_s, 'B/s')} (sets onchip_bandwidth_ratio)."),
        Heading("Fitted parameters"),
        Paragraph("Fitted on micro-benchmarks only (GEMM sweep, bandwidth kernels, the timed micro-layers below). "
                  "Uncertainties are 1σ from the fit's covariance; `-` means the data cannot constrain it."),
        *_fit_blocks(doc),
        Heading("Micro-layers (fit data)"),
        Paragraph("Each micro-layer is timed alone, call after call, and predicted the same way: without the "
                  "in-network terms that the chains below calibrate (switch cost 0, memory factor 1)."),
        table(["case", "class", "FLOP", "measured", "IQR", "n", "predicted (default)", "predicted (calibrated)"],
              [[r.case, r.op_class, si(r.flop, "FLOP"), si(r.median_s, "s"), si(r.iqr_s, "s"),
                str(r.n), si(r.predicted_default_s, "s"), si(r.predicted_s, "s")] for r in doc.observations.layers]),
        Heading("Chains (fit data for switch_overhead_s and network_memory_factor)"),
        Paragraph("Hand-built small networks, timed whole; the gap to their kernels predicted as if timed alone is "
                  "the extra cost of running different kernels back to back: a cost per kernel and a factor on "
                  "the time of data the cache serves."),
        table(["chain", "kernels", "FLOP", "measured", "IQR", "n", "predicted (calibrated)"],
              [[r.case, str(r.kernels), si(r.flop, "FLOP"), si(r.median_s, "s"), si(r.iqr_s, "s"),
                str(r.n), si(r.predicted_s, "s")] for r in doc.observations.chains]),
        *_crossval_blocks(doc.crossval),
        Heading("Validation: whole models (never used in the fit)"),
        Paragraph(f"{val.fit_data} {val.validation_data}"),
        table(["model", "batch", "FLOP", "measured", "IQR", "n", "delivered", "predicted", "error",
               "predicted (defaults)"],
              [[r.model, str(r.batch), si(r.flop, "FLOP"), si(r.median_s, "s"), si(r.iqr_s, "s"),
                str(r.n), si(r.delivered_flop_per_s, "FLOP/s"), si(r.predicted_s, "s"),
                f"{100 * r.error:+.1f}%", si(r.predicted_default_s, "s")] for r in doc.observations.models]),
        Paragraph(_validation_text(doc)),
        *_users_run_blocks(doc.users_run),
        Heading("Power"),
        *_power_blocks(doc.power),
        Heading("Flags"),
        Bullets(tuple(f"**{f.code}** ({f.severity}): {f.message}" for f in doc.flags)) if doc.flags else
        Paragraph("None: measurements, datasheet and physics model agree within the thresholds."),
        Heading("Plots"),
        Figures(tuple((name, desc) for name, desc in PLOTS.items() if name in plots)),
        *_phase_blocks(doc),
    ]
    return blocks


def _users_run_blocks(section) -> list[Block]:
    """A GPU run's compiled and generate rows (calibrate.users_run) with the eager validation
    above them: predicted against measured; nothing for a CPU run."""
    if section is None:
        return []
    def time(row, seconds: float) -> str:
        """Seconds per call; a decoder row's also as output tokens per second (batch / seconds)."""
        return si(seconds, "s") + ("" if row.context is None else f" ({row.batch / seconds:.3g} tok/s)")

    rows = [[r.kind, r.model, str(r.batch), r.mode, "" if r.context is None else f"{r.context}+{r.new_tokens}",
             time(r, r.measured_s), str(r.n), time(r, r.predicted_s), f"{100 * r.error:+.1f}%",
             "" if r.compile_s is None else f"{r.compile_s:.1f} s",
             "" if r.eager_measured_s is None else si(r.eager_measured_s, "s")] for r in section.rows]
    skipped = (f" Not run within the {section.budget_s:.0f} s budget: {', '.join(section.skipped)}."
               if section.skipped else "")
    return [Heading("What users run: torch.compile and generate (never used in the fit)"),
            Paragraph("torch.compile (reduce-overhead) with bf16 weights or under bf16 autocast, seconds per "
                      "forward pass; an LLM's decode step alone and Hugging Face generate end to end, seconds per "
                      "output token and output tokens per second; each predicted with this run's parameters "
                      "(docs/runtimes.md); at the largest batch the same pass eager, measured beside it." + skipped),
            table(["kind", "model", "batch", "mode", "context+new", "measured", "n", "predicted", "error",
                   "compile", "eager"], rows),
            *_kernel_blocks(section)]


def _kernel_blocks(section) -> list[Block]:
    """The profiled rows' largest kernels (calibrate.users_run: torch.profiler's device time per pass,
    per output token for the decoder), and a compiled pass's run eager where it was profiled too;
    nothing for rows without."""
    profiled = [r for r in section.rows if r.kernels]
    if not profiled:
        return []

    def label(row) -> str:
        what = f"{row.model} b{row.batch} {row.mode}"
        return what if row.context is None else f"{row.kind} {what} @{row.context}+{row.new_tokens}"

    def largest(row) -> list:
        """The five largest kernels of each runtime the row was profiled in (stored largest first)."""
        by_runtime: dict[str, list] = {}
        for k in row.kernels:
            by_runtime.setdefault(k.runtime, []).append(k)
        return [k for kernels in by_runtime.values() for k in kernels[:5]]

    rows = [[label(r), k.runtime, k.name[:72], f"{k.calls:g}", si(k.self_s, "s")] for r in profiled for k in largest(r)]
    totals = "; ".join(f"{label(r)}: {r.kind} {si(r.kernels_s, 's')} of {si(r.measured_s, 's')}"
                       + ("" if r.eager_kernels_s is None else
                          f", eager {si(r.eager_kernels_s, 's')} of {si(r.eager_measured_s, 's')}")
                       for r in profiled)
    return [Paragraph("The largest kernels of each profiled pass, own device time per pass, per output token for "
                      f"the decoder (measure.kernel_profile: {PROFILE_PASSES} passes; for generate, {GENERATE_PROFILE_CALLS} "
                      f"calls of min(M, {GENERATE_PROFILE_TOKENS}) tokens less as many of one). All kernels' time against the measured time: "
                      f"{totals}; in the rest the device sat idle (the host, or gaps between kernels)."),
            table(["row", "runtime", "kernel", "calls", "time"], rows)]


def _phase_blocks(doc: CalibrationDocument) -> list[Block]:
    """Where the run's time went (calibrate.phases): each phase's wall and CPU seconds and share;
    nothing for a run from before they were recorded."""
    if not doc.phases:
        return []
    total_wall = sum(p.wall_s for p in doc.phases)
    total_cpu = sum(p.cpu_s for p in doc.phases)
    rows = [[p.phase, f"{p.wall_s:.1f} s", f"{p.cpu_s:.1f} s", pct(p.wall_s / total_wall if total_wall else None)]
            for p in doc.phases]
    rows.append(["total", f"{total_wall:.1f} s", f"{total_cpu:.1f} s", "100%"])
    return [Heading("Where the time went"),
            Paragraph("Wall-clock and process CPU seconds (all threads) of each phase of the run, writing this "
                      "report excluded; the timing rounds interleave micro-layers, chains and models, and each "
                      "row adds up its rounds." + (" The measurements are the source run's: these are its phases."
                                                    if doc.refit else "")),
            table(["phase", "wall", "CPU", "of the wall time"], rows)]


def render_markdown(doc: CalibrationDocument) -> str:
    """report.md: the report's blocks as markdown, the plots linked to the PNGs beside it."""
    return render.markdown(report_blocks(doc))


def render_html(doc: CalibrationDocument, images: dict[str, bytes] | None = None) -> str:
    """report.html: the same blocks as one self-contained page with the plots embedded: `images`
    ({file name: PNG bytes}, those just written beside it, compacted) or else drawn from the document
    (report.plots.png_bytes). It opens without network and without the PNG files."""
    if images is None:
        from chipcal.report.plots import png_bytes

        images = png_bytes(doc)
    return render.html_page(f"Calibration: {doc.machine_slug} ({doc.device}), {doc.created_utc}",
                            report_blocks(doc, tuple(images)), images)


def run_writers(doc: CalibrationDocument) -> dict[str, Callable[[Path], None]]:
    """Every file of a run directory, {name: writer(path)} in writing order (calibrate.store.write_run):
    calibration.json naming its plots, report.md, the plots, and report.html embedding the plots
    just written beside it."""
    from chipcal.report.plots import compact, plot_writers

    plots = plot_writers(doc)
    doc = doc.with_plots(plots)
    return {store.CALIBRATION_FILE: store.json_writer(doc.to_dict()),
            "report.md": lambda path: store.text_writer(render_markdown(doc))(path),
            **plots,
            "report.html": lambda path: store.text_writer(
                render_html(doc, {n: compact((path.parent / n).read_bytes()) for n in doc.plots}))(path)}


def _pj(joules: float | None) -> str:
    return "-" if joules is None else f"{joules * 1e12:.3g}"


def _power_blocks(power: PowerSection) -> list[Block]:
    """The power section: static power, energy per byte, and each precision's sustained point
    with its energy per FLOP beside the physics model's (calibrate.sustain)."""
    if not power.available:
        return [Paragraph(f"No power source: {power.reason}. Energy figures are physics-model estimates only.")]
    blocks: list[Block] = [Paragraph(
        f"Source: {power.source}. Static power (idle) {si(power.idle_w, 'W')}"
        + (f"; DRAM {_pj(power.j_per_byte)} pJ/byte from the triad (physics model "
           f"{_pj(power.physics_j_per_byte)} pJ/byte)" if power.j_per_byte is not None else "") + ".")]
    if power.note:
        blocks.append(Paragraph(f"No energy fit: {power.note}."))
    if not power.precisions:
        return blocks
    return blocks + [
        Paragraph("Each precision's GEMM held back to back until clock and power settled (its second half is the "
                  "sustained point); energy per FLOP fitted as P = static·V(f) + e·FLOP/s·V(f)² + pJ/byte·byte/s "
                  "with the model's V(f), at boost voltage and at the spec clock's voltage (with the GEMM's DRAM "
                  "bytes), beside the physics model's energy at the spec clock."),
        table(["precision", "engine", "sustained", "of spec", "burst", "SM clock", "of boost", "power",
               "clock events", "settled", "pJ/FLOP at boost", "at spec clock", "physics at spec"],
              [[e.precision, e.engine or "-", si(e.sustained_flop_per_s, "FLOP/s"), pct(e.fraction_of_spec),
                si(e.burst_flop_per_s, "FLOP/s"), si(e.sustained_clock_hz, "Hz"), pct(e.clock_fraction),
                si(e.sustained_power_w, "W"), ", ".join(e.clock_events) or "-",
                {True: "yes", False: "no", None: e.source}[e.settled], _pj(e.j_per_flop_at_boost),
                _pj(e.j_per_flop_at_spec_clock), _pj(e.physics_j_per_flop_at_spec)] for e in power.precisions]),
    ]


def _crossval_blocks(cv: CrossValSection | None) -> list[Block]:
    """The self-check section: k-fold cross-validation of the micro-benchmark fits (absent from
    documents written before it existed)."""
    if cv is None:
        return []
    kept = cv.classes_keeping_defaults
    return [
        Heading("Self-check: cross-validation of the fits"),
        Paragraph(f"The layer fit was run again {cv.folds} times, each without one fold of the micro-layers, and "
                  "the switch fit once without each chain; the held-out micro-benchmarks were predicted by the fit "
                  f"that did not see them. Held-out median |error| **{pct(cv.median_abs_error)}**, p90 "
                  f"{pct(cv.p90_abs_error)} (defaults: {pct(cv.default_median_abs_error)}, "
                  f"{pct(cv.default_p90_abs_error)})."),
        Paragraph("Per op class, over the held-out layers that run it: the fold's fitted parameters against the same "
                  "parameters with this class's efficiency and overhead at their defaults. A class keeps its defaults "
                  f"where they are better by more than {100 * REVERT_MARGIN:.0f} points in |error| weighted by each "
                  f"layer's measured time (a network's latency is the sum of its layers'), if it has at least "
                  f"{REVERT_MIN_LAYERS} micro-layers of its own."),
        table(["op class", "own layers", "held-out layers running it", "median |error| fitted",
               "with its defaults", "time-weighted fitted", "with its defaults", "kept"],
              [[v.op_class, str(v.own_layers), str(v.n), pct(v.median_abs_error), pct(v.reverted_median_abs_error),
                pct(v.weighted_abs_error), pct(v.reverted_weighted_abs_error),
                "defaults" if v.keeps_defaults else "fitted"] for v in cv.classes]),
        Paragraph(f"Classes that keep their defaults: {', '.join(kept) if kept else 'none'}."),
    ]


def _rerun_line(r) -> str:
    """The held-out models against the previous run on this machine (calibrate.rerun)."""
    return (f"Against the previous run on this machine ({r.previous_run}, `{r.previous_command}`): the same "
            f"{r.n} model × batch cases moved by median {pct(r.median_abs_change)}, max {pct(r.max_abs_change)}, "
            "the drift between runs that the rounds of one run do not see"
            + ("." if r.same_software else " (torch or the allocator setting differ between the two runs)."))
