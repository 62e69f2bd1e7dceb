"""report.html (issue 39): the calibration report as one self-contained page. Every run directory in
results/ has one; it parses, its images are PNG data: URIs, it names no other host or file, its
tables are whole; it says what report.md says; and, where a Chromium is installed, it opens in it
with the network shut, every image decodes and every table renders and sorts."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
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


def _chromium() -> str | None:
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


# Loaded beside the pages under test: waits for each page in its iframe, then reads from it what a
# reader would see: each image decoded with its size, each table's rendered height and rows, and for
# the pages named in SORT each column's cells after one click on its header and after a second.
HARNESS = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><pre id="result">pending</pre>
<script>
var PAGES = %(pages)s, SORT = %(sort)s;
function load(src) {
  return new Promise(function (done) {
    var f = document.createElement("iframe");
    f.style.width = "1200px"; f.style.height = "800px";
    f.onload = function () { done(f); };
    f.src = src; document.body.appendChild(f);
  });
}
function pixels(img) {
  // decoded for real: drawn on a canvas, the count of pixels that are not white
  var c = document.createElement("canvas");
  c.width = img.naturalWidth; c.height = img.naturalHeight;
  var g = c.getContext("2d"); g.drawImage(img, 0, 0);
  var d = g.getImageData(0, 0, c.width, c.height).data, n = 0;
  for (var i = 0; i < d.length; i += 4) if (d[i] < 250 || d[i + 1] < 250 || d[i + 2] < 250) n++;
  return n;
}
async function inspect(src) {
  var f = await load(src), doc = f.contentDocument, out = {page: src, images: [], tables: []};
  for (var img of doc.images) {
    out.images.push(img.complete ? [img.naturalWidth, img.naturalHeight, pixels(img)] : [0, 0, 0]);
  }
  for (var t of doc.querySelectorAll("table")) {
    var entry = {height: t.getBoundingClientRect().height, rows: t.tBodies[0].rows.length, columns: []};
    if (SORT.indexOf(src) >= 0) {
      var heads = t.tHead.rows[0].cells;
      for (var i = 0; i < heads.length; i++) {
        var col = function () { return Array.from(t.tBodies[0].rows, function (r) { return r.cells[i].textContent; }); };
        heads[i].click(); var up = col(), upSort = heads[i].getAttribute("aria-sort");
        heads[i].click(); var down = col(), downSort = heads[i].getAttribute("aria-sort");
        entry.columns.push({up: up, down: down, marks: [upSort, downSort]});
      }
    }
    out.tables.push(entry);
  }
  f.remove();
  return out;
}
(async function () {
  var results = [];
  for (var p of PAGES) results.push(await inspect(p));
  document.getElementById("result").textContent = JSON.stringify(results);
})();
</script></body></html>"""


def browse(pages: list[Path], sort: list[Path], tmp_path: Path) -> list[dict]:
    """Open `pages` in headless Chromium with every network request refused; the harness's findings."""
    harness = tmp_path / "harness.html"
    harness.write_text(HARNESS % {"pages": json.dumps([p.as_uri() for p in pages]),
                                  "sort": json.dumps([p.as_uri() for p in sort])})
    done = subprocess.run(
        [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
         "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>", "--host-resolver-rules=MAP * ~NOTFOUND",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=60000", "--dump-dom", harness.as_uri()],
        capture_output=True, text=True, timeout=180)
    match = re.search(r'<pre id="result">(.*?)</pre>', done.stdout, re.S)
    assert match and match.group(1) != "pending", done.stderr[-2000:]
    import html

    return json.loads(html.unescape(match.group(1)))


@pytest.mark.skipif(_chromium() is None, reason="no Chromium installed (Debian: apt-get install chromium)")
def test_every_report_opens_in_chromium_without_network(tmp_path, cli):
    """Each checked-in report.html and a comparison page, in a real browser engine: every image
    decodes to its PNG size, every table renders with its rows, and on the comparison and the two
    newest main jobs every column sorts both ways (judged by html_check's own number parser)."""
    from chipcal.cli import report as report_cli

    pages = [run / "report.html" for run in RUNS]
    machine = [r for r in RUNS if r.parent.name == "amd-epyc-2c-c90a32d0"]
    compare = tmp_path / "compare.html"
    rc, _, err = cli(report_cli.main, ["--compare", str(machine[-2]), str(machine[-1]), "--html", str(compare)])
    assert rc == 0, err
    sort = [compare, pages[-1], machine[-1] / "report.html"]
    found = browse(pages + [compare], sort, tmp_path)
    assert [f["page"] for f in found] == [p.as_uri() for p in pages + [compare]]
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
