"""`chipcal calibrate`: measure this machine, fit the physics model, validate, write a report.

Writes results/<machine-slug>/<timestamp>/ (calibration.json, report.md, PNG plots, report.html) atomically:
an interrupted run leaves nothing half-written, and a rerun never overwrites an earlier one.
`--refit DIR` measures nothing: it re-fits a recorded run with this code (calibrate.refit) and
writes the new run beside DIR, or under --out.
"""

from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

from chipcal.cli.common import (
    Parser,
    UsageError,
    choice_error,
    csv_choices,
    csv_list,
    device_arg,
    positive_int_list,
    print_json,
    run,
)
from chipcal.model.precision import PRECISIONS


class PhaseBars:
    """One tqdm bar per calibration phase, so each shows its own rate and ETA."""

    def __init__(self):
        self.bar = None

    def phase(self, name: str, total: int) -> None:
        from tqdm import tqdm

        self.close()
        self.bar = tqdm(total=total, desc=name, unit="step", file=sys.stderr, dynamic_ncols=True)

    def step(self, label: str) -> None:
        if self.bar is not None:
            self.bar.set_postfix_str(label[:40], refresh=False)
            self.bar.update(1)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    from chipcal.calibrate.config import DEFAULT_MODELS, QUICK_MODELS, SMOKE_MODELS

    p = Parser(prog=prog or "chipcal calibrate", description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", type=device_arg, help="cpu (default), cuda or cuda:N")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true",
                      help=f"shorter timing budgets, 2 rounds, models {','.join(QUICK_MODELS)}")
    mode.add_argument("--smoke", action="store_true",
                      help=f"the shortest run through every phase, to check that a machine runs chipcal end to end "
                           f"(a fleet's smoke test): an eighth of the probe budgets, no measurement cache, 2 rounds, "
                           f"{','.join(SMOKE_MODELS)} at batch 1, fp32 sweep; its figures are noisy")
    p.add_argument("--models", type=csv_list, metavar="A,B,…",
                   help=f"validation models (default {','.join(DEFAULT_MODELS)})")
    p.add_argument("--batch", type=positive_int_list, metavar="1,8",
                   help="validation batch sizes (default 1,8; --smoke: 1)")
    p.add_argument("--out", metavar="DIR",
                   help="results directory (default results/; with --refit, beside the re-fitted run)")
    p.add_argument("--by-node", action="store_true",
                   help="write the run under OUT/<node>/ instead of OUT/<machine>/: a fleet's shared store, where "
                        "identical nodes share one machine class (the node: $CHIPCAL_NODE, else Slurm's node name, "
                        "else the host name)")
    p.add_argument("--precision", type=csv_choices("precision", PRECISIONS), metavar="fp32,bf16,…",
                   help="GEMM sweep precisions (default fp32,bf16,fp16,int8: those with a hardware unit here are "
                        "swept, any other is timed once at one small shape and reported as emulated). "
                        "Layers and models run in fp32")
    p.add_argument("--remeasure", action="store_true", help="ignore cached GEMM peak and bandwidth results")
    again = p.add_mutually_exclusive_group()
    again.add_argument("--resume", metavar="DIR", type=Path,
                       help="continue an interrupted run from its journal (DIR is named when a run is interrupted); "
                            "the run's own options are used")
    again.add_argument("--refit", metavar="DIR", type=Path,
                       help="measure nothing: re-fit the recorded run in DIR (a directory with calibration.json) with "
                            "this chipcal and write it as a new run beside DIR (or under --out); its measurements "
                            "are kept as recorded, and no device is needed")
    p.add_argument("--json", action="store_true", help="print the run's summary as an array of flat records")
    return p


def _check_models(names: list[str]) -> None:
    from chipcal.model.workload import classification_models

    valid = sorted(classification_models())
    for name in names:
        if name not in valid:
            raise choice_error("model", name, valid)


def code_version() -> str:
    """The code that fits: chipcal's version, its checkout's `git describe` where it runs from a
    git checkout, and torch's version (it counts the workloads)."""
    from importlib.metadata import PackageNotFoundError, version

    import torch

    try:
        described = f"chipcal {version('chipcal')}"
    except PackageNotFoundError:
        described = "chipcal (not installed)"
    try:
        git = subprocess.run(["git", "-C", str(Path(__file__).resolve().parent), "describe", "--always", "--dirty",
                              "--tags"], capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.SubprocessError):
        git = None
    if git is not None and git.returncode == 0 and git.stdout.strip():
        described += f" (git {git.stdout.strip()})"
    return f"{described}, torch {torch.__version__}"


def _write(doc, results_root: Path, folder: str):
    """The run written atomically as results_root/folder/<its timestamp>/: calibration.json,
    report.md, the plots and report.html (report.calibration.run_writers, calibrate.store).
    Returns (its directory, the document with its plots)."""
    from chipcal.calibrate import store
    from chipcal.report.calibration import run_writers
    from chipcal.report.plots import plot_writers

    writers = run_writers(doc)      # rendered inside the guarded write: a failure saves the document
    stamp = doc.created_utc.replace("-", "").replace(":", "")
    return store.write_run(results_root, folder, stamp, writers, fallback=doc.to_dict()), \
        doc.with_plots(plot_writers(doc))


