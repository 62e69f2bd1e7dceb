"""`measure_model_efficiency`: model latency, delivered FLOP/s and efficiency vs the peaks, energy.

Per (model, batch, precision): FLOP from chipcal's workload counter (2 per MAC), the latency
distribution (median, IQR, CI, n), delivered FLOP/s = FLOP / median latency, efficiency against the
spec peak (registry), the measured GEMM peak (cached, measured on first use) and the physics peak,
and energy per forward pass and average power where a power source exists.

Models: torchvision names; LLMs (a preset or PATH/config.json, random weights: one row per
prefill or decode step, `--phase`, `--context`, `--new-tokens`, src/chipcal/measure/llm.py); your own model
(path/to/file.py:factory or package.module:factory, which is executed; docs/llm.md).
`--by-layer`: each leaf module's time inside the pass too, and alone (src/chipcal/measure/layer_times.py).
`--profile`: each kernel's own time in the pass (an LLM's step, or one token of `--generate`), from
torch.profiler (src/chipcal/measure/kernel_profile.py).
`--runtime compiled`: torch.compile of the model (reduce-overhead on CUDA, default mode on a CPU;
src/chipcal/measure/models.py), its compile time in `compile_s`. `--generate`: an LLM's Hugging Face
`generate` timed end to end, per output token (src/chipcal/measure/llm.py), instead of one decode step.
`--scenario offline`: an LLM served by a continuous-batching loop with `--batch` slots, output tokens/s
at saturation (src/chipcal/measure/batching.py); `chipcal predict --scenario offline` predicts it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import pandas as pd

from chipcal.cli.common import (
    Measuring,
    Parser,
    RowWriter,
    UsageError,
    csv_choices,
    device_arg,
    interrupted_exit,
    note,
    output_file,
    positive_float,
    positive_int,
    positive_int_list,
    print_json,
    print_table,
    run,
    write_notes,
)
from chipcal.measure.device import Device
from chipcal.measure.kernel_profile import (
    GENERATE_PROFILE_CALLS,
    GENERATE_PROFILE_TOKENS,
    PROFILE_PASSES,
    generate_profile_tokens,
)
from chipcal.measure.models import FP32_SWITCHES, MODEL_FP32_MODE, MODEL_PRECISIONS, MODEL_RUNTIMES
from chipcal.measure.workloads import WorkloadSource
from chipcal.model.workload.llm_config import PHASES, is_llm, load_llm_config
from chipcal.model.workload.user_model import is_user_model

LAYER_FIELDS = ("model", "batch", "precision", "device", "layer", "kind", "calls", "latency_s", "latency_iqr_s",
                "latency_ci_low_s", "latency_ci_high_s", "n", "share_of_hooked_pass", "hooked_pass_s", "pass_s",
                "alone_s", "alone_iqr_s", "alone_n", "in_network_over_alone", "fingerprint", "torch_version",
                "threads")
FIELDS = ("model", "batch", "precision", "device", "flop", "latency_s", "latency_iqr_s", "latency_ci_low_s",
          "latency_ci_high_s", "n", "cv", "unstable", "delivered_flop_per_s", "spec_peak_flop_per_s",
          "measured_peak_flop_per_s", "physics_peak_flop_per_s", "efficiency_vs_spec", "efficiency_vs_measured",
          "efficiency_vs_physics", "efficiency", "peak", "energy_j", "energy_per_sample_j", "avg_power_w",
          "idle_power_w", "power_source", "power_note", "chip", "fingerprint", "torch_version", "threads",
          "other_cpus", "fp32_mode", "cudnn_allow_tf32", "float32_matmul_precision", "cudnn_benchmark", "note",
          "phase", "context", "new_tokens", "cached_tokens", "tokens_per_s", "runtime", "compile_mode", "compile_s",
          "prefill_s", "requests", "mean_batch", "prefill_group")
KERNEL_FIELDS = ("model", "batch", "precision", "device", "runtime", "autocast", "phase", "context", "new_tokens",
                 "kernel", "clock", "calls_per_pass", "self_s", "share_of_kernels", "kernels_s", "pass_s", "passes",
                 "fingerprint", "torch_version")
OFFLINE_REQUESTS_PER_SLOT = 6


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    p = Parser(prog=prog or "measure_model_efficiency", description=__doc__.splitlines()[0])
    p.add_argument("--model", default="resnet50",
                   help="comma-separated torchvision model names (default resnet50), LLMs (a preset or "
                        "PATH/config.json) or your own model (path/to/file.py:factory; the file is executed)")
    p.add_argument("--phase", choices=PHASES, default="decode",
                   help="LLMs: time the prefill over the context, or a decode step (default decode)")
    p.add_argument("--context", type=positive_int, default=512, metavar="N",
                   help="LLMs: prompt tokens per sequence (default 512)")
    p.add_argument("--new-tokens", type=positive_int, default=128, metavar="M",
                   help="LLMs: tokens generated; a decode step is timed at context N + (M-1)//2 (default 128)")
    p.add_argument("--generate", action="store_true",
                   help="LLMs, decode: time Hugging Face generate end to end, per output token ((call of M "
                        "tokens - its prefill) / (M - 1)), instead of one decode step")
    p.add_argument("--scenario", choices=("offline",),
                   help="LLMs: offline = a continuous-batching loop at saturation (MLPerf's Offline): --batch "
                        "is its slots (the most sequences running), --context and --new-tokens the mean prompt "
                        "and output lengths (each uniform within +-50 %%); tok/s = output tokens per second "
                        "while every slot runs")
    p.add_argument("--requests", type=positive_int, metavar="R",
                   help=f"--scenario offline: requests in the queue (default {OFFLINE_REQUESTS_PER_SLOT} x --batch)")
    p.add_argument("--runtime", choices=MODEL_RUNTIMES, default="eager",
                   help="eager (default) or compiled: torch.compile (reduce-overhead on CUDA, the default mode "
                        "on a CPU); torchvision and your own models")
    p.add_argument("--device", type=device_arg, default="cpu", help="cpu (default), cuda or cuda:N")
    p.add_argument("--batch", type=positive_int_list, default=[1], help="comma-separated batch sizes (default 1)")
    p.add_argument("--precision", type=csv_choices("precision", MODEL_PRECISIONS), default=["fp32"],
                   help="fp32 (default), bf16 or fp16; comma-separated for several")
    p.add_argument("--fp32-mode", choices=tuple(FP32_SWITCHES), default=MODEL_FP32_MODE,
                   help="what fp32 runs as: pytorch (default: PyTorch's own defaults, cuDNN convolutions "
                        "in TF32, matmuls in fp32), strict (TF32 off), tf32 (TF32 for both); recorded per row")
    p.add_argument("--peak", choices=("spec", "measured"), default="measured",
                   help="peak for the 'efficiency' column; 'measured' runs the GEMM sweep if not cached")
    p.add_argument("--max-time", type=positive_float, default=5.0, metavar="S",
                   help="timing budget per row in seconds (default 5)")
    p.add_argument("--no-power", action="store_true", help="skip the power measurement")
    p.add_argument("--by-layer", action="store_true",
                   help="also time each leaf module inside the pass (forward hooks, a second budget of "
                        "--max-time) and alone on its inputs (a third); --json and --csv then hold one "
                        "record per layer")
    p.add_argument("--profile", action="store_true",
                   help=f"also profile {PROFILE_PASSES} passes with torch.profiler: each kernel's device time on a GPU, each "
                        "operator's own CPU time on a CPU (Inductor's generated C++ stays in its compiled "
                        f"region); with --generate, per output token: {GENERATE_PROFILE_CALLS} calls of min(M, "
                        f"{GENERATE_PROFILE_TOKENS}) tokens less as many of 1; --json and --csv then hold one record per kernel")
    p.add_argument("--json", action="store_true", help="print an array of flat records")
    p.add_argument("--csv", metavar="FILE", type=output_file, help="write the rows to FILE as each completes")
    return p


def _models(text: str) -> list[str]:
    """Model names, each checked against the workload counter's list (UsageError otherwise);
    LLM configs are read here, user models when they are loaded."""
    from chipcal.model.workload import UnknownModelError, default_input_size

    names = [t.strip() for t in text.split(",") if t.strip()]
    if not names:
        raise UsageError("--model: empty list; give torchvision model names, e.g. resnet50,vit_b_16")
    for name in names:
        if is_llm(name):
            load_llm_config(name)
        elif not is_user_model(name):
            try:
                default_input_size(name)
            except UnknownModelError as exc:
                raise UsageError(f"--model: {exc.args[0] if exc.args else exc}") from None
    return names


def _measure(name: str, batch: int, precision: str, args: argparse.Namespace, power, source):
    """The ModelMeasurement of one row and the LLM fields of its record."""
    from chipcal.measure.models import measure_model, measure_module

    if is_llm(name):
        from chipcal.measure.llm import measure_generate, measure_llm
        from chipcal.model.workload.llm_config import step_key

        config = load_llm_config(name)
        step = source.llm_step(step_key(config, "eager", args.phase, batch, args.context, args.new_tokens,
                                        precision))
        fields = {"phase": args.phase, "context": args.context, "new_tokens": args.new_tokens,
                  "cached_tokens": step.cached}
        if args.scenario == "offline":
            m, served = _offline(config, batch, precision, step.workload.flop, args)
            return m, fields | served | {"phase": None, "cached_tokens": None}
        if args.generate:
            g = measure_generate(config, batch, args.context, args.new_tokens, step.workload.flop, precision,
                                 args.device, max_time_s=args.max_time, fp32_mode=args.fp32_mode,
                                 profile=args.profile)
            return g.step, fields | {"tokens_per_s": batch / g.step.latency.median_s, "prefill_s": g.prefill.median_s}
        m = measure_llm(config, args.phase, batch, args.context, args.new_tokens, step.workload.flop, precision,
                        args.device, power=power, max_time_s=args.max_time, fp32_mode=args.fp32_mode,
                        profile=args.profile)
        tokens = batch * (args.context if args.phase == "prefill" else 1)
        return m, fields | {"tokens_per_s": tokens / m.latency.median_s}
    if is_user_model(name):
        from chipcal.model.workload.user_model import characterize_user_model, load_user_model

        module, inputs = load_user_model(name, batch)
        flop = characterize_user_model(name, batch).flop
        return measure_module(module, inputs, flop, name=name, batch=batch, precision=precision, device=args.device,
                              power=power, max_time_s=args.max_time, fp32_mode=args.fp32_mode,
                              by_layer=args.by_layer, runtime=args.runtime, profile=args.profile), {}
    return measure_model(name, batch, precision, args.device, power=power, max_time_s=args.max_time,
                         fp32_mode=args.fp32_mode, by_layer=args.by_layer, runtime=args.runtime,
                         profile=args.profile), {}


def _offline(config, slots: int, precision: str, step_flop: int, args: argparse.Namespace):
    """The continuous-batching loop as a ModelMeasurement: latency = seconds per output token,
    flop = the decode step's per token (the prefill's is left out), and its fields."""
    from chipcal.measure.batching import measure_batching, requests
    from chipcal.measure.models import ModelMeasurement

    queue = requests(args.requests or OFFLINE_REQUESTS_PER_SLOT * slots, args.context, args.new_tokens)
    b = measure_batching(config, slots, queue, precision, args.device, max_time_s=args.max_time,
                         fp32_mode=args.fp32_mode)
    flop = step_flop // slots
    m = ModelMeasurement(model=config.name, batch=slots, precision=precision, device=b.device, flop=flop,
                         latency=b.per_token, delivered_flop_per_s=flop / b.per_token.median_s, power=None,
                         power_source="unavailable", power_note="not read for continuous batching",
                         numerics=b.numerics, runtime="offline")
    return m, {"context": round(b.prompt_tokens_mean), "new_tokens": round(b.output_tokens_mean),
               "tokens_per_s": b.tokens_per_s, "requests": b.requests, "mean_batch": b.mean_batch,
               "prefill_group": b.mean_prefill_group}


def _ratio(value, reference):
    return value / reference if value is not None and reference else None


def record(m, ref, measured_peak, peak_kind: str, fp, other_cpus: float | None = None) -> dict:
    """One flat row for a ModelMeasurement."""
    spec, physics = ref.spec(m.precision), ref.physics(m.precision)
    lat = m.latency
    row = dict.fromkeys(FIELDS)
    row.update(
        model=m.model, batch=m.batch, precision=m.precision, device=m.device, flop=m.flop,
        latency_s=lat.median_s, latency_iqr_s=lat.iqr_s, latency_ci_low_s=lat.ci_low_s,
        latency_ci_high_s=lat.ci_high_s, n=lat.n, cv=lat.cv, unstable=lat.unstable,
        delivered_flop_per_s=m.delivered_flop_per_s, spec_peak_flop_per_s=spec,
        measured_peak_flop_per_s=measured_peak, physics_peak_flop_per_s=physics,
        efficiency_vs_spec=_ratio(m.delivered_flop_per_s, spec),
        efficiency_vs_measured=_ratio(m.delivered_flop_per_s, measured_peak),
        efficiency_vs_physics=_ratio(m.delivered_flop_per_s, physics), peak=peak_kind,
        energy_j=m.energy_j, energy_per_sample_j=m.energy_per_sample_j, avg_power_w=m.avg_power_w,
        idle_power_w=m.power.idle_w if m.power else None, power_source=m.power_source,
        power_note=m.power_note, chip=ref.chip, fingerprint=fp.slug, torch_version=fp.torch_version,
        other_cpus=other_cpus, runtime=m.runtime, compile_mode=m.compile_mode, compile_s=m.compile_s,
        **({"fp32_mode": m.numerics.fp32_mode, "cudnn_allow_tf32": m.numerics.cudnn_allow_tf32,
            "float32_matmul_precision": m.numerics.float32_matmul_precision,
            "cudnn_benchmark": m.numerics.cudnn_benchmark} if m.numerics else {}),
        threads=lat.threads, note="; ".join(lat.warnings + (m.power.warnings if m.power else ())) or None)
    row["efficiency"] = row["efficiency_vs_spec" if peak_kind == "spec" else "efficiency_vs_measured"]
    return row


def layer_records(m, fp) -> list[dict]:
    """One flat row per leaf module of a ModelMeasurement timed with by_layer (none without)."""
    if m.layers is None:
        return []
    hooked = m.layers.hooked.median_s
    return [{"model": m.model, "batch": m.batch, "precision": m.precision, "device": m.device, "layer": layer.name,
             "kind": layer.kind, "calls": layer.calls, "latency_s": layer.time.median_s,
             "latency_iqr_s": layer.time.iqr_s, "latency_ci_low_s": layer.time.ci_low_s,
             "latency_ci_high_s": layer.time.ci_high_s, "n": layer.time.n,
             "share_of_hooked_pass": layer.time.median_s / hooked, "hooked_pass_s": hooked,
             "pass_s": m.latency.median_s, **_alone_fields(layer), "fingerprint": fp.slug,
             "torch_version": fp.torch_version, "threads": m.latency.threads}
            for layer in m.layers.layers]


def _alone_fields(layer) -> dict:
    """The leaf timed alone (None where the budget ran out first) and the network's time over it."""
    a = layer.alone
    return {"alone_s": a and a.median_s, "alone_iqr_s": a and a.iqr_s, "alone_n": a and a.n,
            "in_network_over_alone": a and layer.time.median_s / a.median_s}


