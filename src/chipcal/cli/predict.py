"""`chipcal predict`: latency, energy and memory of models on registry chips, with the reasons.

One row per (model, chip, batch, precision); a comparison with recommendations when several chips
are predicted; `--by-layer` for the per-subgraph roofline; `--explain` for the energy breakdown,
memory timeline and quantified opportunities; `--plot` for a roofline chart per chip.

Each model is characterized once per batch size and cached (chipcal.measure.workloads), so
repeated predictions do not import torch.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from contextlib import contextmanager

from chipcal.calibrate.prediction_inputs import (
    LOCAL,
    host_overhead,
    prediction_chips,
    unused_calibration_warning,
)
from chipcal.calibrate.store import load_calibration
from chipcal.cli.common import (
    Parser,
    UsageError,
    at_most,
    csv_choices,
    csv_list,
    load_registry_warn,
    note,
    output_file,
    plot_path,
    positive_float,
    positive_int,
    positive_int_list,
    print_json,
    print_table,
    print_wrapped,
    run,
    save_figure,
)
from chipcal.measure.workloads import WorkloadSource
from chipcal.model.chip import Chip
from chipcal.model.estimate import server, serving
from chipcal.model.estimate.cost import INFERENCES_PER_QUOTE, TOKENS_PER_QUOTE, quote, usd_per_units
from chipcal.model.estimate.grid import LlmRequest, opportunities_all, predict_all, predict_all_llm
from chipcal.model.estimate.host import DEFAULT_FRAMEWORK, FRAMEWORKS
from chipcal.model.estimate.llm import LLM_PRECISIONS
from chipcal.model.estimate.numerics import AUTOCAST_PRECISIONS, FP32_MODES
from chipcal.model.estimate.opportunities import Opportunity
from chipcal.model.estimate.parallel import parse_layout
from chipcal.model.estimate.prediction import MEMORY_FORMATS, Prediction, chip_label
from chipcal.model.estimate.ranking import rankings
from chipcal.model.estimate.records import prediction_records
from chipcal.model.estimate.throttle import with_power_limit
from chipcal.model.mapping.params import RUNTIMES, CalibrationParams
from chipcal.model.precision import PRECISIONS
from chipcal.model.workload.llm_config import LLM_RUNTIMES, PHASES, PRESETS, is_llm, load_llm_config
from chipcal.model.workload.user_model import is_user_model
from chipcal.report import llm_predictions, prediction_detail, predictions
from chipcal.report.roofline_plot import roofline_figure

DEFAULT_CONTEXT = 512
DEFAULT_NEW_TOKENS = 128
LLM_RUNTIME = "compiled"
LLM_PRECISION = "bf16"


# --- arguments ---------------------------------------------------------------------------------


def non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number >= 0")
    return value


def host_seconds(text: str) -> float | str:
    """--host-overhead-s: seconds >= 0, or 'local' (this machine's dispatch probe)."""
    return LOCAL if text.strip().lower() == LOCAL else non_negative_float(text)


def model_list(text: str) -> list[str]:
    """argparse type: comma-separated model names, lowercased except paths and file.py:factory specs
    (a file name keeps its case)."""
    items = [t.strip() for t in text.split(",") if t.strip()]
    if not items:
        raise argparse.ArgumentTypeError("empty list")
    return [item if is_user_model(item) or item.lower().endswith(".json") else item.lower() for item in items]


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = Parser(prog=prog or "chipcal predict", description=__doc__.splitlines()[0])
    p.add_argument("--model", type=model_list, required=True,
                   help="comma-separated torchvision model names (e.g. resnet50,mobilenet_v2), MLPerf networks "
                        "(retinanet_800), LLMs (a preset: "
                        f"{', '.join(PRESETS)}; or PATH/config.json; docs/llm.md) or your own model "
                        "(path/to/file.py:factory or package.module:factory; the file is executed)")
    p.add_argument("--hardware", type=csv_list, default=["all"],
                   help="comma-separated registry names (NAME@MODE for a power mode), 'local' for "
                        "this machine's CPU, or 'all' (default: all)")
    p.add_argument("--batch", type=positive_int_list, default=[1], help="batch sizes, e.g. 1,8,64 (default 1)")
    p.add_argument("--precision", type=csv_choices("precision", PRECISIONS), default=None,
                   help=f"comma-separated precisions ({', '.join(PRECISIONS)}; default fp32, LLMs bf16; "
                        "for an LLM int8/int4 are weight-only with bf16 compute)")
    p.add_argument("--calibration", metavar="DIR",
                   help="calibration directory written by `chipcal calibrate` (applies to its chip only)")
    p.add_argument("--runtime", choices=RUNTIMES, default=None,
                   help="fused: one kernel per fused subgraph (TensorRT/XLA); compiled: torch.compile "
                        "(TorchInductor's kernels, replayed as CUDA graphs on a GPU); eager: one kernel per "
                        "op, each issued by the host (PyTorch eager). Not given: a calibrated chip uses its "
                        "calibration's runtime, others fused; LLMs: compiled "
                        "(static KV cache, CUDA graphs) or eager (Hugging Face generate), default compiled")
    p.add_argument("--phase", choices=PHASES, default=None,
                   help="LLMs: prefill (time to first token) or decode (tokens/s; default)")
    p.add_argument("--context", type=at_most(positive_int, 1 << 24), default=None, metavar="N",
                   help=f"LLMs: prompt tokens per sequence (default {DEFAULT_CONTEXT})")
    p.add_argument("--new-tokens", type=at_most(positive_int, 1 << 24), default=None, metavar="M",
                   help=f"LLMs: tokens generated per sequence, the KV cache growing from N (default {DEFAULT_NEW_TOKENS})")
    p.add_argument("--host-overhead-s", type=host_seconds, metavar="S|local",
                   help="eager runtime: host issue cost per op in seconds, or 'local' for this machine's "
                        "dispatch probe (cached; the target's host is this one). Default: the calibration's "
                        "probe, else the --framework default for the host class (docs/prediction.md)")
    p.add_argument("--framework", choices=FRAMEWORKS, default=DEFAULT_FRAMEWORK,
                   help="eager runtime: framework generation whose per-op host cost is the default "
                        "(pytorch2: today's PyTorch; pytorch1: the 2020-21 hosts of the validation corpus)")
    p.add_argument("--autocast", action="store_true",
                   help="torch.autocast to the precision (bf16/fp16): per-op precision (norms, softmax, "
                        "reductions in fp32), fp32 weights cast at every call, activation casts at each dtype "
                        "boundary (eager: each cast is one more host-issued kernel)")
    p.add_argument("--fp32-mode", choices=FP32_MODES, default="pytorch",
                   help="what fp32 means on a GPU with TF32: pytorch (default: cuDNN convolutions in TF32, "
                        "matmuls in fp32, as PyTorch's defaults), strict (no TF32), tf32 (convolutions and "
                        "matmuls in TF32)")
    p.add_argument("--memory-format", choices=MEMORY_FORMATS, default="nchw",
                   help="activation layout of a PyTorch runtime: nchw (default; cuDNN transposes around "
                        "tensor-core convolutions in eager) or channels_last")
    p.add_argument("--power-limit-w", type=positive_float, metavar="W",
                   help="board power limit every chip is held to (nvidia-smi --power-limit) in place of "
                        "its TDP: a run over it is predicted at the clock that meets it")
    p.add_argument("--devices", type=at_most(positive_int, 1024), default=1, metavar="N",
                   help="LLMs: devices serving the model (default 1): tensor-parallel shards joined by "
                        "all-reduces over the chip's interconnect, the rest replicas; the layout a serving "
                        "engine would pick unless --layout forces one (docs/llm.md)")
    p.add_argument("--scenario", choices=("offline", "server"),
                   help="LLMs: offline = continuous batching at saturation, output tokens/s of requests of "
                        "--context prompt and --new-tokens generated tokens on average; the running batch is "
                        "what the KV cache holds; server = the highest Poisson load whose p99 TTFT and TPOT "
                        "meet --ttft-s and --tpot-s (docs/llm.md)")
    p.add_argument("--ttft-s", type=positive_float, metavar="S",
                   help="--scenario server: the p99 time-to-first-token limit (MLPerf llama2-70b: 2)")
    p.add_argument("--tpot-s", type=positive_float, metavar="S",
                   help="--scenario server: the p99 time-per-output-token limit (MLPerf llama2-70b: 0.2)")
    p.add_argument("--max-batch", type=at_most(positive_int, 1 << 20), metavar="B",
                   help="with --scenario: the engine's cap on running requests (vLLM max_num_seqs, TensorRT-LLM "
                        "max_batch_size); default none")
    p.add_argument("--beams", type=at_most(positive_int, 64), metavar="W",
                   help="with --scenario: beam search of W sequences a request, the prompt's KV cache shared "
                        "(MLPerf gptj: 4); --max-batch and tokens/s count requests; default 1")
    p.add_argument("--layout", metavar="tp=N[,pp=P][,ep=N][,dp=M]",
                   help="LLMs: force the layout (tp shards per stage; with --scenario only: pp pipeline stages "
                        "per replica, ep=N a mixture of experts' experts kept whole over the tp devices; dp "
                        "replicas; alone, it gives the devices)")
    p.add_argument("--usd-per-hour", type=positive_float, metavar="USD",
                   help="price per device-hour (an instance's hourly price / its accelerators): adds the "
                        "cost per 1,000 inferences, or an LLM's per million tokens on its --devices; default: the "
                        "chip's dated price in the registry, where it has one (`chipcal hardware show CHIP`)")
    p.add_argument("--by-layer", action="store_true", help="per-subgraph roofline table")
    p.add_argument("--explain", action="store_true",
                   help="energy breakdown, memory timeline and quantified opportunities per row "
                        "(re-runs the estimator; may characterize larger batches)")
    p.add_argument("--target-utilization", type=at_most(positive_float, 1.0), default=0.8,
                   help="utilization the batch opportunity aims for (default 0.8)")
    p.add_argument("--json", action="store_true", help="print an array of flat records")
    p.add_argument("--csv", metavar="FILE", type=output_file, help="also write the records to a CSV file")
    p.add_argument("--plot", metavar="FILE", type=plot_path, help="roofline chart per chip (.png/.svg)")
    p.add_argument("--no-cache", action="store_true", help="characterize again instead of using the cache")
    return p


# --- LLMs (src/chipcal/model/estimate/llm.py, docs/llm.md) ---------------------------------------------------


def check_llm_args(args: argparse.Namespace) -> None:
    """LLM-only arguments and the options an LLM prediction does not take, as UsageErrors."""
    for flag, given in (("--by-layer", args.by_layer), ("--explain", args.explain), ("--plot", args.plot),
                        ("--autocast", args.autocast), ("--memory-format", args.memory_format != "nchw")):
        if given:
            raise UsageError(f"{flag} is not available for LLMs; --json gives every count of the step")
    runtime = args.runtime or LLM_RUNTIME
    if runtime not in LLM_RUNTIMES:
        raise UsageError(f"an LLM runs under --runtime {' or '.join(LLM_RUNTIMES)}, not {runtime}")
    bad = [p for p in args.precision or () if p not in LLM_PRECISIONS]
    if bad:
        raise UsageError(f"--precision {bad[0]} is not an LLM precision; valid: {', '.join(LLM_PRECISIONS)} "
                         f"(int8/int4: weight-only, bf16 compute)")


def _write_csv(path: str, records: list[dict]) -> None:
    import pandas as pd

    pd.DataFrame(records).to_csv(path, index=False)
    sys.stderr.write(f"wrote {path}\n")


def run_llm(args: argparse.Namespace, chips: list[Chip], calibration: CalibrationParams | None,
            source: WorkloadSource, host_s: float | None, host_source: str) -> int:
    check_llm_args(args)
    request = LlmRequest(args.runtime or LLM_RUNTIME, args.phase or "decode", args.context or DEFAULT_CONTEXT,
                         args.new_tokens or DEFAULT_NEW_TOKENS)
    # --layout alone says how many devices; with --devices it must account for them
    layout = parse_layout(args.layout, args.devices if args.devices != 1 else None) if args.layout else None
    devices = layout.devices if layout else args.devices
    if args.scenario:
        return _run_serving(args, chips, source, devices, layout, calibration=calibration, host_overhead_s=host_s,
                            host_source=host_source)
    if args.max_batch is not None or args.ttft_s or args.tpot_s or args.beams:
        raise UsageError("--max-batch, --beams, --ttft-s and --tpot-s are for --scenario offline or server")
    if layout is not None and (layout.pp > 1 or layout.ep > 1):
        raise UsageError("--layout pp= or ep=: pipelines and expert parallelism are modelled for serving, "
                         "with --scenario offline or server")
    preds = predict_all_llm(args.model, chips, args.batch, args.precision or [LLM_PRECISION], request,
                            source.llm_step, calibration, host_s, devices, layout, host_source=host_source,
                            framework=args.framework, fp32_mode=args.fp32_mode)
    records = [p.record() for p in preds]
    _priced(records, args.usd_per_hour, "usd_per_million_tokens", TOKENS_PER_QUOTE,
            ((p.tokens_per_s if p.fits_in_memory else math.nan, p.devices, p.chip) for p in preds), chips)
    if args.csv:
        _write_csv(args.csv, records)
    if args.json:
        print_json(records)
        return 0
    print_table(llm_predictions.llm_rows(preds))
    print_wrapped(llm_predictions.LLM_LEGEND)
    for line in llm_predictions.llm_notes(preds):
        print(line)
    _print_cost(records, "tokens_per_s", "usd_per_million_tokens", "$/M tokens")
    return 0


def _run_serving(args: argparse.Namespace, chips: list[Chip], source: WorkloadSource, devices: int, layout,
                 **launch) -> int:
    """--scenario offline: continuous batching at saturation (estimate/serving.py); server: the
    highest load within the latency limits (estimate/server.py); per model, precision and chip.
    `launch`: the calibration and the host cost, as every LLM prediction takes them."""
    if args.batch != [1]:
        raise UsageError(f"--scenario {args.scenario} chooses the running batch (within the KV cache's bound and "
                         "--max-batch); drop --batch")
    if args.phase == "prefill":
        raise UsageError(f"--scenario {args.scenario} serves whole requests: drop --phase")
    limits = (args.ttft_s, args.tpot_s)
    if (args.scenario == "server") != all(limits) or (args.scenario == "offline" and any(limits)):
        raise UsageError("--scenario server takes both --ttft-s and --tpot-s; offline neither")
    launch |= {"framework": args.framework, "fp32_mode": args.fp32_mode}
    with _counted_steps(source) as llm_step:
        request = (args.runtime or LLM_RUNTIME, args.context or DEFAULT_CONTEXT,
                   args.new_tokens or DEFAULT_NEW_TOKENS, llm_step)
        beams = args.beams or 1
        runs = [server.server(load_llm_config(name), chip, precision, *request, server.Limits(*limits), devices, layout,
                              args.max_batch, beams, **launch) if args.scenario == "server" else
                serving.offline(load_llm_config(name), chip, precision, *request, devices, layout, args.max_batch,
                                beams, **launch)
                for name in args.model for precision in args.precision or [LLM_PRECISION] for chip in chips]
    records = [r.record() for r in runs]
    _priced(records, args.usd_per_hour, "usd_per_million_tokens", TOKENS_PER_QUOTE,
            ((r.tokens_per_s, r.devices, r.chip) for r in runs), chips)
    if args.csv:
        _write_csv(args.csv, records)
    if args.json:
        print_json(records)
        return 0
    limited = args.scenario == "server"
    print_table((llm_predictions.server_rows if limited else llm_predictions.serving_rows)(runs))
    print_wrapped(llm_predictions.SERVER_LEGEND if limited else llm_predictions.SERVING_LEGEND)
    _print_cost(records, "tokens_per_s", "usd_per_million_tokens", "$/M tokens")
    return 0


@contextmanager
def _counted_steps(source: WorkloadSource):
    """source.llm_step with a tqdm counter on stderr: a serving search reads or traces a step per
    layout and running batch it tries (llama-2-70b on 8 x MI300X: 24 steps, 9 s here from the cache). The
    bar starts with the first step, so a layout refused before any leaves its one-line error alone."""
    from tqdm import tqdm

    bar = None

    def llm_step(key):
        nonlocal bar
        if bar is None:
            bar = tqdm(desc="LLM steps (cache or trace)", unit="step", file=sys.stderr, dynamic_ncols=True,
                       leave=False, mininterval=0, miniters=1)
        step = source.llm_step(key)
        bar.update()
        return step

    try:
        yield llm_step
    finally:
        if bar is not None:
            bar.close()


def _priced(records: list[dict], usd_per_hour: float | None, field: str, units: int, rates,
            chips: list[Chip]) -> None:
    """Each record whose chip has a price (--usd-per-hour, else the registry's dated one) gains it,
    its basis and `field`: what `units` of work cost at its (rate per second, devices, chip name)
    from `rates`; None where there is no rate."""
    by_name = {chip_label(chip): chip for chip in chips}
    for record, (rate, devices, name) in zip(records, rates, strict=True):
        price = quote(by_name[name], usd_per_hour)
        if price is not None:
            cost = usd_per_units(price.usd_per_device_hour, rate, units, devices)
            record.update(usd_per_hour=price.usd_per_device_hour, price_basis=price.basis,
                          **{field: cost if math.isfinite(cost) else None})


def _print_cost(records: list[dict], rate: str, cost: str, label: str) -> None:
    """The cost table, for the records that carry a price, and the prices it used; then the chips
    without one, so that a missing cost is never silent."""
    priced = [r for r in records if cost in r]
    if priced:
        print("\nCost at a price per device-hour (--usd-per-hour, else the registry's dated price, which `chipcal "
              "hardware show CHIP`\ncites), every device of the row charged (no cost: unsupported, or an LLM whose "
              "share does not fit a device):")
        print_table([{**{k: r[k] for k in ("model", "chip", "batch", "layout", "precision") if k in r},
                      rate: r[rate], "$/device-h": r["usd_per_hour"], label: r[cost]} for r in priced],
                    {rate: ".4g", "$/device-h": ".4g", label: ".4g"})
        for chip, basis in dict.fromkeys((r["chip"], r["price_basis"]) for r in priced):
            print(f"  {chip}: {basis}")
    unpriced = ", ".join(dict.fromkeys(r["chip"] for r in records if cost not in r))
    if unpriced:
        print()
        print_wrapped(f"No cost for {unpriced}: the registry holds no dated price; give --usd-per-hour")


# --- main --------------------------------------------------------------------------------------


def _check_model_args(args: argparse.Namespace, precisions: list[str]) -> None:
    """The LLM-only options and --autocast's precisions, for a model that is not an LLM."""
    for flag, value in (("--phase", args.phase), ("--context", args.context), ("--new-tokens", args.new_tokens),
                        ("--devices", args.devices if args.devices != 1 else None), ("--layout", args.layout),
                        ("--scenario", args.scenario), ("--max-batch", args.max_batch), ("--beams", args.beams),
                        ("--ttft-s", args.ttft_s), ("--tpot-s", args.tpot_s)):
        if value is not None:
            raise UsageError(f"{flag} is for LLMs; {', '.join(args.model)} is not one")
    if args.autocast and any(p not in AUTOCAST_PRECISIONS for p in precisions):
        raise UsageError(f"--autocast lowers to {' or '.join(AUTOCAST_PRECISIONS)}; --precision "
                         f"{','.join(precisions)} has others")


def _print_summary(preds: list[Prediction], limit: str) -> None:
    """The summary table per model, its legend and notes, then the recommendations."""
    tables = predictions.summary_tables(preds)
    for model, rows in tables.items():
        if len(tables) > 1:
            print(f"\n{model}:")
        print_table(rows)
    print(predictions.summary_legend(preds))
    for line in predictions.summary_notes(preds, limit):
        print(line)
    lines = predictions.recommendation_lines(rankings(preds))
    if lines:
        print("\nrecommendations:")
        print("\n".join(lines))


def _print_details(preds: list[Prediction], found: dict[int, tuple[Opportunity, ...]], by_layer: bool) -> None:
    """--by-layer's table per supported prediction, then --explain's breakdown per prediction."""
    if by_layer:
        for p in preds:
            if p.supported:
                print(prediction_detail.layer_heading(p))
                print_table(prediction_detail.layer_rows(p))
                print(prediction_detail.LAYER_LEGEND)
                print("\n".join(prediction_detail.slowest_lines(p)))
    for i, p in enumerate(preds):
        if i in found:
            for line in prediction_detail.explain_lines(p, found[i]):
                print(line)


def run_models(args: argparse.Namespace, chips: list[Chip], calibration: CalibrationParams | None,
               source: WorkloadSource, host_s: float | None, host_source: str) -> int:
    precisions = args.precision or ["fp32"]
    _check_model_args(args, precisions)
    pairs = predict_all(args.model, chips, args.batch, precisions, calibration, source.get,
                        args.runtime, host_s, args.autocast, fp32_mode=args.fp32_mode,
                        memory_format=args.memory_format, framework=args.framework, host_source=host_source)
    preds = [p for _, p in pairs]
    found = (opportunities_all(pairs, calibration, source.get, args.target_utilization) if args.explain else {})
    records = prediction_records(preds, found, by_layer=args.by_layer)
    if not args.by_layer:
        _priced(records, args.usd_per_hour, "usd_per_1000_inferences", INFERENCES_PER_QUOTE,
                ((p.throughput_per_s if p.supported else math.nan, 1, p.chip) for p in preds), chips)
    if args.csv:
        _write_csv(args.csv, records)
    if args.plot:
        save_figure(roofline_figure(preds), args.plot)
    if args.json:
        print_json(records)
        return 0
    _print_summary(preds, "TDP" if args.power_limit_w is None else "power limit")
    _print_details(preds, found, args.by_layer)
    if not args.by_layer:
        _print_cost(records, "throughput_per_s", "usd_per_1000_inferences", "$/1k inferences")
    return 0


def _body(args: argparse.Namespace) -> int:
    calibration = None if args.calibration is None else load_calibration(args.calibration)
    chips = prediction_chips(args.hardware, load_registry_warn(), calibration, args.calibration)
    if args.power_limit_w is not None:
        chips = [with_power_limit(c, args.power_limit_w) for c in chips]
    warning = unused_calibration_warning(calibration, chips)
    if warning:
        sys.stderr.write(warning + "\n")
    source = WorkloadSource(use_cache=not args.no_cache, notify=note)
    host_s, host_source = host_overhead(args.host_overhead_s, use_cache=not args.no_cache)
    llms = [is_llm(m) for m in args.model]
    if any(llms):
        if not all(llms):
            raise UsageError("LLMs and other models are predicted in separate calls (different fields)")
        return run_llm(args, chips, calibration, source, host_s, host_source)
    return run_models(args, chips, calibration, source, host_s, host_source)


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    return run(_body, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
