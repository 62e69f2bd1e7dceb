"""`compare_tdp_registry`: can each registry chip sustain its datasheet peak inside its TDP?

Per chip and precision: spec peak; all-in power of a dense GEMM at the spec clock with its
low-high band; TDP; the power-limited (DVFS) sustained clock and the sustainable peak with its
fraction of spec; the verdict (from a sustained measurement where the registry has one, else
from the model's band) and the sustained and burst measurements kept apart. The model runs with
the constants fitted on the sustained measurements (src/chipcal/model/fitted_constants.toml); `--sourced`
uses every constant's sourced nominal value instead (physics only). `--evidence` prints the
sourced, fitted and leave-one-chip-out predictions of every sustained measurement (needs scipy),
and `--refit FILE` writes the fitted constants to FILE. Does not import torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from chipcal.cli.common import (
    HYPOTHETICAL_NOTE,
    Parser,
    csv_list,
    load_registry_warn,
    marked,
    output_file,
    plot_path,
    print_json,
    print_table,
    resolve_chips,
    run,
    save_figure,
)
from chipcal.model import power
from chipcal.model.estimate.prediction import chip_label
from chipcal.model.precision import PRECISIONS
from chipcal.model.tdp import (
    VERDICT_MEASURED_EXCEEDS,
    VERDICT_MEASURED_OK,
    VERDICT_UNCERTAIN,
    VERDICT_UNSUSTAINABLE,
    ChipTdpComparison,
    compare_chip,
)
from chipcal.report.render import wrap


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = Parser(prog=prog or "compare_tdp_registry", description=__doc__.splitlines()[0])
    p.add_argument("--hardware", type=csv_list, metavar="A,B,…", help="registry chips (default: all)")
    p.add_argument("--precision", type=str.lower, choices=PRECISIONS, metavar="P",
                   help=f"assess every chip at this precision ({', '.join(PRECISIONS)}); "
                        "default: each chip's headline precision (bf16/fp16, else int8, else fp32)")
    p.add_argument("--plot", type=plot_path, metavar="FILE", help="estimated vs spec TDP chart (.png/.svg)")
    p.add_argument("--sourced", action="store_true",
                   help="every uncertain constant at its sourced nominal value instead of the fitted ones")
    p.add_argument("--evidence", action="store_true",
                   help="print the sourced, fitted and leave-one-chip-out predictions of every sustained measurement")
    p.add_argument("--refit", metavar="FILE", type=output_file,
                   help="fit the constants on the registry's sustained measurements and write them to FILE "
                        "(the shipped file is src/chipcal/model/fitted_constants.toml)")
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
        "clock_fraction": c.clock_fraction, "gemm_efficiency": c.gemm.efficiency,
        "verdict": c.verdict, "verdict_basis": c.verdict_basis, "model_verdict": c.model_verdict,
        "measured_peak_flop_per_s": c.measured_peak_flop_per_s, "measured_fraction": c.measured_fraction,
        "measured_kind": None if c.measured is None else c.measured.kind,
        "measured_clock_hz": None if c.measured is None else c.measured.sm_clock_hz,
        "measured_power_w": None if c.measured is None else c.measured.board_power_w,
        "measured_source": c.measured_source,
        "burst_peak_flop_per_s": None if c.burst is None else c.burst.flop_per_s,
        "burst_fraction": c.burst_fraction, "burst_source": None if c.burst is None else c.burst.source,
        "hypothetical": chip.hypothetical,
    }


COMPONENTS = ("arithmetic", "issue", "register_file", "l1", "l2", "network", "clock_control", "dram", "static")
NUMERIC_FIELDS = ("spec_peak_flop_per_s", "spec_clock_hz", "boost_clock_hz", "power_at_spec_w",
                  "power_at_spec_low_w", "power_at_spec_high_w", "pj_per_mac", "pj_per_flop_at_spec",
                  "compute_w", "memory_w", "static_w", "estimated_tdp_w", "combined_tdp_w", "ratio",
                  "max_sustainable_pj_per_mac", "margin", "sustained_clock_hz", "sustainable_peak_flop_per_s",
                  "sustainable_fraction", "sustainable_fraction_low", "sustainable_fraction_high",
                  "clock_fraction", "gemm_efficiency", "verdict_basis", "model_verdict",
                  "measured_peak_flop_per_s", "measured_fraction", "measured_kind", "measured_clock_hz",
                  "measured_power_w", "measured_source", "burst_peak_flop_per_s", "burst_fraction", "burst_source",
                  "engines", "peak_engine",
                  *(f"{c}_at_spec_w" for c in COMPONENTS))


def unsupported_record(chip, precision: str) -> dict:
    row = {"hardware": chip_label(chip), "process_nm": chip.process_nm, "precision": precision, "spec_tdp_w": chip.tdp_w}
    row.update(dict.fromkeys(NUMERIC_FIELDS))
    row.update({"verdict": f"unsupported: runs {', '.join(chip.precisions)}", "hypothetical": chip.hypothetical})
    return row


def _tera(x):
    return None if x is None else x / 1e12


# the table's words; --json has the whole verdict ('unsupported: runs …' shows as 'unsupported')
VERDICT_SHORT = {VERDICT_UNSUSTAINABLE: "exceeds TDP", VERDICT_MEASURED_EXCEEDS: "exceeds TDP (meas)",
                 VERDICT_MEASURED_OK: "sustainable (meas)"}


def _display(r: dict) -> dict:
    """The columns that answer the question within 120 columns; pJ/FLOP, the clocks and the TFLOP/s
    behind the fractions are in --json."""
    band = (f"{r['power_at_spec_low_w']:.0f}-{r['power_at_spec_high_w']:.0f}"
            if r["power_at_spec_w"] is not None else "-")
    return {"hardware": marked(r["hardware"], r["hypothetical"]), "nm": r["process_nm"], "prec": r["precision"],
            "spec_TFLOPS": _tera(r["spec_peak_flop_per_s"]),
            "P_spec_W": r["power_at_spec_w"], "band_W": band, "TDP_W": r["spec_tdp_w"],
            "sust": r["sustainable_fraction"], "meas": r["measured_fraction"], "burst": r["burst_fraction"],
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

    report = validate(registry.chips.values())
    if as_json:
        print_json(r.record() for r in report.rows)
        return 0
    print_table([{"hardware": r.chip, "prec": r.precision, "data": r.data, "fit": "yes" if r.in_fit else "no",
                  "meas_TFLOPS": r.measured_flop_per_s / 1e12,
                  "meas_GHz": None if r.measured_clock_hz is None else r.measured_clock_hz / 1e9,
                  "sourced_err": r.sourced_error, "fitted_err": r.fitted_error, "loo_err": r.loo_error,
                  "loo_GHz": r.loo_clock_hz / 1e9, "loo_P_err": r.loo_power_error}
                 for r in report.rows],
                {"meas_TFLOPS": ".1f", "meas_GHz": ".3f", "sourced_err": "+.1%", "fitted_err": "+.1%",
                 "loo_err": "+.1%", "loo_GHz": ".3f", "loo_P_err": "+.1%"})
    print("(throughput errors mean something for random data at the power limit; a zero-data row is "
          "judged by loo_P_err, the power at its measured clock)")
    print(f"median |error| of the random-data rows: sourced {report.median_abs_error('sourced'):.1%}, "
          f"fitted {report.median_abs_error('fitted'):.1%}, leave-one-chip-out {report.median_abs_error('loo'):.1%}")
    print("fitted: " + ", ".join(f"{k}={round(v, 6):.3g}" for k, v in report.fitted.values.items()))
    over = [b for b in report.bursts if not b.within_ceiling]
    print(f"bursts: {len(report.bursts) - len(over)} of {len(report.bursts)} within the burst ceiling"
          + "".join(f"; {b.chip} {b.precision} {b.measured_flop_per_s / 1e12:.4g} > {b.ceiling_flop_per_s / 1e12:.4g}"
                    " TFLOPS (boosts past its listed clock)" for b in over))
    return 0


def _refit(registry, path: str) -> int:
    from chipcal.calibrate.evidence import fitted_constants_toml, validate

    text = fitted_constants_toml(validate(registry.chips.values()))
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {path}")
    return 0


def _body(args: argparse.Namespace) -> int:
    registry = load_registry_warn()
    chips = resolve_chips(args.hardware, registry)
    if args.evidence:
        return _evidence(registry, args.json)
    if args.refit:
        return _refit(registry, args.refit)
    constants = power.SOURCED if args.sourced else power.NOMINAL
    records = []
    for chip in chips:
        if args.precision and not chip.supports(args.precision):
            records.append(unsupported_record(chip, args.precision))
        else:
            records.append(record(compare_chip(chip, args.precision, constants)))
    if args.json:
        print_json(records)
    else:
        print_table([_display(r) for r in records],
                    {"nm": "g", "spec_TFLOPS": ".4g", "P_spec_W": ".0f", "TDP_W": ".0f",
                     "sust": ".2f", "meas": ".2f", "burst": ".2f"})
        print(wrap("P_spec_W: all-in GEMM power at the spec clock, band_W its low-high band; fractions of the spec "
                   "peak: sust, sustainable at the clock that holds the TDP (in --json: sustained_clock_hz); meas, "
                   "a sustained measurement (decides the verdict where there is one); burst, a short window before "
                   f"the power limit acts; exceeds TDP: {VERDICT_UNSUSTAINABLE}; (meas): decided by a sustained "
                   "measurement"
                   + (f"; {HYPOTHETICAL_NOTE}" if any(r["hypothetical"] for r in records) else "")))
    if args.plot:
        _plot(args.plot, records)
    return 0


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    return run(_body, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