def _print_layers(m, fp) -> None:
    """The per-layer table of one measurement (its layer_records) and what the leaves cover."""
    records = layer_records(m, fp)
    rows = [{"layer": r["layer"], "kind": r["kind"], "calls": r["calls"], "ms": r["latency_s"] * 1e3,
             "IQR ms": r["latency_iqr_s"] * 1e3, "n": r["n"], "share": r["share_of_hooked_pass"],
             "alone ms": r["alone_s"] and r["alone_s"] * 1e3, "x alone": r["in_network_over_alone"]}
            for r in records]
    sys.stdout.write(f"\n{m.model} b{m.batch} {m.precision}: each leaf module inside the pass, and alone\n")
    print_table(rows, {"ms": ".3f", "IQR ms": ".3f", "n": ".0f", "share": ".1%", "alone ms": ".3f", "x alone": ".2f"})
    both = [r for r in records if r["alone_s"]]
    sys.stdout.write(f"leaves {m.layers.covered_s * 1e3:.2f} ms of the hooked pass {m.layers.hooked.median_s * 1e3:.2f} ms "
                     f"(the pass without hooks {m.latency.median_s * 1e3:.2f} ms); the {len(both)} timed alone too: "
                     f"{sum(r['latency_s'] for r in both) * 1e3:.2f} ms in the pass, "
                     f"{sum(r['alone_s'] for r in both) * 1e3:.2f} ms alone; medians per pass\n")


