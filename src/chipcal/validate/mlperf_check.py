"""MLPerf Inference rows predicted, per accelerator, against what the submission measured.

What is predicted, and how (MLPerf Inference rules, "Scenarios"; validate.mlperf_scenarios):
- Offline: all samples are available at once, so a serving engine runs at saturation: the
  highest throughput over the benchmark's batch sizes whose peak memory fits the device, under
  the fused runtime (one kernel per fused subgraph, as TensorRT, MIGraphX, XLA and OpenVINO
  compile a network) at the precision submitted, at the clock the chip's TDP allows.
- Server: queries arrive at random; the highest throughput among those batches whose
  99th-percentile latency, taken as twice the batch's run time (a query waits for the batch
  running when it arrives, then runs in the next), stays within the benchmark's limit.
- SingleStream: one sample at a time: batch 1's latency, against LoadGen's 90th percentile.
- MultiStream: one query of 8 samples at a time (MLPerf Inference rules, "Scenarios"), which the
  engine runs as one batch of 8: batch 8's latency, against LoadGen's 99th percentile of a query.
The measured figure is the system's divided by its accelerators (a CPU-only system: its sockets).
A benchmark whose sample is many network calls (3D-UNet, DLRM: validate.mlperf_benchmarks)
divides a throughput of calls by the mean calls per sample, and times its SingleStream sample at
the 90th percentile of calls, run at the batch of highest throughput up to that many calls.
A MaxQ row whose accelerators' power limit its submitter published (validate.mlperf_power) is
predicted at that limit, with its system's average power beside it, and its energy per sample (per
token) as power over throughput.
The LLM benchmarks (llama2-70b, mixtral-8x7b, gptj's beam search; from v5.0 llama3.1-405b) are
served as a serving engine serves them (validate.mlperf_llm): Offline at saturation, Server (and
v5.1's Interactive) at the highest Poisson load within the latency limits (TTFT and TPOT, or
gptj's whole query), their SingleStream rows not at all; on all of a system's accelerators in
the layout of most tokens/s, over the link the system's description names (validate.mlperf_links:
PCIe where a system lacks its chip's bridges); their figure is output tokens/s per accelerator.

The predictions are the physics with the family defaults, fitted on none of these rows. Beside
them, each throughput row carries its software stack's efficiency fitted on the other
accelerators' Offline rows (validate.mlperf_stack) and its held-out error with it.
A row is excluded, with its reason, where chipcal cannot characterize the benchmark's network,
where its chip lacks the precision, where a MultiStream sample is many calls, or where it is a
MaxQ row whose power limit is not published.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from chipcal.calibrate.accuracy import abs_quantile
from chipcal.model.estimate.prediction import Prediction, predict
from chipcal.model.estimate.throttle import with_power_limit
from chipcal.model.registry import Registry
from chipcal.model.workload.llm_config import StepKey
from chipcal.model.workload.types import LlmStep
from chipcal.validate import mlperf_llm
from chipcal.validate.mlperf import MlperfRow, chip_of, device_name, devices_of, per_accelerator
from chipcal.validate.mlperf_benchmarks import Benchmark, benchmarks
from chipcal.validate.mlperf_devices import NOT_IN_REGISTRY
from chipcal.validate.mlperf_links import UnreadLink, link_label, with_system_link
from chipcal.validate.mlperf_llm import LlmBenchmark, NotServed, Served, llm_benchmark
from chipcal.validate.mlperf_power import node_power_w, power_limit_w
from chipcal.validate.mlperf_scenarios import (
    Workloads,
    fitting,
    pipeline_run,
    saturation,
    server_choice,
)
from chipcal.validate.mlperf_stack import Observed, family_of, held_out_factor, stack_of

# why the other benchmarks, v4.1's and later rounds', are not predicted yet
NOT_CHARACTERIZED = {
    # later rounds' LLM benchmarks that mlperf_llm.LLM_BENCHMARKS does not map (mlcommons/inference v5.1 tag)
    **dict.fromkeys(("llama3.1-8b", "llama3.1-8b-edge"),
                    "LLM serving: Llama-3.1-8B on CNN-DailyMail; the reference README states the generated "
                    "length in characters (gen_len 8,167,644 over 13,368 samples), not tokens, so the mean "
                    "output is not at hand"),
    "deepseek-r1": "LLM serving: DeepSeek-R1's multi-head latent attention and 256 routed experts are not among "
                   "the decoders chipcal traces (Llama, Mistral, Mixtral, Qwen2, GPT-2)",
}
PREDICTED_SCENARIOS = ("Offline", "Server", "Interactive", "SingleStream", "MultiStream")
MULTISTREAM_SAMPLES = 8         # samples per MultiStream query (MLPerf Inference rules, "Scenarios")


@dataclass(frozen=True)
class Checked:
    """A row predicted: per-accelerator measured and predicted (samples/s, or seconds for a
    latency), the batch the prediction ran at, and its relative error (predicted / measured - 1).
    A throughput row also carries its stack's factor fitted on the other accelerators
    (validate.mlperf_stack) and its prediction with it, `held_out`; a latency row keeps its own.
    `options`: a Server row's (batch, latency_s, throughput per sample) to choose among again
    once the stack's factor is known."""

    row: MlperfRow
    chip: str
    batch: int
    measured: float
    predicted: float
    bottleneck: str
    precision: str
    stack_factor: float = 1.0
    power_limit_w: float | None = None      # a MaxQ row's accelerators' limit (validate.mlperf_power)
    device_power_w: float | None = None     # predicted average power of one accelerator at the limit
    node_power_w: float | None = None       # the system's non-accelerator power, fitted on its other rows
    held_out: float | None = None
    options: tuple[tuple[int, float, float], ...] = ()
    layout: str = ""                        # an LLM row's parallel layout (validate.mlperf_llm)
    link: str = ""                          # and the link its all-reduces cross (validate.mlperf_links)

    @property
    def error(self) -> float:
        return self.predicted / self.measured - 1

    @property
    def predicted_power_w(self) -> float | None:
        """The system's average power: its accelerators' predicted power plus the node's."""
        if self.device_power_w is None or self.node_power_w is None:
            return None
        return self.row.accelerators * self.device_power_w + self.node_power_w

    @property
    def power_error(self) -> float | None:
        predicted = self.predicted_power_w
        return None if predicted is None or not self.row.avg_power_w else predicted / self.row.avg_power_w - 1

    @property
    def energy_error(self) -> float | None:
        """The system's energy per sample (per token) predicted against measured, - 1: power over
        throughput, the physics' throughput (MLPerf's power logs: joules = average power x time)."""
        power = self.power_error
        return None if power is None else (1 + power) / (1 + self.error) - 1

    @property
    def held_out_error(self) -> float:
        return (self.predicted if self.held_out is None else self.held_out) / self.measured - 1

    def record(self) -> dict:
        """A flat record: the row's provenance, measured and predicted per accelerator (SI units)."""
        return {**_provenance(self.row), "chip": self.chip, "status": "predicted", "batch": self.batch,
                "precision": self.precision,
                "measured": self.measured, "predicted": self.predicted, "error": self.error,
                "stack": stack_of(self.row), "stack_factor": self.stack_factor,
                "held_out_error": self.held_out_error, "power_limit_w": self.power_limit_w,
                "measured_power_w": self.row.avg_power_w, "predicted_power_w": self.predicted_power_w,
                "power_error": self.power_error, "energy_error": self.energy_error, "bottleneck": self.bottleneck,
                "layout": self.layout or None, "link": self.link or None, "reason": None}


