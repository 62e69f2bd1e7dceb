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
from collections.abc import Callable, Sequence

from chipcal.calibrate.store import load_calibration
from chipcal.cli.common import (
    HYPOTHETICAL_NOTE,
    Parser,
    UsageError,
    at_most,
    csv_choices,
    csv_list,
    load_registry_warn,
    marked,
    output_file,
    plot_path,
    positive_float,
    positive_int,
    positive_int_list,
    print_json,
    print_table,
    resolve_chips,
    run,
    save_figure,
)
from chipcal.measure.workloads import WorkloadSource
from chipcal.model.chip import Chip
from chipcal.model.estimate.host import DEFAULT_FRAMEWORK, FRAMEWORKS
from chipcal.model.estimate.llm import (
    DEVICES_NOTE,
    LLM_PRECISIONS,
    WEIGHT_ONLY,
    LlmPrediction,
    predict_llm,
)
from chipcal.model.estimate.numerics import AUTOCAST_PRECISIONS, FP32_MODES
from chipcal.model.estimate.opportunities import Opportunity, opportunities, top_consumers
from chipcal.model.estimate.prediction import MEMORY_FORMATS, Prediction, predict
from chipcal.model.estimate.throttle import with_power_limit
from chipcal.model.local import LOCAL_CHIP_NAME, CpuSpec
from chipcal.model.mapping.params import (
    HOST_RUNTIMES,
    RUNTIMES,
    CalibrationError,
    CalibrationParams,
    params_for,
    runtime_fuses,
)
from chipcal.model.precision import PRECISIONS
from chipcal.model.workload.llm_config import (
    LLM_RUNTIMES,
    PHASES,
    PRESETS,
    is_llm,
    load_llm_config,
    step_key,
)
from chipcal.model.workload.user_model import is_user_model
from chipcal.report.render import wrap

MB = 1e6
GB = 1e9
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


LOCAL_HOST = "local"


def host_seconds(text: str) -> float | str:
    """--host-overhead-s: seconds >= 0, or 'local' (this machine's dispatch probe)."""
    return LOCAL_HOST if text.strip().lower() == LOCAL_HOST else non_negative_float(text)


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
                   help="comma-separated torchvision model names (e.g. resnet50,mobilenet_v2), LLMs (a preset: "
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
                   help="fused: one kernel per fused subgraph (TensorRT/XLA); compiled: torch.compile with "
                        "CUDA graphs; eager: one kernel per op, each issued by the host (PyTorch eager). "
                        "A calibrated chip uses its calibration's runtime. Default fused; LLMs: compiled "
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


def _local_chip(calibration_dir: str | None) -> Chip:
    """This machine's CPU with its measured DRAM bandwidth and cache knee where known: from the
    calibration being applied (so its parameters meet the chip they were fitted on), else from
    the bandwidth probe's cache, else the documented assumptions."""
    from chipcal.measure.cpu import detect_cpu
    from chipcal.measure.system import local_chip

    spec = detect_cpu()     # once: the machine check, the cache lookup and the chip need it
    if calibration_dir is not None:
        cal = load_calibration(calibration_dir)     # validated: a local-cpu calibration has its bandwidth
        if cal.chip == LOCAL_CHIP_NAME:
            _check_same_machine(cal, spec)
            return local_chip(cal.memory_bandwidth_bytes_per_s, cal.l3_bytes, f"calibration {calibration_dir}", cpu=spec)
    from chipcal.measure.bandwidth import cached_cpu_bandwidth, local_overrides

    measured = cached_cpu_bandwidth(spec)
    return local_chip(**local_overrides(measured, spec), cpu=spec) if measured is not None else local_chip(cpu=spec)


def _check_same_machine(cal: CalibrationParams, spec: CpuSpec) -> None:
    """A local-cpu calibration describes the machine it was measured on: every machine's CPU is
    'local-cpu', so another machine's run would otherwise be applied here without a word."""
    from chipcal.measure.system import host_differences

    differ = host_differences(cal.host, spec) if cal.host is not None else []
    if differ:
        raise UsageError(f"--calibration {cal.path.parent}: measured on another machine ({'; '.join(differ)}); a "
                         f"{LOCAL_CHIP_NAME} calibration applies to the machine it was measured on: run "
                         "`chipcal calibrate` here")


