"""`compare_tdp_registry`: physics TDP at the derived peak vs spec TDP for registry chips.

For each chip: each engine's power flat out (CUDA cores, tensor cores, ...), the peak engine
plus DRAM at full bandwidth plus static power, its ratio to the spec TDP, the pJ/MAC at which
compute alone would exhaust the TDP, and a verdict. Does not import torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from chipcal.cli.common import (
    Parser,
    csv_list,
    load_registry_warn,
    plot_path,
    print_json,
    print_table,
    resolve_chips,
    run,
    save_figure,
)
from chipcal.model.precision import PRECISIONS
from chipcal.model.tdp import ChipTdpComparison, compare_chip


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = Parser(prog=prog or "compare_tdp_registry", description=__doc__.splitlines()[0])
    p.add_argument("--hardware", type=csv_list, metavar="A,B,…", help="registry chips (default: all)")
    p.add_argument("--precision", type=str.lower, choices=PRECISIONS, metavar="P",
                   help=f"assess every chip at this precision ({', '.join(PRECISIONS)}); "
                        "default: each chip's headline precision (bf16/fp16, else int8, else fp32)")
    p.add_argument("--plot", type=plot_path, metavar="FILE", help="estimated vs spec TDP chart (.png/.svg)")
    p.add_argument("--json", action="store_true", help="print an array of flat records")
    return p


def record(c: ChipTdpComparison) -> dict:
    chip = c.chip
    return {
        "hardware": chip.name, "process_nm": chip.process_nm, "precision": c.precision,
        "spec_tdp_w": chip.tdp_w,
        "engines": "; ".join(f"{e.engine}({e.precision})={e.compute_w + e.delivery_w:.1f}W" for e in c.engines),
        "peak_engine": c.peak_engine, "peak_ops_per_s": 2 * c.peak_macs_per_s,
        "pj_per_mac": c.peak_engine_tdp.pj_per_mac, "compute_w": c.compute_w,
        "memory_w": c.memory_w, "static_w": c.static_w, "estimated_tdp_w": c.estimated_tdp_w,
        "combined_tdp_w": c.combined_tdp_w, "ratio": c.ratio,
        "max_sustainable_pj_per_mac": c.max_sustainable_pj_per_mac, "margin": c.margin,
        "verdict": c.verdict, "hypothetical": chip.hypothetical,
    }


def unsupported_record(chip, precision: str) -> dict:
    return {"hardware": chip.name, "process_nm": chip.process_nm, "precision": precision,
            "spec_tdp_w": chip.tdp_w, "engines": None, "peak_engine": None, "peak_ops_per_s": None,
            "pj_per_mac": None, "compute_w": None, "memory_w": None, "static_w": None,
            "estimated_tdp_w": None, "combined_tdp_w": None, "ratio": None,
            "max_sustainable_pj_per_mac": None, "margin": None,
            "verdict": f"unsupported: runs {', '.join(chip.precisions)}", "hypothetical": chip.hypothetical}


def _display(r: dict) -> dict:
    return {"hardware": r["hardware"], "nm": r["process_nm"], "prec": r["precision"],
            "spec_W": r["spec_tdp_w"], "engines (flat out)": r["engines"] or "-",
            "pJ/MAC": r["pj_per_mac"], "mem_W": r["memory_w"], "static_W": r["static_w"],
            "est_W": r["estimated_tdp_w"], "est/spec": r["ratio"],
            "max_pJ/MAC": r["max_sustainable_pj_per_mac"], "verdict": r["verdict"]}


def _plot(path: str, records: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in records if r["estimated_tdp_w"] is not None]
    fig, ax = plt.subplots(figsize=(8, 6))
    for r in rows:
        colour = "tab:red" if r["verdict"].startswith("UNSUSTAINABLE") else (
            "tab:orange" if r["verdict"].startswith("tight") else "tab:green")
        ax.scatter(r["spec_tdp_w"], r["estimated_tdp_w"], color=colour, marker="x" if r["hypothetical"] else "o")
        ax.annotate(r["hardware"], (r["spec_tdp_w"], r["estimated_tdp_w"]), fontsize=7,
                    xytext=(3, 3), textcoords="offset points")
    lo = min(min(r["spec_tdp_w"], r["estimated_tdp_w"]) for r in rows) / 1.5
    hi = max(max(r["spec_tdp_w"], r["estimated_tdp_w"]) for r in rows) * 1.5
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="estimate = spec")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("spec TDP (W)")
    ax.set_ylabel("physics estimate at spec peak (W)")
    ax.set_title("Physics TDP vs spec (red: compute alone exceeds TDP; x: hypothetical)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    save_figure(fig, path)


def _body(args: argparse.Namespace) -> int:
    registry = load_registry_warn()
    chips = resolve_chips(args.hardware, registry)
    records = []
    for chip in chips:
        if args.precision and not chip.supports(args.precision):
            records.append(unsupported_record(chip, args.precision))
        else:
            records.append(record(compare_chip(chip, args.precision)))
    if args.json:
        print_json(records)
    else:
        print_table([_display(r) for r in records],
                    {"nm": "g", "spec_W": ".0f", "pJ/MAC": ".3f", "mem_W": ".0f", "static_W": ".0f",
                     "est_W": ".0f", "est/spec": ".2f", "max_pJ/MAC": ".3f"})
    if args.plot:
        _plot(args.plot, records)
    return 0


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    return run(_body, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
