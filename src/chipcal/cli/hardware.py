"""`chipcal hardware list|show NAME`: the registry, with derived peaks and sources.

Does not import torch.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

from chipcal.cli.common import Parser, load_registry_warn, print_json, print_table, run
from chipcal.model.chip import KINDS
from chipcal.model.chip_records import list_record, show_record
from chipcal.model.selection import resolve_chips
from chipcal.report.labels import HYPOTHETICAL_NOTE, marked
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
