"""Local HTML pages in a real browser engine: one headless Chromium, the network shut, opens each page
in an iframe of a harness page and reads back what a reader would see (images decoded, tables
rendered and sorted) and what its console would show as errors (uncaught exceptions, unhandled
promise rejections, console.error calls, resources that failed to load)."""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

# Loaded beside the pages under test: waits for each page in its iframe, then reads from it what a
# reader would see: each image decoded with its size, each table's rendered height and rows, and for
# the pages named in SORT each column's cells after one click on its header and after a second.
# The console's errors are heard on the iframe's first window (about:blank), hooked before the page
# starts: the same-origin page that replaces it keeps that window (HTML's window reuse), so the hooks
# hear the page's scripts from their first line, its resources and the clicks on its headers.
HARNESS = """<!DOCTYPE html><html><head><meta charset="utf-8"></head><body><pre id="result">pending</pre>
<script>
var PAGES = %(pages)s, SORT = %(sort)s;
function short(url) {
  // a data: URI holds a whole image: its start names it
  return url.length > 80 ? url.slice(0, 80) + "..." : url;
}
function watch(w, errors) {
  // what the console would show as errors: uncaught exceptions (window), failed loads (an element's
  // error event, which does not bubble: heard in the capture phase), rejections, console.error
  w.addEventListener("error", function (e) {
    var t = e.target;
    errors.push(t === w ? e.message + " at " + e.filename + ":" + e.lineno
                        : "failed to load: " + t.tagName + " " + short(t.currentSrc || t.src || t.href || ""));
  }, true);
  w.addEventListener("unhandledrejection", function (e) { errors.push("unhandled rejection: " + e.reason); });
  var error = w.console.error;
  w.console.error = function () {
    errors.push("console.error: " + Array.from(arguments, String).join(" "));
    return error.apply(this, arguments);
  };
}
function blocked(w, errors) {
  // requests for another host (all refused: the network is shut) that fire no error event, such as a
  // CSS url() or a font, are left in the page's resource timing
  for (var r of w.performance.getEntriesByType("resource")) {
    if (/^https?:/.test(r.name) && !errors.some(function (e) { return e.indexOf(r.name) >= 0; })) {
      errors.push("failed to load: " + r.initiatorType + " " + r.name);
    }
  }
}
function load(src, errors) {
  return new Promise(function (done) {
    var f = document.createElement("iframe");
    f.style.width = "1200px"; f.style.height = "800px";
    f.src = src; document.body.appendChild(f);
    var w = f.contentWindow;
    watch(w, errors);
    f.onload = function () {
      if (f.contentWindow !== w) errors.push("console not watched: the page did not keep the iframe's window");
      done(f);
    };
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
  var out = {page: src, images: [], tables: [], errors: []};
  var f = await load(src, out.errors), doc = f.contentDocument;
  for (var img of doc.images) {
    out.images.push(img.complete && img.naturalWidth ? [img.naturalWidth, img.naturalHeight, pixels(img)] : [0, 0, 0]);
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
  blocked(f.contentWindow, out.errors);
  f.remove();
  return out;
}
(async function () {
  var results = [];
  for (var p of PAGES) results.push(await inspect(p));
  document.getElementById("result").textContent = JSON.stringify(results);
})();
</script></body></html>"""


def chromium() -> str | None:
    """The installed Chromium's path, or None (the browser tests then skip)."""
    return next((p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None)


needs_chromium = pytest.mark.skipif(chromium() is None,
                                    reason="no Chromium installed (Debian: apt-get install chromium)")


def browse(pages: list[Path], sort: list[Path], tmp_path: Path) -> list[dict]:
    """Open `pages` one after another in one headless Chromium with every network request refused;
    per page, in order, the harness's findings: {"page": its file: URI, "images": [[width, height,
    pixels not white]] ([0, 0, 0] where it did not decode), "tables": [{"height", "rows", "columns":
    [{"up", "down", "marks"}] (only for the pages in `sort`)}], "errors": [what the console showed
    as an error, one line each]}."""
    harness = tmp_path / "harness.html"
    harness.write_text(HARNESS % {"pages": json.dumps([p.as_uri() for p in pages]),
                                  "sort": json.dumps([p.as_uri() for p in sort])})
    done = subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--allow-file-access-from-files",
         "--proxy-server=127.0.0.1:9", "--proxy-bypass-list=<-loopback>", "--host-resolver-rules=MAP * ~NOTFOUND",
         f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=60000", "--dump-dom", harness.as_uri()],
        capture_output=True, text=True, timeout=180)
    match = re.search(r'<pre id="result">(.*?)</pre>', done.stdout, re.S)
    assert match and match.group(1) != "pending", done.stderr[-2000:]
    return json.loads(html.unescape(match.group(1)))


def console_errors(found: list[dict]) -> dict[str, list[str]]:
    """The pages of a `browse` whose console showed errors, with them: empty when every page was
    clean, so `assert not console_errors(found)` names each fault."""
    return {result["page"]: result["errors"] for result in found if result["errors"]}
