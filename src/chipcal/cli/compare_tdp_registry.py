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
    Parser,
    csv_list,
    load_registry_warn,
    output_file,
    plot_path,
    print_json,
    print_table,
    run,
    save_figure,
)
from chipcal.model import power
from chipcal.model.precision import PRECISIONS
from chipcal.model.selection import resolve_chips
from chipcal.model.tdp import VERDICT_MEASURED_EXCEEDS, VERDICT_MEASURED_OK, VERDICT_UNSUSTAINABLE
from chipcal.model.tdp_records import comparison_records
from chipcal.report.labels import HYPOTHETICAL_NOTE, marked
from chipcal.report.render import wrap
from chipcal.report.tdp_plots import tdp_vs_spec_figure


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
    records = comparison_records(chips, args.precision, constants)
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
        save_figure(tdp_vs_spec_figure(records), args.plot)
    return 0


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    return run(_body, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
