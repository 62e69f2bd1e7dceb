"""`chipcal validate`: predictions against published measurements (the validation corpus).

Per row: published vs predicted latency, the error and the bottleneck; then median and p90
|error| per runtime and overall, and the bias per chip. `--plot` draws predicted vs published
(log-log); `--markdown` writes the tables of both splits for docs/validation.md; `--fit` refits
the defaults the `fit` split constrains. Workloads come from the cache (chipcal.measure.workloads):
with a warm cache torch is never imported.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from chipcal.cli.common import (
    Parser,
    RowWriter,
    UsageError,
    load_registry_warn,
    note,
    output_file,
    plot_path,
    print_json,
    print_table,
    print_wrapped,
    run,
    save_figure,
)
from chipcal.measure.workloads import WorkloadSource

if TYPE_CHECKING:       # imported when a command runs (_body), not for --help
    from chipcal.calibrate.fits import FitResult
    from chipcal.model.registry import Registry
    from chipcal.validate.corpus import Measurement, Summary

SPLIT_CHOICES = ("test", "fit", "all")


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = Parser(prog=prog or "chipcal validate", description=__doc__.splitlines()[0])
    p.add_argument("--corpus", metavar="FILE", help="corpus CSV (default: the packaged src/chipcal/validate/data/corpus.csv)")
    p.add_argument("--split", choices=SPLIT_CHOICES, default="test", help="rows to compare (default test)")
    p.add_argument("--json", action="store_true", help="print an array of flat records, one per row")
    p.add_argument("--plot", metavar="FILE", type=plot_path, help="predicted vs published, log-log (.png/.svg)")
    p.add_argument("--markdown", metavar="FILE", help="write the summary tables of both splits (docs/validation.md)")
    p.add_argument("--fit", action="store_true", help="refit the defaults on the fit split and print them")
    p.add_argument("--no-cache", action="store_true", help="characterize again instead of using the cache")
    p.add_argument("--mlperf", nargs="?", const="", metavar="PATH",
                   help="MLPerf Inference rows instead of the corpus: a round's results tree (a checkout of "
                        "mlcommons/inference_results_vX.Y), its summary_results.json, or a CSV of its rows; alone, "
                        "the packaged v4.1 rows (docs/validation-corpus.md)")
    p.add_argument("--csv", metavar="FILE", type=output_file, help="with --mlperf: write every row, predicted or "
                                                                    "excluded, as CSV")
    p.add_argument("--skip-llm", action="store_true",
                   help="with --mlperf: leave the LLM rows out (serving them takes minutes on a small machine)")
    p.add_argument("--exclude-unknown", action="store_true",
                   help="with --mlperf: list the rows of an accelerator no registry chip is known for as excluded, "
                        "instead of refusing the file (a later round's new hardware)")
    return p


def _fit(rows: Sequence[Measurement], source: WorkloadSource, registry: Registry) -> FitResult:
    """The defaults refitted on the fit split, with a progress bar on stderr."""
    from tqdm import tqdm

    from chipcal.validate.corpus import fit_defaults, select

    with tqdm(desc="fitting the defaults", unit="evaluation", file=sys.stderr, leave=False) as bar:
        return fit_defaults(select(rows, "fit"), source.get, registry, on_evaluation=bar.update)


def _print_summary(split: str, summary: Summary, fit: FitResult | None) -> None:
    from chipcal.validate.tables import stats_table

    print(f"\nsplit {split}: {summary.overall.n} rows; error = predicted / published - 1 (+: model slow)")
    print_table(stats_table((summary.overall, *summary.by_runtime), "runtime"))
    print("\nbias per chip (median signed error):")
    print_table(stats_table(summary.by_chip, "chip"))
    print("\nbias per model (median signed error):")
    print_table(stats_table(summary.by_model, "model"))
    if summary.unsupported:
        print(f"\n{summary.unsupported} row(s) not predicted (no engine for the precision)")
    if fit is not None:
        print("\nfit on the fit split (log-latency least squares):")
        for k, v in fit.parameters.items():
            print(f"  {k} = {v:.4g} ± {fit.stderr[k]:.2g}")
        print(f"  {fit.n} rows, R² (log latency) {fit.r2:.3f}")


def _mlperf(args: argparse.Namespace) -> int:
    """--mlperf: every row predicted or excluded with its reason; the table, the |error| figures
    and the exclusions counted by reason."""
    from collections import Counter
    from pathlib import Path

    from chipcal.validate import mlperf, mlperf_check

    if args.fit or args.markdown or args.corpus or args.split != "test":
        raise UsageError("--mlperf takes --json, --csv, --plot, --skip-llm and --exclude-unknown only")
    rows = mlperf.load_rows(Path(args.mlperf) if args.mlperf else None, exclude_unknown=args.exclude_unknown)
    source = WorkloadSource(use_cache=not args.no_cache, notify=note)
    registry = load_registry_warn()
    from tqdm import tqdm

    with tqdm(total=len(rows), desc="MLPerf rows", unit="row", file=sys.stderr, dynamic_ncols=True, leave=False) as bar:
        checked, excluded = mlperf_check.check(rows, registry, source.get, None if args.skip_llm else source.llm_step,
                                               on_row=bar.update)
    records = [r.record() for r in (*checked, *excluded)]
    if args.plot:
        from chipcal.validate.mlperf_plot import offline_figure

        save_figure(offline_figure(checked, registry), args.plot)
    if args.csv:
        writer = RowWriter(args.csv, tuple(records[0]) if records else ())
        for record in records:
            writer.write(record)
        sys.stderr.write(f"wrote {args.csv}\n")
    if args.json:
        print_json(records)
        return 0
    print_table([{k: r[k] for k in ("system", "chip", "benchmark", "scenario", "batch", "measured", "predicted",
                                    "error", "held_out_error", "bottleneck")} for r in records if r["status"] == "predicted"],
                {"measured": ".4g", "predicted": ".4g", "error": "+.1%", "held_out_error": "+.1%"})
    print()
    print_wrapped(f"{len(checked)} of {len(rows)} rows predicted, per accelerator (latency: one sample, or a "
                  "MultiStream query); error = predicted / measured - 1; held_out_error: with the stack's efficiency "
                  "fitted on the other accelerators")
    for llm, scenario in ((llm, s) for llm in (False, True) for s in mlperf_check.PREDICTED_SCENARIOS):
        these = [c for c in checked if c.row.scenario == scenario and (c.layout != "") == llm]
        if these:
            _, median, p90 = mlperf_check.error_figures(these)
            line = f"  {'LLM ' if llm else ''}{scenario}: {len(these)} rows, median |error| {median:.1%}, p90 {p90:.1%}"
            if these[0].row.unit != "latency_s":        # a latency row keeps its own (mlperf_check.Checked)
                _, median, p90 = mlperf_check.error_figures(these, held_out=True)
                line += f"; held out: median {median:.1%}, p90 {p90:.1%}"
            print(line)
    powered = [c for c in checked if c.power_error is not None]
    if powered:
        _, throughput, _ = mlperf_check.error_figures(powered, held_out=True)
        power = max(abs(c.power_error) for c in powered)
        energy = ", ".join(f"{c.row.benchmark} {c.energy_error:+.1%}" for c in powered if c.layout)
        print_wrapped(f"MaxQ (at the power limit): {len(powered)} rows, held-out throughput median |error| "
                      f"{throughput:.1%}; system power |error| at most {power:.1%} (node power fitted on the "
                      "system's other benchmarks)" + (f"; LLM energy per token: {energy}" if energy else ""), "  ")
    for reason, count in Counter(e.reason for e in excluded).most_common():
        print_wrapped(f"excluded {count}: {reason}", "  ")
    return 0


def _body(args: argparse.Namespace) -> int:
    if args.mlperf is not None:
        return _mlperf(args)
    mlperf_only = [f for f, given in (("--csv", args.csv), ("--skip-llm", args.skip_llm),
                                      ("--exclude-unknown", args.exclude_unknown)) if given]
    if mlperf_only:
        raise UsageError(f"{mlperf_only[0]}: with --mlperf only")
    from chipcal.validate.corpus import load_corpus
    from chipcal.validate.plot import predicted_vs_published_figure
    from chipcal.validate.splits import compare_splits
    from chipcal.validate.tables import markdown_report, row_table

    rows = load_corpus(args.corpus)
    registry = load_registry_warn()
    source = WorkloadSource(use_cache=not args.no_cache, notify=note)
    shown, by_split = compare_splits(rows, args.split, source.get, registry, every_split=bool(args.markdown))
    fit = _fit(rows, source, registry) if args.fit else None
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write(markdown_report(by_split, fit))
        sys.stderr.write(f"wrote {args.markdown}\n")
    if args.plot:
        save_figure(predicted_vs_published_figure(shown.comparisons), args.plot)
    if args.json:
        print_json([c.record() for c in shown.comparisons])
        return 0
    print_table(row_table(shown.comparisons))
    _print_summary(args.split, shown.summary, fit)
    return 0


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    return run(_body, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