def _chips(names: Sequence[str], calibration_dir: str | None = None) -> list[Chip]:
    registry = load_registry_warn()
    chips: list[Chip] = []
    rest = [n for n in names if n != "local"]
    if "all" in rest:
        if len(names) > 1:
            raise UsageError("'all' cannot be combined with other hardware names")
        return resolve_chips(None, registry)
    if "local" in names:
        chips.append(_local_chip(calibration_dir))
    if rest:
        chips += resolve_chips(rest, registry)
    return chips


def _calibration(directory: str | None) -> CalibrationParams | None:
    if directory is None:
        return None
    try:
        return load_calibration(directory)
    except CalibrationError as exc:
        raise UsageError(str(exc)) from None


# --- records and tables ------------------------------------------------------------------------


def opportunity_fields(found: Sequence[Opportunity]) -> dict:
    """Opportunities flattened into one record: <kind>[_<precision>]_<metric>."""
    out = {}
    for o in found:
        prefix = o.kind if o.kind != "precision" else f"precision_{o.metrics['precision']}"
        for k, v in o.metrics.items():
            if k != "precision":
                out[f"opportunity_{prefix}_{k}"] = v
    return out


def layer_record(p: Prediction, e) -> dict:
    return {"model": p.model, "chip": p.chip, "batch": p.batch, "precision": p.precision,
            "index": e.index, "name": e.name, "pattern": e.pattern, "op_class": e.op_class, "stage": e.stage,
            "engine": e.engine, "compute_precision": e.compute_precision, "flop": e.flop,
            "units_allocated": e.units_allocated, "units_total": e.units_total, "waves": e.waves,
            "utilization": e.utilization, "lane_fill": e.lane_fill, "occupancy": e.occupancy,
            "class_efficiency": e.class_efficiency, "compute_time_s": e.compute_time_s,
            "memory_time_s": e.memory_time_s, "overhead_s": e.overhead_s, "latency_s": e.latency_s,
            "bottleneck": e.bottleneck, "dram_bytes": e.dram_bytes, "onchip_bytes": e.onchip_bytes,
            "attained_flop_per_s": e.attained_flop_per_s, "compute_efficiency": e.compute_efficiency,
            "bandwidth_utilization": e.bandwidth_utilization, "arithmetic_intensity": e.arithmetic_intensity,
            "energy_j": e.energy_j, "compute_energy_j": e.compute_energy_j, "clock_energy_j": e.clock_energy_j,
            "memory_energy_j": e.memory_energy_j,
            "static_energy_j": e.static_energy_j, "wasted_energy_j": e.wasted_energy_j,
            "explanation": e.explanation}


def _summary_row(p: Prediction) -> dict:
    """The columns that matter for choosing a chip; the rest (TFLOP/s, AI, units, runtime…) are in
    --json and --csv."""
    row = {"chip": marked(p.chip, p.hypothetical), "batch": p.batch, "prec": p.precision}
    if not p.supported:
        return row | {"latency_ms": "unsupported"}
    return row | {
        "latency_ms": f"{p.latency_s * 1e3:.4g}", "per_s": f"{p.throughput_per_s:,.0f}",
        "energy_mJ": f"{p.energy_j * 1e3:.4g}", "power_W": f"{p.avg_power_w:.3g}",
        "mem_MB": f"{p.peak_memory_bytes / MB:.4g}" + ("" if p.fits_in_memory else "!"),
        "util": f"{p.compute_utilization:.0%}", "eff": f"{p.compute_efficiency:.1%}",
        "bw": f"{p.bandwidth_utilization:.0%}", "bound": p.bottleneck}


