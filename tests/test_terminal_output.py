"""Terminal output a person reads (issue 39): every line of the tables and notes fits 120 columns,
a hypothetical chip (registry `hypothetical = true`) is marked wherever a table names it, and the
recommendations rank products, with design studies listed apart."""

from __future__ import annotations

import re

import pytest
from test_predict_cli import hand_mlp  # noqa: F401  (fixture)

from chipcal.cli import compare_tdp_registry, hardware, predict, report
from chipcal.model.registry import load_registry

WIDTH = 120
REGISTRY = load_registry()
HYPOTHETICAL = {name for name, chip in REGISTRY.chips.items() if chip.hypothetical}
NOTE = "* = hypothetical: a design study, not a product"


@pytest.fixture(autouse=True)
def private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CHIPCAL_CACHE_DIR", str(tmp_path / "cache"))


def _fits(out: str) -> None:
    long = [line for line in out.splitlines() if len(line) > WIDTH]
    assert not long, f"{len(long)} lines over {WIDTH} columns, e.g. {long[0]!r}"


def _row_names(out: str) -> list[str]:
    """The first cell of each table row (after the dashed rule, up to the first blank line)."""
    lines = out.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("---")) + 1
    names = []
    for line in lines[start:]:
        if not line.strip() or not re.match(r"^\S+\s{2,}", line):
            break
        names.append(line.split()[0])
    return names


def test_the_registry_has_hypothetical_chips_to_mark():
    assert {"kpu-t64", "kpu-t256", "kpu-t768"} <= HYPOTHETICAL and "h100-sxm5" not in HYPOTHETICAL


def test_predict_vit_over_the_registry_fits_and_ranks_products(cli):
    """The issue's case: `chipcal predict --model vit_b_16 --hardware all` printed rows 158 wide and
    notes up to 239, and named kpu-t768 (a design study) the best latency, energy and throughput."""
    rc, out, err = cli(predict.main, ["--model", "vit_b_16", "--hardware", "all"])
    assert rc == 0, err
    _fits(out)
    names = _row_names(out)
    assert len(names) == len(REGISTRY.names)
    for name in names:        # every hypothetical chip marked, no product marked
        assert name.endswith("*") == (name.rstrip("*") in HYPOTHETICAL), name
    assert NOTE in " ".join(out.split())
    recs = out.split("recommendations:")[1]
    best = [line for line in recs.splitlines() if line.strip().startswith("best ")]
    assert len(best) == 3
    for line in best:
        assert not any(re.search(rf"\b{re.escape(h)}\b", line) for h in HYPOTHETICAL), line
    designs = recs.split("design studies, not products")[1]
    assert re.search(r"^\s+kpu-t768: ", designs, re.M)       # listed apart, with the rank it would take


def test_recommendations_among_design_studies_only_say_so(cli, hand_mlp):  # noqa: F811
    rc, out, _ = cli(predict.main, ["--model", "mlp1024", "--hardware", "kpu-t64,kpu-t768"])
    recs = out.split("recommendations:")[1]
    assert rc == 0 and "only design studies here" in recs
    assert all("kpu-t768*" in line or "kpu-t64*" in line for line in recs.splitlines() if "best " in line)


def test_predict_by_layer_and_explain_fit(cli, hand_mlp):  # noqa: F811
    rc, out, _ = cli(predict.main, ["--model", "mlp1024", "--hardware", "h100-sxm5,kpu-t64,core-i7-12700k",
                                    "--batch", "1,64", "--by-layer", "--explain"])
    assert rc == 0 and "slowest subgraphs" in out and "opportunity" in out
    _fits(out)


@pytest.mark.parametrize("main, argv", [
    (hardware.main, ["list"]),
    (compare_tdp_registry.main, []),
    (compare_tdp_registry.main, ["--precision", "int8"]),
])
def test_registry_tables_fit_and_mark_hypothetical_chips(cli, main, argv):
    rc, out, err = cli(main, argv)
    assert rc == 0, err
    _fits(out)
    names = _row_names(out)
    assert {n.rstrip("*") for n in names} == set(REGISTRY.names)
    assert {n.rstrip("*") for n in names if n.endswith("*")} == HYPOTHETICAL
    assert NOTE in " ".join(out.split())


def test_report_listing_fits(cli):
    rc, out, err = cli(report.main, ["results"])
    assert rc == 0, err
    _fits(out)
