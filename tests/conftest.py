"""Shared fixtures: paths of the shipped files and a clean studies folder per test."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SPACES = ROOT / "search_spaces"
TWIN_SPACE = SPACES / "qwen3.6-27b-2xa6000-twin.yaml"
REAL_SPACE = SPACES / "qwen3.6-27b-2xa6000.yaml"


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
