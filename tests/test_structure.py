"""Architecture rules that a reader relies on: the twin is reached only as a process, and only the
study's attrs module touches Optuna's user attrs."""

from __future__ import annotations

import ast
from pathlib import Path

import autotune
from tests.conftest import ROOT

PACKAGE = ROOT / "autotune"
TWIN = ROOT / "autotune_twin"


def imported_modules(source: str) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:  # a relative import stays inside its own package
                continue
            if node.module:
                names.add(node.module)
    return names


def top_package(module: str) -> str:
    return module.split(".", 1)[0]


def test_the_twin_is_a_package_of_its_own() -> None:
    assert (TWIN / "__main__.py").is_file()
    assert not (PACKAGE / "twin").exists(), "the twin lives in autotune_twin/, not inside the product"


def test_core_never_imports_the_twin() -> None:
    paths = sorted(PACKAGE.rglob("*.py"))
    assert len(paths) > 20  # the scan reads the product, not an empty folder
    for path in paths:
        offending = {m for m in imported_modules(path.read_text()) if top_package(m) == "autotune_twin"}
        assert not offending, f"{path} imports {offending}"


def test_twin_imports_nothing_of_the_core() -> None:
    paths = sorted(TWIN.rglob("*.py"))
    assert len(paths) > 10
    for path in paths:
        offending = {m for m in imported_modules(path.read_text()) if top_package(m) == "autotune"}
        assert not offending, f"{path} imports {offending}"


def test_the_import_scan_sees_both_directions() -> None:
    """The scan itself: an import of the twin, and one of the product, are found."""
    source = "import autotune_twin.physics\nfrom autotune.space import Condition\nfrom . import sibling\n"
    found = imported_modules(source)
    assert {top_package(m) for m in found} == {"autotune_twin", "autotune"}


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
        if path in (attrs_module, PACKAGE / "study" / "snapshot.py"):  # the snapshot copies stored rows, names no key
            continue
        assert not attr_uses(path), f"{path} touches Optuna user attrs: go through autotune.study.attrs"


FLAT_MODULES_MOVED = ["measure", "report", "htmlreport", "report_summary", "report_figures", "dashboard", "workload",
                      "protocol", "agreement", "breakeven"]  # fmt: skip


def test_measurement_and_what_a_person_reads_are_packages() -> None:
    """The flat modules now live in autotune/measure/, autotune/report/ and autotune/study/: no copy is left."""
    for name in FLAT_MODULES_MOVED:
        assert not (PACKAGE / f"{name}.py").exists(), f"autotune/{name}.py was moved into a package"
    for package in ("measure", "report"):
        assert (PACKAGE / package / "__init__.py").is_file(), f"autotune/{package}/ is a package"


# What only a pre-launch rule asks: whether a plan fits, failed alike, decodes as a measured one, or
# sits inside what memory deaths left open.
DECIDING_CALLS = {"predict", "predicted_failure", "rate_key", "fraction_window", "excess", "alike_sizing"}
RULES = PACKAGE / "study" / "rules"


def calls(path: Path) -> set[str]:
    """The names of the functions and methods a module calls."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Call):
            if isinstance(node.func, ast.Name):
                found.add(node.func.id)
            elif isinstance(node.func, ast.Attribute):
                found.add(node.func.attr)
    return found


def defined(path: Path) -> set[str]:
    """The names of the functions and methods a module defines."""
    return {node.name for node in ast.walk(ast.parse(path.read_text())) if isinstance(node, ast.FunctionDef)}


def test_only_the_rules_decide_before_a_launch() -> None:
    assert calls(RULES / "memory.py") & DECIDING_CALLS, "the scan sees a rule's deciding call"
    for path in PACKAGE.rglob("*.py"):
        if RULES in path.parents:
            continue
        deciding = calls(path) & DECIDING_CALLS - defined(path)  # where they are defined, they build on each other
        assert not deciding, f"{path} decides before a launch ({deciding}): that is a rule's job"


def test_every_rule_is_a_module_of_its_own_in_the_stated_order() -> None:
    from autotune.study.rules import RULE_NAMES

    modules = {p.stem for p in RULES.glob("*.py")} - {"__init__"}
    assert modules == {"duplicate", "same_rate", "served_sizing", "fraction_inside", "make_room", "named_failure",
                       "memory"}  # fmt: skip
    assert RULE_NAMES == ("duplicate", "same-rate", "served-sizing", "fraction-inside", "make-room", "named-failure",
                          "memory")  # fmt: skip


def test_the_product_never_imports_the_benchmarks() -> None:
    for path in PACKAGE.rglob("*.py"):
        offending = {m for m in imported_modules(path.read_text()) if top_package(m) == "benchmarks"}
        assert not offending, f"{path} imports {offending}"
