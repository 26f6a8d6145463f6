"""Architecture rules that a reader relies on: the twin is reached only as a process, and only the
study's attrs module touches Optuna's user attrs."""

from __future__ import annotations

import ast
import inspect
import io
import re
import tokenize
from collections.abc import Collection, Sequence
from pathlib import Path

import autotune
from tests.conftest import ROOT

PACKAGE = ROOT / "autotune"
TWIN = ROOT / "autotune_twin"
PASS_MODEL = ROOT / "passmodel"


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


def test_the_pass_model_imports_neither_the_product_nor_the_twin() -> None:
    """Both import the pass model (``passmodel/``); it stands alone, so neither reaches the other through it."""
    paths = sorted(PASS_MODEL.rglob("*.py"))
    assert len(paths) > 5
    for path in paths:
        offending = {m for m in imported_modules(path.read_text()) if top_package(m) in ("autotune", "autotune_twin")}
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
    assert modules == {"duplicate", "same_rate", "served_sizing", "fraction_inside", "make_room", "context_fit",
                       "named_failure", "memory"}  # fmt: skip
    assert RULE_NAMES == ("duplicate", "same-rate", "served-sizing", "fraction-inside", "make-room", "context-fit",
                          "named-failure", "memory")  # fmt: skip


def test_the_product_never_imports_the_benchmarks() -> None:
    for path in PACKAGE.rglob("*.py"):
        offending = {m for m in imported_modules(path.read_text()) if top_package(m) == "benchmarks"}
        assert not offending, f"{path} imports {offending}"


# ---------------------------------------------------------------- engines own their knowledge

ENGINES = PACKAGE / "engines"


def engine_flags() -> set[str]:
    """Every flag an engine declares as its own knowledge: its draft spelling, its schedule's flags,
    the flags that size its memory."""
    from autotune.engines import engine_names, get_engine

    flags: set[str] = set()
    for name in engine_names():
        engine = get_engine(name)
        if engine.speculation is not None:
            flags |= engine.speculation.flags()
        if engine.schedule_form is not None:
            flags |= engine.schedule_form.per_tier | {engine.schedule_form.running_flag or ""}
        if engine.memory_rules is not None:
            flags.add(engine.memory_rules.fraction_flag)
        flags |= {engine.verdict_memory_flag or "", *engine.memory_sizing_flags}
    return flags - {""}


def engine_knowledge(source: str, names: Collection[str], flags: Collection[str]) -> list[str]:
    """What a module says that only an engine should: a string that is an engine's name, and an
    engine's flag (or any ``speculative-`` flag) in a string or a comment."""
    spelled = "|".join(map(re.escape, sorted(flags, key=len, reverse=True)))
    flag = re.compile(rf"(?<![\w-])(?:{spelled}|speculative-[a-z][\w.-]*)(?![\w-])")
    found = [
        f"line {node.lineno}: engine name {node.value!r}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names
    ]
    texts = {tokenize.STRING, tokenize.COMMENT, getattr(tokenize, "FSTRING_MIDDLE", tokenize.STRING)}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type in texts:
            found += [f"line {token.start[0]}: flag {m.group(0)}" for m in flag.finditer(token.string)]
    return sorted(found, key=lambda f: int(f.split(":")[0].removeprefix("line ")))


def test_the_engine_scan_finds_a_name_and_a_flag() -> None:
    source = 'x = "sglang"\ny = f"--{a} mem-fraction-static"  # speculative-num-steps\nz = "SGLang"\n'
    found = engine_knowledge(source, {"sglang"}, {"mem-fraction-static"})
    assert found == [
        "line 1: engine name 'sglang'",
        "line 2: flag mem-fraction-static",
        "line 2: flag speculative-num-steps",
    ]


def test_no_module_outside_the_engines_names_an_engine_or_one_of_its_flags() -> None:
    from autotune.engines import engine_names

    names, flags = engine_names(), engine_flags()
    assert {"sglang", "vllm", "llamacpp"} <= set(names)
    assert {"mem-fraction-static", "speculative-num-steps", "num-speculative-tokens", "spec-draft-n-max"} <= flags
    for name in names:  # the scan sees what each engine's own module says
        assert engine_knowledge((ENGINES / f"{name}.py").read_text(), names, flags), name
    outside = [p for p in sorted(PACKAGE.rglob("*.py")) if ENGINES not in p.parents]
    assert len(outside) > 50  # the scan reads the product, not an empty folder
    offending = {}
    for path in outside:
        found = engine_knowledge(path.read_text(), names, flags)
        if found:
            offending[str(path.relative_to(ROOT))] = found
    assert not offending, f"engine knowledge outside autotune/engines/: {offending}"


