"""MLPerf Inference results read as MLCommons publishes them: a round's results tree, or the
round's `summary_results.json`.

A round's repository (github.com/mlcommons/inference_results_v4.1, and older rounds alike) holds,
per submitter, `closed/<submitter>/systems/<system>.json` (the system: accelerator model and count,
host CPU, software) and, per benchmark and scenario, the LoadGen summary of the performance run,
`closed/<submitter>/results/<system>/<benchmark>/<scenario>/performance/run_1/mlperf_log_summary.txt`.
A power submission (a MaxQ system) adds the power analyzer's samples beside it (`spl.txt`) and
LoadGen marks the measured window in `mlperf_log_detail.txt` (`power_begin`, `power_end`).

One row per (system, benchmark, scenario) performance run of the closed division, with the
metric MLPerf publishes for it (MLPerf Inference rules, "Scenarios" and "Metrics"; the figure of
the round's summary_results.json, below), as LoadGen's summary prints it:
- Offline: samples/s ("Samples per second"); an LLM's tokens/s ("Tokens per second"), or for
  gptj, whose harness counts no tokens, LoadGen's "Tokens per second (inferred)" (samples/s × 69);
- Server: completed samples/s ("Completed samples per second"); an LLM's "Completed tokens per
  second", or gptj's "(inferred)" one;
- Interactive (from v5.1, an LLM's): a Server run under tighter latency limits, which LoadGen logs as
  Server (v5.1 tag's tools/submission/submission_checker.py: an Interactive folder's log must say
  Server); its folder names it, and its metric is the Server one;
- SingleStream: the 90th-percentile latency of one query: LoadGen's early-stopping estimate of it
  ("Early stopping 90th percentile estimate"), where the run used early stopping, which is what
  MLPerf reports (on v4.1 up to 1.6 % above the run's own 90th percentile), else the
  percentile ("90th percentile latency (ns)");
- MultiStream: the 99th-percentile latency of a query of 8 samples, likewise ("Early stopping
  99th percentile estimate", else "99th percentile latency (ns)").
A MaxQ row adds the system's average power over LoadGen's window: the mean of the analyzer's
"Watts" readings between power_begin and power_end, as MLPerf's submission checker computes it.

A round's `summary_results.json` (in its repository, the table MLCommons' results page is drawn
from) holds one record per (system, benchmark, scenario) with the same facts: `Location` (the
results folder of the run), `Platform` (the system folder), `Accelerator` and `a#` (per node) times
`Nodes`, `Processor`, `host_processors_per_node`, `Software`, `Performance_Result` in
`Performance_Units` (SUMMARY_UNITS; the benchmark is read from `Location`, as the tree names it:
its `Model` says "resnet" for resnet50), and for a power run `Power_Result` in Watts (Offline, Server;
a SingleStream or MultiStream power run gives millijoules per query instead, not read here). On
v4.1 its 873 closed-division records and the results tree's rows agree field by field
(tests/test_mlperf.py), with two differences of what is printed: a Server figure is LoadGen's
completed samples/s at full precision where the summary line rounds it (within 0.3 %), and gptj's
figure is LoadGen's tokens/s "(inferred)", samples/s × 69, where the tree's row keeps samples/s.

Rows are kept in a compact CSV (validate/data/mlperf_inference.csv, `write_csv` / `read_csv`)
with the round, the repository's commit and the path each row came from, so that tests and
predictions need no network. Rounds v5.0 and later are kept for an independent check: this module
reads any round, the repository's CSV holds v4.1 only.
"""

from __future__ import annotations

import csv
import datetime as _dt
import json
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, fields
from importlib import resources
from pathlib import Path

from chipcal.model.errors import ChipcalError
from chipcal.validate.mlperf_devices import chip_named

SUMMARY = "mlperf_log_summary.txt"
PACKAGED = Path(str(resources.files("chipcal.validate") / "data" / "mlperf_inference.csv"))   # v4.1 (docs/validation-corpus.md)
# LoadGen's summary line of each scenario's metric: (label, unit, scale to SI)
SERVER_LINES = (("Completed tokens per second", "tokens_per_s", 1.0),
                ("Completed tokens per second (inferred)", "tokens_per_s", 1.0),
                ("Completed samples per second", "samples_per_s", 1.0),
                ("Scheduled samples per second", "samples_per_s", 1.0))