def kernel_records(m, fp, row: dict) -> list[dict]:
    """One flat row per kernel of a ModelMeasurement profiled (none without), largest first; `row` is
    the measurement's own record (an LLM's phase and lengths)."""
    if m.kernels is None:
        return []
    total = m.kernels.total_s
    return [{"model": m.model, "batch": m.batch, "precision": m.precision, "device": m.device, "runtime": m.runtime,
             "autocast": m.autocast, "phase": row["phase"], "context": row["context"],
             "new_tokens": row["new_tokens"], "kernel": k.name, "clock": m.kernels.clock, "calls_per_pass": k.calls,
             "self_s": k.self_s, "share_of_kernels": k.self_s / total, "kernels_s": total,
             "pass_s": m.latency.median_s, "passes": m.kernels.passes, "fingerprint": fp.slug,
             "torch_version": fp.torch_version} for k in m.kernels.kernels]


def _print_kernels(m, fp, row: dict, top: int = 12) -> None:
    """The largest kernels of one profiled measurement, and what they cover."""
    records = kernel_records(m, fp, row)
    rows = [{"kernel": r["kernel"][:70], "calls": r["calls_per_pass"], "ms": r["self_s"] * 1e3,
             "share": r["share_of_kernels"]} for r in records[:top]]
    name = f"{m.model} eager" if row["phase"] is None and m.runtime == "eager" else _label(row)
    generate = m.runtime == "generate"
    per = "output token" if generate else "pass"
    sys.stdout.write(f"\n{name} b{m.batch} {m.precision}: the {len(rows)} largest of "
                     f"{len(records)} kernels by their own {m.kernels.clock} time, per {per}\n")
    print_table(rows, {"calls": ".1f", "ms": ".3f", "share": ".1%"})
    profiled = (f"{m.kernels.passes} calls of {generate_profile_tokens(row['new_tokens'])} tokens less as many of 1"
                if generate else f"{m.kernels.passes} profiled passes")
    sys.stdout.write(f"kernels {m.kernels.total_s * 1e3:.2f} ms over {profiled}; the {per} timed without the "
                     f"profiler {m.latency.median_s * 1e3:.2f} ms\n")


