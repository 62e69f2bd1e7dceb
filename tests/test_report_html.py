"""report.html (issue 39): the calibration report as one self-contained page. Every run directory in
results/ has one; it parses, its images are PNG data: URIs, it names no other host or file, its
tables are whole; it says what report.md says; and, where a Chromium is installed, it opens in it
with the network shut, every image decodes, every table renders and sorts, and the console shows no
error."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from browser import browse, console_errors, needs_chromium
from html_check import Page, assert_sorted, check_page, png_size
from recorded import reference_run_dir

from chipcal.calibrate import store
from chipcal.report import calibration as report
from chipcal.report import render

ROOT = Path(__file__).resolve().parents[1]
RUNS = sorted(p.parent for p in ROOT.glob("results/*/*/calibration.json"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The reference run's document and its report.html drawn now (plots included: ~5 s)."""
    doc = store.load(reference_run_dir(tmp_path_factory.mktemp("reference")))
    return doc, report.render_html(doc)


def _md_tables(text: str) -> list[tuple[list[str], list[list[str]]]]:
    """The markdown's tables as (header, rows), inline marks removed: read line by line."""
    tables, lines = [], text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("| ") and i + 1 < len(lines) and lines[i + 1].startswith("|---"):
            def cells(line):
                return [render.plain(c.strip()) for c in line.strip().strip("|").split(" | ")]
            head, rows, i = cells(lines[i]), [], i + 2
            while i < len(lines) and lines[i].startswith("| "):
                rows.append(cells(lines[i]))
                i += 1
            tables.append((head, rows))
        else:
            i += 1
    return tables


def test_the_reference_report_is_one_self_contained_page(reference):
    doc, text = reference
    page = check_page(text)
    assert len(page.images) == (4 if doc.observations.power or doc.observations.holds else 3)   # power.png: power read
    assert page.headings[0] == f"Calibration: {doc.machine_slug} ({doc.device})"


def test_the_html_says_what_the_markdown_says(reference):
    """Same headings, same tables cell by cell (report.md and report.html are two renderings)."""
    doc, text = reference
    markdown = report.render_markdown(doc)
    page = Page(text)
    assert page.headings == [render.plain(line.lstrip("#").strip()) for line in markdown.splitlines()
                             if line.startswith("#")]
    assert [(t.head, t.rows) for t in page.tables] == _md_tables(markdown)
    validation = next(t for t in page.tables if t.head[:2] == ["model", "batch"])
    assert [(r[0], int(r[1])) for r in validation.rows] == [(m.model, m.batch) for m in doc.observations.models]


@pytest.mark.parametrize("run", RUNS, ids=lambda p: str(p.relative_to(ROOT / "results")))
def test_every_run_in_results_has_its_report_html(run):
    """Checked in beside report.md (`chipcal report results/ --html` writes them), for this run."""
    path = run / "report.html"
    assert path.is_file(), f"no {path.relative_to(ROOT)}: run `chipcal report results/ --html`"
    doc = store.load(run)
    page = check_page(path.read_text())
    assert page.headings[0] == f"Calibration: {doc.machine_slug} ({doc.device})"
    assert f"Created {doc.created_utc}" in path.read_text()
    assert len(page.images) == (4 if doc.observations.power or doc.observations.holds else 3)   # power.png: power read


