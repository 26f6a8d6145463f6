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


ATTRS_NAMES = {"user_attrs", "set_user_attr", "set_trial_user_attr"}


def attr_uses(path: Path) -> set[str]:
    """Optuna user-attr access in a module: attributes, methods and keyword arguments of that name."""
    used: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and node.attr in ATTRS_NAMES:
            used.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg in ATTRS_NAMES:
            used.add(node.arg)
    return used


def test_only_the_attrs_module_touches_user_attrs() -> None:
    attrs_module = PACKAGE / "study" / "attrs.py"
    assert attr_uses(attrs_module), "the attrs module should be where user attrs are read and written"
    for path in PACKAGE.rglob("*.py"):
        if path == attrs_module or "twin" in path.relative_to(PACKAGE).parts:
            continue
        assert not attr_uses(path), f"{path} touches Optuna user attrs: go through autotune.study.attrs"
