"""Physics-only CLIs: outputs, --json fields, bad input (exit 2, one line), no torch import."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from chipcal.cli import compare_tdp_registry, estimate_tdp, hardware
from chipcal.cli import main as umbrella
from chipcal.model import power, technology
from chipcal.model.tdp import (
    VERDICT_MEASURED_EXCEEDS,
    VERDICT_MEASURED_OK,
    VERDICT_OK,
    VERDICT_UNCERTAIN,
    VERDICT_UNSUSTAINABLE,
)

VERDICTS = (VERDICT_OK, VERDICT_UNCERTAIN, VERDICT_UNSUSTAINABLE, VERDICT_MEASURED_EXCEEDS, VERDICT_MEASURED_OK)


def _one_line_error(rc, err):
    assert rc == 2
    assert err.count("\n") == 1 and "Traceback" not in err


def test_estimate_tdp_json_fields(cli):
    rc, out, _ = cli(estimate_tdp.main, ["--alus", "1000", "--frequency", "1", "--process", "45",
                                         "--circuit", "systolic_mac", "--precision", "fp32", "--json"])
    assert rc == 0
    (row,) = json.loads(out)
    for field in ("process_nm", "circuit", "precision", "alus", "frequency_hz", "pj_per_mac", "tdp_w",
                  "peak_ops_per_s", "ops_per_w"):
        assert field in row
    # hand-worked in test_tdp: (1 + c)(4.548 + 0.9375 s) pJ all-in at the shipped constants;
    # static 15 % of the total
    k = tomllib.loads((Path(power.__file__).with_name("fitted_constants.toml")).read_text())["values"]
    pj = (1 + k["clock_control_fraction"]) * (4.548 + 0.9375 * k["delivery_scale"])
    assert row["pj_per_mac"] == pytest.approx(pj, rel=1e-9, abs=0)
    assert row["tdp_w"] == pytest.approx(pj / 0.85, rel=1e-9, abs=0)
    assert row["tdp_low_w"] < row["tdp_w"] < row["tdp_high_w"]
    assert row["frequency_hz"] == 1e9


@pytest.mark.parametrize("flag,count", [("--compare-processes", len(technology.PROCESS_NODES_NM)),
                                        ("--compare-precisions", 9), ("--compare-circuits", 6)])
def test_estimate_tdp_sweeps(cli, flag, count):
    rc, out, _ = cli(estimate_tdp.main, [flag, "--json"])
    assert rc == 0 and len(json.loads(out)) == count
    rc, out, _ = cli(estimate_tdp.main, [flag])
    assert rc == 0 and "TOPS/W" in out


@pytest.mark.parametrize("argv", [
    ["--alus", "0"], ["--alus", "abc"], ["--alus", "-5"], ["--process", "0"], ["--process", "100"],
    ["--process", "x"], ["--frequency", "-1"], ["--frequency", "nan"], ["--circuit", "bogus"],
    ["--precision", "fp9"], ["--compare-processes", "--compare-circuits"], ["--plot", "chart.txt"],
    ["--memory-bandwidth", "100"], ["--memory-bandwidth", "100", "--memory-type", "hbm9"],
])
def test_estimate_tdp_bad_input(cli, argv):
    _one_line_error(*cli(estimate_tdp.main, argv)[::2])


def test_unknown_circuit_suggests_closest(cli):
    rc, _, err = cli(estimate_tdp.main, ["--circuit", "tensorcore"])
    assert rc == 2 and "did you mean tensor_core" in err and "systolic_mac" in err


def test_estimate_tdp_plot(cli, tmp_path):
    path = tmp_path / "tdp.png"
    rc, _, _ = cli(estimate_tdp.main, ["--compare-precisions", "--plot", str(path)])
    assert rc == 0 and path.read_bytes()[:4] == b"\x89PNG"


def test_compare_registry_fields(cli):
    rc, out, _ = cli(compare_tdp_registry.main, ["--hardware", "h100-sxm5", "--json"])
    assert rc == 0
    (row,) = json.loads(out)
    for field in ("hardware", "process_nm", "spec_tdp_w", "estimated_tdp_w", "ratio",
                  "max_sustainable_pj_per_mac", "verdict"):
        assert field in row
    # H100 SXM5: 700 W / (528 TCs * 512 MAC/clk * 1.83 GHz = 4.947e14 MAC/s) = 1.415 pJ/MAC
    assert row["max_sustainable_pj_per_mac"] == pytest.approx(700 / (528 * 512 * 1.83e9) / 1e-12)
    assert row["ratio"] == pytest.approx(row["estimated_tdp_w"] / 700)


REQUIRED = ("spec_peak_flop_per_s", "power_at_spec_w", "power_at_spec_low_w", "power_at_spec_high_w",
            "sustained_clock_hz", "sustainable_peak_flop_per_s", "sustainable_fraction", "verdict",
            "measured_peak_flop_per_s", "measured_source")


@pytest.mark.parametrize("precision", [None, "fp32", "int8"])
def test_compare_registry_every_chip_has_the_issue_fields(cli, precision):
    rc, out, _ = cli(compare_tdp_registry.main, ["--json"] + (["--precision", precision] if precision else []))
    rows = json.loads(out)
    assert rc == 0
    for row in rows:
        assert set(REQUIRED) <= set(row)
        if row["power_at_spec_w"] is None:
            continue
        assert row["power_at_spec_low_w"] <= row["power_at_spec_w"] <= row["power_at_spec_high_w"]
        assert 0 <= row["sustainable_fraction"] <= row["clock_fraction"] <= 1
        assert row["verdict"] in VERDICTS and row["verdict_basis"] in ("measured", "model")
        assert (row["verdict_basis"] == "measured") == (row["measured_kind"] == "sustained")
    measured = [r for r in rows if r["measured_peak_flop_per_s"]]
    bursts = [r for r in rows if r["burst_peak_flop_per_s"]]
    if precision is None:   # headline precisions: the evidence chips (bf16 or fp16)
        assert len(measured) >= 3 and all(r["measured_kind"] == "sustained" for r in measured)
        assert len(bursts) >= 6 and all(r["burst_source"].startswith("burst (") for r in bursts)
        assert all(r["measured_source"].startswith("sustained (") for r in measured)


def test_compare_registry_evidence_table(cli):
    rc, out, _ = cli(compare_tdp_registry.main, ["--evidence", "--json"])
    rows = json.loads(out)
    assert rc == 0 and len(rows) >= 8
    for r in rows:
        assert r["loo_error"] == pytest.approx(
            r["loo_sustainable_peak_flop_per_s"] / r["measured_flop_per_s"] - 1, rel=1e-9)
    rc, out, _ = cli(compare_tdp_registry.main, ["--evidence"])
    assert rc == 0 and "leave-one-chip-out" in out and "h100-sxm5" in out


def test_compare_registry_refit_writes_the_shipped_constants(cli, tmp_path):
    path = tmp_path / "fitted.toml"
    rc, out, _ = cli(compare_tdp_registry.main, ["--refit", str(path)])
    assert rc == 0 and str(path) in out
    assert path.read_text() == Path(power.__file__).with_name("fitted_constants.toml").read_text()


def test_compare_registry_all_and_plot(cli, tmp_path):
    rc, out, _ = cli(compare_tdp_registry.main, ["--json"])
    rows = json.loads(out)
    assert rc == 0 and len(rows) >= 1
    path = tmp_path / "cmp.svg"
    rc, _, _ = cli(compare_tdp_registry.main, ["--plot", str(path)])
    assert rc == 0 and b"<svg" in path.read_bytes()[:500]


def test_compare_registry_unsupported_precision_is_a_row(cli):
    rc, out, _ = cli(compare_tdp_registry.main, ["--hardware", "h100-sxm5", "--precision", "int4", "--json"])
    (row,) = json.loads(out)
    assert rc == 0 and row["verdict"].startswith("unsupported") and row["estimated_tdp_w"] is None


@pytest.mark.parametrize("argv", [["--hardware", "h100-sxm9"], ["--precision", "fp9"], ["--hardware", ""]])
def test_compare_registry_bad_input(cli, argv):
    _one_line_error(*cli(compare_tdp_registry.main, argv)[::2])


def test_hardware_list_and_show(cli):
    rc, out, _ = cli(hardware.main, ["list", "--json"])
    rows = json.loads(out)
    h100 = next(r for r in rows if r["name"] == "h100-sxm5")
    assert h100["kind"] == "gpu" and h100["hypothetical"] is False
    assert h100["peak_flop_per_s_bf16"] == pytest.approx(528 * 512 * 2 * 1.83e9)
    for row in rows:
        assert {"name", "kind", "process_nm", "tdp_w", "hypothetical"} <= set(row)
    rc, out, _ = cli(hardware.main, ["show", "h100-sxm5"])
    assert rc == 0 and "whitepaper" in out
    rc, out, _ = cli(hardware.main, ["show", "h100-sxm5", "--json"])
    (shown,) = json.loads(out)
    # AWS's capacity-block table: p5.48xlarge at $39.33 an hour for 8 H100s -> $4.916 each
    assert shown["price_usd_per_device_hour"] == pytest.approx(39.33 / 8, abs=5.01e-4)
    assert "as of 2024-12-31" in shown["price"] and "capacityblocks" in shown["price_source"]
    _one_line_error(*cli(hardware.main, ["show", "h100"])[::2])
    _one_line_error(*cli(hardware.main, ["frobnicate"])[::2])


def test_umbrella_dispatch_and_unknown(cli):
    rc, out, _ = cli(umbrella.main, ["hardware", "list"])
    assert rc == 0 and "h100-sxm5" in out
    _one_line_error(*cli(umbrella.main, ["hardwre"])[::2])


@pytest.mark.parametrize("module,argv", [
    ("chipcal.cli.estimate_tdp", ["--compare-processes"]),
    ("chipcal.cli.compare_tdp_registry", []),
    ("chipcal.cli.hardware", ["list"]),
])
def test_physics_clis_do_not_import_torch(module, argv):
    # nor pandas or scipy (0.3 s each to import): they start in well under a second
    code = (f"import sys; from {module} import main; rc = main({argv!r}); "
            "assert not {'torch', 'pandas', 'scipy'} & set(sys.modules), 'heavy import'; sys.exit(rc)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
