"""`chipcal predict`'s LLM table for the terminal: one row per (model, chip, phase, batch,
precision), the legend, then a note per prediction (share of the bandwidth bound, host bound,
weight format, memory that does not fit on one device).

Rows come back as records of text cells (the CLI aligns them); the figures are the model's
(estimate/llm.py, docs/llm.md).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from chipcal.model.estimate.llm import DEVICES_NOTE, WEIGHT_ONLY, LlmPrediction
from chipcal.model.estimate.parallel import Layout

GB = 1e9
LLM_LEGEND = ("tok/s: decode tokens per second summed over the batch, generate end to end (prefill: prompt "
              "tokens per second); step_tok/s: the decode forward alone, as a step timing measures it; TTFT: time to first token; TPOT: time per output token; bw_bound: what moving the weights and "
              "KV cache at the spec DRAM bandwidth allows; host_bound: what the host issuing every op allows "
              "(- : a captured graph, no per-op host cost); mem: weights + KV cache + activations, ! = exceeds "
              "one device's memory; dev: devices whose memory holds it (a memory bound, not a parallel-speed claim); "
              "with --devices: layout, tp shards per replica and dp replicas (tok/s and the bounds summed "
              "over the replicas, mem and dev one shard's), allreduce_ms: the all-reduces of a step")


def _rate(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:,.4g}"


def llm_rows(preds: Sequence[LlmPrediction]) -> list[dict]:
    """One row per prediction; an unsupported one has its first columns and 'unsupported' only."""
    rows = []
    layouts = any(p.devices > 1 for p in preds)
    for p in preds:
        row = {"model": p.model, "chip": p.chip, "phase": p.phase, "b": p.batch,
               "ctx+new": f"{p.context}+{p.new_tokens}", "prec": p.precision, "rt": p.runtime}
        if not p.supported:
            rows.append(row | {"tok/s": "unsupported"})
            continue
        rows.append(row | {
            "tok/s": _rate(p.tokens_per_s), "step_tok/s": _rate(p.step_tokens_per_s),
            "TTFT_ms": f"{p.time_to_first_token_s * 1e3:.4g}",
            "TPOT_ms": "-" if p.phase == "prefill" else f"{p.time_per_output_token_s * 1e3:.4g}",
            "bw_bound": _rate(p.bandwidth_bound_tokens_per_s), "host_bound": _rate(p.host_bound_tokens_per_s),
            "bound": p.bottleneck, "mem_GB": f"{p.memory_bytes / GB:.4g}" + ("" if p.fits_in_memory else "!"),
            "dev": p.devices_needed,
        } | ({"layout": f"tp={p.tp},dp={p.dp}", "allreduce_ms": f"{p.allreduce_s * 1e3:.3g}"} if layouts else {}))
    return rows


def _fit_note(p: LlmPrediction) -> str:
    return (f"does not fit: {p.model} at batch {p.batch} {p.precision} needs "
            f"{p.memory_bytes / GB:.4g} GB (weights {p.weight_bytes / GB:.4g} + KV cache "
            f"{p.kv_cache_bytes / GB:.3g} + activations {p.activation_peak_bytes / GB:.3g}) > "
            f"{p.memory_capacity_bytes / GB:.4g} GB on one {p.chip}: needs {p.devices_needed} devices "
            f"({DEVICES_NOTE}); the figures above are one device's")


def _bound_note(p: LlmPrediction) -> str:
    share = p.tokens_per_s / p.bandwidth_bound_tokens_per_s
    host = ("no per-op host cost (captured graph)" if not math.isfinite(p.host_bound_tokens_per_s) else
            f"host bound {_rate(p.host_bound_tokens_per_s)} tok/s ({p.host_ops_per_step} host-issued ops "
            f"per step, {p.host_per_op_s * 1e6:.3g} us each on average)")
    loop = (f" (generate end to end; the decode forward alone {_rate(p.step_tokens_per_s)} tok/s, "
            f"generate adds {p.generate_loop_ops} ops per token)" if p.generate_loop_ops else "")
    where = (f"{p.devices} x {p.chip} (tp={p.tp} shards per replica, dp={p.dp} replicas; a step's all-reduces "
             f"{p.allreduce_s * 1e3:.3g} ms)" if p.devices > 1 else p.chip)
    per_device = " per device" if p.devices > 1 else ""
    return (f"{p.model} on {where}, {p.phase} at batch {p.batch}, {p.precision}, {p.runtime}: "
            f"{_rate(p.tokens_per_s)} tok/s{loop} = {share:.0%} of the bandwidth bound "
            f"{_rate(p.bandwidth_bound_tokens_per_s)} tok/s; {host}; bottleneck {p.bottleneck}; "
            f"weights {p.weight_bytes / GB:.4g} GB, KV cache {p.kv_cache_bytes / GB:.3g} GB{per_device}")


def llm_notes(preds: Sequence[LlmPrediction]) -> list[str]:
    """The notes under the table, each once, in the order of the predictions."""
    notes = []
    for p in preds:
        if not p.supported:
            notes.append(f"unsupported: {p.chip} {p.precision}: {p.reason}")
            continue
        if p.precision in WEIGHT_ONLY:
            notes.append(f"{p.precision}: {WEIGHT_ONLY[p.precision].label()}")
        if not p.fits_in_memory:
            notes.append(_fit_note(p))
        notes.append(_bound_note(p))
    return list(dict.fromkeys(notes))


SERVING_LEGEND = ("offline: continuous batching at saturation. tok/s: output tokens per second of every replica; "
                  "batch: running requests per replica, each --beams sequences (kv_limit: what the KV cache holds); "
                  "iteration_ms: one decode step of the batch plus its share of the new requests' prefill; J/token: "
                  "energy per output token over all devices")


SERVER_LEGEND = ("server: the highest Poisson load whose p99 TTFT and TPOT meet the limits. slots: the engine's "
                 "cap on running requests per replica (the count of most tokens/s within the limits, at most the KV cache's bound); "
                 "occ: mean running / slots; q/s and tok/s: queries and output tokens per second of every replica; "
                 "TTFT_p99: the wait for a slot (M/M/c) + one iteration + a group's prefill; TPOT: an iteration "
                 "with the slots full; J/token: energy per output token over all devices")


def _layout(run) -> str:
    """A serving run's layout as --layout takes it."""
    return Layout(run.tp, run.dp, run.pp, run.ep).label


