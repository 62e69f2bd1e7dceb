"""What users run on a GPU (issue 55), measured by `chipcal calibrate --device cuda` after its
validation and predicted beside it with the run's own parameters:

* torch.compile (`reduce-overhead`) of COMPILED_MODELS at COMPILED_BATCHES, with bf16 weights and
  with fp32 weights under bf16 autocast (measure.models, runtime "compiled");
* one small decoder (DECODER, random weights, bf16) at two contexts: the decode step alone and
  Hugging Face `generate` end to end, as time per output token (measure.llm).

Every compiled row is also profiled (measure.kernel_profile: 5 passes, each kernel's device time),
and at the largest batch the same pass runs eager too, timed and profiled: where compiled runs
slower than eager (vit_b_16 at batch 64 on the H100 and H200 so far), the row's kernels say which
ones (docs/findings/2026-11-30-compiled-multihead-attention.md). The eager pass adds about a model
build and a second of timing to those rows. The decoder's rows are profiled too, per output token
(measure.llm): the device's busy time in a token against the token's time says how much of it is
the host's (issue 55's generate on one H100 host, 3-4x slower than predicted). That adds a second
or two to each generate row (two calls of 8 tokens and two of one, profiled) and less to a step.

Compiling dominates the phase (each graph tens of seconds on a cold Inductor cache), and no
recorded run says how long it takes, so the phase runs inside a wall budget
(CalibrationConfig.users_run_time_s): before each row it checks that the row, priced at the
longest row of its kind so far, still fits, and lists every row that does not as skipped. The
first row of a kind has no price yet, so the phase can overrun by that one row (a compile). The
decoder's rows come first (no compile), then the compiled rows with bf16 weights, batch 64 first
(where issue 55 saw compiled predicted 2x too fast), then batch 1 and 8, then the autocast rows.
On a lent H200 a row took 10-16 s, compile included, so --quick's 90 s hold the decoder and about
five compiled rows: both ends of the batch range for every model. A row that fails (out of memory, a compile
error, no transformers for the decoder) is listed as skipped with its reason, and the run goes on:
this phase comes after every fitted figure, and must not lose them. A CPU run has no such phase
(a CPU's compiled and generate checks are measure_model_efficiency runs, docs/runtimes.md).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass

from chipcal.calibrate import document as cd
from chipcal.calibrate.context import RunContext
from chipcal.model.errors import ChipcalError

COMPILED_MODELS = ("resnet50", "vit_b_16", "mobilenet_v2")
COMPILED_BATCHES = (64, 1, 8)             # the two ends first: device-bound, then graph-launch-bound
COMPILED_MODES = ("bf16", "autocast")        # bf16 weights; fp32 weights under bf16 autocast
DECODER = "llama-3.2-1b"
DECODER_CONTEXTS = (128, 2048)
NEW_TOKENS = 32
ROW_TIME_S = 1.0                              # timing budget of one row, compile excluded
KERNELS_KEPT = 8                              # the largest kernels a row keeps of each runtime's profile


@dataclass(frozen=True)
class Planned:
    """One row to measure: what it is and how to measure and predict it."""

    kind: str            # "compiled" | "step" | "generate"
    model: str
    batch: int
    mode: str            # a compiled row's COMPILED_MODES; "bf16" for the decoder
    context: int = 0

    @property
    def label(self) -> str:
        what = f"{self.model} b{self.batch} {self.mode}"
        return f"{self.kind} {what}" + (f" @{self.context}+{NEW_TOKENS}" if self.context else "")


def plan(models: tuple[str, ...]) -> list[Planned]:
    """The rows in the order they run (module docstring): the decoder's, then the compiled rows of
    the COMPILED_MODELS among the run's validation `models`: bf16 weights at every batch first, in
    COMPILED_BATCHES' order, then the same under autocast."""
    rows = [Planned(kind, DECODER, 1, "bf16", context) for context in DECODER_CONTEXTS for kind in ("step", "generate")]
    return rows + [Planned("compiled", m, b, mode) for mode in COMPILED_MODES for b in COMPILED_BATCHES
                   for m in COMPILED_MODELS if m in models]


def run_rows(planned: list[Planned], budget_s: float, measure: Callable[[Planned], cd.UsersRunRow],
             clock: Callable[[], float] = time.monotonic, progress: Callable[[str], None] = lambda _: None
             ) -> tuple[list[cd.UsersRunRow], list[str]]:
    """Each planned row measured while it fits the budget (module docstring): (rows, skipped labels)."""
    start, longest = clock(), {}
    rows, skipped = [], []
    for entry in planned:
        began = clock()
        if began - start + longest.get(entry.kind, 0.0) > budget_s:
            skipped.append(entry.label)
        else:
            try:
                rows.append(measure(entry))
            except (ChipcalError, RuntimeError, ImportError) as exc:
                skipped.append(f"{entry.label} ({_first_line(exc)})")
            longest[entry.kind] = max(longest.get(entry.kind, 0.0), clock() - began)
        progress(entry.label)
    return rows, skipped


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:160] if text else type(exc).__name__