def _refit(args: argparse.Namespace) -> int:
    """--refit: the recorded run re-fitted (calibrate.refit) and written beside it, or under --out."""
    from chipcal.calibrate import refit, store
    from chipcal.calibrate.run import now_utc

    source = args.refit
    if not source.is_dir():
        raise UsageError(f"--refit {source}: not a directory")
    doc = store.load(source)
    # beside the source (its parent folder), or --out/<machine>/ as a measured run
    root, folder = ((Path(args.out), doc.machine_slug) if args.out else
                    (source.resolve().parent.parent, source.resolve().parent.name))
    store.check_writable(root / folder)
    chip, origin = refit.refit_chip(doc)
    bars = PhaseBars()
    new = refit.refit_document(doc, chip, origin, source_run=str(source), code=code_version(),
                               command=args.command, created_utc=now_utc(), progress=bars)
    bars.phase("writing report", 1)
    path, new = _write(new, root, folder)
    bars.close()
    _summarize(new, path, args.json)
    return 0


def _body(args: argparse.Namespace) -> int:
    if args.refit:
        return _refit(args)
    args.device.require()

    from chipcal.calibrate import rerun, store
    from chipcal.calibrate.config import CalibrationConfig
    from chipcal.calibrate.journal import Journal
    from chipcal.calibrate.run import run_calibration

    args.out = args.out or "results"
    store.check_writable(Path(args.out))
    if args.resume:
        journal, fields = Journal.open(args.resume)
        try:
            config = CalibrationConfig.from_fields(fields)
        except TypeError as exc:
            raise UsageError(f"--resume {args.resume}: its configuration does not fit this chipcal ({exc})") from None
    else:
        config = _config(args)
        journal = Journal.create(config.journal_root(Path(args.out)), config)
    bars = PhaseBars()
    try:
        doc = run_calibration(config, progress=bars, journal=journal)
        folder = config.folder(doc.machine_slug)
        doc = rerun.with_rerun(doc, Path(args.out), folder)
        bars.phase("writing report", 1)
        path, doc = _write(doc, Path(args.out), folder)
    except KeyboardInterrupt:
        bars.close()
        sys.stderr.write(f"interrupted: the measurements so far are kept in {journal.directory}; "
                         f"continue with: chipcal calibrate --out {shlex.quote(args.out)} --resume "
                         f"{shlex.quote(str(journal.directory))}\n")
        return 130
    journal.remove()
    bars.close()
    _summarize(doc, path, args.json)
    return 0


def _config(args: argparse.Namespace):
    """The run's configuration from its arguments; --quick and --smoke choose their own models,
    batches and (--smoke) sweep precision where the arguments do not."""
    from chipcal.calibrate.config import (
        DEFAULT_BATCHES,
        QUICK_MODELS,
        SMOKE_BATCHES,
        SMOKE_MODELS,
        CalibrationConfig,
    )

    models = args.models or (list(SMOKE_MODELS) if args.smoke else list(QUICK_MODELS) if args.quick else None)
    if models:
        _check_models(models)
    precisions = args.precision or (["fp32"] if args.smoke else None)
    return CalibrationConfig(device=args.device, quick=args.quick, smoke=args.smoke,
                             batches=tuple(args.batch or (SMOKE_BATCHES if args.smoke else DEFAULT_BATCHES)),
                             remeasure=args.remeasure, by_node=args.by_node,
                             gemm_precisions=tuple(precisions) if precisions else None, command=args.command,
                             **({"models": tuple(models)} if models else {}))


def _summarize(doc, path: Path, as_json: bool) -> None:
    """The written run on stdout: the summary record (--json), or its peaks, bandwidth,
    validation, drift since the previous run and flags."""
    from chipcal.report.runs import summary_record

    val = doc.validation
    if as_json:
        print_json([summary_record(doc, path)])
    else:
        print(f"wrote {path}")
        if doc.refit:
            print(f"  refit of {doc.refit.source_run} ({doc.refit.source_created_utc}) by {doc.refit.code}; "
                  "measurements as recorded")
        for p in doc.peaks:
            if p.measured_flop_per_s:
                frac = f"{p.fraction_of_physics:.0%} of physics peak" if p.fraction_of_physics else ""
                frac = "emulated: no hardware unit, a rate and not a peak" if p.support == "emulated" else frac
                print(f"  {p.precision:>5} GEMM peak {p.measured_flop_per_s / 1e9:8.1f} GFLOP/s  {frac}")
        print(f"  bandwidth {doc.bandwidth.measured_bytes_per_s / 1e9:.1f} GB/s")
        if val.n:
            print(f"  held-out models: median |error| {val.median_abs_error:.1%}, p90 {val.p90_abs_error:.1%} "
                  f"(defaults: {val.default_median_abs_error:.1%}, {val.default_p90_abs_error:.1%})")
        else:
            print("  held-out models: none could be run within the time bound (see report.md)")
        if doc.rerun:
            print(f"  since the previous run here ({doc.rerun.previous_run}): the same {doc.rerun.n} cases moved "
                  f"by median {doc.rerun.median_abs_change:.1%}, max {doc.rerun.max_abs_change:.1%}")
        if doc.phases and not doc.refit:
            slowest = sorted(doc.phases, key=lambda p: -p.wall_s)[:3]
            print(f"  took {sum(p.wall_s for p in doc.phases):.0f} s before the report: "
                  + ", ".join(f"{p.phase} {p.wall_s:.0f} s" for p in slowest) + " (report.md: where the time went)")
        for f in doc.flags:
            print(f"  flag {f.code}: {f.message}")


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join([*(prog or "chipcal calibrate").split(), *argv])

    def body(args: argparse.Namespace) -> int:
        args.command = command
        return _body(args)

    return run(body, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
