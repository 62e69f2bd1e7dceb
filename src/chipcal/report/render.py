"""A report as a list of blocks, rendered to markdown, plain text or one self-contained HTML page.

The calibration report, the run comparison and the results index say what they say once, as
blocks (headings, paragraphs, bullet lists, tables, figures) whose text may carry three inline
markdown marks: **bold**, `code` and [text](relative link). `markdown`, `text` and `html` render
the same blocks, so report.md and report.html cannot drift apart.

The HTML page needs no network: figures are PNG bytes embedded as data: URIs, the style sheet and
the table-sorting script are inline, and nothing refers to another host.
"""

from __future__ import annotations

import base64
import html
import re
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

TEXT_WIDTH = 120          # a terminal line (issue 39: tables and notes fit 120 columns)


@dataclass(frozen=True)
class Heading:
    text: str
    level: int = 2


@dataclass(frozen=True)
class Paragraph:
    text: str


@dataclass(frozen=True)
class Bullets:
    items: tuple[str, ...]


@dataclass(frozen=True)
class Table:
    headers: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Figures:
    """Plots by file name with their captions: links in markdown, embedded images in HTML."""

    items: tuple[tuple[str, str], ...]


Block = Heading | Paragraph | Bullets | Table | Figures


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> Table:
    return Table(tuple(headers), tuple(tuple(r) for r in rows))


# --- markdown ----------------------------------------------------------------------------------


def _md_table(t: Table) -> str:
    out = ["| " + " | ".join(t.headers) + " |", "|" + "---|" * len(t.headers)]
    return "\n".join(out + ["| " + " | ".join(r) + " |" for r in t.rows])


def markdown(blocks: Sequence[Block]) -> str:
    """The blocks as markdown, separated by blank lines."""
    parts = []
    for b in blocks:
        if isinstance(b, Heading):
            parts.append("#" * b.level + " " + b.text)
        elif isinstance(b, Paragraph):
            parts.append(b.text)
        elif isinstance(b, Bullets):
            parts.append("\n".join(f"- {item}" for item in b.items))
        elif isinstance(b, Table):
            parts.append(_md_table(b))
        elif isinstance(b, Figures):
            parts.append("\n".join(f"- [{name}]({name}): {caption}" for name, caption in b.items))
    return "\n\n".join(p for p in parts if p) + "\n"


# --- plain text (terminal) -----------------------------------------------------------------------

_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_CODE = re.compile(r"`([^`]+)`")


def plain(text: str) -> str:
    """Inline marks removed: a link keeps its text, bold and code their content."""
    return _CODE.sub(r"\1", _BOLD.sub(r"\1", _LINK.sub(r"\1", text)))


def wrap(text: str, width: int = TEXT_WIDTH, indent: str = "") -> str:
    """`text` (inline marks removed) folded to `width` columns: its first line keeps the text's
    leading spaces, continuation lines start with `indent`."""
    lead = text[:len(text) - len(text.lstrip())]
    return textwrap.fill(" ".join(plain(text).split()), width, initial_indent=lead, subsequent_indent=indent,
                         break_long_words=False, break_on_hyphens=False)


def _is_number(cell: str) -> bool:
    return bool(_NUMBER.match(cell.strip()))


_NUMBER = re.compile(r"^[+\-−]?\d[\d,]*(\.\d+)?(e[+-]?\d+)?\s*[^\s]{0,8}$")