def _notes(preds: Sequence[Prediction], limit: str) -> list[str]:
    notes = []
    for p in preds:
        if not p.supported:
            notes.append(f"unsupported: {p.chip} {p.precision}: {p.reason}")
        elif p.bottleneck == "host":
            notes.append(f"host-bound: {p.chip} at batch {p.batch} {p.precision} ({p.runtime}) idles "
                         f"{p.host_wait_s * 1e3:.3g} of {p.latency_s * 1e3:.3g} ms waiting for the host to issue "
                         f"its ops ({p.host_per_op_s * 1e6:.3g} us per op); a compiled or fused runtime removes it")
        if p.supported and p.power_limited:
            notes.append(f"power-limited: {p.chip} at batch {p.batch} {p.precision} would average "
                         f"{p.listed_clock_power_w:.3g} W at its listed clocks > its {p.tdp_w:g} W {limit}: "
                         f"predicted at {p.clock_fraction:.0%} of them, {p.latency_s * 1e3:.4g} ms "
                         f"({p.listed_clock_latency_s * 1e3:.4g} ms at the listed clocks)"
                         + (f"; it still draws {p.avg_power_w:.3g} W there (static and DRAM power alone "
                            f"exceed the {limit})" if p.avg_power_w > p.tdp_w * 1.001 else ""))
        elif p.supported and p.exceeds_tdp:
            notes.append(f"note: {p.chip} at batch {p.batch} {p.precision} averages {p.avg_power_w:.3g} W > "
                         f"its {p.tdp_w:g} W TDP (an assumed share: its clock is the measured one)")
    return list(dict.fromkeys(notes))


def _summary_table(preds: Sequence[Prediction], limit: str = "TDP") -> None:
    """One table per model (columns within TEXT_WIDTH), the legend, then the notes, each folded."""
    import pandas as pd

    models = list(dict.fromkeys(p.model for p in preds))
    runtimes = sorted({p.runtime for p in preds if p.supported})
    for model in models:
        if len(models) > 1:
            print(f"\n{model}:")
        print_table(pd.DataFrame([_summary_row(p) for p in preds if p.model == model]).fillna(""))
    legend = ("util = time-averaged fraction of units with work; eff = attained / peak FLOP/s; "
              "bw = DRAM bandwidth used; ! = exceeds device memory"
              + (f"; runtime {runtimes[0]}" if len(runtimes) == 1 else f"; runtimes {', '.join(runtimes)}")
              + "; TFLOP/s, arithmetic intensity and units in --json / --csv")
    if any(p.hypothetical for p in preds):
        legend += f"; {HYPOTHETICAL_NOTE}"
    print(wrap(legend))
    for line in _notes(preds, limit):
        print(wrap(line, indent="  "))


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.2f}x" if b else "-"


def _best_lines(group: Sequence[Prediction]) -> list[str]:
    """Best latency (smallest batch), energy per sample and throughput among `group`, each against
    the runner-up."""
    small = min(p.batch for p in group)
    at_small = sorted((p for p in group if p.batch == small), key=lambda p: (p.latency_s, p.chip))
    by_energy = sorted(group, key=lambda p: (p.energy_per_sample_j, p.chip))
    by_tput = sorted(group, key=lambda p: (-p.throughput_per_s, p.chip))
    best, second = at_small[0], at_small[1] if len(at_small) > 1 else None
    e, t = by_energy[0], by_tput[0]
    return [
        f"best latency (batch {small}): {_named(best)} {best.latency_s * 1e3:.4g} ms"
        + (f", {_ratio(second.latency_s, best.latency_s)} faster than {_named(second)}" if second else ""),
        f"best energy: {_named(e)} at batch {e.batch}, {e.energy_per_sample_j * 1e3:.4g} mJ per sample"
        + (f", {_ratio(by_energy[1].energy_per_sample_j, e.energy_per_sample_j)} less than "
           f"{_named(by_energy[1])} (batch {by_energy[1].batch})" if len(by_energy) > 1 else ""),
        f"best throughput: {_named(t)} at batch {t.batch}, {t.throughput_per_s:,.0f}/s"
        + (f", {_ratio(t.throughput_per_s, by_tput[1].throughput_per_s)} {_named(by_tput[1])} "
           f"(batch {by_tput[1].batch})" if len(by_tput) > 1 else ""),
    ]


def _named(p: Prediction) -> str:
    return marked(p.chip, p.hypothetical)


def _ordinal(n: int) -> str:
    return f"{n}{'th' if 10 <= n % 100 <= 20 else {1: 'st', 2: 'nd', 3: 'rd'}.get(n % 10, 'th')}"