@needs_chromium
def test_every_report_opens_in_chromium_without_network(tmp_path, cli):
    """Each checked-in report.html and a comparison page, in a real browser engine: every image
    decodes to its PNG size, every table renders with its rows, on the comparison and the two newest
    main jobs every column sorts both ways (judged by html_check's own number parser), and the
    console shows no error, the sorting clicks included."""
    from chipcal.cli import report as report_cli

    pages = [run / "report.html" for run in RUNS]
    machine = [r for r in RUNS if r.parent.name == "amd-epyc-2c-c90a32d0"]
    compare = tmp_path / "compare.html"
    rc, _, err = cli(report_cli.main, ["--compare", str(machine[-2]), str(machine[-1]), "--html", str(compare)])
    assert rc == 0, err
    sort = [compare, pages[-1], machine[-1] / "report.html"]
    found = browse(pages + [compare], sort, tmp_path)
    assert [f["page"] for f in found] == [p.as_uri() for p in pages + [compare]]
    assert not console_errors(found)
    for path, result in zip(pages + [compare], found, strict=True):
        parsed = Page(path.read_text())
        assert len(result["images"]) == len(parsed.images)
        assert all(w > 100 and h > 100 and drawn > 1000 for w, h, drawn in result["images"]), (path, result["images"])
        assert [tuple(i[:2]) for i in result["images"]] == [png_size(base64.b64decode(src.split(",", 1)[1]))
                                                           for src in parsed.images]
        assert [t["rows"] for t in result["tables"]] == [len(t.rows) for t in parsed.tables]
        assert all(t["height"] > 0 for t in result["tables"])
        for table, entry in zip(parsed.tables, result["tables"], strict=True):
            for i, column in enumerate(entry["columns"]):
                assert column["marks"] == ["ascending", "descending"]
                assert_sorted(column["up"], ascending=True)
                assert_sorted(column["down"], ascending=False)
                assert sorted(column["up"]) == sorted(column["down"]) == sorted(r[i] for r in table.rows)
        if path in sort:
            assert all(len(e["columns"]) == len(t.head) for t, e in zip(parsed.tables, result["tables"], strict=True))


# A 1x1 PNG, its one pixel not white: an image that decodes, on the page that must show no error.
PIXEL = ("data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9a"
         "wAAAABJRU5ErkJggg==")


@needs_chromium
def test_the_console_check_reports_each_kind_of_error(tmp_path):
    """The check above can fail: a page with an exception thrown while it loads, a console.error
    call, an image that does not decode, and an image and a CSS background from another host (the
    network is shut) reports each; a clean page opened after it, with a log line, reports none."""
    faulty, clean = tmp_path / "faulty.html", tmp_path / "clean.html"
    faulty.write_text('<!DOCTYPE html><html><head><meta charset="utf-8">'
                      "<style>body { background: url(http://example.com/back.png) }</style></head><body>"
                      '<script>throw new Error("fault a");</script><script>console.error("fault b");</script>'
                      '<img src="data:image/png;base64,AAAAbroken"><img src="http://example.com/chart.png">'
                      "</body></html>")
    clean.write_text(f'<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><img src="{PIXEL}">'
                     '<script>console.log("all well");</script></body></html>')
    found = browse([faulty, clean], [], tmp_path)
    errors = console_errors(found)
    assert list(errors) == [faulty.as_uri()]
    assert sorted(errors[faulty.as_uri()]) == sorted([
        f"Uncaught Error: fault a at {faulty.as_uri()}:1",
        "console.error: fault b",
        "failed to load: IMG data:image/png;base64,AAAAbroken",
        "failed to load: IMG http://example.com/chart.png",
        "failed to load: css http://example.com/back.png",
    ])
    assert [f["images"] for f in found] == [[[0, 0, 0], [0, 0, 0]], [[1, 1, 1]]]


@pytest.mark.parametrize("draw", ["draw_predicted_vs_measured", "draw_roofline", "draw_gemm_efficiency"])
def test_plots_label_their_axes_and_points_without_overlaps(draw):
    """On a main job with 22 held-out cases (11 models × batch 1, 8): axes say quantity and unit,
    every model point is named, and no two names overlap once drawn."""
    from chipcal.report import plots

    doc = store.load(ROOT / "results" / "amd-epyc-2c-c90a32d0" / "20261126T042801Z")
    fig = getattr(plots, draw)(doc)
    try:
        ax = fig.axes[0]
        assert ax.get_xlabel() and ax.get_ylabel() and ax.get_title()
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        from matplotlib.text import Text

        boxes = [Text.get_window_extent(t, renderer) for t in ax.texts]     # the words, not the leader lines
        for i, a in enumerate(boxes):
            for b in boxes[i + 1:]:
                assert not a.overlaps(b), (a, b)
        legend = ax.get_legend().get_window_extent(renderer)
        assert not any(legend.overlaps(b) for b in boxes) and not legend.overlaps(ax.get_window_extent(renderer))
        if draw != "draw_gemm_efficiency":
            names = sorted(t.get_text() for t in ax.texts)
            assert names == sorted(f"{m.model}/{m.batch}" for m in doc.observations.models)
    finally:
        import matplotlib.pyplot as plt

        plt.close(fig)
