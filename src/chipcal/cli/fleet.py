"""`chipcal fleet`: calibrate a fleet of nodes through its scheduler, and find the slow ones.

- `chipcal fleet run --store DIR [--scheduler local|slurm] [--nodes N | --nodelist A,B] [--partition P]
  [--quick] [-- CALIBRATE ARGS]`: one `chipcal calibrate` per node into DIR/<node>/<timestamp>/;
  Slurm: one job-array task per node, each with the node to itself; local (the default): this
  machine, now. Prints the submission and the job id.
- `chipcal fleet status DIR`: which tasks ran, failed or wait.
- `chipcal fleet report DIR [--json | --csv FILE | --html FILE]`: a row per node, the median and
  spread per figure, the nodes off their peers and why, drift since each node's previous run.
- `chipcal fleet manifest --k8s --nodes N --image IMAGE --claim PVC [-- CALIBRATE ARGS]`: a
  Kubernetes Indexed Job that runs the same per node.
- `chipcal fleet task`: what one task runs on its node (the schedulers call it).

docs/fleet.md has the set-up on Slurm and on Kubernetes.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from chipcal.cli.common import (
    Parser,
    UsageError,
    csv_list,
    output_file,
    positive_int,
    print_json,
    print_table,
    run,
    subcommand,
)


def _split(argv: Sequence[str]) -> tuple[list[str], list[str]]:
    """(fleet arguments, calibrate arguments after `--`)."""
    argv = list(argv)
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = Parser(prog=prog or "chipcal fleet", description=__doc__.splitlines()[0],
               epilog="Arguments after `--` go to each node's `chipcal calibrate`.")
    sub = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    r = sub.add_parser("run", help="calibrate every node into a shared store")
    r.add_argument("--store", required=True, type=Path, help="the shared directory every node writes into")
    r.add_argument("--scheduler", choices=("local", "slurm"), default="local",
                   help="local (default): this machine, now; slurm: one job-array task per node")
    nodes = r.add_mutually_exclusive_group()
    nodes.add_argument("--nodes", type=positive_int, default=1, help="Slurm: how many nodes (array tasks)")
    nodes.add_argument("--nodelist", type=csv_list, metavar="A,B,…", help="Slurm: these nodes, one job each")
    r.add_argument("--partition", help="Slurm partition")
    r.add_argument("--quick", action="store_true", help="each node runs `chipcal calibrate --quick`")
    s = sub.add_parser("status", help="which tasks ran, failed or wait")
    s.add_argument("store", type=Path)
    s.add_argument("--json", action="store_true", help="print an array of flat records")
    rep = sub.add_parser("report", help="nodes, spread, outliers and drift")
    rep.add_argument("store", type=Path)
    out = rep.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="print an array of flat records, one per node and figure")
    out.add_argument("--csv", metavar="FILE", type=output_file, help="write the same records as CSV")
    rep.add_argument("--html", metavar="FILE", type=output_file, help="also write the report as one HTML page")
    m = sub.add_parser("manifest", help="a Kubernetes Indexed Job that runs the fleet")
    m.add_argument("--k8s", action="store_true", required=True, help="write a Kubernetes manifest (the one kind)")
    m.add_argument("--nodes", type=positive_int, required=True, help="GPU nodes: one pod each")
    m.add_argument("--image", required=True, help="a container image with chipcal installed")
    m.add_argument("--claim", required=True, help="the PersistentVolumeClaim (ReadWriteMany) that holds the store")
    m.add_argument("--gpus-per-node", type=int, default=8, help="GPUs each pod requests (default 8; 0: none)")
    m.add_argument("--namespace")
    m.add_argument("--submission", help="the id its pods record their state under (default: a new UTC one)")
    m.add_argument("--quick", action="store_true")
    m.add_argument("--out", metavar="FILE", type=output_file, help="write it to FILE (default: stdout)")
    t = sub.add_parser("task", help="run one fleet task on this node (the schedulers call it)")
    t.add_argument("--store", required=True, type=Path)
    t.add_argument("--submission", required=True)
    t.add_argument("--index", type=int, help="the task's index (default: $SLURM_ARRAY_TASK_ID or "
                                             "$JOB_COMPLETION_INDEX)")
    t.add_argument("--tasks", type=positive_int, help="Kubernetes: the task count, recorded by the first pod")
    return p


def _calibrate(argv: list[str]) -> int:
    return subcommand("calibrate").main(argv, prog="chipcal calibrate")


def _calibrate_args(args: argparse.Namespace) -> list[str]:
    """What each node's calibrate runs: --quick where asked, and --remeasure, since a fleet run
    measures every node afresh (a cached peak would hide a node that slowed down)."""
    from chipcal.fleet.launch import check_calibrate_args

    check_calibrate_args(args.calibrate)
    subcommand("calibrate").build_parser().parse_args(args.calibrate)   # a mistake is said now, not by every node
    extra = [a for a, on in (("--quick", args.quick), ("--remeasure", "--smoke" not in args.calibrate)) if on]
    return [*extra, *args.calibrate]


def _run(args: argparse.Namespace) -> int:
    from chipcal.fleet.launch import Request, start

    if args.scheduler == "local" and (args.nodelist or args.nodes != 1 or args.partition):
        raise UsageError("--nodes, --nodelist and --partition are Slurm's; local runs this one machine")
    sub, done = start(Request(args.store, args.scheduler, args.nodes, tuple(args.nodelist or ()), args.partition,
                              tuple(_calibrate_args(args))), _calibrate)
    jobs = ",".join(sub.job_ids) or "-"
    print(f"submission {sub.id}: {sub.tasks} task(s), {sub.scheduler} job {jobs}; "
          f"chipcal fleet status {args.store}")
    failed = [s for s in done if s.state != "done"]
    return 1 if failed else 0


def _status(args: argparse.Namespace) -> int:
    import dataclasses

    from chipcal.fleet.status import fleet_status

    rows = [dataclasses.asdict(s) for s in fleet_status(args.store)]
    if args.json:
        print_json(rows)
    elif rows:
        print_table(rows)
    else:
        print(f"{args.store}: no fleet submissions")
    return 0


def _report(args: argparse.Namespace) -> int:
    from chipcal.fleet import report
    from chipcal.report.render import text

    fleet = report.fleet_report(args.store)
    records = report.records(fleet)
    if args.html:
        Path(args.html).write_text(report.render_html(fleet))
        sys.stderr.write(f"wrote {args.html}\n")
    if args.json:
        print_json(records)
    elif args.csv:
        import pandas as pd

        pd.DataFrame(records).to_csv(args.csv, index=False)
        sys.stderr.write(f"wrote {args.csv}\n")
    else:
        print(text(report.blocks(fleet)))
    return 0


def _manifest(args: argparse.Namespace) -> int:
    from chipcal.fleet.k8s import K8sRequest, manifest
    from chipcal.fleet.store import new_stamp

    submission = args.submission or f"{new_stamp()}-k8s"
    text = manifest(K8sRequest(args.nodes, args.image, args.claim, args.gpus_per_node, submission,
                               tuple(_calibrate_args(args)), args.namespace))
    if args.out:
        Path(args.out).write_text(text)
        sys.stderr.write(f"wrote {args.out}: kubectl apply -f {args.out}\n")
    else:
        sys.stdout.write(text)
    return 0


def _task_index(args: argparse.Namespace) -> int:
    if args.index is not None:
        return args.index
    for env in ("SLURM_ARRAY_TASK_ID", "JOB_COMPLETION_INDEX"):
        if os.environ.get(env, "").isdigit():
            return int(os.environ[env])
    raise UsageError("--index: not given, and neither $SLURM_ARRAY_TASK_ID nor $JOB_COMPLETION_INDEX is set")


def _task(args: argparse.Namespace) -> int:
    from chipcal.calibrate.run import now_utc
    from chipcal.fleet import store
    from chipcal.fleet.task import run_task

    index = _task_index(args)
    if args.tasks:
        store.submission_or_new(args.store, store.Submission(args.submission, "k8s", now_utc(), args.tasks,
                                                             tuple(args.calibrate)))
    state = run_task(args.store, args.submission, index, _calibrate)
    print(f"task {index} on {state.node}: {state.state}" + (f", {state.run}" if state.run else ""))
    return 0 if state.state == "done" else 1


ACTIONS = {"run": _run, "status": _status, "report": _report, "manifest": _manifest, "task": _task}


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    own, calibrate_args = _split(sys.argv[1:] if argv is None else argv)

    def body(args: argparse.Namespace) -> int:
        args.calibrate = calibrate_args
        return ACTIONS[args.action](args)

    return run(body, build_parser(prog), own)


if __name__ == "__main__":
    raise SystemExit(main())
