"""What the memory-sizing rules are built from: the space, each engine, and each engine's memory model."""

from __future__ import annotations

from collections.abc import Mapping

from autotune.engines.base import Engine
from autotune.feasibility import FeasibilityModel
from autotune.space import SearchSpace


class SizingRule:
    """A pre-launch rule that sizes memory from the space's offered values and the learned model."""

    def __init__(
        self, space: SearchSpace, engines: Mapping[str, Engine], feasibility: Mapping[str, FeasibilityModel]
    ) -> None:
        self.space = space
        self.engines = engines
        self.feasibility = feasibility
