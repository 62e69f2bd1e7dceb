"""`chipcal report [DIR]`: calibrations side by side, one row per machine (its latest run).

Peaks and their fraction of physics/spec, bandwidth, held-out model error and flags, read
from every calibration.json under DIR (default results/).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from chipcal.calibrate import store
from chipcal.cli.common import Parser, UsageError, print_json, print_table, run, summary_record


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = Parser(prog=prog or "chipcal report", description=__doc__.splitlines()[0])
    p.add_argument("directory", nargs="?", default="results", help="results directory (default results/)")
    p.add_argument("--all", action="store_true", help="every run, not only the latest per machine")
    p.add_argument("--json", action="store_true", help="print an array of flat records")
    return p


def collect(directory: Path, latest_only: bool) -> tuple[list[dict], list[str]]:
    rows, bad = [], []
    for run_dir in store.find_runs(directory):
        try:
            rows.append(summary_record(store.load(run_dir), run_dir))
        except ValueError as exc:
            bad.append(f"{run_dir}: {exc}")
    if latest_only:
        latest: dict[tuple[str, str], dict] = {}
        for r in rows:
            key = (r["machine"], r["device"])
            if key not in latest or r["created_utc"] > latest[key]["created_utc"]:
                latest[key] = r
        rows = sorted(latest.values(), key=lambda r: (r["machine"], r["device"]))
    return rows, bad


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


def _body(args: argparse.Namespace) -> int:
    directory = Path(args.directory)
    if not directory.is_dir():
        raise UsageError(f"{directory} is not a directory (give the results directory, e.g. results/)")
    rows, bad = collect(directory, latest_only=not args.all)
    for line in bad:
        sys.stderr.write(f"warning: skipped {line}\n")
    if args.json:
        print_json(rows)
        return 0
    if not rows:
        print(f"no calibrations under {directory}")
        return 0
    shown = []
    for r in rows:
        peaks = _peaks_text(r)
        shown.append({"machine": r["machine"], "device": r["device"], "chip": r["chip"], "created": r["created_utc"],
                      "peaks (of physics / spec)": peaks,
                      "GB/s": None if r["bandwidth_bytes_per_s"] is None else r["bandwidth_bytes_per_s"] / 1e9,
                      "models": r["models_validated"], "median_err": r["median_abs_error"],
                      "p90_err": r["p90_abs_error"], "flags": r["flags"] or "-"})
    print_table(shown, {"GB/s": ".1f", "median_err": ".1%", "p90_err": ".1%"})
    return 0


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    return run(_body, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
