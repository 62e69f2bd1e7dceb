"""`estimate_tdp`: all-in power of a MAC array running a dense GEMM, and sweeps over precision, circuit or node.

Prints the all-in pJ/MAC (datapath, issue, operand delivery, network, clock/control), TDP with
its low-high band, TOPS and TOPS/W (`--json` has every component); `--plot` draws TDP against ALU count (log-log), one
line per swept value. Does not import torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from chipcal.cli.common import (
    Parser,
    UsageError,
    at_most,
    choice_error,
    plot_path,
    positive_float,
    positive_int,
    print_json,
    print_table,
    run,
    save_figure,
)
from chipcal.model import technology
from chipcal.model.precision import PRECISIONS
from chipcal.model.tdp import TdpEstimate, sweep
from chipcal.model.tdp_records import estimate_record
from chipcal.report.tdp_plots import tdp_vs_alus_figure

GHZ = 1e9
GB = 1e9


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = Parser(prog=prog or "estimate_tdp", description=__doc__.splitlines()[0])
    p.add_argument("--alus", type=positive_int, default=16384, help="MAC units (default 16384 = 128x128)")
    p.add_argument("--process", type=positive_float, default=7.0, metavar="NM",
                   help="process node in nm, 3-45 (default 7)")
    p.add_argument("--circuit", default="tensor_core", type=str.lower,
                   help=f"one of {', '.join(technology.CIRCUITS)} (default tensor_core)")
    p.add_argument("--precision", default="bf16", type=str.lower,
                   help=f"one of {', '.join(PRECISIONS)} (default bf16)")
    p.add_argument("--frequency", type=at_most(positive_float, 100.0), default=1.0, metavar="GHZ",
                   help="clock in GHz, up to 100 (default 1.0)")
    p.add_argument("--memory-bandwidth", type=positive_float, metavar="GB/S",
                   help="add DRAM power at this bandwidth (needs --memory-type)")
    p.add_argument("--memory-type", type=str.lower, help=f"one of {', '.join(technology.MEMORY_TYPES)}")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--compare-precisions", action="store_true", help="sweep every precision")
    group.add_argument("--compare-circuits", action="store_true", help="sweep every circuit type")
    group.add_argument("--compare-processes", action="store_true", help="sweep every process node")
    p.add_argument("--plot", type=plot_path, metavar="FILE", help="log-log TDP vs ALUs chart (.png/.svg)")
    p.add_argument("--json", action="store_true", help="print an array of flat records")
    return p


def _display(e: TdpEstimate) -> dict:
    return {
        "node_nm": e.process_nm, "circuit": e.circuit, "precision": e.precision, "alus": e.alus,
        "GHz": e.frequency_hz / GHZ, "pJ/MAC": e.pj_per_mac, "compute_W": e.compute_w + e.delivery_w,
        "memory_W": e.memory_w, "static_W": e.static_w, "TDP_W": e.tdp_w,
        "band_W": f"{e.tdp_low_w:.3g}-{e.tdp_high_w:.3g}",
        "TOPS": e.peak_ops_per_s / 1e12, "TOPS/W": e.ops_per_w / 1e12,
        "note": "extrapolated <7nm" if e.extrapolated_node else "",
    }


def _body(args: argparse.Namespace) -> int:
    if args.circuit not in technology.CIRCUITS:
        raise choice_error("circuit", args.circuit, technology.CIRCUITS)
    if args.precision not in PRECISIONS:
        raise choice_error("precision", args.precision, PRECISIONS)
    try:
        technology.check_process(args.process)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if (args.memory_bandwidth is None) != (args.memory_type is None):
        raise UsageError("--memory-bandwidth and --memory-type go together")
    if args.memory_type is not None and args.memory_type not in technology.MEMORY_TYPES:
        raise choice_error("memory type", args.memory_type, technology.MEMORY_TYPES)

    base = dict(alus=args.alus, frequency_hz=args.frequency * GHZ, process_nm=args.process,
                circuit=args.circuit, precision=args.precision,
                memory_bandwidth_bytes_per_s=(args.memory_bandwidth or 0.0) * GB,
                memory_type=args.memory_type)
    if args.compare_precisions:
        swept, values = "precision", list(PRECISIONS)
    elif args.compare_circuits:
        swept, values = "circuit", list(technology.CIRCUITS)
    elif args.compare_processes:
        swept, values = "process_nm", list(technology.PROCESS_NODES_NM)
    else:
        swept, values = "alus", [args.alus]
    estimates = sweep(swept, values, **base)

    if args.json:
        print_json(estimate_record(e) for e in estimates)
    else:
        print_table([_display(e) for e in estimates],
                    {"GHz": ".3g", "pJ/MAC": ".3f", "compute_W": ".1f", "memory_W": ".1f",
                     "static_W": ".1f", "TDP_W": ".1f", "TOPS": ".2f", "TOPS/W": ".2f", "node_nm": "g"})
    if args.plot:
        save_figure(tdp_vs_alus_figure(swept if swept != "alus" else "process_nm",
                                       values if swept != "alus" else [args.process], base), args.plot)
    return 0


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    return run(_body, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