def test_no_module_outside_the_engines_imports_one_engine() -> None:
    """The study reaches an engine through the registry (:func:`autotune.engines.get_engine`) only."""
    from autotune.engines import engine_names

    own = {f"autotune.engines.{name}" for name in engine_names()}
    outside = [p for p in sorted(PACKAGE.rglob("*.py")) if ENGINES not in p.parents]
    assert len(outside) > 50
    assert own & imported_modules("from autotune.engines.sglang import STEPS\n"), "the scan sees such an import"
    for path in outside:
        assert not own & imported_modules(path.read_text()), f"{path} imports an engine's module"


# ---------------------------------------------------------------- public Optuna only


def optuna_private_names() -> set[str]:
    """The private attributes and methods Optuna's own classes define (``self._x``, ``def _x``)."""
    import optuna

    names: set[str] = set()
    for path in Path(optuna.__file__).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, ast.ClassDef):
                names |= {f.name for f in node.body if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef))}
    return {n for n in names if n.startswith("_") and not n.endswith("__")}


def optuna_private_uses(source: str, private: Collection[str], own: Collection[str]) -> list[str]:
    """A private Optuna module imported, or an attribute that only Optuna defines privately read."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        modules: list[str] = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            modules = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
        private_modules = [
            m for m in modules if top_package(m) == "optuna" and any(p.startswith("_") for p in m.split("."))
        ]
        found += [f"line {node.lineno}: imports {m}" for m in private_modules]
        if isinstance(node, ast.Attribute) and node.attr in private and node.attr not in own:
            found.append(f"line {node.lineno}: .{node.attr}")
        elif isinstance(node, ast.Constant) and node.value in private and node.value not in own:  # getattr(x, "_y")
            found.append(f"line {node.lineno}: {node.value!r}")
    return found


def own_private_names(paths: Sequence[Path]) -> set[str]:
    """The private names autotune defines itself (its own ``self._x`` and ``def _x``)."""
    names: set[str] = set()
    for path in paths:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                names.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                names.add(node.name)
    return names


def test_the_optuna_scan_finds_a_private_attribute_and_module() -> None:
    source = (
        "import optuna.storages._rdb.models\nfrom optuna.storages import _heartbeat\nx = study._storage\n"
        "y = getattr(x, '_backend', x)\n"
    )
    found = optuna_private_uses(source, {"_storage", "_backend"}, set())
    assert found == [
        "line 1: imports optuna.storages._rdb.models",
        "line 2: imports optuna.storages._heartbeat",
        "line 3: ._storage",
        "line 4: '_backend'",
    ]


def test_the_product_uses_public_optuna_only() -> None:
    private = optuna_private_names()
    assert {"_storage", "_trial_id", "_backend", "_get_stale_trial_ids", "_study_id"} <= private
    paths = sorted(PACKAGE.rglob("*.py"))
    assert len(paths) > 50
    own = own_private_names(paths)
    assert not {"_storage", "_trial_id", "_backend"} & own  # autotune's own private names are its business
    offending = {}
    for path in paths:
        found = optuna_private_uses(path.read_text(), private, own)
        if found:
            offending[str(path.relative_to(ROOT))] = found
    assert not offending, f"Optuna's private parts used: {offending}"


def test_only_the_snapshot_reads_optuna_s_tables() -> None:
    """The one declared exception: study/snapshot.py reads Optuna's SQLite tables directly (``show``
    in well under a second on a large study); test_study_snapshot.py fails when Optuna's schema moves."""
    from optuna.storages._rdb import models

    tables = {t for t in models.BaseModel.metadata.tables if "_" in t}  # "trials", "studies" are words too
    table = re.compile(r"\b(?:" + "|".join(sorted(tables)) + r")\b")
    snapshot = PACKAGE / "study" / "snapshot.py"
    assert table.search(snapshot.read_text()), "the scan sees the snapshot's SQL"
    for path in PACKAGE.rglob("*.py"):
        if path != snapshot:
            assert not table.search(path.read_text()), f"{path} reads Optuna's tables: only snapshot.py may"