def _limits_ms(run) -> str:
    """A server run's limits as TTFT/TPOT in ms, "-" for none, and a query's latency after a space."""
    ttft_tpot = "/".join("-" if v is None else f"{v * 1e3:g}" for v in (run.ttft_limit_s, run.tpot_limit_s))
    return ttft_tpot if run.latency_limit_s is None else f"{ttft_tpot} {run.latency_limit_s * 1e3:g}"


def server_rows(runs: Sequence) -> list[dict]:
    """One row per latency-limited prediction (estimate/server.ServerLoad)."""
    return [{"model": r.model, "chip": r.chip, "prec": r.precision, "in+out": f"{r.input_tokens}+{r.output_tokens}",
             "layout": _layout(r), "slots": r.slots, "occ": f"{r.occupancy:.0%}",
             "q/s": f"{r.queries_per_s:.4g}", "tok/s": _rate(r.tokens_per_s),
             "TTFT_p99_ms": f"{r.ttft_p99_s * 1e3:.4g}", "TPOT_ms": f"{r.tpot_s * 1e3:.4g}",
             "limits_ms": _limits_ms(r), "bound": r.bottleneck,
             "J/token": f"{r.energy_per_token_j:.3g}"}
            for r in runs]


def serving_rows(runs: Sequence) -> list[dict]:
    """One row per continuous-batching prediction (estimate/serving.Serving)."""
    return [{"model": r.model, "chip": r.chip, "prec": r.precision, "in+out": f"{r.input_tokens}+{r.output_tokens}",
             "layout": _layout(r), "batch": r.batch, "kv_limit": r.kv_batch_limit,
             "tok/s": _rate(r.tokens_per_s), "iteration_ms": f"{r.iteration_s * 1e3:.4g}",
             "decode_ms": f"{r.decode_step_s * 1e3:.4g}", "prefill_ms": f"{r.prefill_share_s * 1e3:.4g}",
             "bound": r.bottleneck, "J/token": f"{r.energy_per_token_j:.3g}"}
            for r in runs]
