"""Architecture rules that a reader relies on: the twin is reached only as a process."""

from __future__ import annotations

import ast
from pathlib import Path

import autotune
from tests.conftest import ROOT

PACKAGE = ROOT / "autotune"


def imported_modules(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_core_never_imports_the_twin() -> None:
    for path in PACKAGE.rglob("*.py"):
        if "twin" in path.relative_to(PACKAGE).parts:
            continue
        offending = {m for m in imported_modules(path) if m.startswith("autotune.twin")}
        assert not offending, f"{path} imports {offending}"


def test_twin_imports_nothing_of_the_core() -> None:
    for path in (PACKAGE / "twin").rglob("*.py"):
        offending = {
            m for m in imported_modules(path) if m.startswith("autotune") and not m.startswith("autotune.twin")
        }
        assert not offending, f"{path} imports {offending}"


def test_public_surface_matches_all() -> None:
    for name in autotune.__all__:
        assert hasattr(autotune, name), name
    public = {n for n in vars(autotune) if not n.startswith("_") and n not in ("annotations",)}
    modules = {n for n in public if type(getattr(autotune, n)).__name__ == "module"}
    assert public - modules == set(autotune.__all__) - {"__version__"}
