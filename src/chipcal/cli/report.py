"""`chipcal report`: calibration runs side by side, the results index, HTML reports, two runs compared.

- `chipcal report [DIR]`: the latest run per machine under DIR (default results/): held-out error,
  bandwidth, then each machine's peaks and flags (`--all`: every run; `--json`: flat records).
- `chipcal report DIR --markdown DIR/README.md`: the results index (report.index), and each
  machine's HISTORY.md, runs dropped from the tree read back from git.
- `chipcal report DIR --html`: report.html (one self-contained page) in every run directory under DIR.
- `chipcal report DIR --uncited PATH…`: the run directories that neither the index nor any file
  under PATH cites (the ones to `git rm`).
- `chipcal report --compare RUN_A RUN_B [--html FILE]`: two runs of one machine side by side, each
  change judged against the runs' noise (report.compare).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from chipcal.calibrate import store
from chipcal.cli.common import Parser, UsageError, print_json, print_table, run
from chipcal.report.render import wrap
from chipcal.report.runs import MissingPath, citing_texts, latest_runs, read_runs, summary_record

if TYPE_CHECKING:       # the index's modules import numpy and scipy: imported where they are used
    from chipcal.report.index import RunSummary


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = Parser(prog=prog or "chipcal report", description=__doc__.splitlines()[0])
    p.add_argument("directory", nargs="?", default="results", help="results directory (default results/)")
    p.add_argument("--all", action="store_true", help="every run, not only the latest per machine")
    p.add_argument("--json", action="store_true", help="print an array of flat records")
    p.add_argument("--markdown", metavar="FILE",
                   help="write the results index to FILE (links relative to DIR: write it into DIR) and "
                        "DIR/<machine>/HISTORY.md")
    p.add_argument("--no-history", action="store_true", help="with --markdown: the index only")
    p.add_argument("--html", nargs="?", const=True, metavar="FILE",
                   help="write report.html into every run directory under DIR; with --compare: the comparison "
                        "as one HTML page in FILE")
    p.add_argument("--uncited", nargs="+", metavar="PATH",
                   help="list the run directories under DIR that the index does not show and no file under "
                        "PATH cites by name")
    p.add_argument("--compare", nargs=2, metavar=("RUN_A", "RUN_B"),
                   help="two run directories of one machine side by side (B against A)")
    return p


def _peaks_text(r: dict) -> str:
    parts = []
    for key, value in r.items():
        if not key.startswith("peak_flop_per_s_") or not value:
            continue
        p = key.removeprefix("peak_flop_per_s_")
        fractions = [f"{r[f'fraction_of_{kind}_{p}']:.0%} {kind}" for kind in ("physics", "spec")
                     if r.get(f"fraction_of_{kind}_{p}") is not None]
        parts.append(f"{p} {value / 1e9:.0f} GFLOP/s" + (f" ({', '.join(fractions)})" if fractions else ""))
    return "; ".join(parts)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.1%}"


def _warn_skipped(lines: Sequence[str]) -> None:
    for line in lines:
        sys.stderr.write(f"warning: skipped {line}\n")


def _run_summaries(directory: Path) -> list[RunSummary]:
    """RunSummary of every readable run under `directory` (the unreadable ones on stderr)."""
    from chipcal.report.index_runs import run_summaries

    runs, skipped = run_summaries(directory)
    _warn_skipped(skipped)
    return runs


def _write_index(directory: Path, target: str, history: bool) -> None:
    from chipcal.report.index import HISTORY_FILE, history_markdown, index_markdown
    from chipcal.report.index_runs import dropped_runs

    runs = _run_summaries(directory)
    if not runs:
        raise UsageError(f"no calibration runs under {directory}")
    Path(target).write_text(index_markdown(runs))
    sys.stderr.write(f"wrote {target}\n")
    if not history:
        return
    dropped, skipped = dropped_runs(directory, {r.directory for r in runs})
    _warn_skipped(skipped)
    everything = runs + dropped
    for machine in sorted({r.machine for r in runs}):
        path = directory / machine / HISTORY_FILE
        path.write_text(history_markdown(machine, everything))
        sys.stderr.write(f"wrote {path}\n")


def _write_html(directory: Path) -> None:
    from chipcal.report.calibration import render_html

    runs = store.find_runs(directory)
    if not runs:
        raise UsageError(f"no calibration runs under {directory}")
    from tqdm import tqdm

    for run_dir in tqdm(runs, desc="report.html", file=sys.stderr, leave=False):
        (run_dir / "report.html").write_text(render_html(store.load(run_dir)))
    sys.stderr.write(f"wrote report.html in {len(runs)} run directories under {directory}\n")


def _uncited(directory: Path, paths: Sequence[str]) -> None:
    from chipcal.report.index import cited, uncited

    try:
        texts = citing_texts(paths)
    except MissingPath as exc:
        raise UsageError(f"--uncited: {exc}") from None
    for r in uncited(_run_summaries(directory), cited(texts)):
        print(directory / r.directory)


def _compare(args: argparse.Namespace) -> int:
    from chipcal.report import compare, render

    (a_dir, b_dir) = args.compare
    result = compare.compare(store.load(a_dir), store.load(b_dir), a_dir, b_dir)
    blocks = compare.blocks(result)
    if isinstance(args.html, str):
        Path(args.html).write_text(render.html_page(f"Compare {a_dir} and {b_dir}", blocks))
        sys.stderr.write(f"wrote {args.html}\n")
    elif args.html:
        raise UsageError("--compare --html needs a file name")
    if args.json:
        print_json(compare.records(result))
    else:
        sys.stdout.write(render.text(blocks))
    return 0


def _body(args: argparse.Namespace) -> int:
    if args.compare:
        return _compare(args)
    directory = Path(args.directory)
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory (give the results directory, e.g. results/)")
    if args.markdown or args.html or args.uncited:
        if isinstance(args.html, str):
            raise UsageError("--html takes a file name only with --compare")
        if args.markdown:
            _write_index(directory, args.markdown, not args.no_history)
        if args.html:
            _write_html(directory)
        if args.uncited:
            _uncited(directory, args.uncited)
        return 0
    runs, bad = read_runs(directory)
    _warn_skipped(bad)
    rows = [summary_record(r.document, r.path) for r in (runs if args.all else latest_runs(runs))]
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print(f"no calibrations under {directory}")
        return 0
    print_table([{"machine": r["machine"], "device": r["device"],
                  "created": r["created_utc"][:16].replace("T", " "), "quick": "yes" if r["quick"] else "",
                  "GB/s": None if r["bandwidth_bytes_per_s"] is None else r["bandwidth_bytes_per_s"] / 1e9,
                  "held-out error": f"{_pct(r['median_abs_error'])} / {_pct(r['p90_abs_error'])}",
                  "cases": r["models_validated"]} for r in rows], {"GB/s": ".1f"})
    print("held-out error: median / p90 of |predicted / measured - 1| over the models the fit never saw")
    for r in rows:
        print(wrap(f"{r['machine']} ({r['chip']}, {r['created_utc']}): peaks (of physics / spec) "
                   f"{_peaks_text(r) or '-'}; flags: {r['flags'] or '-'}", indent="  "))
    return 0


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    return run(_body, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
