"""Shared fixtures: paths of the shipped files and a clean studies folder per test."""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPACES = ROOT / "search_spaces"
TWIN_SPACE = SPACES / "qwen3.6-27b-2xa6000-twin.yaml"
REAL_SPACE = SPACES / "qwen3.6-27b-2xa6000.yaml"


def load_benchmark(name: str = "search_efficiency") -> ModuleType:
    """benchmarks/<name>.py as a module (the benchmarks folder is not a package)."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "benchmarks" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def autotune_cmd(*args: str) -> list[str]:
    """Run the installed console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "autotune"
    return [str(script), *args]


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(autouse=True)
def _no_color(monkeypatch: pytest.MonkeyPatch) -> None:
    # Rich output is asserted as plain text.
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("COLUMNS", "200")
    os.environ.pop("FORCE_COLOR", None)