def unsupported_record(model: str, batch: int, precision: str, device: Device, note: str, ref, fp) -> dict:
    row = dict.fromkeys(FIELDS)
    row.update(model=model, batch=batch, precision=precision, device=str(device), chip=ref.chip,
               fingerprint=fp.slug, torch_version=fp.torch_version, note=note)
    return row


def _label(row: dict) -> str:
    """A row's model column: the model, its runtime when not eager, an LLM's phase and context."""
    if row["runtime"] == "offline":
        return f"{row['model']} offline {row['context']}+{row['new_tokens']} x{row['requests']}"
    if row["phase"] is None:
        return row["model"] if row["runtime"] in (None, "eager") else f"{row['model']} {row['runtime']}"
    if row["runtime"] == "generate":
        return f"{row['model']} generate {row['context']}+{row['new_tokens']}"
    return f"{row['model']} {row['phase']}@{row['cached_tokens']}"


def _display(rows: list[dict]) -> pd.DataFrame:
    frame = pd.DataFrame(rows)
    return pd.DataFrame({
        "model": [_label(r) for r in rows],
        "batch": frame["batch"], "prec": frame["precision"],
        "GFLOP": frame["flop"].astype(float) / 1e9, "latency ms": frame["latency_s"].astype(float) * 1e3,
        "IQR ms": frame["latency_iqr_s"].astype(float) * 1e3, "n": frame["n"],
        "GFLOP/s": frame["delivered_flop_per_s"].astype(float) / 1e9,
        "vs spec": frame["efficiency_vs_spec"], "vs measured": frame["efficiency_vs_measured"],
        "vs physics": frame["efficiency_vs_physics"],
        "J/pass": frame["energy_j"], "W": frame["avg_power_w"],
        "tok/s": frame["tokens_per_s"],
        "flag": ["unstable" if r["unstable"] else ("unsupported" if r["flop"] is None else "") for r in rows],
    })