README_MAX_LINES = 90


def test_the_readme_is_a_page() -> None:
    """README is what a newcomer reads in two minutes; the rest lives in docs/."""
    lines = (ROOT / "README.md").read_text().splitlines()
    assert "<!-- readme-commands -->" in lines  # the scan reads the real README
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines (at most {README_MAX_LINES})"


def test_the_readme_links_resolve() -> None:
    """Every relative link of README.md names a file of the repository (anchors aside)."""
    targets = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", (ROOT / "README.md").read_text())
    local = [t for t in targets if "://" not in t]
    assert len(local) > 5
    missing = [t for t in local if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


CLI = PACKAGE / "cli"
CLI_COMMANDS = ["study", "show", "export", "confirm", "check", "bench", "gpus", "dashboard", "report"]
CLI_MAX_MODULE_LINES = 600


def long_functions(source: str, limit: int) -> list[str]:
    """Functions (methods and nested ones too) longer than ``limit`` lines, from ``def`` to their last line."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                found.append(f"{node.name} ({length} lines)")
    return found


def test_the_length_scan_counts_a_function_s_lines() -> None:
    source = "def short():\n    pass\n\n\nclass A:\n    def long(self):\n" + "        x = 1\n" * 60
    assert long_functions(source, 60) == ["long (61 lines)"]


def test_the_cli_is_a_module_per_command() -> None:
    for command in CLI_COMMANDS:
        assert (CLI / f"{command}.py").is_file(), f"autotune {command} has no module of its own in autotune/cli/"
    assert not (PACKAGE / "cli.py").exists()
    for path in sorted(CLI.glob("*.py")):
        lines = len(path.read_text().splitlines())
        assert lines <= CLI_MAX_MODULE_LINES, f"{path} has {lines} lines (at most {CLI_MAX_MODULE_LINES})"


# ---------------------------------------------------------------- what can be counted (issue 45)

MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 60
STUDY_RUNNER_MAX_METHODS = 20
TRIAL_RECORD_MAX_FIELDS = 12


def long_modules(paths: Sequence[Path], limit: int) -> list[tuple[Path, int]]:
    """Modules longer than ``limit`` lines, with their lengths."""
    lengths = [(path, len(path.read_text().splitlines())) for path in paths]
    return [(path, n) for path, n in lengths if n > limit]


def report(rule: str, violations: Sequence[str]) -> str:
    """The violations of ``rule``, one a line: printed, and the assertion's message."""
    text = f"{rule}:\n" + "\n".join(f"  {v}" for v in violations)
    if violations:
        print(text)
    return text


def test_the_module_scan_counts_a_module_s_lines(tmp_path: Path) -> None:
    short, long = tmp_path / "short.py", tmp_path / "long.py"
    short.write_text("x = 1\n" * 600)
    long.write_text("x = 1\n" * 601)
    assert long_modules([short, long], 600) == [(long, 601)]


def assert_no_module_over_the_limit(paths: Sequence[Path], *, fewest: int) -> None:
    """No module of ``paths`` over :data:`MAX_MODULE_LINES`; more than ``fewest`` paths, so that the scan
    is shown to read the folder, not an empty one."""
    assert len(paths) > fewest
    too_long = [f"{path.relative_to(ROOT)} ({n} lines)" for path, n in long_modules(paths, MAX_MODULE_LINES)]
    assert not too_long, report(f"{len(too_long)} modules over {MAX_MODULE_LINES} lines", too_long)


def test_no_module_of_autotune_is_over_six_hundred_lines() -> None:
    assert_no_module_over_the_limit(sorted(PACKAGE.rglob("*.py")), fewest=50)


def test_no_module_of_the_pass_model_is_over_six_hundred_lines() -> None:
    """The pass model is a part of the product both packages import (issue 53), held to the product's rule."""
    assert_no_module_over_the_limit(sorted(PASS_MODEL.rglob("*.py")), fewest=4)


BENCHMARKS = ROOT / "benchmarks"


def test_no_module_of_the_benchmarks_is_over_six_hundred_lines() -> None:
    assert_no_module_over_the_limit(sorted(BENCHMARKS.glob("*.py")), fewest=15)


def benchmark_imports(source: str) -> set[str]:
    """The benchmarks modules a module imports, at its top or inside a function (a late import hides
    a circle; it does not remove it)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[1] for a in node.names if a.name.startswith("benchmarks."))
        elif isinstance(node, ast.ImportFrom) and node.module == "benchmarks":
            names.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("benchmarks."):
            names.add(node.module.split(".")[1])
    return names


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each circle of ``graph`` (module -> the modules it imports), once, as the path that closes it."""
    cycles: list[list[str]] = []
    done: set[str] = set()

    def visit(module: str, path: list[str]) -> None:
        if module in path:
            cycles.append(path[path.index(module) :] + [module])
            return
        if module in done:
            return
        for imported in sorted(graph.get(module, ())):
            visit(imported, [*path, module])
        done.add(module)

    for module in sorted(graph):
        visit(module, [])
    return cycles


def test_the_cycle_scan_finds_a_late_import_circle() -> None:
    late = "def f() -> None:\n    from benchmarks import b  # late\n"
    graph = {"a": benchmark_imports(late), "b": benchmark_imports("from benchmarks.a import f\n"), "c": {"a"}}
    assert import_cycles(graph) == [["a", "b", "a"]]
    assert import_cycles({"a": {"b"}, "b": set()}) == []


def test_the_benchmarks_import_no_circle() -> None:
    graph = {path.stem: benchmark_imports(path.read_text()) for path in sorted(BENCHMARKS.glob("*.py"))}
    assert "nights" in graph["search_efficiency"]  # the scan reads the real imports
    cycles = [" -> ".join(cycle) for cycle in import_cycles(graph)]
    assert not cycles, report(f"{len(cycles)} import circles in benchmarks/", cycles)


def test_no_function_of_autotune_is_over_sixty_lines() -> None:
    paths = sorted(PACKAGE.rglob("*.py"))
    assert len(paths) > 50
    too_long = [
        f"{path.relative_to(ROOT)}: {f}" for path in paths for f in long_functions(path.read_text(), MAX_FUNCTION_LINES)
    ]
    assert not too_long, report(f"{len(too_long)} functions over {MAX_FUNCTION_LINES} lines", too_long)


def test_the_study_runner_keeps_the_search_in_twenty_methods() -> None:
    from autotune.study.runner import StudyRunner

    methods = sorted(
        n
        for n, v in vars(StudyRunner).items()
        if inspect.isfunction(v) or isinstance(v, (property, staticmethod, classmethod))
    )
    assert "objective" in methods  # the count reads the runner's own methods
    assert len(methods) <= STUDY_RUNNER_MAX_METHODS, report(
        f"StudyRunner has {len(methods)} methods (at most {STUDY_RUNNER_MAX_METHODS})", methods
    )


def test_a_trial_record_is_a_few_typed_parts() -> None:
    from autotune.records import TrialRecord

    fields = list(TrialRecord.model_fields)
    assert "number" in fields
    assert len(fields) <= TRIAL_RECORD_MAX_FIELDS, report(
        f"TrialRecord has {len(fields)} top-level fields (at most {TRIAL_RECORD_MAX_FIELDS})", fields
    )


def test_the_race_is_its_own_module() -> None:
    assert {"race_finalists", "race_schedule", "plan_race", "race_budget"} <= defined(PACKAGE / "study" / "race.py")
    assert not (PACKAGE / "study" / "schedule_race.py").exists(), "the schedule's race is in study/race.py"


def test_a_trial_prints_flat_with_every_part_s_fields() -> None:
    from autotune.records import FLAT_ORDER, PARTS, TrialRecord

    record = TrialRecord(number=0, state="COMPLETE", outcome="ok")
    printed = list(record.model_dump(mode="json"))
    inner = {name for part in PARTS for name in type(getattr(record, part)).model_fields}
    own = set(TrialRecord.model_fields) - set(PARTS)
    assert printed == list(FLAT_ORDER) and set(printed) == inner | own  # no part's field left unprinted