def measure_row(run: RunContext, chip, params, entry: Planned) -> cd.UsersRunRow:
    """One row measured on the run's device and predicted with `params` on `chip`."""
    if entry.kind == "compiled":
        return _compiled(run, chip, params, entry)
    return _decoder(run, chip, params, entry)


def _compiled(run: RunContext, chip, params, entry: Planned) -> cd.UsersRunRow:
    from chipcal.measure.models import measure_model
    from chipcal.measure.workloads import WorkloadSource
    from chipcal.model.estimate.prediction import predict

    autocast = entry.mode == "autocast"
    workload = WorkloadSource().get(entry.model, entry.batch, "codegen")

    def measured(runtime: str):
        return measure_model(entry.model, entry.batch, "fp32" if autocast else "bf16", run.device,
                             flop=workload.flop, max_time_s=ROW_TIME_S, min_samples=5, runtime=runtime,
                             autocast=autocast, profile=True)

    m = measured("compiled")
    eager = measured("eager") if entry.batch == max(COMPILED_BATCHES) else None
    predicted = predict(workload, chip, "bf16", params=params, runtime="compiled", autocast=autocast).latency_s
    row = _row(entry, m.latency, predicted, compile_s=m.compile_s)
    kernels = (_largest("compiled", m.kernels) or ()) + (_largest("eager", eager and eager.kernels) or ())
    return dataclasses.replace(row, kernels=kernels or None, kernels_s=m.kernels and m.kernels.total_s,
                               eager_measured_s=eager and eager.latency.median_s,
                               eager_kernels_s=eager and eager.kernels and eager.kernels.total_s)


def _decoder(run: RunContext, chip, params, entry: Planned) -> cd.UsersRunRow:
    from chipcal.measure.llm import measure_generate, measure_llm
    from chipcal.measure.workloads import WorkloadSource
    from chipcal.model.estimate.llm import predict_llm
    from chipcal.model.workload.llm_config import load_llm_config, step_key

    config, source = load_llm_config(entry.model), WorkloadSource()
    steps = [source.llm_step(step_key(config, "eager", phase, entry.batch, entry.context, NEW_TOKENS, "bf16"))
             for phase in ("prefill", "decode")]
    p = predict_llm(config, *steps, chip, "bf16", "eager", entry.context, NEW_TOKENS, params=params)
    if entry.kind == "generate":
        m = measure_generate(config, entry.batch, entry.context, NEW_TOKENS, steps[1].workload.flop, "bf16",
                             run.device, max_time_s=ROW_TIME_S, profile=True).step
        predicted_s = entry.batch / p.tokens_per_s
    else:
        m = measure_llm(config, "decode", entry.batch, entry.context, NEW_TOKENS, steps[1].workload.flop,
                        "bf16", run.device, max_time_s=ROW_TIME_S, profile=True)
        predicted_s = entry.batch / p.step_tokens_per_s
    return dataclasses.replace(_row(entry, m.latency, predicted_s), kernels=_largest(entry.kind, m.kernels),
                               kernels_s=m.kernels and m.kernels.total_s)


def _largest(runtime: str, profile) -> tuple[cd.UsersRunKernel, ...] | None:
    """The KERNELS_KEPT largest kernels of `profile` (None without one), labelled with `runtime`."""
    if profile is None:
        return None
    return tuple(cd.UsersRunKernel(runtime=runtime, name=k.name, calls=k.calls, self_s=k.self_s)
                 for k in profile.kernels[:KERNELS_KEPT])


def _row(entry: Planned, latency, predicted_s: float, compile_s: float | None = None) -> cd.UsersRunRow:
    return cd.UsersRunRow(kind=entry.kind, model=entry.model, batch=entry.batch, mode=entry.mode,
                          context=entry.context or None, new_tokens=NEW_TOKENS if entry.context else None,
                          measured_s=latency.median_s, n=latency.n, cv=latency.cv, predicted_s=predicted_s,
                          error=predicted_s / latency.median_s - 1, compile_s=compile_s)


def users_run(run: RunContext, chip, params) -> cd.UsersRunSection | None:
    """The phase (module docstring); None on a CPU. Journaled as a whole."""
    if not run.device.is_cuda:
        return None
    run.clock.start("what users run: compiled, generate")
    planned = plan(run.config.models)
    budget = run.config.users_run_time_s
    run.progress.phase(f"what users run: compiled and generate, within {budget:.0f} s", len(planned))

    def measure() -> dict:
        rows, skipped = run_rows(planned, budget, lambda e: measure_row(run, chip, params, e), progress=run.step)
        return cd.UsersRunSection(rows=tuple(rows), skipped=tuple(skipped), budget_s=budget).to_dict()

    return cd.UsersRunSection.from_dict(run.journaled("users_run", measure))