def _measured_peaks(args, precisions: list[str], fp, bar_desc) -> dict[str, float | None]:
    """Measured GEMM peak per precision: from the cache, or measured now when --peak measured."""
    from chipcal.measure.peak import cached_peak_flop_per_s, measure_gemm_peak

    peaks: dict[str, float | None] = {}
    for precision in precisions:
        cached = cached_peak_flop_per_s(args.device, precision, fp)
        if cached is None and args.peak == "measured":
            bar_desc(f"GEMM peak {precision} (cached afterwards)")
            cached = measure_gemm_peak(args.device, [precision], fp=fp).peak_flop_per_s(precision)
        peaks[precision] = cached
    return peaks


def _detail(args: argparse.Namespace, fp):
    """The records of one measurement and its row that --by-layer or --profile write, or None."""
    if args.by_layer:
        return lambda m, row: layer_records(m, fp)
    return (lambda m, row: kernel_records(m, fp, row)) if args.profile else None


def _body(args: argparse.Namespace) -> int:
    device = args.device.require()
    models = _models(args.model)
    if args.by_layer and any(is_llm(m) for m in models):
        raise UsageError("--by-layer: torchvision and user models only (an LLM step is timed as a whole)")
    if args.profile and args.by_layer:
        raise UsageError("--profile and --by-layer: one at a time (hooks would time the profiler's own work)")
    if args.profile and args.scenario:
        raise UsageError("--profile: a model's pass, an LLM's step or generate; not --scenario offline")
    if args.by_layer and args.runtime != "eager":
        raise UsageError("--by-layer times an eager model: forward hooks would split a compiled graph")
    if args.runtime != "eager" and any(is_llm(m) for m in models):
        raise UsageError("--runtime compiled: torchvision and user models only (an LLM is timed eager, "
                         "as a step or with --generate)")
    if args.generate and (args.phase != "decode" or not all(is_llm(m) for m in models)):
        raise UsageError("--generate times an LLM's decode: give LLM models and --phase decode")
    if args.scenario and (args.generate or args.phase != "decode" or not all(is_llm(m) for m in models)):
        raise UsageError("--scenario offline serves LLMs: give LLM models, without --generate or --phase prefill")
    if args.requests and not args.scenario:
        raise UsageError("--requests is the queue of --scenario offline")
    if args.generate and args.new_tokens < 2:
        raise UsageError("--generate needs --new-tokens of at least 2 (one decode forward)")
    from chipcal.measure.allocator import pin_allocator
    from chipcal.measure.models import UnsupportedPrecision
    from chipcal.measure.power import UnavailableSource, open_power_source
    from chipcal.measure.reference import reference_peaks
    from chipcal.measure.system import OtherLoad, fingerprint

    fp = fingerprint(device.index)
    allocator = pin_allocator()     # as calibrate does: page faults independent of the process's history
    ref = reference_peaks(fp, args.device)
    power = UnavailableSource("--no-power given") if args.no_power else open_power_source(args.device)
    writer = RowWriter(args.csv, LAYER_FIELDS if args.by_layer else KERNEL_FIELDS if args.profile else FIELDS)
    source = WorkloadSource(notify=note)
    jobs = [(m, b, p) for m in models for b in args.batch for p in args.precision]
    rows: list[dict] = []
    detail = _detail(args, fp)
    detailed: list = []           # (measurement, its record) timed by layer or profiled, for their tables
    loop = Measuring(len(jobs), "measure_model_efficiency")
    with loop as bar:
        measured = _measured_peaks(args, args.precision, fp, bar.set_description)
        for name, batch, precision in jobs:
            bar.set_description(f"{name} b{batch} {precision}")
            try:
                with OtherLoad() as other:
                    m, llm_fields = _measure(name, batch, precision, args, power, source)
                row = record(m, ref, measured[precision], args.peak, fp, other.cpus) | llm_fields
            except UnsupportedPrecision as exc:
                m, row = None, unsupported_record(name, batch, precision, args.device, str(exc), ref, fp)
            rows.append(row)
            if detail is None:
                writer.write(row)
            elif m is not None:
                detailed.append((m, row))
                for detail_row in detail(m, row):
                    writer.write(detail_row)
                if m.profile_note:
                    note(f"{name} b{batch} {precision}: no kernel profile: {m.profile_note}")
            bar.update()

    if args.json:
        print_json([r for m, row in detailed for r in detail(m, row)] if detail else rows)
    elif rows:
        print_table(_display(rows), {"GFLOP": ".2f", "latency ms": ".2f", "IQR ms": ".2f", "n": ".0f",
                                     "GFLOP/s": ".1f", "vs spec": ".1%", "vs measured": ".1%",
                                     "vs physics": ".1%", "J/pass": ".3f", "W": ".1f", "tok/s": ".4g"})
        sys.stdout.write(f"chip: {ref.chip}; fingerprint {fp.slug}; torch {fp.torch_version}, "
                         f"{fp.torch_threads} threads; efficiency column: vs {args.peak} peak\n")
        sys.stdout.write(f"power: {power.name}" + (f" ({power.reason})" if not power.available else "") + "\n")
        sys.stdout.write(f"allocator: {allocator.detail}\n")
        write_notes(rows, ref.notes, fp.logical_cores)
        for r in rows:
            if r["note"]:
                sys.stdout.write(f"{r['model']} b{r['batch']} {r['precision']}: {r['note']}\n")
        for m, row in detailed:
            if args.by_layer:
                _print_layers(m, fp)
            elif m.kernels is not None:
                _print_kernels(m, fp, row)
    return interrupted_exit("measure_model_efficiency", rows) if loop.interrupted else 0


def main(argv: Sequence[str] | None = None, prog: str | None = None) -> int:
    return run(_body, build_parser(prog), argv)


if __name__ == "__main__":
    raise SystemExit(main())