METRIC_LINES = {
    "Offline": (("Tokens per second", "tokens_per_s", 1.0), ("Tokens per second (inferred)", "tokens_per_s", 1.0),
                ("Samples per second", "samples_per_s", 1.0)),
    "Server": SERVER_LINES,
    "Interactive": SERVER_LINES,
    "SingleStream": (("Early stopping 90th percentile estimate", "latency_s", 1e-9),
                     ("90th percentile latency (ns)", "latency_s", 1e-9)),
    "MultiStream": (("Early stopping 99th percentile estimate", "latency_s", 1e-9),
                    ("99th percentile latency (ns)", "latency_s", 1e-9)),
}
SCENARIOS = {s.lower(): s for s in METRIC_LINES}
# summary_results.json's Performance_Units: (unit, scale to SI); "Queries/s" is a Server figure
SUMMARY_UNITS = {"Samples/s": ("samples_per_s", 1.0), "Queries/s": ("samples_per_s", 1.0),
                 "Tokens/s": ("tokens_per_s", 1.0), "Latency (ms)": ("latency_s", 1e-3)}

class MlperfError(ChipcalError, ValueError):
    """A results tree or file that is not what MLPerf publishes; the message names the path."""


@dataclass(frozen=True)
class MlperfRow:
    """One performance run of a closed-division system, as submitted (not normalized).

    `accelerators`: accelerators per node times nodes (0 for a CPU-only system, whose work is
    shared by `host_processors` sockets). `value` is in `unit` (samples_per_s, tokens_per_s or
    latency_s). `avg_power_w`: the system's average power over the run (MaxQ), else None.
    `accelerator_interconnect` and `accelerator_host_interconnect`: the links the system's
    description names ("N/A": none; "": a source that does not say, as summary_results.json)."""

    round: str
    commit: str
    path: str                     # the summary's path in the round's repository
    submitter: str
    system: str
    accelerator: str              # accelerator_model_name as submitted ("N/A" for CPU-only systems)
    accelerators: int
    host_processor: str
    host_processors: int
    framework: str
    benchmark: str
    scenario: str
    unit: str
    value: float
    valid: bool
    avg_power_w: float | None
    accelerator_interconnect: str = ""
    accelerator_host_interconnect: str = ""


# --- the LoadGen summary and the power window ------------------------------------------------------

def parse_summary(text: str, where: str) -> tuple[str, str, float, bool]:
    """(scenario, unit, value in SI, valid) of a LoadGen summary; MlperfError without a metric."""
    head = dict(_fields(text))
    scenario = SCENARIOS.get(head.get("Scenario", "").strip().lower())
    if scenario is None:
        raise MlperfError(f"{where}: no known scenario (got {head.get('Scenario')!r})")
    for label, unit, scale in METRIC_LINES[scenario]:
        if label in head:
            return scenario, unit, float(head[label]) * scale, head.get("Result is", "").strip() == "VALID"
    raise MlperfError(f"{where}: no {scenario} metric line ({', '.join(m[0] for m in METRIC_LINES[scenario])})")


def _fields(text: str) -> Iterator[tuple[str, str]]:
    """`label : value` lines of the summary's first section (before "Additional Stats"), and the
    early-stopping estimates LoadGen lists there as ` * label: value`."""
    for line in text.split("Additional Stats")[0].splitlines():
        if line.startswith(" * Early stopping"):
            line = line.removeprefix(" * ")
        if ":" in line and not line.startswith((" ", "*")):
            label, value = line.split(":", 1)
            yield label.strip(), value.strip()


def power_window(detail: str) -> tuple[_dt.datetime, _dt.datetime] | None:
    """LoadGen's power_begin and power_end marks (analyzer clock, MM-DD-YYYY HH:MM:SS.fff)."""
    marks = dict(re.findall(r'"key": "(power_begin|power_end)", "value": "([^"]+)"', detail))
    if len(marks) != 2:
        return None
    return _stamp(marks["power_begin"]), _stamp(marks["power_end"])


def _stamp(text: str) -> _dt.datetime:
    return _dt.datetime.strptime(text.strip(), "%m-%d-%Y %H:%M:%S.%f")


def average_power_w(spl: str, window: tuple[_dt.datetime, _dt.datetime]) -> float | None:
    """Mean of the analyzer's total Watts readings inside the window (None if none falls in it)."""
    begin, end = window
    watts = []
    for line in spl.splitlines():
        parts = line.split(",")
        if len(parts) > 3 and parts[0] == "Time" and parts[2] == "Watts" and begin <= _stamp(parts[1]) <= end:
            watts.append(float(parts[3]))
    return sum(watts) / len(watts) if watts else None


