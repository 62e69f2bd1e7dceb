"""`chipcal report --compare RUN_A RUN_B` (issue 39): two runs of one machine side by side, each change
marked only when it is beyond the runs' own noise; two machines' runs are refused in one line."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
from html_check import check_page
from recorded import reference_document

from chipcal.calibrate import store
from chipcal.calibrate.document import CalibrationDocument
from chipcal.cli import report as report_cli
from chipcal.report import compare

ROOT = Path(__file__).resolve().parents[1]


def _pair() -> tuple[dict, dict]:
    """Run A: the reference document with round-to-round noise 2 %; run B: A with changes whose
    verdicts are worked out by hand below."""
    a = reference_document()
    a["validation"]["noise_rel"] = 0.02
    b = copy.deepcopy(a)
    # held-out models: threshold 2 % + 2 % = 4 %
    factors = {("resnet18", 1): 1.03, ("resnet18", 8): 1.05, ("resnet50", 1): 0.5}
    for row in b["observations"]["models"]:
        f = factors.get((row["model"], row["batch"]), 1.0)
        row.update({k: row[k] * f for k in ("median_s", "ci_low_s", "ci_high_s")})
    # fp32 GEMM peak: the best shape twice as fast in B (its CI moves with it); bf16 untouched
    m, n, k = next(p["best_shape"] for p in a["peaks"] if p["precision"] == "fp32")
    for row in b["observations"]["gemm"]:
        if row["precision"] == "fp32" and (row["m"], row["k"], row["flop"]) == (m, k, 2 * m * n * k):
            row.update({"median_s": row["median_s"] / 2, "ci_low_s": row["ci_low_s"] / 2,
                        "ci_high_s": row["ci_high_s"] / 2, "flop_per_s": row["flop_per_s"] * 2})
    # bandwidth: every size twice as fast
    for row in b["observations"]["bandwidth"]:
        row["bytes_per_s"] *= 2
    b["bandwidth"]["measured_bytes_per_s"] *= 2
    # e_max 1.00 and 1.05, ± 0.01 each: 0.05 apart > 2·√(0.01² + 0.01²) = 0.028, marked;
    # w_half_flop 1e6 and 1.3e6, ± 2e5 each: 3e5 apart < 2·√2·2e5 = 5.7e5, not marked
    for doc, e_max, w_half in ((a, 1.0, 1e6), (b, 1.05, 1.3e6)):
        fit = doc["fits"]["gemm_efficiency_fp32"]
        fit["parameters"] = {"e_max": e_max, "w_half_flop": w_half}
        fit["stderr"] = {"e_max": 0.01, "w_half_flop": 2e5}
        fit["unconstrained"] = {}
    b["flags"] = [*a["flags"][1:], {"code": "new_flag", "severity": "warning", "message": "m", "values": {}}]
    return a, b


def test_changes_are_marked_against_the_runs_noise():
    a, b = _pair()
    c = compare.compare(CalibrationDocument.from_dict(a), CalibrationDocument.from_dict(b))
    models = {(m.model, m.batch): m.beyond_noise for m in c.models}
    assert models[("resnet18", 1)] is False and models[("resnet18", 8)] is True and models[("resnet50", 1)] is True
    assert models[("resnet50", 8)] is False
    peaks = {p.precision: p for p in c.peaks}
    assert peaks["fp32"].beyond_noise is True and peaks["bf16"].beyond_noise is False
    assert peaks["fp32"].b_ci[0] == pytest.approx(2 * peaks["fp32"].a_ci[0])
    assert c.bandwidth.beyond_noise is True
    params = {(p.fit, p.parameter): p.beyond_noise for p in c.parameters}
    assert params[("gemm_efficiency_fp32", "e_max")] is True
    assert params[("gemm_efficiency_fp32", "w_half_flop")] is False
    flags = {f.code: (f.in_a, f.in_b) for f in c.flags}
    assert flags[a["flags"][0]["code"]] == (True, a["flags"][0]["code"] in {f["code"] for f in b["flags"]})
    assert flags["new_flag"] == (False, True)


def test_a_run_against_itself_marks_nothing():
    doc = CalibrationDocument.from_dict(reference_document())
    c = compare.compare(doc, doc)
    judged = [x.beyond_noise for x in (*c.peaks, c.bandwidth, *c.parameters, *c.models)]
    assert True not in judged and False in judged


def _write(tmp_path: Path, name: str, doc: dict) -> Path:
    return store.write_run(tmp_path, name, "T", {"calibration.json": store.json_writer(doc)})


def test_the_cli_compares_in_the_terminal_html_and_json(cli, tmp_path):
    a, b = _pair()
    run_a, run_b = _write(tmp_path / "a", a["machine_slug"], a), _write(tmp_path / "b", b["machine_slug"], b)
    rc, out, err = cli(report_cli.main, ["--compare", str(run_a), str(run_b), "--html", str(tmp_path / "c.html")])
    assert rc == 0, err
    assert all(len(line) <= 120 for line in out.splitlines())
    line = next(x for x in out.splitlines() if x.startswith("resnet18") and " 8 " in x)
    assert " +5.0%  *" in line
    page = check_page((tmp_path / "c.html").read_text())
    assert page.headings[0] == f"Compare: {a['machine_slug']} (cpu)" and len(page.tables) == 6
    rc, out, _ = cli(report_cli.main, ["--compare", str(run_a), str(run_b), "--json"])
    rows = {(r["section"], r["quantity"]): r for r in json.loads(out)}
    assert rows[("bandwidth", "dram")]["b"] == 2 * rows[("bandwidth", "dram")]["a"]
    assert rows[("model", "resnet50/1")]["beyond_noise"] is True


@pytest.mark.parametrize("change, says", [({"machine_slug": "other-machine"}, "compare two runs of one machine"),
                                          ({"device": "cuda:0"}, "compare two runs of one device")])
def test_two_machines_are_refused_in_one_line(cli, tmp_path, change, says):
    a = reference_document()
    run_a = _write(tmp_path / "a", a["machine_slug"], a)
    run_b = _write(tmp_path / "b", "x", {**a, **change})
    rc, out, err = cli(report_cli.main, ["--compare", str(run_a), str(run_b)])
    assert rc == 2 and out == "" and says in err and len(err.strip().splitlines()) == 1


def test_two_checked_in_runs_of_one_machine(cli):
    runs = sorted(p.parent for p in (ROOT / "results" / "amd-epyc-2c-c90a32d0").glob("*/calibration.json"))
    rc, out, err = cli(report_cli.main, ["--compare", str(runs[-2]), str(runs[-1])])
    assert rc == 0, err
    assert "Held-out model latency" in out and all(len(line) <= 120 for line in out.splitlines())
