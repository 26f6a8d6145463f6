"""The ``autotune`` console script that pyproject installs: the CLI itself, help pages included."""

from __future__ import annotations

from autotune.cli import main

__all__ = ["main"]
