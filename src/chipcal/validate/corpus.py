"""Predictions checked against published measurements: the validation corpus and its comparison.

The corpus (src/chipcal/validate/data/corpus.csv, schema in docs/validation-corpus.md) holds one published
inference measurement per row: model, chip, batch, precision, runtime, value + unit, framework,
host CPU where stated, source (id, title, URL, date) and the split (`fit` or `test`, fixed per
source). `compare` predicts each row with the physics model and returns one `Comparison` each;
`summarize` gives median / p90 |error| per runtime and overall, and the bias per chip.

    published latency_s = value/1e3 (ms) | value (s) | batch / value (samples/s)
    error               = predicted latency / published latency − 1   (+: the model is slow)

Published runtimes map onto the model's runtimes (`RUNTIME_MODEL`): every framework that issues
ops one at a time from the host (PyTorch eager, PaddlePaddle's static-graph executor, TensorFlow)
is `eager`; TensorRT (also inside Paddle Inference, Paddle-TRT), XLA and vendor SDKs compile the
graph (`fused`); torch.compile with CUDA graphs is `compiled`. PyTorch eager with AMP
(torch.cuda.amp autocast) also casts every weight at each call (`AUTOCAST_RUNTIMES`).
"""

from __future__ import annotations

import dataclasses
import math
import re
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from importlib import resources
from pathlib import Path

from chipcal.calibrate.accuracy import abs_quantile
from chipcal.model.errors import ChipcalError
from chipcal.model.estimate.prediction import predict
from chipcal.model.mapping.base import MAC_CLASSES
from chipcal.model.mapping.params import FamilyParams, params_for, runtime_partition
from chipcal.model.precision import PRECISIONS

RUNTIME_MODEL = {
    "pytorch-eager": "eager",
    "pytorch-eager-amp": "eager",
    "paddle-static": "eager",
    "tensorflow": "eager",
    "torch-compile": "compiled",
    "tensorrt": "fused",
    "paddle-trt": "fused",
    "xla": "fused",
    "vendor-sdk": "fused",
}
# published runtimes that run under torch.autocast: weights cast from fp32 at every call
# (estimate/prediction.py, "Autocast")
AUTOCAST_RUNTIMES = ("pytorch-eager-amp",)
UNITS = ("ms", "s", "samples/s")
# this project's own recorded measurements cite the file in this repository that holds them
REPOSITORY_SOURCE = "repository: "
SPLITS = ("fit", "test")
COLUMNS = ("model", "chip", "batch", "precision", "runtime", "value", "unit", "framework", "host_cpu",
           "source", "source_title", "source_url", "source_date", "split", "note")


class CorpusError(ChipcalError, ValueError):
    """The corpus file is unreadable or a row breaks the schema; the message names file and row."""


def default_corpus() -> Path:
    return Path(str(resources.files("chipcal.validate") / "data" / "corpus.csv"))


@dataclass(frozen=True)
class Measurement:
    """One published measurement (one corpus row)."""

    row: int            # 1-based data row in the file
    model: str
    chip: str
    batch: int
    precision: str
    runtime: str        # as published (RUNTIME_MODEL key)
    value: float
    unit: str
    framework: str
    host_cpu: str
    source: str
    source_title: str
    source_url: str
    source_date: str
    split: str
    note: str

    @property
    def latency_s(self) -> float:
        """Published time per batch in seconds."""
        if self.unit == "ms":
            return self.value * 1e-3
        if self.unit == "s":
            return self.value
        return self.batch / self.value

    @property
    def model_runtime(self) -> str:
        return RUNTIME_MODEL[self.runtime]

    @property
    def autocast(self) -> bool:
        return self.runtime in AUTOCAST_RUNTIMES

    @property
    def framework_generation(self) -> str:
        """The eager framework's generation for its host cost (estimate.host.FRAMEWORKS): PyTorch
        2.x where the framework column says so, else the corpus's 2020-21 frameworks (pytorch1)."""
        return "pytorch2" if re.search(r"(pytorch|torch) 2\.", self.framework.lower()) else "pytorch1"