# --- a results tree --------------------------------------------------------------------------------

def _count(value: object) -> int:
    """A count field of a system description: "8", 8, "N/A" or "" (0)."""
    try:
        return int(str(value).strip())
    except ValueError:
        return 0


def read_system(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise MlperfError(f"{path}: not a readable system description ({exc})") from None


def rows_from_tree(root: Path, round_name: str, commit: str) -> list[MlperfRow]:
    """Every closed-division performance run under `root` (a round's repository checked out),
    in path order."""
    root = Path(root)
    if not (root / "closed").is_dir():
        raise MlperfError(f"{root}: not an MLPerf Inference results tree (no closed/ folder)")
    return [_row(root, summary, round_name, commit)
            for summary in sorted(root.glob(f"closed/*/results/*/*/*/performance/run_1/{SUMMARY}"))]


def _row(root: Path, summary: Path, round_name: str, commit: str) -> MlperfRow:
    rel = summary.relative_to(root)
    _, submitter, _, system, benchmark, folder, *_ = rel.parts
    desc = read_system(root / "closed" / submitter / "systems" / f"{system}.json")
    scenario, unit, value, valid = parse_summary(summary.read_text(), str(rel))
    if folder == "Interactive" and scenario == "Server":       # LoadGen logs it as Server (module docstring)
        scenario = folder
    return MlperfRow(
        round=round_name, commit=commit, path=str(rel), submitter=submitter, system=system,
        accelerator=str(desc.get("accelerator_model_name", "")).strip(),
        accelerators=_count(desc.get("accelerators_per_node")) * max(_count(desc.get("number_of_nodes")), 1),
        host_processor=str(desc.get("host_processor_model_name", "")).strip(),
        host_processors=_count(desc.get("host_processors_per_node")),
        framework=str(desc.get("framework", "")).strip(), benchmark=benchmark, scenario=scenario, unit=unit,
        value=value, valid=valid, avg_power_w=_power(summary.parent),
        accelerator_interconnect=str(desc.get("accelerator_interconnect", "")).strip(),
        accelerator_host_interconnect=str(desc.get("accelerator_host_interconnect", "")).strip())


def _power(run: Path) -> float | None:
    """The run's average system power, where the analyzer's samples and LoadGen's window are there."""
    spl, detail = run / "spl.txt", run / "mlperf_log_detail.txt"
    if not (spl.is_file() and detail.is_file()):
        return None
    window = power_window(detail.read_text())
    return average_power_w(spl.read_text(), window) if window else None


# --- a round's summary_results.json ----------------------------------------------------------------

def rows_from_summary_results(path: Path) -> list[MlperfRow]:
    """Every closed-division record of a round's summary_results.json (module docstring), as the
    results tree's rows; its commit from git where the file is in a checkout."""
    try:
        records = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise MlperfError(f"{path}: not a readable summary_results.json ({exc})") from None
    if not isinstance(records, list):
        raise MlperfError(f"{path}: not a summary_results.json (a list of records expected)")
    commit = _commit_of(Path(path).resolve().parent)
    return [_summary_row(r, commit, f"{path}: record {i}") for i, r in enumerate(records)
            if isinstance(r, dict) and r.get("Category") == "closed"]


def _summary_row(r: dict, commit: str, where: str) -> MlperfRow:
    try:
        unit, scale = SUMMARY_UNITS[r["Performance_Units"]]
        scenario = SCENARIOS[str(r["Scenario"]).lower()]
        watts = r.get("Power_Units") == "Watts" and r.get("Power_Result") is not None
        # the results folder names the benchmark as the tree does ("resnet50"; its Model says "resnet")
        _, submitter, _, system, benchmark, _ = str(r["Location"]).split("/")
        return MlperfRow(
            round=str(r["version"]), commit=commit, path=f"{r['Location']}/performance/run_1/{SUMMARY}",
            # a CPU-only system: "" here, "N/A" in its systems/<system>.json
            submitter=submitter, system=system, accelerator=str(r["Accelerator"]).strip() or "N/A",
            accelerators=_count(str(r["a#"]).split(".")[0]) * max(_count(r["Nodes"]), 1),
            host_processor=str(r["Processor"]).strip(), host_processors=_count(r["host_processors_per_node"]),
            framework=str(r["Software"]).strip(), benchmark=benchmark, scenario=scenario, unit=unit,
            value=float(r["Performance_Result"]) * scale, valid=r.get("errors", 0) == 0,
            avg_power_w=float(r["Power_Result"]) if watts else None)
    except (KeyError, TypeError, ValueError) as exc:
        raise MlperfError(f"{where}: not an MLPerf result record ({exc!r})") from None


def load_rows(path: Path | None = None, exclude_unknown: bool = False) -> list[MlperfRow]:
    """Rows from a results tree (a folder with closed/), a round's summary_results.json, or a CSV
    `write_csv` wrote; None: the packaged v4.1 rows. A tree's round is read from its folder name
    (inference_results_vX.Y), its commit from git where the folder is a checkout. Unknown devices
    are refused in one line, unless `exclude_unknown`: then their rows are kept, and the check
    excludes each with its reason."""
    if path is None:
        path = PACKAGED
    path = Path(path)
    if path.is_dir():
        rows = rows_from_tree(path, _round_of(path), _commit_of(path))
    elif path.is_file() and path.suffix == ".json":
        rows = rows_from_summary_results(path)
    elif path.is_file():
        rows = read_csv(path)
    else:
        raise MlperfError(f"{path}: no such results tree or CSV")
    if (unknown := unknown_devices(rows)) and not exclude_unknown:
        raise MlperfError(f"{path}: accelerators without a registry chip: {'; '.join(unknown)} "
                          "(validate.mlperf_devices maps them; --exclude-unknown predicts the other rows)")
    return rows


def _round_of(path: Path) -> str:
    match = re.search(r"inference_results_(v\d+\.\d+)", str(path.resolve()))
    return match.group(1) if match else "unknown"


def _commit_of(path: Path) -> str:
    """The checkout's commit (git rev-parse HEAD), "" where the folder is not a git checkout."""
    import subprocess

    try:
        done = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout.strip() if done.returncode == 0 else ""


# --- the CSV ---------------------------------------------------------------------------------------

COLUMNS = tuple(f.name for f in fields(MlperfRow))
# a CSV an earlier chipcal wrote, before the systems' links were kept: its links read as not said
COLUMNS_BEFORE_LINKS = COLUMNS[:-2]


def write_csv(rows: Iterable[MlperfRow], path: Path) -> None:
    with open(path, "w", newline="") as f:
        out = csv.DictWriter(f, COLUMNS, lineterminator="\n")
        out.writeheader()
        for row in rows:
            out.writerow({k: ("" if v is None else v) for k, v in asdict(row).items()})


def read_csv(path: Path) -> list[MlperfRow]:
    """The rows of a CSV `write_csv` wrote; MlperfError naming the line of a damaged one."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if tuple(reader.fieldnames or ()) not in (COLUMNS, COLUMNS_BEFORE_LINKS):
            raise MlperfError(f"{path}: columns {reader.fieldnames} are not {list(COLUMNS)}")
        return [_typed(r, f"{path}:{i + 2}") for i, r in enumerate(reader)]


def _typed(r: dict, where: str) -> MlperfRow:
    try:
        return MlperfRow(**{**r, "accelerators": int(r["accelerators"]), "host_processors": int(r["host_processors"]),
                            "value": float(r["value"]), "valid": r["valid"] == "True",
                            "avg_power_w": float(r["avg_power_w"]) if r["avg_power_w"] else None})
    except (TypeError, ValueError) as exc:
        raise MlperfError(f"{where}: {exc}") from None


def per_accelerator(row: MlperfRow) -> float:
    """The row's throughput per accelerator (per socket for a CPU-only system); a latency as is."""
    if row.unit == "latency_s":
        return row.value
    return row.value / devices_of(row)


def devices_of(row: MlperfRow) -> int:
    """What the row's work is spread over: its accelerators, or for a CPU-only system its sockets."""
    share = row.accelerators or row.host_processors
    if share < 1:
        raise MlperfError(f"{row.path}: no accelerator or processor count to normalize by")
    return share


def device_name(row: MlperfRow) -> str:
    """What the row's work runs on: the accelerator, or for a CPU-only system the processor."""
    return row.host_processor if row.accelerators == 0 else row.accelerator


def chip_of(row: MlperfRow) -> str | None:
    """The registry chip name of the row's device (validate.mlperf_devices), None when unknown."""
    return chip_named(device_name(row))


def unknown_devices(rows: Sequence[MlperfRow]) -> list[str]:
    """The device names of `rows` that no chip is known for, sorted."""
    return sorted({device_name(r) for r in rows if chip_of(r) is None})