def _design_lines(designs: Sequence[Prediction], products: Sequence[Prediction]) -> list[str]:
    """Hypothetical designs apart from the products, each with the rank it would take among them:
    latency at the smallest batch, best energy per sample and best throughput over the batches."""
    small = min(p.batch for p in (*designs, *products))

    def best(rows: Sequence[Prediction]) -> dict[str, tuple[float, float, float]]:
        """{chip: (latency at the smallest batch, least energy per sample, most samples per second)}"""
        out = {}
        for chip in dict.fromkeys(p.chip for p in rows):
            mine = [p for p in rows if p.chip == chip]
            latency = min((p.latency_s for p in mine if p.batch == small), default=math.inf)
            out[chip] = (latency, min(p.energy_per_sample_j for p in mine), -max(p.throughput_per_s for p in mine))
        return out

    theirs = best(products)
    lines = [f"design studies, not products (the rank each would take among the {len(theirs)} products: "
             f"latency at batch {small}, energy, throughput):"]
    for chip, mine in sorted(best(designs).items(), key=lambda kv: (kv[1], kv[0])):
        ranks = [_ordinal(1 + sum(other[i] < mine[i] for other in theirs.values())) for i in range(3)]
        lines.append(f"  {chip}: {mine[0] * 1e3:.4g} ms, {mine[1] * 1e3:.4g} mJ per sample, {-mine[2]:,.0f}/s "
                     f"({', '.join(ranks)})")
    return lines


def recommendations(preds: Sequence[Prediction]) -> list[str]:
    """Per (model, precision): the products ranked by latency (smallest batch), energy per sample and
    throughput; hypothetical designs (registry `hypothetical`) listed apart with the rank they would
    take. With no product among the chips, the designs are ranked and each is named as one."""
    lines = []
    groups: dict[tuple[str, str], list[Prediction]] = {}
    for p in preds:
        if p.supported and p.fits_in_memory:
            groups.setdefault((p.model, p.precision), []).append(p)
    for (model, precision), group in groups.items():
        if len({p.chip for p in group}) < 2:
            continue
        products = [p for p in group if not p.hypothetical]
        designs = [p for p in group if p.hypothetical] if products else []
        lines.append(f"{model} @ {precision}:" + ("" if products else f" (only design studies here: {HYPOTHETICAL_NOTE})"))
        lines += [wrap(f"  {line}", indent="    ") for line in _best_lines(products or group)]
        if designs:
            lines += [wrap(f"  {line}", indent="      ") for line in _design_lines(designs, products)]
    return lines


def _layer_table(p: Prediction) -> None:
    import pandas as pd

    rows = [{"#": e.index, "name": e.name[:24], "class": e.op_class,
             "units": f"{e.units_allocated}/{e.units_total}", "waves": e.waves,
             "util": f"{e.utilization:.0%}", "fill": f"{e.lane_fill:.0%}",
             "lat_us": f"{e.latency_s * 1e6:.3g}", "comp_us": f"{e.compute_time_s * 1e6:.3g}",
             "mem_us": f"{e.memory_time_s * 1e6:.3g}", "bound": e.bottleneck,
             "TFLOP/s": f"{e.attained_flop_per_s / 1e12:.3g}", "energy_uJ": f"{e.energy_j * 1e6:.3g}"}
            for e in p.subgraphs]
    print(f"\n{p.model} on {p.chip}, batch {p.batch}, {p.precision}: per subgraph")
    print_table(pd.DataFrame(rows))
    print("(names cut to 24 characters; engine, occupancy, bytes and energy split in --by-layer --json)")
    print("slowest subgraphs, why:")
    for e in sorted(p.subgraphs, key=lambda e: (-e.latency_s, e.index))[:5]:
        print(wrap(f"  {e.explanation}", indent="    "))