def _check(path: Path, row: int, record: dict) -> Measurement:
    where = f"{path.name} row {row}"

    def bad(field: str, why: str) -> CorpusError:
        return CorpusError(f"{where}: {field} {record.get(field)!r} {why}")

    for field in ("model", "chip", "source", "source_title", "source_url", "source_date"):
        if not str(record[field]).strip() or str(record[field]) == "nan":
            raise bad(field, "is empty")
    if not str(record["source_url"]).startswith(("http://", "https://", REPOSITORY_SOURCE)):
        raise bad("source_url", f"is neither a URL nor '{REPOSITORY_SOURCE} <path>' (this project's own measurement)")
    if record["precision"] not in PRECISIONS:
        raise bad("precision", f"is not one of {', '.join(PRECISIONS)}")
    if record["runtime"] not in RUNTIME_MODEL:
        raise bad("runtime", f"is not one of {', '.join(RUNTIME_MODEL)}")
    if record["unit"] not in UNITS:
        raise bad("unit", f"is not one of {', '.join(UNITS)}")
    if record["split"] not in SPLITS:
        raise bad("split", f"is not one of {', '.join(SPLITS)}")
    try:
        batch = int(record["batch"])
        value = float(record["value"])
    except (TypeError, ValueError):
        raise bad("batch/value", "must be numbers") from None
    if batch < 1 or batch != float(record["batch"]):
        raise bad("batch", "must be a positive integer")
    if not math.isfinite(value) or value <= 0:
        raise bad("value", "must be a positive number")
    text = {k: ("" if str(record[k]) == "nan" else str(record[k]).strip())
            for k in ("framework", "host_cpu", "note")}
    return Measurement(row=row, model=str(record["model"]).strip(), chip=str(record["chip"]).strip().lower(),
                       batch=batch, precision=record["precision"], runtime=record["runtime"], value=value,
                       unit=record["unit"], source=str(record["source"]).strip(),
                       source_title=str(record["source_title"]).strip(),
                       source_url=str(record["source_url"]).strip(), source_date=str(record["source_date"]).strip(),
                       split=record["split"], **text)


def load_corpus(path: str | Path | None = None) -> tuple[Measurement, ...]:
    """Read and check the corpus CSV (default: the packaged one). CorpusError names the bad row.

    A source's rows must all sit in one split (the split is by source, made once)."""
    import pandas as pd

    path = Path(path) if path is not None else default_corpus()
    try:
        frame = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError, UnicodeDecodeError) as exc:
        raise CorpusError(f"cannot read corpus {path}: {exc}") from None
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise CorpusError(f"{path.name}: missing columns {', '.join(missing)}; the schema is {', '.join(COLUMNS)}")
    rows = tuple(_check(path, i + 1, rec) for i, rec in enumerate(frame.to_dict("records")))
    splits: dict[str, set[str]] = {}
    for m in rows:
        splits.setdefault(m.source, set()).add(m.split)
    mixed = sorted(s for s, sp in splits.items() if len(sp) > 1)
    if mixed:
        raise CorpusError(f"{path.name}: source(s) {', '.join(mixed)} have rows in both splits; "
                          "the split is by source")
    return rows


def select(rows: Sequence[Measurement], split: str) -> tuple[Measurement, ...]:
    """Rows of one split, or all of them for split 'all'."""
    return tuple(rows) if split == "all" else tuple(m for m in rows if m.split == split)


