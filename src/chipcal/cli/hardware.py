"""`chipcal hardware list|show NAME`: the registry, with derived peaks and sources.

Does not import torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from chipcal.cli.common import (
    HYPOTHETICAL_NOTE,
    Parser,
    load_registry_warn,
    marked,
    print_json,
    print_table,
    resolve_chips,
    run,
)
from chipcal.model.chip import KINDS, Chip
from chipcal.model.precision import PRECISIONS
from chipcal.report.render import wrap

LISTED_PRECISIONS = ("fp32", "bf16", "fp16", "fp8", "int8")      # the columns of `list`


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = Parser(prog=prog or "chipcal hardware", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True, parser_class=Parser)
    ls = sub.add_parser("list", help="every registry chip")
    ls.add_argument("--kind", choices=KINDS, help="only chips of this kind")
    ls.add_argument("--json", action="store_true", help="print an array of flat records")
    show = sub.add_parser("show", help="one chip in full, with sources")
    show.add_argument("name", help="registry name, optionally name@mode for a power mode")
    show.add_argument("--json", action="store_true", help="print an array of flat records")
    return p


def list_record(chip: Chip) -> dict:
    row = {"name": chip.name, "kind": chip.kind, "vendor": chip.vendor, "process_nm": chip.process_nm,
           "tdp_w": chip.tdp_w, "memory_type": chip.memory.type,
           "memory_bandwidth_bytes_per_s": chip.memory.bandwidth_bytes_per_s,
           "memory_capacity_bytes": chip.memory.capacity_bytes}
    for p in PRECISIONS:
        if chip.supports(p):
            row[f"peak_flop_per_s_{p}"] = chip.peak_flop_per_s(p)
    row["hypothetical"] = chip.hypothetical
    return row


def show_record(chip: Chip) -> dict:
    row = list_record(chip)
    row = {"display_name": chip.display_name, **row, "power_mode": chip.active_mode,
           "power_modes": ", ".join(f"{m.name}={m.tdp_w:g}W" for m in chip.power_modes) or None}
    for p, v in chip.stated_peak_flop_per_s.items():
        row[f"stated_peak_flop_per_s_{p}"] = v
    for i, e in enumerate(chip.engines):
        rates = ", ".join(f"{p}={r:g}" for p, r in e.macs_per_unit_per_clock.items())
        row[f"engine_{i}"] = f"{e.name} [{e.circuit}] {e.units} units @ {e.clock_hz / 1e9:g} GHz; MAC/unit/clk: {rates}"
    row["base_clock_hz"], row["boost_clock_hz"] = chip.base_clock_hz, chip.boost_clock_hz
    row["clock_source"] = chip.clock_source or None
    for i, m in enumerate(chip.measured):
        extra = "".join(f", {label} {value:g}" for label, value in
                        (("board W", m.board_power_w), ("SM GHz", m.sm_clock_hz and m.sm_clock_hz / 1e9)) if value)
        row[f"measured_{i}"] = (f"{m.precision} {m.flop_per_s / 1e12:.4g} TFLOP/s sustained GEMM{extra}: "
                                f"{m.title}, {m.url} ({m.date})")
    row["microarch"] = ", ".join(f"{k}={v}" for k, v in chip.microarch.items() if k != "source")
    row["sources"] = " | ".join(chip.sources)
    row["power_source"] = chip.power_source
    row["memory_source"] = chip.memory.source
    row["stated_peak_source"] = chip.stated_peak_source or None
    row["microarch_source"] = str(chip.microarch.get("source", ""))
    for i, e in enumerate(chip.engines):
        row[f"engine_{i}_source"] = e.source
    row["notes"] = chip.notes or None
    return row


def _body(args: argparse.Namespace) -> int:
    registry = load_registry_warn()
    if args.action == "list":
        chips = [c for c in resolve_chips(None, registry) if args.kind in (None, c.kind)]
        records = [list_record(c) for c in chips]
        if args.json:
            print_json(records)
            return 0
        shown = []
        for c in chips:
            row = {"name": marked(c.name, c.hypothetical), "kind": c.kind, "nm": c.process_nm, "TDP_W": c.tdp_w,
                   "memory": c.memory.type, "GB/s": c.memory.bandwidth_bytes_per_s / 1e9}
            for p in LISTED_PRECISIONS:
                v = c.peak_flop_per_s(p)
                row[p] = None if v is None else v / 1e12
            shown.append(row)
        print_table(shown, {"nm": "g", "TDP_W": "g", "GB/s": ".0f", **dict.fromkeys(LISTED_PRECISIONS, ".1f")})
        print(wrap("fp32 … int8: dense peak in TFLOP/s (int8: TOPS); other precisions in --json"
                   + (f"; {HYPOTHETICAL_NOTE}" if any(c.hypothetical for c in chips) else "")))
        return 0
    (chip,) = resolve_chips([args.name], registry)
    record = show_record(chip)
    if args.json:
        print_json([record])
    else:
        width = max(map(len, record))
        for k, v in record.items():
            if v is not None:
                print(f"{k:<{width}}  {v:g}" if isinstance(v, float) else f"{k:<{width}}  {v}")
    return 0


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    return run(_body, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