@dataclass(frozen=True)
class Excluded:
    row: MlperfRow
    reason: str

    def record(self) -> dict:
        return {**_provenance(self.row), "chip": chip_of(self.row), "status": "excluded", "batch": None,
                "precision": None,
                "measured": per_accelerator(self.row), "predicted": None, "error": None,
                "stack": stack_of(self.row), "stack_factor": None, "held_out_error": None, "power_limit_w": None,
                "measured_power_w": self.row.avg_power_w, "predicted_power_w": None, "power_error": None,
                "energy_error": None, "bottleneck": None, "layout": None, "link": None, "reason": self.reason}


def _provenance(row: MlperfRow) -> dict:
    """Where a row comes from, and the unit of its per-accelerator figures (a latency: one sample's,
    or a MultiStream query's)."""
    unit = "latency_s" if row.unit == "latency_s" else f"{row.unit}_per_accelerator"
    return {"round": row.round, "submitter": row.submitter, "system": row.system, "accelerator": device_name(row),
            "accelerators": row.accelerators, "benchmark": row.benchmark, "scenario": row.scenario, "path": row.path,
            "unit": unit}


def check(rows: Sequence[MlperfRow], registry: Registry, workloads: Workloads,
          llm_step: Callable[[StepKey], LlmStep] | None = None,
          on_row: Callable[[], None] = lambda: None) -> tuple[list[Checked], list[Excluded]]:
    """Every row predicted or excluded with its reason (module docstring), in the rows' order.
    `llm_step` characterizes the LLM benchmarks' forwards (measure.workloads.WorkloadSource);
    without it their rows are excluded."""
    checked, excluded = [], []
    known: dict[tuple, list[Prediction]] = {}     # every row of a chip shares its batches' predictions
    served: dict[tuple, Served | NotServed] = {}  # and an LLM system its scenario's, whatever the accuracy

    def options(bench: Benchmark, chip, precision: str) -> list[Prediction]:
        key = (bench.network, chip.name, chip.tdp_w, precision)
        if key not in known:
            known[key] = fitting(bench, chip, precision, workloads)
        return known[key]

    def serve(bench: LlmBenchmark, chip, devices: int, scenario: str, stack: str) -> Served | NotServed:
        key = (bench, chip.name, chip.tdp_w, chip.interconnect, devices, scenario, stack)
        if key not in served:
            try:
                served[key] = mlperf_llm.served(bench, chip, devices, scenario, stack, llm_step)
            except NotServed as exc:
                served[key] = exc
        return served[key]

    for row in rows:
        outcome = _one(row, registry, workloads, options, serve if llm_step is not None else None)
        (checked if isinstance(outcome, Checked) else excluded).append(outcome)
        on_row()
    return _with_node_power(_with_stack_factors(checked)), excluded


