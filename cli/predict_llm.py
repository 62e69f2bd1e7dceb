"""`chipcal predict` for decoder LLMs: tokens/s, time to first token, per-token latency, both
bounds and the memory fit, one row per (model, batch, chip, precision) (model/estimate/llm.py).

Called by cli/predict.py when the models are LLMs (a preset or a config.json path). Each forward
(prefill, decode step) is characterized once per (model, batch, context, runtime, dtype) and
cached (chipcal.measure.workloads), so repeated predictions do not import torch.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence

from chipcal.cli.common import UsageError, print_json, print_table
from chipcal.model.chip import Chip
from chipcal.model.estimate.llm import (
    DEVICES_NOTE,
    LLM_PRECISIONS,
    WEIGHT_ONLY,
    LlmPrediction,
    predict_llm,
)
from chipcal.model.mapping.params import CalibrationParams
from chipcal.model.workload.llm_config import LLM_RUNTIMES, load_llm_config, step_key

GB = 1e9
DEFAULT_RUNTIME = "compiled"
DEFAULT_PRECISION = "bf16"


def check_args(args: argparse.Namespace) -> None:
    """LLM-only arguments and the options an LLM prediction does not take, as UsageErrors."""
    for flag, given in (("--by-layer", args.by_layer), ("--explain", args.explain), ("--plot", args.plot),
                        ("--autocast", args.autocast), ("--memory-format", args.memory_format != "nchw")):
        if given:
            raise UsageError(f"{flag} is not available for LLMs; --json gives every count of the step")
    runtime = args.runtime or DEFAULT_RUNTIME
    if runtime not in LLM_RUNTIMES:
        raise UsageError(f"an LLM runs under --runtime {' or '.join(LLM_RUNTIMES)}, not {runtime}")
    bad = [p for p in args.precision or () if p not in LLM_PRECISIONS]
    if bad:
        raise UsageError(f"--precision {bad[0]} is not an LLM precision; valid: {', '.join(LLM_PRECISIONS)} "
                         f"(int8/int4: weight-only, bf16 compute)")


def predict_all_llm(args: argparse.Namespace, chips: Sequence[Chip], calibration: CalibrationParams | None,
                    source, host_s: float | None = None,
                    host_source: str = "given (--host-overhead-s)") -> list[LlmPrediction]:
    """Every (model, batch, chip, precision) LLM prediction; each forward characterized once.
    `host_s`: the per-op host cost asked for (cli/predict.py's --host-overhead-s), None: default."""
    runtime = args.runtime or DEFAULT_RUNTIME
    out = []
    for name in args.model:
        config = load_llm_config(name)
        for batch in args.batch:
            for precision in args.precision or [DEFAULT_PRECISION]:
                prefill, decode = (source.llm_step(step_key(config, runtime, phase, batch, args.context,
                                                            args.new_tokens, precision))
                                   if phase == "prefill" or args.phase == "decode" else None
                                   for phase in ("prefill", "decode"))
                out += [predict_llm(config, prefill, decode, chip, precision, runtime, args.context,
                                    args.new_tokens, calibration=calibration, host_overhead_s=host_s,
                                    host_source=host_source, framework=args.framework,
                                    fp32_mode=args.fp32_mode)
                        for chip in chips]
    return out


def _rate(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:,.4g}"


def _table(preds: Sequence[LlmPrediction]) -> None:
    rows = []
    for p in preds:
        row = {"model": p.model, "chip": p.chip, "phase": p.phase, "b": p.batch,
               "ctx+new": f"{p.context}+{p.new_tokens}", "prec": p.precision, "rt": p.runtime}
        if not p.supported:
            rows.append(row | {"tok/s": "unsupported"})
            continue
        rows.append(row | {
            "tok/s": _rate(p.tokens_per_s), "TTFT_ms": f"{p.time_to_first_token_s * 1e3:.4g}",
            "TPOT_ms": "-" if p.phase == "prefill" else f"{p.time_per_output_token_s * 1e3:.4g}",
            "bw_bound": _rate(p.bandwidth_bound_tokens_per_s), "host_bound": _rate(p.host_bound_tokens_per_s),
            "bound": p.bottleneck, "mem_GB": f"{p.memory_bytes / GB:.4g}" + ("" if p.fits_in_memory else "!"),
            "dev": p.devices_needed,
        })
    print_table(rows)
    print("tok/s: decode tokens per second summed over the batch (prefill: prompt tokens per second); "
          "TTFT: time to first token; TPOT: time per output token; bw_bound: what moving the weights and "
          "KV cache at the spec DRAM bandwidth allows; host_bound: what the host issuing every op allows "
          "(- : a captured graph, no per-op host cost); mem: weights + KV cache + activations, ! = exceeds "
          "one device's memory; dev: devices whose memory holds it (a memory bound, not a parallel-speed claim)")
    notes = []
    for p in preds:
        if not p.supported:
            notes.append(f"unsupported: {p.chip} {p.precision}: {p.reason}")
            continue
        if p.precision in WEIGHT_ONLY:
            notes.append(f"{p.precision}: {WEIGHT_ONLY[p.precision].label()}")
        if not p.fits_in_memory:
            notes.append(f"does not fit: {p.model} at batch {p.batch} {p.precision} needs "
                         f"{p.memory_bytes / GB:.4g} GB (weights {p.weight_bytes / GB:.4g} + KV cache "
                         f"{p.kv_cache_bytes / GB:.3g} + activations {p.activation_peak_bytes / GB:.3g}) > "
                         f"{p.memory_capacity_bytes / GB:.4g} GB on one {p.chip}: needs {p.devices_needed} devices "
                         f"({DEVICES_NOTE}); the figures above are one device's")
        share = p.tokens_per_s / p.bandwidth_bound_tokens_per_s
        host = ("no per-op host cost (captured graph)" if not math.isfinite(p.host_bound_tokens_per_s) else
                f"host bound {_rate(p.host_bound_tokens_per_s)} tok/s ({p.host_ops_per_step} host-issued ops "
                f"per step at {p.host_per_op_s * 1e6:.3g} us)")
        notes.append(f"{p.model} on {p.chip}, {p.phase} at batch {p.batch}, {p.precision}, {p.runtime}: "
                     f"{_rate(p.tokens_per_s)} tok/s = {share:.0%} of the bandwidth bound "
                     f"{_rate(p.bandwidth_bound_tokens_per_s)} tok/s; {host}; bottleneck {p.bottleneck}; "
                     f"weights {p.weight_bytes / GB:.4g} GB, KV cache {p.kv_cache_bytes / GB:.3g} GB")
    for line in dict.fromkeys(notes):
        print(line)


def run_llm(args: argparse.Namespace, chips: Sequence[Chip], calibration: CalibrationParams | None,
            source, host_s: float | None = None, host_source: str = "given (--host-overhead-s)") -> int:
    check_args(args)
    preds = predict_all_llm(args, chips, calibration, source, host_s, host_source)
    records = [p.record() for p in preds]
    if args.csv:
        import pandas as pd

        pd.DataFrame(records).to_csv(args.csv, index=False)
        sys.stderr.write(f"wrote {args.csv}\n")
    if args.json:
        print_json(records)
    else:
        _table(preds)
    return 0
