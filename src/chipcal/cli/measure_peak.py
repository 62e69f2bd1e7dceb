"""`measure_peak`: measured GEMM peak per precision and memory bandwidth vs the spec/physics peak.

One row per precision (best sustained FLOP/s over the shape sweep, as a fraction of the registry
spec and of the physics peak) and per bandwidth kernel (copy, triad: out-of-cache figure and cache
knee). Results are cached per machine in the user cache dir; --remeasure ignores the cache.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import pandas as pd

from chipcal.cli.common import (
    Measuring,
    Parser,
    RowWriter,
    csv_choices,
    device_arg,
    interrupted_exit,
    output_file,
    print_json,
    print_table,
    run,
    write_notes,
)
from chipcal.model.precision import PRECISIONS

FIELDS = ("device", "kind", "precision", "support", "kernel", "peak_flop_per_s", "spec_peak_flop_per_s",
          "physics_peak_flop_per_s", "fraction_of_spec", "fraction_of_physics", "bandwidth_bytes_per_s",
          "spec_bandwidth_bytes_per_s", "cached_bandwidth_bytes_per_s", "knee_bytes", "shape", "n", "cv",
          "median_s", "ci_low_s", "ci_high_s", "unstable", "chip", "from_cache", "fingerprint", "other_cpus",
          "note")


def _fraction(value, reference):
    return value / reference if value is not None and reference else None


def gemm_record(peak, precision: str, ref) -> dict:
    """One row: best sustained FLOP/s of `precision` vs spec and physics (or the unsupported note)."""
    best = peak.best(precision)
    spec, physics = ref.spec(precision), ref.physics(precision)
    row = dict.fromkeys(FIELDS)
    row.update(device=peak.device, kind="gemm", precision=precision, spec_peak_flop_per_s=spec,
               physics_peak_flop_per_s=physics, chip=ref.chip, from_cache=precision in peak.cached,
               fingerprint=peak.fingerprint_slug, other_cpus=peak.other_cpus)
    if best is None:
        row.update(support="unsupported", note=peak.unsupported.get(precision, "not measured"))
        return row
    m = best.measurement
    notes = list(m.warnings)
    emulated = peak.emulated.get(precision)
    row["support"] = "emulated" if emulated else "native"
    if emulated:
        notes.append(emulated)
        physics = None     # an emulated rate is not judged against a hardware peak
    elif physics is None:
        notes.append(f"no {precision} engine in the physics model of {ref.chip}")
    notes += [f"skipped {s.m}x{s.n}x{s.k}: one call predicted at {s.predicted_call_s:.3g} s > {s.limit_s:.3g} s"
              for s in peak.skipped if s.precision == precision]
    row.update(peak_flop_per_s=best.flop_per_s, fraction_of_spec=_fraction(best.flop_per_s, spec),
               fraction_of_physics=_fraction(best.flop_per_s, physics), shape=f"{best.m}x{best.n}x{best.k}",
               n=m.n, cv=m.cv, median_s=m.median_s, ci_low_s=m.ci_low_s, ci_high_s=m.ci_high_s,
               unstable=m.unstable, note="; ".join(notes) or None)
    return row


def bandwidth_records(bw, ref) -> list[dict]:
    """One row per kernel: out-of-cache bandwidth (and its largest-size sample stats), knee."""
    rows = []
    for kernel, sustained in bw.sustained_bytes_per_s.items():
        curve = bw.curve(kernel)
        largest = curve[-1].measurement
        row = dict.fromkeys(FIELDS)
        row.update(device=bw.device, kind="bandwidth", kernel=kernel, bandwidth_bytes_per_s=sustained,
                   spec_bandwidth_bytes_per_s=ref.spec_bandwidth_bytes_per_s,
                   fraction_of_spec=_fraction(sustained, ref.spec_bandwidth_bytes_per_s),
                   cached_bandwidth_bytes_per_s=max(p.bytes_per_s for p in curve),
                   knee_bytes=bw.knee_bytes.get(kernel), shape=f"{curve[-1].size_bytes} B/array",
                   n=largest.n, cv=largest.cv, median_s=largest.median_s, ci_low_s=largest.ci_low_s,
                   ci_high_s=largest.ci_high_s, unstable=largest.unstable, chip=ref.chip,
                   from_cache=bw.from_cache, fingerprint=bw.fingerprint_slug, other_cpus=bw.other_cpus,
                   note="; ".join(w for w in bw.warnings if w.startswith(kernel)) or None)
        rows.append(row)
    return rows


def _hollow(ax, points: list[tuple[float, float]], color: str) -> None:
    """Mark unstable points with a white face."""
    if points:
        xs, ys = zip(*points, strict=True)
        ax.plot(xs, ys, "o", markerfacecolor="white", markeredgecolor=color, linestyle="none")


def plot(path: str, peaks: list, bw, ref) -> None:
    """GEMM FLOP/s vs work per call (with physics/spec lines) and bandwidth vs working set."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 5))
    for i, peak in enumerate(peaks):
        for precision in peak.precisions:
            color = f"C{i}"
            curve = sorted(peak.curve(precision), key=lambda p: p.flop)
            square = [p for p in curve if p.m == p.n == p.k]
            other = [p for p in curve if not p.m == p.n == p.k]
            ax1.plot([p.flop for p in square], [p.flop_per_s for p in square], "o-", color=color,
                     label=f"{precision} square")
            ax1.plot([p.flop for p in other], [p.flop_per_s for p in other], "s", color=color,
                     label=f"{precision} tall/skinny")
            _hollow(ax1, [(p.flop, p.flop_per_s) for p in curve if p.measurement.unstable], color)
            for value, style, what in ((ref.physics(precision), "--", "physics"), (ref.spec(precision), ":", "spec")):
                if value:
                    ax1.axhline(value, color=color, linestyle=style, linewidth=1, label=f"{precision} {what}")
    ax1.set(xscale="log", yscale="log", xlabel="FLOP per GEMM call (2·m·n·k)", ylabel="FLOP/s (median)",
            title=f"GEMM on {peaks[0].device if peaks else ''} ({ref.chip}); hollow: unstable")
    ax1.grid(True, which="both", alpha=0.3)
    if peaks:
        ax1.legend(fontsize=7, ncol=2)
    if bw is not None:
        for kernel in bw.sustained_bytes_per_s:
            curve = bw.curve(kernel)
            line, = ax2.plot([p.working_set_bytes for p in curve], [p.bytes_per_s for p in curve], "o-",
                             label=kernel)
            _hollow(ax2, [(p.working_set_bytes, p.bytes_per_s) for p in curve if p.measurement.unstable],
                    line.get_color())
            knee = bw.knee_bytes.get(kernel)
            if knee:
                ax2.axvline(knee, color=line.get_color(), linestyle="--", linewidth=1)
        if ref.spec_bandwidth_bytes_per_s:
            ax2.axhline(ref.spec_bandwidth_bytes_per_s, color="k", linestyle=":", label="spec")
        ax2.set(xscale="log", yscale="log", xlabel="working set (bytes)", ylabel="bytes/s (median)",
                title="memory bandwidth (dashed: cache knee)")
        ax2.grid(True, which="both", alpha=0.3)
        ax2.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = Parser(prog=prog or "measure_peak", description=__doc__.splitlines()[0])
    p.add_argument("--device", type=device_arg, default="cpu", help="cpu (default), cuda or cuda:N")
    p.add_argument("--precision", type=csv_choices("precision", PRECISIONS), default=None,
                   help="comma-separated (default cpu: fp32,bf16,fp16,int8, those without a hardware unit timed once "
                        "as emulated; cuda: fp32,tf32,fp16,bf16,fp8,int8)")
    p.add_argument("--remeasure", action="store_true", help="ignore the cached measurement")
    p.add_argument("--no-bandwidth", action="store_true", help="skip the bandwidth sweep")
    p.add_argument("--json", action="store_true", help="print an array of flat records")
    p.add_argument("--plot", metavar="FILE", type=output_file, help="write the GEMM and bandwidth curves (PNG/PDF/SVG)")
    p.add_argument("--csv", metavar="FILE", type=output_file, help="write the rows to FILE as each completes")
    return p