def _with_node_power(checked: list[Checked]) -> list[Checked]:
    """Each MaxQ Offline row with its system's non-accelerator power fitted on the system's other
    Offline rows (a Server row's power is not compared: its load follows the limit's choice)."""
    measured = [(c.row.system, family_of(c.row.benchmark), c.row.avg_power_w - c.row.accelerators * c.device_power_w)
                for c in checked if c.device_power_w is not None]
    return [replace(c, node_power_w=node_power_w(c.row.system, family_of(c.row.benchmark), measured))
            if c.device_power_w is not None else c for c in checked]


def _with_stack_factors(checked: list[Checked]) -> list[Checked]:
    """Each throughput row with its stack's factor fitted on the other accelerators' Offline rows,
    and its prediction with it (a Server row chooses its batch again at the factor's speed)."""
    observed = [Observed(c.chip, stack_of(c.row), family_of(c.row.benchmark), c.precision,
                         math.log(c.measured / c.predicted)) for c in checked if c.row.scenario == "Offline"]
    factors: dict[tuple[str, str, str, str], float] = {}
    out = []
    for c in checked:
        if c.row.unit == "latency_s":
            out.append(c)
            continue
        key = (c.chip, stack_of(c.row), family_of(c.row.benchmark), c.precision)
        if key not in factors:
            factors[key] = held_out_factor(observed, *key)
        f = factors[key]
        held_out = (server_choice(c.options, benchmarks()[c.row.benchmark].server_latency_s, f)[2] if c.options
                    else c.predicted * f)     # Offline, and an LLM's Server load (tokens/s scale with speed)
        out.append(replace(c, stack_factor=f, held_out=held_out))
    return out


def _one(row: MlperfRow, registry: Registry, workloads: Workloads, options, serve) -> Checked | Excluded:
    bench, llm = benchmarks().get(row.benchmark), llm_benchmark(row.benchmark)
    if llm is not None and serve is None:
        return Excluded(row, "an LLM benchmark, left out of this run (validate --mlperf --skip-llm)")
    if bench is None and llm is None:
        return Excluded(row, NOT_CHARACTERIZED.get(row.benchmark, f"benchmark {row.benchmark} is not characterized"))
    if row.scenario == "Interactive" and llm is None:
        return Excluded(row, "Interactive is a scenario of the LLM benchmarks only")
    name = chip_of(row)
    if name is None or name not in registry.names:
        return Excluded(row, NOT_IN_REGISTRY.get(name, f"{device_name(row)}: no registry chip"))
    chip = registry.get(name)
    cap = power_limit_w(row)
    if row.avg_power_w is not None:
        if cap is None:
            return Excluded(row, "a power submission (MaxQ) whose power limit its submitter's configs do not give")
        chip = with_power_limit(chip, cap)
    if llm is not None:
        if row.scenario not in mlperf_llm.SCENARIOS:
            return Excluded(row, f"an LLM's {row.scenario} row: its percentile latency needs the spread of the "
                                 "dataset's lengths, and only their means are at hand")
        try:
            chip = with_system_link(row, chip)
        except UnreadLink as exc:
            return Excluded(row, str(exc))
        return _served(row, chip, serve(llm, chip, devices_of(row), row.scenario, stack_of(row)), cap)
    precision = bench.precision_on(chip, stack_of(row))
    if precision is None:
        return Excluded(row, f"{chip.name} has no {' or '.join(bench.precisions)} engine")
    if row.scenario == "SingleStream":
        return _single_stream(row, chip, bench, precision, workloads, options)
    if row.scenario == "MultiStream":
        return _multi_stream(row, chip, bench, precision, workloads)
    fits = options(bench, chip, precision)
    if not fits:
        return Excluded(row, f"{bench.network} fits {chip.name}'s memory at no batch of {bench.batches}")
    if row.scenario == "Server":
        return _server(row, chip, bench, precision, fits)
    best = saturation(fits)
    powered = row.avg_power_w is not None
    return Checked(row, chip.name, best.batch, per_accelerator(row), best.throughput_per_s / bench.calls_per_sample,
                   best.bottleneck, precision, power_limit_w=cap if powered else None,
                   device_power_w=best.avg_power_w if powered else None)


