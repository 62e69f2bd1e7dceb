"""The layout's import rules (brief): cli modules share plumbing through cli/common.py only;
measure and model never import calibrate or cli. Read from the source with `ast`, so a lazy
import inside a function counts as much as one at the top."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.name for a in node.names)
    return names


@pytest.mark.parametrize("path", sorted((ROOT / "cli").glob("*.py")), ids=lambda p: p.name)
def test_cli_modules_import_only_cli_common(path):
    if path.name == "main.py":       # the dispatcher imports the subcommands
        return
    others = {n for n in _imports(path) if n.startswith("chipcal.cli")} - {"chipcal.cli.common"}
    others = {n for n in others if not n.startswith("chipcal.cli.common.")}
    assert not others, f"{path.name} imports {sorted(others)}; shared plumbing belongs in cli/common.py"


@pytest.mark.parametrize("package", ["measure", "model"])
def test_measure_and_model_never_import_calibrate_or_cli(package):
    bad = {f"{p.relative_to(ROOT)}: {n}" for p in (ROOT / package).rglob("*.py") for n in _imports(p)
           if n.startswith(("chipcal.calibrate", "chipcal.cli"))}
    assert not bad
