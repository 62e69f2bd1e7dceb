"""validate.mlperf: MLPerf Inference results read as published, and the v4.1 rows kept in the repo.

The fixture tree below is built from lines of real v4.1 logs (NVIDIA's H200-SXM-141GBx8_TRT_MaxQ
resnet50 Offline summary, AMD's 8xMI300X llama2-70b-99 Offline, ConnectTechInc's Orin gptj-99
SingleStream); the expected values are those lines read by hand."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chipcal.model.registry import load_registry
from chipcal.validate import mlperf, mlperf_devices
from chipcal.validate.mlperf import MlperfError, MlperfRow
from chipcal.validate.mlperf_devices import (
    ACCELERATOR_CHIPS,
    NAME_RULES,
    NOT_IN_REGISTRY,
    chip_named,
)

CSV = Path(mlperf.__file__).parent / "data" / "mlperf_inference.csv"
V41_COMMIT = "198fc46799b3328b36ee4bcbdebfa2db5a8e6183"

OFFLINE = """================================================
MLPerf Results Summary
================================================
SUT name : LWIS_Server
Scenario : Offline
Mode     : PerformanceOnly
Samples per second: 556234
Result is : VALID
  Min duration satisfied : Yes

================================================
Additional Stats
================================================
Min latency (ns)                : 3360164040
"""
LLM_OFFLINE = OFFLINE.replace("Samples per second: 556234", "Samples per second: 80.15\nTokens per second: 23514.8")
SINGLE = OFFLINE.replace("Scenario : Offline", "Scenario : SingleStream").replace(
    "Samples per second: 556234", "90th percentile latency (ns) : 4079418411")
# ConnectTechInc's Orin gptj-99 SingleStream summary: the run stopped early, and MLPerf reports
# LoadGen's estimate, not the run's own percentile
EARLY = SINGLE.replace("Result is : VALID", "Result is : VALID\nEarly Stopping Result:\n * Would discard 1255 highest "
                       "latency queries.\n * Early stopping 90th percentile estimate: 4145572039\n"
                       " * Early stopping 99th percentile estimate: 4996607198")
# ASUSTeK's 4xH100-NVL gptj-99 Offline: the harness counts samples; LoadGen infers the tokens
GPTJ = OFFLINE.replace("Samples per second: 556234", "Samples per second: 101.239\n"
                       "Tokens per second (inferred): 6985.51")
DETAIL = ('{"key": "power_begin", "value": "07-11-2024 23:36:17.787"}\n'
          '{"key": "power_end", "value": "07-11-2024 23:36:20.500"}\n')
# four readings a second apart; the window holds the 2nd and 3rd: (2400 + 2500) / 2 = 2450 W
SPL = "".join(f"Time,07-11-2024 23:36:{s}.963,Watts,{w:.6f},Volts,239.18,Amps,3.43,PF,0.96\n"
              for s, w in ((16, 9999.0), (18, 2400.0), (19, 2500.0), (21, 9999.0)))


def _system(root: Path, submitter: str, system: str, **fields) -> None:
    path = root / "closed" / submitter / "systems" / f"{system}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(fields))


def _run(root: Path, submitter: str, system: str, benchmark: str, scenario: str, summary: str, **files) -> None:
    run = root / "closed" / submitter / "results" / system / benchmark / scenario / "performance" / "run_1"
    run.mkdir(parents=True)
    (run / "mlperf_log_summary.txt").write_text(summary)
    for name, text in files.items():
        (run / name).write_text(text)


@pytest.fixture
def tree(tmp_path):
    _system(tmp_path, "NVIDIA", "H200x8_MaxQ", accelerator_model_name="NVIDIA H200-SXM-141GB",
            accelerators_per_node=8, number_of_nodes=1, host_processor_model_name="Intel(R) Xeon(R) Platinum 8480C",
            host_processors_per_node=2, framework="TensorRT 10.2")
    _run(tmp_path, "NVIDIA", "H200x8_MaxQ", "resnet50", "Offline", OFFLINE,
         **{"mlperf_log_detail.txt": DETAIL, "spl.txt": SPL})
    _system(tmp_path, "AMD", "8xMI300X", accelerator_model_name="AMD Instinct MI300X-NPS1-SPX-192GB-750W",
            accelerators_per_node=8, number_of_nodes=1, host_processor_model_name="2xAMD EPYC 9374F",
            host_processors_per_node=2, framework="vLLM 0.4.3+rocm614")
    _run(tmp_path, "AMD", "8xMI300X", "llama2-70b-99", "Offline", LLM_OFFLINE)
    _system(tmp_path, "Intel", "1-node-2S-EMR", accelerator_model_name="N/A", accelerators_per_node="N/A",
            number_of_nodes=1, host_processor_model_name="INTEL(R) XEON(R) PLATINUM 8592+", host_processors_per_node=2,
            framework="PyTorch")
    _run(tmp_path, "Intel", "1-node-2S-EMR", "gptj-99", "SingleStream", SINGLE)
    return tmp_path


def test_a_results_tree_reads_as_published(tree):
    rows = {r.system: r for r in mlperf.rows_from_tree(tree, "v4.1", "abc")}
    h200, mi300x, xeon = rows["H200x8_MaxQ"], rows["8xMI300X"], rows["1-node-2S-EMR"]
    assert (h200.benchmark, h200.scenario, h200.unit, h200.value, h200.valid) == (
        "resnet50", "Offline", "samples_per_s", 556234.0, True)
    assert h200.avg_power_w == pytest.approx(2450.0)          # the two readings inside LoadGen's window
    assert h200.path == "closed/NVIDIA/results/H200x8_MaxQ/resnet50/Offline/performance/run_1/mlperf_log_summary.txt"
    assert (mi300x.unit, mi300x.value, mi300x.avg_power_w) == ("tokens_per_s", 23514.8, None)   # tokens, not samples
    assert (xeon.unit, xeon.value, xeon.accelerators) == ("latency_s", pytest.approx(4.079418411), 0)


def test_per_accelerator_normalizes_by_accelerators_else_sockets(tree):
    rows = {r.system: r for r in mlperf.rows_from_tree(tree, "v4.1", "abc")}
    assert mlperf.per_accelerator(rows["H200x8_MaxQ"]) == 556234 / 8
    assert mlperf.per_accelerator(rows["8xMI300X"]) == 23514.8 / 8
    assert mlperf.per_accelerator(rows["1-node-2S-EMR"]) == pytest.approx(4.079418411)    # a latency stays


def test_the_csv_round_trips(tree, tmp_path):
    rows = mlperf.rows_from_tree(tree, "v4.1", "abc")
    mlperf.write_csv(rows, tmp_path / "rows.csv")
    assert mlperf.read_csv(tmp_path / "rows.csv") == rows


@pytest.mark.parametrize("text,says", [
    (OFFLINE.replace("Scenario : Offline", "Scenario : Sideways"), "no known scenario"),
    (OFFLINE.replace("Samples per second: 556234", "Frames: 3"), "no Offline metric line"),
])
def test_a_summary_without_its_metric_is_refused(text, says):
    with pytest.raises(MlperfError, match=says):
        mlperf.parse_summary(text, "x/mlperf_log_summary.txt")


def test_the_metric_is_the_one_mlperf_publishes():
    assert mlperf.parse_summary(EARLY, "x")[1:3] == ("latency_s", pytest.approx(4.145572039))   # not 4.0794
    assert mlperf.parse_summary(GPTJ, "x")[1:3] == ("tokens_per_s", 6985.51)                   # not 101.239


def test_a_folder_that_is_not_a_results_tree_is_refused(tmp_path):
    with pytest.raises(MlperfError, match="no closed/ folder"):
        mlperf.rows_from_tree(tmp_path, "v4.1", "abc")


# --- the v4.1 rows kept in the repository ------------------------------------------------------------

@pytest.fixture(scope="module")
def v41() -> list[MlperfRow]:
    return mlperf.read_csv(CSV)


def test_the_v41_csv_holds_the_closed_divisions_performance_runs(v41):
    assert len(v41) == 873                       # closed/*/results/*/*/*/performance/run_1 at the commit
    assert {(r.round, r.commit) for r in v41} == {("v4.1", V41_COMMIT)}
    assert all(r.path.startswith("closed/") and r.path.endswith("/performance/run_1/mlperf_log_summary.txt")
               for r in v41)
    assert {r.scenario for r in v41} == {"Offline", "Server", "SingleStream", "MultiStream"}
    # two rows read by hand from the published logs
    by_path = {r.path: r for r in v41}
    h200 = by_path["closed/NVIDIA/results/H200-SXM-141GBx8_TRT_MaxQ/resnet50/Offline/performance/run_1/"
                   "mlperf_log_summary.txt"]
    assert (h200.value, h200.accelerators) == (556234.0, 8) and h200.avg_power_w is not None
    amd = by_path["closed/AMD/results/8xMI300X_2xEPYC-9374F/llama2-70b-99/Offline/performance/run_1/"
                  "mlperf_log_summary.txt"]
    assert (amd.unit, amd.value) == ("tokens_per_s", 23514.8)


def test_every_v41_device_is_a_registry_chip_or_says_why_not(v41):
    assert mlperf.unknown_devices(v41) == []
    registry = load_registry()
    assert sorted({mlperf.chip_of(r) for r in v41} - set(registry.names)) == sorted(NOT_IN_REGISTRY)
    assert not set(NOT_IN_REGISTRY) & set(registry.names)


# --- predicted against measured ------------------------------------------------------------------------

def test_cli_predicts_or_excludes_every_row_of_a_tree(tree, cli):
    from chipcal.cli import validate as validate_cli

    _system(tree, "NVIDIA", "H100x8", accelerator_model_name="NVIDIA H100-SXM-80GB", accelerators_per_node=8,
            number_of_nodes=1, host_processor_model_name="Intel(R) Xeon(R) Platinum 8480C", host_processors_per_node=2)
    _run(tree, "NVIDIA", "H100x8", "resnet50", "Offline", OFFLINE.replace("556234", "709920"))
    plot = tree / "mlperf.png"
    rc, out, _ = cli(validate_cli.main, ["--mlperf", str(tree), "--json", "--plot", str(plot), "--skip-llm"])
    assert rc == 0 and plot.read_bytes().startswith(b"\x89PNG")
    records = {r["system"]: r for r in json.loads(out)}
    assert len({tuple(r) for r in records.values()}) == 1          # flat records, one set of columns
    h100 = records["H100x8"]
    assert (h100["status"], h100["chip"], h100["measured"]) == ("predicted", "h100-sxm5", 709920 / 8)
    assert h100["error"] == pytest.approx(h100["predicted"] / h100["measured"] - 1)
    assert records["H200x8_MaxQ"]["reason"].startswith("a power submission (MaxQ)")
    assert "--skip-llm" in records["8xMI300X"]["reason"]
    assert records["1-node-2S-EMR"]["status"] == "excluded"


def test_the_summary_a_person_reads_fits_120_columns(tree, cli):
    """Issue 39's width: the long reasons (llama3.1-8b's, here) wrap instead of running on."""
    from chipcal.cli import validate as validate_cli

    _run(tree, "AMD", "8xMI300X", "llama3.1-8b", "Offline", LLM_OFFLINE)
    rc, out, _ = cli(validate_cli.main, ["--mlperf", str(tree), "--skip-llm"])
    assert rc == 0 and "excluded 1: LLM serving: Llama-3.1-8B on CNN-DailyMail" in out
    assert max(map(len, out.splitlines())) <= 120


def test_a_later_round_s_llm_benchmarks_are_mapped_or_excluded_with_their_reason(tree, cli):
    """v5.0 and v5.1 name new LLM benchmarks (mlcommons/inference's mlperf.conf at those tags):
    llama3.1-405b and llama2-70b-interactive map to Hugging Face configs, so they are LLM rows
    (here left out by --skip-llm); llama3.1-8b and deepseek-r1 are excluded, each with its reason.
    v5.1's Interactive runs keep their folder's scenario."""
    from chipcal.cli import validate as validate_cli

    _system(tree, "AMD", "8xMI300X_v5", accelerator_model_name="AMD Instinct MI300X-NPS1-SPX-192GB-750W",
            accelerators_per_node=8, number_of_nodes=1, host_processor_model_name="AMD EPYC 9374F",
            host_processors_per_node=2, framework="vLLM 0.6")
    for benchmark in ("llama3.1-405b", "llama2-70b-interactive-99", "llama3.1-8b", "deepseek-r1"):
        _run(tree, "AMD", "8xMI300X_v5", benchmark, "Offline", LLM_OFFLINE)
    # v5.1's Interactive scenario: a Server run in a folder of its own, which LoadGen logs as Server
    server = LLM_OFFLINE.replace("Scenario : Offline", "Scenario : Server").replace(
        "Tokens per second", "Completed tokens per second")
    _run(tree, "AMD", "8xMI300X_v5", "llama2-70b-99", "Interactive", server)
    rc, out, _ = cli(validate_cli.main, ["--mlperf", str(tree), "--json", "--skip-llm"])
    assert rc == 0
    rows = [r for r in json.loads(out) if r["system"] == "8xMI300X_v5"]
    reasons = {r["benchmark"]: r["reason"] for r in rows}
    assert "--skip-llm" in reasons["llama3.1-405b"] and "--skip-llm" in reasons["llama2-70b-interactive-99"]
    assert [r["scenario"] for r in rows if r["benchmark"] == "llama2-70b-99"] == ["Interactive"]
    assert "gen_len 8,167,644 over 13,368 samples" in reasons["llama3.1-8b"]
    assert "multi-head latent attention" in reasons["deepseek-r1"]


def test_the_name_rules_give_every_v41_device_its_exact_chip():
    """The rules alone, on v4.1's own names: the same chip as the exact table, for every one."""
    for name, chip in ACCELERATOR_CHIPS.items():
        by_rule = next((c for need, avoid, c in NAME_RULES if need <= mlperf_devices.words(name)
                        and not avoid & mlperf_devices.words(name)), None)
        assert by_rule == chip, name


@pytest.mark.parametrize("name, chip", [
    # names a later round may spell: the model designation decides the part
    ("NVIDIA GB200", "gb200"),
    ("NVIDIA B200-SXM-180GB-TRT", "b200"),
    ("AMD Instinct MI325X-NPS1-SPX-256GB-1000W", "mi325x"),
    ("NVIDIA H200-NVL-141GB", "h200-nvl"),
    ("NVIDIA H100-SXM-80GB-CTS", "h100-sxm5"),
    ("NVIDIA A100-PCIe-80GB", "a100-pcie-80gb"),
    ("NVIDIA A100-SXM4-40GB", "a100-sxm4-40gb"),
    ("Google TPU Trillium", "tpu-v6e"),
    ("Intel(R) Xeon(R) Platinum 8480+", "xeon-platinum-8480-plus"),
    ("AMD EPYC 9654 96-Core Processor", "epyc-9654"),
    # not the chip: a MIG slice, another part, an unknown name
    ("NVIDIA H100-SXM-80GB-MIG_1x1g.10gb", None),
    ("NVIDIA H20", None),
    ("NVIDIA A100-PCIe-40GB", None),
    ("Acme Warp-9", None),
])
def test_a_later_round_s_device_names_map_by_their_model_designation(name, chip):
    assert chip_named(name) == chip


def test_cli_refuses_an_unknown_accelerator_and_corpus_options_in_one_line(tree, cli):
    from chipcal.cli import validate as validate_cli

    _system(tree, "Acme", "x", accelerator_model_name="Acme Warp-9", accelerators_per_node=1, number_of_nodes=1)
    _run(tree, "Acme", "x", "resnet50", "Offline", OFFLINE)
    rc, _, err = cli(validate_cli.main, ["--mlperf", str(tree)])
    assert rc == 2 and "Acme Warp-9" in err and err.count("\n") == 1 and "--exclude-unknown" in err
    # asked to, the unknown accelerator's rows are excluded with their reason, the others checked
    _system(tree, "NVIDIA", "H100x8", accelerator_model_name="NVIDIA H100-SXM-80GB", accelerators_per_node=8,
            number_of_nodes=1, host_processor_model_name="Intel(R) Xeon(R) Platinum 8480C", host_processors_per_node=2)
    _run(tree, "NVIDIA", "H100x8", "resnet50", "Offline", OFFLINE)
    rc, out, _ = cli(validate_cli.main, ["--mlperf", str(tree), "--json", "--skip-llm", "--exclude-unknown"])
    records = {r["system"]: r for r in json.loads(out)}
    assert rc == 0 and records["x"]["reason"] == "Acme Warp-9: no registry chip"
    assert records["H100x8"]["status"] == "predicted"
    rc, _, err = cli(validate_cli.main, ["--mlperf", "--fit"])
    assert rc == 2 and "--mlperf takes --json, --csv, --plot, --skip-llm and --exclude-unknown only" in err
    rc, _, err = cli(validate_cli.main, ["--exclude-unknown"])
    assert rc == 2 and "--exclude-unknown: with --mlperf only" in err


# --- a round's summary_results.json ----------------------------------------------------------------

# Ten records of v4.1's summary_results.json as published (mlcommons/inference_results_v4.1 at
# commit 1e5a50f0619832da57f1425c19a8ec3607eee91d, records 74, 89, 18, 31, 137, 568, 415, 817, 873
# and 0): resnet50 on 8 H100, a CPU-only Xeon, gptj (inferred tokens), SDXL Server, an early-stopped
# SingleStream, a MaxQ power run, a 4-node system, a MultiStream power run (millijoules), an
# open-division record, and AMD's MI300X llama2-70b.
EXCERPT = Path(__file__).parent / "data" / "mlperf_v41_summary_results_excerpt.json"


def test_summary_results_read_as_the_results_tree_reads_the_same_runs(v41):
    """Two formats MLCommons publishes, read apart, give the same rows: the excerpt's records
    against the CSV the results tree's logs gave (tests/data: their paths are the same runs)."""
    by_path = {r.path: r for r in v41}
    rows = mlperf.load_rows(EXCERPT)
    assert len(rows) == 9                                    # the open-division record is not read
    same = ("submitter", "system", "accelerator", "accelerators", "host_processor", "host_processors", "framework",
            "benchmark", "scenario", "unit", "valid")
    for row in rows:
        tree = by_path[row.path]
        assert [getattr(row, f) for f in same] == [getattr(tree, f) for f in same], row.path
        # a Server figure: the summary's is LoadGen's at full precision, the log's line rounds it
        assert row.value == pytest.approx(tree.value, rel=3e-3 if row.scenario == "Server" else 1e-6), row.path
        assert row.round == "v4.1"
    by = {r.path.split("/results/")[1].rsplit("/performance", 1)[0]: r for r in rows}
    assert by["H200-SXM-141GBx8_TRT_MaxQ/3d-unet-99/Offline"].avg_power_w == pytest.approx(4613.6193832599)
    assert by["h13_u3_slim/resnet50/multistream"].avg_power_w is None       # millijoules a query: not read
    assert by["DGX-H100_H100-SXM-80GBx32_TRT/llama2-70b-99/Offline"].accelerators == 32   # 8 a node x 4 nodes
    assert by["ESC_N8_E11_H100x8_TRT/resnet50/Offline"].benchmark == "resnet50"           # its Model: "resnet"


def test_cli_reads_a_summary_results_json(cli):
    from chipcal.cli import validate as validate_cli

    rc, out, err = cli(validate_cli.main, ["--mlperf", str(EXCERPT), "--json", "--skip-llm"])
    assert rc == 0, err
    records = json.loads(out)
    assert len(records) == 9
    (resnet,) = [r for r in records if r["benchmark"] == "resnet50" and r["accelerator"] == "NVIDIA H100-SXM-80GB"]
    assert resnet["status"] == "predicted" and resnet["measured"] == pytest.approx(709920.0 / 8)


def test_an_interactive_record_of_a_later_round_is_read_as_interactive(tmp_path):
    """v5.1's summary_results.json names the Interactive scenario as its results folder does;
    AMD's MI300X llama2-70b record stands in for one, moved to an Interactive folder."""
    (amd,) = [r for r in json.loads(EXCERPT.read_text()) if r["Location"].endswith("llama2-70b-99/Offline")
              and r["Submitter"] == "AMD"]
    amd = {**amd, "Scenario": "Interactive", "version": "v5.1",
           "Location": amd["Location"].replace("/Offline", "/Interactive")}
    path = tmp_path / "summary_results.json"
    path.write_text(json.dumps([amd]))
    (row,) = mlperf.load_rows(path)
    assert (row.scenario, row.unit, row.round) == ("Interactive", "tokens_per_s", "v5.1")


def test_a_damaged_summary_results_json_is_refused_in_one_line(tmp_path, cli):
    from chipcal.cli import validate as validate_cli

    bad = tmp_path / "summary_results.json"
    bad.write_text(json.dumps([{"Category": "closed", "Location": "closed/X/results/S/resnet50/Offline"}]))
    rc, _, err = cli(validate_cli.main, ["--mlperf", str(bad)])
    assert rc == 2 and "record 0" in err and len(err.strip().splitlines()) == 1
