"""`chipcal workload`: operation counts, fusion and concurrency of torchvision models, LLMs and
your own model.

    chipcal workload --model resnet50,vit_b_16 [--batch 8] [--input-size 3,224,224]
                     [--json] [--by-op | --by-subgraph]
    chipcal workload --model llama-3-8b [--phase prefill|decode] [--context N] [--new-tokens M]
    chipcal workload --model path/to/file.py:factory     (the file is executed; docs/llm.md)

An LLM is counted one forward at a time (traced in float32, fused, with a dynamic KV cache):
the prefill over N prompt tokens, or the decode step at the mean context N + (M-1)//2.

Totals per model: MACs, FLOP (= 2 × MACs for MAC work + documented non-MAC counts), params,
unfused bytes read/written, arithmetic intensity, fused subgraphs, stages, critical path.
--by-op / --by-subgraph add one table per model. --json prints one flat record per model
(or per op / per subgraph with --by-op / --by-subgraph), in SI units (MACs, FLOP, bytes).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import pandas as pd
from tqdm import tqdm

from chipcal.cli.common import (
    MAX_BATCH,
    Parser,
    at_most,
    csv_choices,
    positive_int,
    print_json,
    print_table,
    run,
)
from chipcal.model.workload.by_name import characterize_named
from chipcal.model.workload.llm_config import PHASES
from chipcal.model.workload.records import op_record, shapes_text, subgraph_record, totals_record


def _models(text: str) -> list[str]:
    from chipcal.model.workload import classification_models
    from chipcal.model.workload.llm_config import is_llm
    from chipcal.model.workload.mlperf_networks import NETWORKS
    from chipcal.model.workload.user_model import is_user_model

    names = [t.strip() for t in text.split(",") if t.strip()]
    plain = [n for n in names if not (is_llm(n) or is_user_model(n))]
    if plain or not names:
        csv_choices("model", (*classification_models(), *NETWORKS))(",".join(plain))
    return names


def _input_size(text: str) -> tuple[int, ...]:
    """'224' -> (3, 224, 224); '240,320' -> (3, 240, 320); '1,224,224' -> (1, 224, 224)."""
    items = [t.strip() for t in text.replace("x", ",").split(",") if t.strip()]
    if not 1 <= len(items) <= 3:
        raise argparse.ArgumentTypeError(f"{text!r}: give S, H,W or C,H,W (positive integers)")
    sizes = [positive_int(t, 1 << 16) for t in items]
    return (3, sizes[0], sizes[0]) if len(sizes) == 1 else tuple(sizes) if len(sizes) == 3 else (3, *sizes)


def build_parser(prog: str | None = None) -> Parser:
    parser = Parser(prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, type=_models, metavar="NAME[,NAME...]",
                        help="torchvision classification model names (torchvision.models.list_models) or "
                             "MLPerf networks (retinanet_800)")
    parser.add_argument("--batch", type=at_most(positive_int, MAX_BATCH), default=1, help="batch size (default 1)")
    parser.add_argument("--input-size", type=_input_size, default=None, metavar="S|H,W|C,H,W",
                        help="input image size (default: the model's evaluation crop, e.g. 299 for inception_v3)")
    parser.add_argument("--phase", choices=PHASES, default="decode",
                        help="LLMs: the prefill over the context, or a decode step (default decode)")
    parser.add_argument("--context", type=at_most(positive_int, 1 << 24), default=512, metavar="N",
                        help="LLMs: prompt tokens per sequence (default 512)")
    parser.add_argument("--new-tokens", type=at_most(positive_int, 1 << 24), default=128, metavar="M",
                        help="LLMs: tokens generated; the decode step is counted at N + (M-1)//2 (default 128)")
    parser.add_argument("--json", action="store_true", help="print an array of flat JSON records")
    detail = parser.add_mutually_exclusive_group()
    detail.add_argument("--by-op", action="store_true", help="one row per operation")
    detail.add_argument("--by-subgraph", action="store_true", help="one row per fused subgraph (kernel)")
    return parser


def _totals_table(workloads) -> None:
    frame = pd.DataFrame([{
        "model": w.model, "batch": w.batch, "input": "x".join(map(str, w.input_shape[1:])), "capture": w.capture,
        "GMACs": w.macs / 1e9, "GFLOP": w.flop / 1e9, "params_M": w.params / 1e6,
        "read_MB": w.bytes_read / 1e6, "written_MB": w.bytes_written / 1e6,
        "fused_MB": (w.fused_bytes_read + w.fused_bytes_written) / 1e6, "FLOP/B": w.arithmetic_intensity,
        "subgraphs": len(w.subgraphs), "stages": len(w.stages), "max_par": w.max_parallel_subgraphs,
        "crit_GFLOP": w.critical_path_flop / 1e9, "unclassified": len(w.unclassified_ops),
    } for w in workloads])
    print_table(frame, {c: ".3f" for c in ("GMACs", "GFLOP", "params_M", "read_MB", "written_MB", "fused_MB",
                                           "crit_GFLOP")} | {"FLOP/B": ".1f"})


def _ops_table(w) -> None:
    frame = pd.DataFrame([{
        "#": op.index, "name": op.name, "kind": op.kind, "class": op.op_class, "MACs": op.macs, "FLOP": op.flop,
        "read_B": op.bytes_read, "written_B": op.bytes_written, "FLOP/B": op.arithmetic_intensity,
        "output": shapes_text(op.outputs), "ok": "" if op.classified else "UNCLASSIFIED",
    } for op in w.ops])
    print_table(frame, {"MACs": ",", "FLOP": ",", "read_B": ",", "written_B": ",", "FLOP/B": ".1f"})


def _subgraphs_table(w) -> None:
    frame = pd.DataFrame([{
        "#": s.index, "name": s.name, "pattern": s.pattern, "class": s.op_class, "ops": len(s.op_indices),
        "stage": s.stage, "after": ",".join(map(str, s.depends_on)) or "-", "MACs": s.macs, "FLOP": s.flop,
        "in_B": s.input_bytes, "weight_B": s.weight_bytes, "out_B": s.output_bytes,
        "saved_B": s.bytes_saved_by_fusion, "FLOP/B": s.arithmetic_intensity, "threads": s.threads,
    } for s in w.subgraphs])
    print_table(frame, {c: "," for c in ("MACs", "FLOP", "in_B", "weight_B", "out_B", "saved_B", "threads")}
                | {"FLOP/B": ".1f"})


def _main(args: argparse.Namespace) -> int:
    workloads = [characterize_named(name, args.batch, args.input_size, phase=args.phase, context=args.context,
                                    new_tokens=args.new_tokens)
                 for name in tqdm(args.model, desc="characterizing", unit="model", file=sys.stderr,
                                  disable=len(args.model) < 2, leave=False)]
    if args.json:
        if args.by_op:
            print_json(op_record(w, op) for w in workloads for op in w.ops)
        elif args.by_subgraph:
            print_json(subgraph_record(w, s) for w in workloads for s in w.subgraphs)
        else:
            print_json(totals_record(w) for w in workloads)
        return 0
    _totals_table(workloads)
    for w in workloads:
        if args.by_op or args.by_subgraph:
            sys.stdout.write(f"\n{w.model} (batch {w.batch}, {'x'.join(map(str, w.input_shape[1:]))}):\n")
            (_ops_table if args.by_op else _subgraphs_table)(w)
    return 0


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    return run(_main, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