def _explain(p: Prediction, found: Sequence[Opportunity]) -> None:
    def say(line: str) -> None:
        print(wrap(line, indent="    "))

    print(f"\n{p.model} on {p.chip}, batch {p.batch}, {p.precision}")
    total = p.energy_j
    say(f"  energy {total * 1e3:.4g} mJ: compute {p.compute_energy_j / total:.0%} (of which the clocks of "
        f"busy units {p.clock_energy_j / total:.0%}), memory "
        f"{p.memory_energy_j / total:.0%}, static {p.static_energy_j / total:.0%}; idle units waste "
        f"{p.wasted_energy_j * 1e3:.4g} mJ ({p.wasted_energy_j / total:.0%})")
    say("  top energy: " + "; ".join(f"{e.name} {e.energy_j * 1e3:.3g} mJ" for e in top_consumers(p)))
    mem = p.memory
    at = next((m.name for m in mem.timeline if m.index == mem.peak_index), "start")
    say(f"  memory: peak {mem.peak_bytes / MB:.4g} MB at {at} = weights {mem.weight_bytes / MB:.4g} MB + "
        f"activations {mem.peak_activation_bytes / MB:.4g} MB (no workspace: implicit-GEMM lowering); "
        f"weights {'stay on chip' if p.weights_on_chip else 'stream from DRAM'}")
    say("  memory timeline (MB after each subgraph): "
        + " ".join(f"{m.live_bytes / MB:.3g}" for m in mem.timeline))
    if p.runtime in HOST_RUNTIMES:
        say(f"  latency: {p.latency_s * 1e3:.4g} ms ({p.runtime}: one stream behind the host); host issues "
            f"{len(p.subgraphs)} ops at {p.host_per_op_s * 1e6:.3g} us = {p.host_s * 1e3:.4g} ms, device busy "
            f"{p.serial_latency_s * 1e3:.4g} ms, idle {p.host_wait_s * 1e3:.4g} ms waiting for the host")
    else:
        say(f"  latency: {p.latency_s * 1e3:.4g} ms with stage concurrency, {p.serial_latency_s * 1e3:.4g} ms "
            f"serial, {p.critical_path_latency_s * 1e3:.4g} ms critical path")
    for o in found:
        say(f"  opportunity ({o.kind}): {o.summary}")


