"""`compare_tdp_registry`: can each registry chip sustain its datasheet peak inside its TDP?

Per chip and precision: spec peak; all-in power of a dense GEMM at the spec clock with its
low-high band; TDP; the power-limited (DVFS) sustained clock and the sustainable peak with its
fraction of spec; the verdict (sustainable / exceeds TDP even at the optimistic end / uncertain);
and the published measured peak where the registry has one. `--fitted` uses the constants fitted
on those measurements (calibrate/evidence.py, needs scipy) instead of the nominal ones, and
`--evidence` prints the leave-one-chip-out validation instead. Does not import torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from chipcal.calibrate.render import wrap
from chipcal.cli.common import (
    HYPOTHETICAL_NOTE,
    Parser,
    csv_list,
    load_registry_warn,
    marked,
    plot_path,
    print_json,
    print_table,
    resolve_chips,
    run,
    save_figure,
)
from chipcal.model.estimate.prediction import chip_label
from chipcal.model.precision import PRECISIONS
from chipcal.model.tdp import (
    VERDICT_UNCERTAIN,
    VERDICT_UNSUSTAINABLE,
    ChipTdpComparison,
    compare_chip,
)


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = Parser(prog=prog or "compare_tdp_registry", description=__doc__.splitlines()[0])
    p.add_argument("--hardware", type=csv_list, metavar="A,B,…", help="registry chips (default: all)")
    p.add_argument("--precision", type=str.lower, choices=PRECISIONS, metavar="P",
                   help=f"assess every chip at this precision ({', '.join(PRECISIONS)}); "
                        "default: each chip's headline precision (bf16/fp16, else int8, else fp32)")
    p.add_argument("--plot", type=plot_path, metavar="FILE", help="estimated vs spec TDP chart (.png/.svg)")
    p.add_argument("--fitted", action="store_true",
                   help="use the constants fitted on the registry's published measurements")
    p.add_argument("--evidence", action="store_true",
                   help="print the physics-only and leave-one-chip-out fitted errors on the measured chips")
    p.add_argument("--json", action="store_true", help="print an array of flat records")
    return p


def record(c: ChipTdpComparison) -> dict:
    chip = c.chip
    parts = c.components_at_spec_w
    return {
        "hardware": chip_label(chip), "process_nm": chip.process_nm, "precision": c.precision,
        "spec_tdp_w": chip.tdp_w, "peak_engine": c.peak_engine,
        "engines": "; ".join(f"{e.engine}({e.precision})={e.dynamic_w:.1f}W" for e in c.engines),
        "spec_peak_flop_per_s": c.spec_peak_flop_per_s, "spec_clock_hz": c.gemm.spec_clock_hz,
        "boost_clock_hz": c.gemm.boost_clock_hz,
        "power_at_spec_w": c.power_at_spec_w, "power_at_spec_low_w": c.power_at_spec_low_w,
        "power_at_spec_high_w": c.power_at_spec_high_w,
        **{k[:-2] + "_at_spec_w": v for k, v in parts.items()},
        "pj_per_mac": c.peak_engine_tdp.pj_per_mac, "pj_per_flop_at_spec": c.gemm.pj_per_flop_at_spec,
        "compute_w": c.compute_w, "memory_w": c.memory_w, "static_w": c.static_w,
        "estimated_tdp_w": c.estimated_tdp_w, "combined_tdp_w": c.combined_tdp_w, "ratio": c.ratio,
        "max_sustainable_pj_per_mac": c.max_sustainable_pj_per_mac, "margin": c.margin,
        "sustained_clock_hz": c.sustained_clock_hz,
        "sustainable_peak_flop_per_s": c.sustainable_peak_flop_per_s,
        "sustainable_fraction": c.sustainable_fraction,
        "sustainable_fraction_low": c.low.sustainable_fraction,
        "sustainable_fraction_high": c.high.sustainable_fraction,
        "verdict": c.verdict,
        "measured_peak_flop_per_s": c.measured_peak_flop_per_s, "measured_source": c.measured_source,
        "measured_fraction": (None if c.measured is None else c.measured.flop_per_s / c.spec_peak_flop_per_s),
        "hypothetical": chip.hypothetical,
    }


COMPONENTS = ("arithmetic", "issue", "register_file", "l1", "l2", "network", "clock_control", "dram", "static")
NUMERIC_FIELDS = ("spec_peak_flop_per_s", "spec_clock_hz", "boost_clock_hz", "power_at_spec_w",
                  "power_at_spec_low_w", "power_at_spec_high_w", "pj_per_mac", "pj_per_flop_at_spec",
                  "compute_w", "memory_w", "static_w", "estimated_tdp_w", "combined_tdp_w", "ratio",
                  "max_sustainable_pj_per_mac", "margin", "sustained_clock_hz", "sustainable_peak_flop_per_s",
                  "sustainable_fraction", "sustainable_fraction_low", "sustainable_fraction_high",
                  "measured_peak_flop_per_s", "measured_source", "measured_fraction", "engines", "peak_engine",
                  *(f"{c}_at_spec_w" for c in COMPONENTS))


def unsupported_record(chip, precision: str) -> dict:
    row = {"hardware": chip_label(chip), "process_nm": chip.process_nm, "precision": precision, "spec_tdp_w": chip.tdp_w}
    row.update(dict.fromkeys(NUMERIC_FIELDS))
    row.update({"verdict": f"unsupported: runs {', '.join(chip.precisions)}", "hypothetical": chip.hypothetical})
    return row


def _tera(x):
    return None if x is None else x / 1e12


# the table's words; --json has the whole verdict ('unsupported: runs …' shows as 'unsupported')
VERDICT_SHORT = {VERDICT_UNSUSTAINABLE: "exceeds TDP"}


def _display(r: dict) -> dict:
    """The columns that answer the question within 120 columns; pJ/FLOP, clocks and the TFLOP/s
    behind the fractions are in --json."""
    band = (f"{r['power_at_spec_low_w']:.0f}-{r['power_at_spec_high_w']:.0f}"
            if r["power_at_spec_w"] is not None else "-")
    return {"hardware": marked(r["hardware"], r["hypothetical"]), "nm": r["process_nm"], "prec": r["precision"],
            "spec_TFLOPS": _tera(r["spec_peak_flop_per_s"]),
            "P_spec_W": r["power_at_spec_w"], "band_W": band, "TDP_W": r["spec_tdp_w"],
            "sust_GHz": None if r["sustained_clock_hz"] is None else r["sustained_clock_hz"] / 1e9,
            "sust/spec": r["sustainable_fraction"], "meas/spec": r["measured_fraction"],
            "verdict": VERDICT_SHORT.get(r["verdict"], r["verdict"].split(":")[0])}


def _plot(path: str, records: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in records if r["power_at_spec_w"] is not None]
    fig, ax = plt.subplots(figsize=(8, 6))
    for r in rows:
        colour = {VERDICT_UNSUSTAINABLE: "tab:red", VERDICT_UNCERTAIN: "tab:orange"}.get(r["verdict"], "tab:green")
        y = r["power_at_spec_w"]
        ax.errorbar(r["spec_tdp_w"], y, yerr=[[y - r["power_at_spec_low_w"]], [r["power_at_spec_high_w"] - y]],
                    color=colour, fmt="x" if r["hypothetical"] else "o", elinewidth=0.6, capsize=2)
        ax.annotate(r["hardware"], (r["spec_tdp_w"], y), fontsize=7, xytext=(3, 3), textcoords="offset points")
    lo = min(min(r["spec_tdp_w"], r["power_at_spec_low_w"]) for r in rows) / 1.5
    hi = max(max(r["spec_tdp_w"], r["power_at_spec_high_w"]) for r in rows) * 1.5
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8, label="estimate = spec")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("spec TDP (W)")
    ax.set_ylabel("all-in GEMM power at the spec clock (W), with band")
    ax.set_title("Power at spec peak vs TDP (red: exceeds even optimistic; orange: uncertain; x: hypothetical)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    save_figure(fig, path)


def _evidence(registry, as_json: bool) -> int:
    from chipcal.calibrate.evidence import validate

    report = validate(registry)
    if as_json:
        print_json(r.record() for r in report.rows)
        return 0
    print_table([{"hardware": r.chip, "prec": r.precision, "meas_TFLOPS": r.measured_flop_per_s / 1e12,
                  "physics_TFLOPS": r.physics_flop_per_s / 1e12, "physics_err": r.physics_error,
                  "loo_TFLOPS": r.loo_flop_per_s / 1e12, "loo_err": r.loo_error, "source": r.source}
                 for r in report.rows],
                {"meas_TFLOPS": ".1f", "physics_TFLOPS": ".1f", "physics_err": "+.1%", "loo_TFLOPS": ".1f",
                 "loo_err": "+.1%"})
    print(f"median |error|: physics-only {report.physics_median_abs_error:.1%}, "
          f"leave-one-chip-out fitted {report.loo_median_abs_error:.1%}; fitted on all: "
          + ", ".join(f"{k}={v:.3g}" for k, v in report.fitted.items()))
    return 0


def _body(args: argparse.Namespace) -> int:
    registry = load_registry_warn()
    chips = resolve_chips(args.hardware, registry)
    if args.evidence:
        return _evidence(registry, args.json)
    constants = None
    if args.fitted:
        from chipcal.calibrate.evidence import fit_constants

        constants = fit_constants(registry.chips.values()).constants
    records = []
    for chip in chips:
        if args.precision and not chip.supports(args.precision):
            records.append(unsupported_record(chip, args.precision))
        elif constants is not None:
            records.append(record(compare_chip(chip, args.precision, constants)))
        else:
            records.append(record(compare_chip(chip, args.precision)))
    if args.json:
        print_json(records)
    else:
        print_table([_display(r) for r in records],
                    {"nm": "g", "spec_TFLOPS": ".4g", "P_spec_W": ".0f", "TDP_W": ".0f",
                     "sust_GHz": ".3g", "sust/spec": ".2f", "meas/spec": ".2f"})
        print(wrap("P_spec_W: all-in GEMM power at the spec clock, band_W its low-high band; sust_GHz: the clock "
                   "that holds the TDP; sust/spec, meas/spec: sustainable and published measured peak over spec; "
                   f"exceeds TDP: {VERDICT_UNSUSTAINABLE}"
                   + (f"; {HYPOTHETICAL_NOTE}" if any(r["hypothetical"] for r in records) else "")))
    if args.plot:
        _plot(args.plot, records)
    return 0


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    return run(_body, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
