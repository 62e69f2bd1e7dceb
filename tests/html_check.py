"""Checks of a report.html page that do not trust the code that wrote it: a parse with the standard
library's html.parser (every image a decodable PNG data: URI, no URL to another host or file, tags
balanced, every table with one header row and rows of its width), and the sort order read back
from a browser judged by a number parser of its own."""

from __future__ import annotations

import base64
import re
import struct
from dataclasses import dataclass, field
from html.parser import HTMLParser

VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}
URL_ATTRIBUTES = {"src", "href", "srcset", "action", "formaction", "data", "poster", "background", "cite"}
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@dataclass
class ParsedTable:
    head: list[str] = field(default_factory=list)
    rows: list[list[str]] = field(default_factory=list)


class Page(HTMLParser):
    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.images: list[str] = []
        self.urls: list[tuple[str, str, str]] = []
        self.tables: list[ParsedTable] = []
        self.headings: list[str] = []
        self.problems: list[str] = []
        self.csp: str | None = None
        self._stack: list[str] = []
        self._section: str | None = None
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._heading: list[str] | None = None
        self.feed(text)
        self.close()
        if self._stack:
            self.problems.append(f"unclosed: {self._stack}")

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag not in VOID:
            self._stack.append(tag)
        for name, value in attrs.items():
            if name in URL_ATTRIBUTES:
                self.urls.append((tag, name, value or ""))
            if name == "style" and value and "url(" in value:
                self.problems.append(f"style attribute with url(): {value[:60]}")
        if tag == "meta" and (attrs.get("http-equiv") or "").lower() == "content-security-policy":
            self.csp = attrs.get("content")
        if tag == "img":
            self.images.append(attrs.get("src") or "")
        if tag == "link" or (tag == "script" and "src" in attrs):
            self.problems.append(f"<{tag}> loads a resource")
        if tag == "table":
            self.tables.append(ParsedTable())
        elif tag in ("thead", "tbody"):
            self._section = tag
        elif tag == "tr":
            self._row = []
        elif tag in ("th", "td"):
            self._cell = []
        elif re.fullmatch(r"h[1-6]", tag):
            self._heading = []

    def handle_endtag(self, tag):
        if tag in VOID:
            return
        if not self._stack or self._stack[-1] != tag:
            self.problems.append(f"</{tag}> closes <{self._stack[-1] if self._stack else '-'}>")
            return
        self._stack.pop()
        if tag in ("th", "td") and self._row is not None and self._cell is not None:
            self._row.append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._section == "thead":
                self.tables[-1].head = self._row
            else:
                self.tables[-1].rows.append(self._row)
            self._row = None
        elif tag in ("thead", "tbody"):
            self._section = None
        elif re.fullmatch(r"h[1-6]", tag) and self._heading is not None:
            self.headings.append("".join(self._heading).strip())
            self._heading = None

    def handle_data(self, data):
        for part in (self._cell, self._heading):
            if part is not None:
                part.append(data)


def png_size(data: bytes) -> tuple[int, int]:
    """Width and height from the PNG's IHDR chunk (the first, right after the magic)."""
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR", "not a PNG"
    return struct.unpack(">II", data[16:24])


def check_page(text: str) -> Page:
    """Parse `text` and assert what a self-contained, well-formed report page must be."""
    page = Page(text)
    assert not page.problems, page.problems
    assert page.csp and "default-src 'none'" in page.csp and "img-src data:" in page.csp
    for src in page.images:
        assert src.startswith("data:image/png;base64,"), src[:60]
        width, height = png_size(base64.b64decode(src.split(",", 1)[1], validate=True))
        assert width > 100 and height > 100
    for tag, name, value in page.urls:
        if tag == "img":
            continue
        assert not re.match(r"^\s*([a-z][a-z0-9+.-]*:|//)", value, re.I), f"<{tag} {name}={value!r}> leaves the page"
    assert not re.search(r"@import|url\(\s*['\"]?(?!data:)", text), "the style sheet loads something"
    assert not re.search(r"https?://", text), "an absolute URL in the page"
    for t in page.tables:
        assert t.head, "a table without a header row"
        assert all(len(r) == len(t.head) for r in t.rows), f"ragged rows under {t.head}"
    return page


_PREFIX = {"P": 1e15, "T": 1e12, "G": 1e9, "M": 1e6, "k": 1e3, "m": 1e-3, "µ": 1e-6, "n": 1e-9, "p": 1e-12}
_CELL = re.compile(r"([+\-−]?[\d,]+(?:\.\d+)?(?:e[+-]?\d+)?)\s*([PTGMkmµnp]?)([A-Za-z/%²]*)")


def sort_value(cell: str) -> float | None:
    """A cell's number with its SI prefix applied ('1.5 ms' -> 0.0015, '-3.2%' -> -3.2); None: text."""
    m = _CELL.fullmatch(cell.strip())
    if not m or not re.search(r"\d", m.group(1)):
        return None
    value = float(m.group(1).replace("−", "-").replace(",", ""))
    prefix, unit = m.group(2), m.group(3)
    return value * _PREFIX[prefix] if prefix and unit else value


def assert_sorted(cells: list[str], ascending: bool) -> None:
    """Ascending: the numbers first, in order, then text; descending: the reverse. Ties and the
    order among text cells are the browser's business."""
    values = [sort_value(c) for c in (cells if ascending else cells[::-1])]
    numbers = [v for v in values if v is not None]
    first_text = next((i for i, v in enumerate(values) if v is None), len(values))
    assert all(v is None for v in values[first_text:]), f"a number after text: {cells}"
    assert numbers == sorted(numbers), f"not sorted: {cells}"
