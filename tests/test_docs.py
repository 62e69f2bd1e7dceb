"""The docs stay reference pages of readable size, and their links resolve.

Each page under docs/ says how the tool works and how to use it in at most about 15 KB; experiments
and their outcomes are dated files under docs/findings/, indexed in its README and linked from the
reference page they bear on (issue 39). Links are checked the way GitHub renders them: a relative
target must exist, and an anchor must be the slug of a heading in the target file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
FINDINGS = DOCS / "findings"
PAGE_LIMIT_BYTES = 15_500                       # "at most about 15 KB"; pages aim at 15,000

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^(```|~~~)")


def _prose(path: Path) -> str:
    """The file without its fenced and indented code blocks (links there are not links)."""
    out, fenced = [], False
    for line in path.read_text(encoding="utf-8").splitlines():
        if FENCE.match(line.lstrip()):
            fenced = not fenced
            continue
        if not fenced and not line.startswith("    "):
            out.append(line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for line in _prose(path).splitlines():
        m = re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
        if not m:
            continue
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", ROOT / "ARCHITECTURE.md", *sorted(DOCS.rglob("*.md"))]


def broken_links(path: Path) -> list[str]:
    broken = []
    for target in LINK.findall(_prose(path)):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):        # https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target} (no such file)")
        elif anchor and dest.is_file() and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target} (no heading #{anchor} in {dest.name})")
    return broken


def test_slug_matches_githubs_rule():
    # worked out by hand from GitHub's rendering of these headings
    assert slug("The fit (`chipcal validate --fit`)") == "the-fit-chipcal-validate---fit"
    assert slug("3b. Layout passes and oneDNN's per-call costs") == "3b-layout-passes-and-onednns-per-call-costs"
    assert slug("Power-limited clock (DVFS)") == "power-limited-clock-dvfs"


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "a.md").write_text("# Top\n\n## Known limits\n\n[ok](a.md#known-limits) [bad](a.md#limits) "
                                   "[gone](b.md) [web](https://example.org)\n\n    [code](c.md)\n")
    assert broken_links(tmp_path / "a.md") == ["a.md#limits (no heading #limits in a.md)", "b.md (no such file)"]


@pytest.mark.parametrize("page", sorted(DOCS.glob("*.md")), ids=lambda p: p.name)
def test_reference_page_is_at_most_about_15_kb(page):
    size = page.stat().st_size
    assert size <= PAGE_LIMIT_BYTES, (f"{page.name} is {size:,} bytes: move experiments to docs/findings/ "
                                      f"or split the page by topic")


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(path):
    assert broken_links(path) == []


def test_every_finding_is_dated_indexed_and_linked_both_ways():
    index = (FINDINGS / "README.md").read_text(encoding="utf-8")
    reference = "\n".join(p.read_text(encoding="utf-8") for p in DOCS.glob("*.md"))
    findings = sorted(FINDINGS.glob("*.md"))
    assert len(findings) > 1
    for f in findings:
        if f.name == "README.md":
            continue
        assert re.match(r"^\d{4}-\d{2}-\d{2}-[a-z0-9-]+\.md$", f.name), f.name
        text = f.read_text(encoding="utf-8")
        assert text.startswith("# "), f"{f.name}: no title line"
        assert f"]({f.name})" in index, f"{f.name} is not in docs/findings/README.md"
        assert re.search(r"\]\(\.\./[a-z_-]+\.md", text), f"{f.name} links no reference page"
        assert f"findings/{f.name}" in reference, f"no reference page links {f.name}"


# a file of the package named by its path from the repository root, and one named without it
PACKAGE_PATH = re.compile(r"src/chipcal/[\w/.*-]*[\w*/]")
ROOMLESS_PATH = re.compile(r"(?<![\w/.-])(?:model|measure|calibrate|report|validate|cli)/[\w/]+\.(?:py|toml|csv|json)\b")


def stale_paths(path: Path) -> list[str]:
    """Paths in `path` (code blocks included) to package files that do not exist, and paths
    that name a room without src/chipcal/ in front (the layout before issue 51)."""
    text = path.read_text(encoding="utf-8")
    missing = [p for p in PACKAGE_PATH.findall(text) if not list(ROOT.glob(p.rstrip("/")))]
    return missing + ROOMLESS_PATH.findall(text)


def test_a_stale_path_is_found(tmp_path):
    page = tmp_path / "a.md"
    page.write_text("`src/chipcal/model/power.py` `src/chipcal/model/gone.py` (model/tdp.py) model/batch size\n")
    assert stale_paths(page) == ["src/chipcal/model/gone.py", "model/tdp.py"]


@pytest.mark.parametrize("path", markdown_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_paths_to_the_package_exist(path):
    assert stale_paths(path) == []