def text_table(t: Table) -> str:
    """Aligned columns, numbers right-aligned, a dashed rule under the header."""
    rows = [tuple(plain(c) for c in r) for r in t.rows]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(t.headers)]
    numeric = [bool(rows) and all(_is_number(r[i]) or r[i] == "-" for r in rows) for i in range(len(t.headers))]

    def line(cells) -> str:
        return "  ".join(c.rjust(w) if n else c.ljust(w) for c, w, n in zip(cells, widths, numeric, strict=True)).rstrip()

    return "\n".join([line(t.headers), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def text(blocks: Sequence[Block], width: int = TEXT_WIDTH) -> str:
    """The blocks for a terminal: paragraphs and bullets folded to `width`, headings underlined."""
    parts = []
    for b in blocks:
        if isinstance(b, Heading):
            title = plain(b.text)
            parts.append(title + "\n" + ("=" if b.level == 1 else "-") * min(len(title), width))
        elif isinstance(b, Paragraph):
            parts.append(wrap(b.text, width))
        elif isinstance(b, Bullets):
            parts.append("\n".join(wrap(f"- {item}", width, "  ") for item in b.items))
        elif isinstance(b, Table):
            parts.append(text_table(b))
        elif isinstance(b, Figures):
            parts.append("\n".join(wrap(f"- {name}: {caption}", width, "  ") for name, caption in b.items))
    return "\n\n".join(p for p in parts if p) + "\n"


# --- HTML -------------------------------------------------------------------------------------------


def inline_html(text: str) -> str:
    """Escaped text with the inline marks as <strong>, <code> and <a>."""
    out = html.escape(text, quote=True)
    out = _CODE.sub(r"<code>\1</code>", out)
    out = _BOLD.sub(r"<strong>\1</strong>", out)
    return _LINK.sub(r'<a href="\2">\1</a>', out)


def _html_table(t: Table) -> str:
    head = "".join(f'<th scope="col">{inline_html(h)}</th>' for h in t.headers)
    body = "\n".join("<tr>" + "".join(f"<td>{inline_html(c)}</td>" for c in r) + "</tr>" for r in t.rows)
    return f'<table class="sortable">\n<thead><tr>{head}</tr></thead>\n<tbody>\n{body}\n</tbody>\n</table>'


def _html_figures(f: Figures, images: Mapping[str, bytes]) -> str:
    out = []
    for name, caption in f.items:
        if name in images:
            data = base64.b64encode(images[name]).decode("ascii")
            out.append(f'<figure><img src="data:image/png;base64,{data}" alt="{html.escape(caption)}">'
                       f"<figcaption>{html.escape(caption)}</figcaption></figure>")
        else:
            out.append(f"<p>{html.escape(name)}: {html.escape(caption)} (no plot)</p>")
    return "\n".join(out)


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 75em; padding: 0 1em; line-height: 1.45; }
table { border-collapse: collapse; margin: 0.8em 0; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.5em; text-align: left; vertical-align: top; }
th { background: #f2f2f2; cursor: pointer; user-select: none; }
th[aria-sort="ascending"]::after { content: " \\25B2"; }
th[aria-sort="descending"]::after { content: " \\25BC"; }
code { background: #f4f4f4; padding: 0 0.2em; }
figure { margin: 1em 0; }
figure img { max-width: 100%; }
figcaption { font-size: 0.9em; color: #444; }
"""

# Click a column header to sort its table by it (again: the other way). A cell that is a number
# with an optional SI prefix before its unit ("3.2 ms", "-12.5%", "1.1 TFLOP/s") sorts by value;
# other cells by text, after the numbers.
_SCRIPT = r"""
(function () {
  var SCALE = {P: 1e15, T: 1e12, G: 1e9, M: 1e6, k: 1e3, m: 1e-3, "\u00b5": 1e-6, n: 1e-9, p: 1e-12};
  var NUM = /^([+\-\u2212]?\d[\d,]*(?:\.\d+)?(?:e[+\-]?\d+)?)\s*([PTGMkm\u00b5np]?)([A-Za-z\/%\u00b2]*)$/;
  function key(cell) {
    var t = cell ? cell.textContent.trim() : "";
    var m = NUM.exec(t);
    if (!m) return {s: t};
    var v = parseFloat(m[1].replace("\u2212", "-").replace(/,/g, ""));
    return {n: m[2] && m[3] ? v * SCALE[m[2]] : v};
  }
  function cmp(a, b) {
    if ("n" in a && "n" in b) return a.n - b.n;
    if ("n" in a) return -1;
    if ("n" in b) return 1;
    return a.s.localeCompare(b.s);
  }
  document.querySelectorAll("table.sortable th").forEach(function (th) {
    th.addEventListener("click", function () {
      var tbl = th.closest("table"), body = tbl.tBodies[0], i = th.cellIndex;
      var up = th.getAttribute("aria-sort") !== "ascending";
      tbl.querySelectorAll("th").forEach(function (h) { h.removeAttribute("aria-sort"); });
      th.setAttribute("aria-sort", up ? "ascending" : "descending");
      var rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) { return cmp(key(a.cells[i]), key(b.cells[i])) * (up ? 1 : -1); });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
})();
"""


# The page may load nothing from anywhere: images only from data: URIs, style and script only inline.
_POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'unsafe-inline'"


def html_page(title: str, blocks: Sequence[Block], images: Mapping[str, bytes] | None = None) -> str:
    """One self-contained HTML page: inline style and script, figures as data: URIs."""
    images = images or {}
    body = []
    for b in blocks:
        if isinstance(b, Heading):
            body.append(f"<h{b.level}>{inline_html(b.text)}</h{b.level}>")
        elif isinstance(b, Paragraph):
            body.append(f"<p>{inline_html(b.text)}</p>")
        elif isinstance(b, Bullets) and b.items:
            body.append("<ul>\n" + "\n".join(f"<li>{inline_html(i)}</li>" for i in b.items) + "\n</ul>")
        elif isinstance(b, Table):
            body.append(_html_table(b))
        elif isinstance(b, Figures):
            body.append(_html_figures(b, images))
    return _one_line("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
            f'<meta http-equiv="Content-Security-Policy" content="{_POLICY}">\n'
            f"<title>{html.escape(title)}</title>\n<style>{_STYLE}</style>\n</head>\n<body>\n"
            + "\n".join(body) + f"\n<script>{_SCRIPT}</script>\n</body>\n</html>\n")


def _one_line(page: str) -> str:
    """The page on one line, its lines' indentation dropped (no <pre> and no line comment in it, so
    the meaning is the same): a generated page is data, and a tool that counts repeated source
    lines (`duplicates`) passes over lines this long instead of pairing every report with every other."""
    return " ".join(line.strip() for line in page.splitlines() if line.strip()) + "\n"