def roofline_plot(preds: Sequence[Prediction], path: str) -> None:
    """One log-log roofline per prediction: min(peak, AI × bandwidth), subgraphs by bottleneck."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [p for p in preds if p.supported]
    if not shown:
        raise UsageError("nothing to plot: no supported (chip, precision) pair")
    cols = math.ceil(math.sqrt(len(shown)))
    rows = math.ceil(len(shown) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.2 * cols, 3.4 * rows), squeeze=False)
    colors = {"compute": "tab:blue", "memory": "tab:red", "overhead": "tab:gray"}
    for ax, p in zip(axes.flat, shown, strict=False):
        bw = p.bandwidth_bytes_per_s
        finite = [e.arithmetic_intensity for e in p.subgraphs if math.isfinite(e.arithmetic_intensity) and e.flop]
        hi = max(finite + [p.peak_flop_per_s / bw]) * 4
        lo = min(finite + [0.1]) / 2
        xs = [lo * (hi / lo) ** (i / 200) for i in range(201)]
        ax.plot(xs, [min(p.peak_flop_per_s, x * bw) for x in xs], color="black", lw=1.2, label="roofline (spec)")
        for kind, color in colors.items():
            for on_chip in (False, True):
                pts = [(min(e.arithmetic_intensity, hi), e.attained_flop_per_s) for e in p.subgraphs
                       if e.bottleneck == kind and e.flop > 0 and math.isinf(e.arithmetic_intensity) == on_chip]
                if pts:
                    ax.scatter(*zip(*pts, strict=True), s=14, color=color, alpha=0.8, marker=">" if on_chip else "o",
                               label=f"{kind} (no DRAM traffic, at right edge)" if on_chip else kind)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{p.chip} ({p.precision}, b{p.batch})", fontsize=9)
        ax.set_xlabel("FLOP per DRAM byte", fontsize=8)
        ax.set_ylabel("FLOP/s", fontsize=8)
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="lower right")
    for ax in list(axes.flat)[len(shown):]:
        ax.axis("off")
    fig.suptitle(f"{', '.join(sorted({p.model for p in shown}))}: subgraphs on each chip's roofline")
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


# --- LLMs (src/chipcal/model/estimate/llm.py, docs/llm.md) ---------------------------------------------------
# One row per (model, batch, chip, precision); each forward (prefill, decode step) characterized once
# per (model, batch, context, runtime, dtype) and cached (chipcal.measure.workloads).

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


def predict_all_llm(args: argparse.Namespace, chips: Sequence[Chip], calibration: CalibrationParams | None,
                    source, host_s: float | None = None,
                    host_source: str = "given (--host-overhead-s)") -> list[LlmPrediction]:
    """Every (model, batch, chip, precision) LLM prediction; each forward characterized once.
    `host_s`: the per-op host cost asked for (src/chipcal/cli/predict.py's --host-overhead-s), None: default."""
    runtime = args.runtime or LLM_RUNTIME
    out = []
    for name in args.model:
        config = load_llm_config(name)
        for batch in args.batch:
            for precision in args.precision or [LLM_PRECISION]:
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


def _llm_rate(value: float) -> str:
    return "-" if not math.isfinite(value) else f"{value:,.4g}"


def _llm_table(preds: Sequence[LlmPrediction]) -> None:
    rows = []
    for p in preds:
        row = {"model": p.model, "chip": p.chip, "phase": p.phase, "b": p.batch,
               "ctx+new": f"{p.context}+{p.new_tokens}", "prec": p.precision, "rt": p.runtime}
        if not p.supported:
            rows.append(row | {"tok/s": "unsupported"})
            continue
        rows.append(row | {
            "tok/s": _llm_rate(p.tokens_per_s), "TTFT_ms": f"{p.time_to_first_token_s * 1e3:.4g}",
            "TPOT_ms": "-" if p.phase == "prefill" else f"{p.time_per_output_token_s * 1e3:.4g}",
            "bw_bound": _llm_rate(p.bandwidth_bound_tokens_per_s), "host_bound": _llm_rate(p.host_bound_tokens_per_s),
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
                f"host bound {_llm_rate(p.host_bound_tokens_per_s)} tok/s ({p.host_ops_per_step} host-issued ops "
                f"per step, {p.host_per_op_s * 1e6:.3g} us each on average)")
        notes.append(f"{p.model} on {p.chip}, {p.phase} at batch {p.batch}, {p.precision}, {p.runtime}: "
                     f"{_llm_rate(p.tokens_per_s)} tok/s = {share:.0%} of the bandwidth bound "
                     f"{_llm_rate(p.bandwidth_bound_tokens_per_s)} tok/s; {host}; bottleneck {p.bottleneck}; "
                     f"weights {p.weight_bytes / GB:.4g} GB, KV cache {p.kv_cache_bytes / GB:.3g} GB")
    for line in dict.fromkeys(notes):
        print(line)


def run_llm(args: argparse.Namespace, chips: Sequence[Chip], calibration: CalibrationParams | None,
            source, host_s: float | None = None, host_source: str = "given (--host-overhead-s)") -> int:
    check_llm_args(args)
    preds = predict_all_llm(args, chips, calibration, source, host_s, host_source)
    records = [p.record() for p in preds]
    if args.csv:
        import pandas as pd

        pd.DataFrame(records).to_csv(args.csv, index=False)
        sys.stderr.write(f"wrote {args.csv}\n")
    if args.json:
        print_json(records)
    else:
        _llm_table(preds)
    return 0


# --- main --------------------------------------------------------------------------------------


def predict_all(models: Sequence[str], chips: Sequence[Chip], batches: Sequence[int],
                precisions: Sequence[str], calibration: CalibrationParams | None,
                workload: Callable[[str, int, bool], object], runtime: str = "fused",
                host_overhead_s: float | None = None, autocast: bool = False,
                **launch) -> list[tuple[Chip, Prediction]]:
    """Every (model, batch, chip, precision) prediction with its chip; each model characterized
    once per batch and runtime, not once per chip. The calibrated chip is predicted under the
    runtime its calibration was fitted on; every other chip under `runtime`. `autocast` and
    `launch` (fp32_mode, memory_format, framework, host_source): estimate/prediction.predict."""
    out = []
    for model in models:
        for batch in batches:
            for chip in chips:
                calibrated = calibration is not None and calibration.applies_to(chip.name, chip.active_mode)
                chip_runtime = calibration.runtime if calibrated else runtime
                w = workload(model, batch, runtime_fuses(chip_runtime))
                for precision in precisions:
                    out.append((chip, predict(w, chip, precision, calibration=calibration,
                                              runtime=chip_runtime, host_overhead_s=host_overhead_s,
                                              autocast=autocast, **launch)))
    return out


def _host(value: float | str | None, no_cache: bool) -> tuple[float | None, str]:
    """(per-op host seconds or None for the default, where they came from) of --host-overhead-s."""
    if value != LOCAL_HOST:
        return value, "given (--host-overhead-s)"
    from chipcal.measure.dispatch import local_dispatch

    cost = local_dispatch(use_cache=not no_cache)
    return cost.per_op_s, f"this machine's dispatch probe: {cost.method} (median of {cost.per_op.n})"


def _body(args: argparse.Namespace) -> int:
    calibration = _calibration(args.calibration)
    chips = _chips(args.hardware, args.calibration)
    if args.power_limit_w is not None:
        chips = [with_power_limit(c, args.power_limit_w) for c in chips]
    if calibration is not None and not any(calibration.applies_to(c.name, c.active_mode) for c in chips):
        sys.stderr.write(f"warning: calibration is for {calibration.chip}, which is not among the chips "
                         "predicted; every chip keeps its family defaults\n")
    source = WorkloadSource(use_cache=not args.no_cache, notify=lambda line: sys.stderr.write(line + "\n"))
    host_s, host_source = _host(args.host_overhead_s, args.no_cache)
    llms = [is_llm(m) for m in args.model]
    if any(llms):
        if not all(llms):
            raise UsageError("LLMs and other models are predicted in separate calls (different fields)")
        args.phase = args.phase or "decode"
        args.context = args.context or DEFAULT_CONTEXT
        args.new_tokens = args.new_tokens or DEFAULT_NEW_TOKENS
        return run_llm(args, chips, calibration, source, host_s, host_source)
    for flag, value in (("--phase", args.phase), ("--context", args.context), ("--new-tokens", args.new_tokens)):
        if value is not None:
            raise UsageError(f"{flag} is for LLMs; {', '.join(args.model)} is not one")
    args.precision = args.precision or ["fp32"]
    args.runtime = args.runtime or "fused"
    if args.autocast and any(p not in AUTOCAST_PRECISIONS for p in args.precision):
        raise UsageError(f"--autocast lowers to {' or '.join(AUTOCAST_PRECISIONS)}; --precision "
                         f"{','.join(args.precision)} has others")
    try:
        pairs = predict_all(args.model, chips, args.batch, args.precision, calibration, source.get,
                            args.runtime, host_s, args.autocast, fp32_mode=args.fp32_mode,
                            memory_format=args.memory_format, framework=args.framework, host_source=host_source)
    except CalibrationError as exc:
        raise UsageError(str(exc)) from None
    preds = [p for _, p in pairs]

    found: dict[int, tuple[Opportunity, ...]] = {}
    if args.explain:
        for i, (chip, p) in enumerate(pairs):
            params = params_for(chip.name, chip.kind, calibration, chip.active_mode, p.runtime, p.framework)
            found[i] = opportunities(p, source.get(p.model, p.batch, p.fused), chip, params,
                                     workload_at=lambda b, m=p.model, f=p.fused: source.get(m, b, f),
                                     target_utilization=args.target_utilization)

    if args.by_layer:
        records = [layer_record(p, e) for p in preds for e in p.subgraphs]
    else:
        records = [{**p.record(), **opportunity_fields(found.get(i, ()))} for i, p in enumerate(preds)]
    if args.csv:
        import pandas as pd

        pd.DataFrame(records).to_csv(args.csv, index=False)
        sys.stderr.write(f"wrote {args.csv}\n")
    if args.plot:
        roofline_plot(preds, args.plot)
    if args.json:
        print_json(records)
        return 0
    _summary_table(preds, "TDP" if args.power_limit_w is None else "power limit")
    lines = recommendations(preds)
    if lines:
        print("\nrecommendations:")
        print("\n".join(lines))
    if args.by_layer:
        for p in preds:
            if p.supported:
                _layer_table(p)
    for i, p in enumerate(preds):
        if i in found:
            _explain(p, found[i])
    return 0


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    return run(_body, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
