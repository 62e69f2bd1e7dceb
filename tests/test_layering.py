"""The package's rooms and their one-way arrows (ARCHITECTURE.md), read from the source with `ast`,
so that a lazy import inside a function counts as much as one at the top.

    model <- measure <- calibrate <- report, validate <- fleet <- cli

A room imports only rooms to its left (report and validate not each other); a cli module shares
plumbing through cli/common.py only. The package lives in src/chipcal: from the repository root
there is no top-level `model` (or `measure`, ...) to import by mistake."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "chipcal"
# each room's rank: a room may import a room of lower rank; equal ranks are separate rooms
RANK = {"model": 0, "measure": 1, "calibrate": 2, "report": 3, "validate": 3, "fleet": 4, "cli": 5}


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


def room_arrows(package: Path) -> set[tuple[str, str, str]]:
    """(importing room, imported room, module path) for every import between two rooms."""
    arrows = set()
    for path in package.rglob("*.py"):
        parts = path.relative_to(package).parts
        if len(parts) < 2:
            continue
        for name in _imports(path):
            target = name.split(".")
            if target[0] == "chipcal" and len(target) > 1 and target[1] != parts[0]:
                arrows.add((parts[0], target[1], str(path.relative_to(package))))
    return arrows


def upward(arrows) -> list[str]:
    """The arrows that do not point to a room of lower rank."""
    return sorted(f"{where}: {a} imports {b}" for a, b, where in arrows if not RANK[b] < RANK[a])


def test_the_rooms_are_the_package_directories():
    rooms = {p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file()}
    assert rooms == set(RANK)


def test_every_arrow_points_down():
    arrows = room_arrows(PACKAGE)
    assert not upward(arrows)
    # the rooms are connected as drawn: each one above model uses the one below it
    used = {(a, b) for a, b, _ in arrows}
    assert {("measure", "model"), ("calibrate", "measure"), ("report", "calibrate"), ("validate", "calibrate"),
            ("cli", "report"), ("cli", "validate")} <= used


def test_an_upward_import_is_found(tmp_path):
    for room in ("model", "calibrate"):
        (tmp_path / room).mkdir()
        (tmp_path / room / "__init__.py").write_text("")
    (tmp_path / "model" / "bad.py").write_text("def f():\n    from chipcal.calibrate.fits import x\n")
    (tmp_path / "calibrate" / "good.py").write_text("import chipcal.model.bad\n")
    assert upward(room_arrows(tmp_path)) == ["model/bad.py: model imports calibrate"]


@pytest.mark.parametrize("path", sorted((PACKAGE / "cli").glob("*.py")), ids=lambda p: p.name)
def test_cli_modules_import_only_cli_common(path):
    if path.name == "main.py":       # the dispatcher imports the subcommands
        return
    others = {n for n in _imports(path) if n.startswith("chipcal.cli")} - {"chipcal.cli.common"}
    others = {n for n in others if not n.startswith("chipcal.cli.common.")}
    assert not others, f"{path.name} imports {sorted(others)}; shared plumbing belongs in cli/common.py"


def test_no_top_level_room_is_importable_from_the_repository_root():
    """`python -c "import model"` from the root finds no folder of this repository (a module of
    that name installed elsewhere is not ours to refuse)."""
    code = ("import importlib.util as u, json, sys; "
            "print(json.dumps([(s and s.origin) for s in map(u.find_spec, sys.argv[1:])]))")
    done = subprocess.run([sys.executable, "-c", code, *RANK], cwd=ROOT, capture_output=True, text=True, check=True)
    found = [o for o in json.loads(done.stdout) if o and Path(o).resolve().is_relative_to(ROOT)]
    assert not found