def _rate(flop_per_s: float | None = None, bytes_per_s: float | None = None) -> str:
    if flop_per_s:
        return f"{flop_per_s / 1e12:.3f} TFLOP/s"
    return f"{bytes_per_s / 1e9:.1f} GB/s" if bytes_per_s else "-"


def _display(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    return pd.DataFrame({
        "kind": frame["kind"],
        "what": [r["precision"] or r["kernel"] for r in rows],
        "measured": [_rate(r["peak_flop_per_s"], r["bandwidth_bytes_per_s"]) for r in rows],
        "spec": [_rate(r["spec_peak_flop_per_s"], r["spec_bandwidth_bytes_per_s"]) for r in rows],
        "physics": [_rate(r["physics_peak_flop_per_s"]) for r in rows],
        "of_spec": frame["fraction_of_spec"], "of_physics": frame["fraction_of_physics"],
        "best shape / knee": [r["shape"] if r["kind"] == "gemm" else
                              (f"knee {r['knee_bytes'] / 2**20:.1f} MiB" if r["knee_bytes"] else "no knee")
                              for r in rows],
        "n": frame["n"], "cv": frame["cv"],
        "flag": ["unstable" if r["unstable"] else "" for r in rows],
    })


def _body(args: argparse.Namespace) -> int:
    device = args.device.require()
    from chipcal.measure import bandwidth as bw_mod
    from chipcal.measure import peak as peak_mod
    from chipcal.measure.reference import reference_peaks
    from chipcal.measure.system import fingerprint

    kind = device.kind
    fp = fingerprint(device.index)
    precisions = args.precision or list(peak_mod.default_precisions(args.device, fp))
    ref = reference_peaks(fp, args.device)
    writer = RowWriter(args.csv, FIELDS)
    rows: list[dict] = []
    peaks, bw = [], None
    n_shapes, n_sizes = len(peak_mod.default_shapes(args.device)), len(bw_mod.DEFAULT_BANDWIDTH_SIZES[kind])
    loop = Measuring(len(precisions) * n_shapes + (0 if args.no_bandwidth else 2 * n_sizes), "measure_peak")
    with loop as bar:
        for precision in precisions:
            bar.set_description(f"gemm {precision}")
            start = bar.n
            peak = peak_mod.measure_gemm_peak(args.device, [precision], remeasure=args.remeasure, fp=fp,
                                              on_shape=lambda _label: bar.update())
            bar.update(start + n_shapes - bar.n)
            peaks.append(peak)
            rows.append(gemm_record(peak, precision, ref))
            writer.write(rows[-1])
        if not args.no_bandwidth:
            bar.set_description("bandwidth")
            bw = bw_mod.measure_bandwidth(args.device, remeasure=args.remeasure, fp=fp, on_point=lambda _p: bar.update())
            for row in bandwidth_records(bw, ref):
                rows.append(row)
                writer.write(row)

    if args.json:
        print_json(rows)
    elif rows:
        print_table(_display(rows), {"of_spec": ".1%", "of_physics": ".1%", "cv": ".1%", "n": ".0f"})
        sys.stdout.write(f"chip: {ref.chip}; fingerprint {fp.slug}\n")
        for r in rows:
            if r["note"]:
                sys.stdout.write(f"{r['precision'] or r['kernel']}: {r['note']}\n")
        write_notes(rows, ref.notes, fp.logical_cores)
    if args.plot and (peaks or bw):
        plot(args.plot, peaks, bw, ref)
    return interrupted_exit("measure_peak", rows) if loop.interrupted else 0


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    return run(_body, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