@dataclass(frozen=True)
class Comparison:
    """One corpus row next to its prediction."""

    row: int
    model: str
    chip: str
    batch: int
    precision: str
    runtime: str
    model_runtime: str
    split: str
    source: str
    published_latency_s: float
    predicted_latency_s: float
    error: float                # predicted / published − 1
    bottleneck: str
    host_wait_s: float
    clock_fraction: float       # engine clocks ÷ listed: < 1 where the TDP limits them (bottleneck "power")
    status: str
    reason: str = ""

    @property
    def abs_error(self) -> float:
        return abs(self.error)

    def record(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def compare(rows: Sequence[Measurement], workload: Callable[[str, int, str], object], registry,
            params: Callable[[object, str, str], FamilyParams] | None = None,
            host_overhead_s: float | None = None,
            host_by_framework: dict[tuple[str, str], float] | None = None) -> tuple[Comparison, ...]:
    """Predict every row. `workload(model, batch, partition)` returns the characterized workload;
    `params(chip, runtime, framework)` the parameters to use (default: mapping.params_for);
    `host_overhead_s` the per-op host cost of every eager row, or `host_by_framework` that of the
    rows of a (host class, framework generation) (others: their default, estimate.host)."""
    from chipcal.model.estimate.host import host_class

    out = []
    for m in rows:
        chip = registry.get(m.chip)
        rt = m.model_runtime
        gen = m.framework_generation
        fam = params(chip, rt, gen) if params is not None else params_for(chip.name, chip.kind, runtime=rt, framework=gen)
        host = (host_overhead_s if host_by_framework is None
                else host_by_framework.get((host_class(chip), m.framework_generation)))
        # a row's fp32 is what its label says: fp32 math (the sources name TF32 rows tf32)
        p = predict(workload(m.model, m.batch, runtime_partition(rt)), chip, m.precision, params=fam,
                    runtime=rt, host_overhead_s=host, autocast=m.autocast, fp32_mode="strict",
                    framework=gen)
        published = m.latency_s
        pred = p.latency_s if p.supported else math.nan
        out.append(Comparison(row=m.row, model=m.model, chip=m.chip, batch=m.batch, precision=m.precision,
                              runtime=m.runtime, model_runtime=rt, split=m.split, source=m.source,
                              published_latency_s=published, predicted_latency_s=pred,
                              error=pred / published - 1.0, bottleneck=p.bottleneck,
                              host_wait_s=p.host_wait_s, clock_fraction=p.clock_fraction, status=p.status,
                              reason=p.reason))
    return tuple(out)


@dataclass(frozen=True)
class ErrorStats:
    """One group's signed errors (predicted / published − 1) and their summaries: median and p90
    of |error| (numpy's linear-interpolation percentile) and the signed median, the bias."""

    group: str
    errors: tuple[float, ...]   # the group's finite errors

    @property
    def n(self) -> int:
        return len(self.errors)

    @property
    def median_abs_error(self) -> float:
        return _or_nan(abs_quantile(self.errors, 50))

    @property
    def p90_abs_error(self) -> float:
        return _or_nan(abs_quantile(self.errors, 90))

    @property
    def median_error(self) -> float:
        """Signed: +: predictions too slow."""
        return float(statistics.median(self.errors)) if self.errors else math.nan


def _or_nan(value: float | None) -> float:
    return math.nan if value is None else value


def _stats(group: str, cs: Sequence[Comparison]) -> ErrorStats:
    return ErrorStats(group, tuple(c.error for c in cs if math.isfinite(c.error)))


@dataclass(frozen=True)
class Summary:
    overall: ErrorStats
    by_runtime: tuple[ErrorStats, ...]
    by_chip: tuple[ErrorStats, ...]
    by_model: tuple[ErrorStats, ...]
    unsupported: int        # rows the model could not predict (no engine for the precision)


def summarize(comparisons: Sequence[Comparison]) -> Summary:
    """Median and p90 |error| overall and per published runtime; the signed bias per chip and
    per model (a model's kernels can cost differently on every chip: docs/validation.md).
    p90 is numpy's linear-interpolation percentile."""
    def grouped(key) -> tuple[ErrorStats, ...]:
        groups: dict[str, list[Comparison]] = {}
        for c in comparisons:
            groups.setdefault(key(c), []).append(c)
        return tuple(_stats(k, v) for k, v in sorted(groups.items()))

    return Summary(overall=_stats("all", comparisons), by_runtime=grouped(lambda c: c.runtime),
                   by_chip=grouped(lambda c: c.chip), by_model=grouped(lambda c: c.model),
                   unsupported=sum(1 for c in comparisons if not math.isfinite(c.error)))


# --- fit of the defaults the `fit` split constrains ----------------------------------------------

# The K-loop latency starts at, and is held near, its published-latency prior: one L2 round trip
# (~200 cycles on V100, A100 and H100) per 64 bytes of K (CUTLASS's Ampere int8 tile), 3.1 cycles
# per byte, within a factor 2. The fit split cannot separate it from the per-kernel cycles: its
# TensorRT rows are all one network at int8 (docs/validation.md, "The fit").
# The server host's per-op cost is fitted per framework generation: the corpus's PyTorch 1.x rows
# and this project's own PyTorch 2.x rows (the H100 SXM5's host) each get theirs, so that neither
# host's misfit lands on the GPU parameters.
FIT_START = {"host_server_s": 20e-6, "host_server_pytorch2_s": 20e-6, "gpu_mac_efficiency_scale": 1.0,
             "gpu_kernel_cycles": 5e3, "gpu_k_loop_cycles_per_byte": 200 / 64}
FIT_PRIOR_SIGMA = {"gpu_k_loop_cycles_per_byte": math.log(2.0)}
FIT_BOUNDS = {"host_server_s": (1e-7, 1e-3), "host_server_pytorch2_s": (1e-7, 1e-3),
              "gpu_mac_efficiency_scale": (0.2, 1.4), "gpu_kernel_cycles": (1.0, 1e6),
              "gpu_k_loop_cycles_per_byte": (1e-3, 1e3)}


def trial_params(values: dict[str, float]) -> Callable[[object, str, str], FamilyParams]:
    """Family defaults with the fitted quantities replaced: one scale on the GPU efficiency of
    every MAC class, the GPU's fixed per-kernel cost in clock cycles (its per-kernel cost in seconds
    set to 0) and the GPU's K-loop cycles per byte. The server host's per-op cost is fitted too,
    for the pytorch1 rows (`fit_defaults` passes it to `compare` by framework generation)."""
    def params(chip, runtime: str, framework: str) -> FamilyParams:
        base = params_for(chip.name, chip.kind, runtime=runtime, framework=framework)
        if chip.kind == "cpu":
            return base
        changes: dict = {}
        if chip.kind == "gpu":
            s = values["gpu_mac_efficiency_scale"]
            changes["efficiency"] = {c: v * s if c in MAC_CLASSES else v for c, v in base.efficiency.items()}
            if base.tensor_efficiency is not None:
                changes["tensor_efficiency"] = {c: v * s if c in MAC_CLASSES else v
                                                for c, v in base.tensor_efficiency.items()}
            changes["overhead_s"] = {c: 0.0 for c in base.overhead_s}
            changes["overhead_cycles"] = values["gpu_kernel_cycles"]
            changes["k_loop_cycles_per_byte"] = values["gpu_k_loop_cycles_per_byte"]
        return dataclasses.replace(base, **changes)

    return params


def fit_defaults(rows: Sequence[Measurement], workload: Callable[[str, int, str], object], registry,
                 on_evaluation: Callable[[], object] | None = None):
    """Fit the server host's per-op cost (PyTorch 1.x rows, PyTorch 2.x rows), the GPU MAC-efficiency scale, the GPU per-kernel cycles
    and the GPU K-loop cycles per byte (held near its prior, FIT_PRIOR_SIGMA) to `rows` (the `fit`
    split) by least squares on log(predicted/published latency) (calibrate.fits.fit_log_latency),
    with standard errors from the Jacobian. `on_evaluation` is called after each prediction of
    the rows (a progress bar: the solver decides how many)."""
    import numpy as np

    from chipcal.calibrate.fits import fit_log_latency

    names = list(FIT_START)

    def predicted(values: dict[str, float]):
        # the fitted host costs are the server hosts' of each framework generation; others keep their default
        out = np.array([c.predicted_latency_s for c in compare(
            rows, workload, registry, trial_params(values),
            host_by_framework={("server", "pytorch1"): values["host_server_s"],
                               ("server", "pytorch2"): values["host_server_pytorch2_s"]})])
        if on_evaluation is not None:
            on_evaluation()
        return out

    return fit_log_latency(names, [FIT_START[n] for n in names], predicted, [m.latency_s for m in rows],
                           name="validation_defaults",
                           model="latency = predict(workload, chip; host per-op cost, GPU MAC efficiency x scale, "
                                 "GPU per-kernel cycles / clock, GPU K-loop cycles per byte)",
                           lower=[FIT_BOUNDS[n][0] for n in names], upper=[FIT_BOUNDS[n][1] for n in names],
                           prior_sigma=[FIT_PRIOR_SIGMA.get(n) for n in names])