def _served(row: MlperfRow, chip, outcome: Served | NotServed, cap: float | None) -> Checked | Excluded:
    """An LLM row (validate.mlperf_llm): tokens/s per accelerator; a MaxQ Offline row's power."""
    if isinstance(outcome, NotServed):
        return Excluded(row, str(outcome))
    powered = row.avg_power_w is not None and row.scenario == "Offline"
    return Checked(row, chip.name, outcome.batch, per_accelerator(row), outcome.tokens_per_s / devices_of(row),
                   outcome.bottleneck, outcome.precision, power_limit_w=cap if powered else None,
                   device_power_w=outcome.device_power_w if powered else None, layout=outcome.layout,
                   link=link_label(chip))


def _server(row: MlperfRow, chip, bench: Benchmark, precision: str, fits: list[Prediction]) -> Checked | Excluded:
    choices = tuple((p.batch, p.latency_s, p.throughput_per_s / bench.calls_per_sample) for p in fits)
    if bench.server_latency_s is None:
        return Excluded(row, f"{row.benchmark} has no Server latency limit in chipcal")
    batch, _, throughput = server_choice(choices, bench.server_latency_s)
    bottleneck = next(p.bottleneck for p in fits if p.batch == batch)
    return Checked(row, chip.name, batch, per_accelerator(row), throughput, bottleneck, precision, options=choices)


def _multi_stream(row: MlperfRow, chip, bench: Benchmark, precision: str, workloads: Workloads) -> Checked | Excluded:
    """One query's latency: its 8 samples as one batch (module docstring); a benchmark whose
    sample is many calls is not predicted."""
    if bench.calls_p90 != 1 or bench.pipeline:
        return Excluded(row, f"MultiStream: a query of {row.benchmark}'s many-call samples is not predicted")
    p = predict(workloads(bench.network, MULTISTREAM_SAMPLES, "fused"), chip, precision)
    if not p.fits_in_memory:
        return Excluded(row, f"{bench.network} does not fit {chip.name}'s memory at batch {MULTISTREAM_SAMPLES}")
    return Checked(row, chip.name, MULTISTREAM_SAMPLES, row.value, p.latency_s, p.bottleneck, precision)


def _single_stream(row: MlperfRow, chip, bench: Benchmark, precision: str, workloads: Workloads,
                   options) -> Checked | Excluded:
    """One sample's latency: one call at batch 1, or a many-call sample's calls at the batch of
    highest throughput up to that many (module docstring)."""
    if bench.pipeline:
        p = pipeline_run(bench, chip, precision, workloads, 1)
        return Checked(row, chip.name, 1, row.value, p.latency_s, p.bottleneck, precision)
    if bench.calls_p90 == 1:
        p = predict(workloads(bench.network, 1, "fused"), chip, precision)
        return Checked(row, chip.name, 1, row.value, p.latency_s, p.bottleneck, precision)
    best = saturation(options(bench, chip, precision), most=bench.calls_p90)
    if best is None:
        return Excluded(row, f"{bench.network} fits {chip.name}'s memory at no batch of {bench.batches}")
    return Checked(row, chip.name, best.batch, row.value, bench.calls_p90 / best.throughput_per_s, best.bottleneck,
                   precision)


def error_figures(checked: Sequence[Checked], held_out: bool = False) -> tuple[int, float | None, float | None]:
    """(n, median |error|, p90 |error|) of the predicted rows (None with no row): the physics'
    errors, or with `held_out` the errors with each row's held-out stack factor."""
    errors = [c.held_out_error if held_out else c.error for c in checked]
    return len(errors), abs_quantile(errors, 50), abs_quantile(errors, 90)
