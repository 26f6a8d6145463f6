"""What an engine knows of speculative decoding: how it spells a draft (method, depth, draft model)
and, where it runs one, how a speculation schedule per load is written for it.

The study reads drafts and builds schedules through these, never through an engine's own flags:
:mod:`autotune.study.breakeven` fits depths, :mod:`autotune.study.schedule` picks a tier per load
level and hands the slots (batch size -> depth) to the engine's :class:`ScheduleForm`."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from typing import ClassVar

from pydantic import Field

from autotune.models import Frozen
from autotune.space import FlagValue

ScheduleConfig = dict[str, dict[str, list[int]]]
"""A schedule written as a file the server reads (SGLang's adaptive config)."""


class SpeculationFlags(Frozen):
    """An engine's spelling of a draft; no method (or "none"): no speculation."""

    method: str = Field(description="the flag naming the draft algorithm or method")
    depth: str = Field(description="the flag of the draft depth")
    draft_model: str = Field(description="the flag of a separate draft model")
    draft_tokens: str | None = Field(default=None, description="the flag of the tokens verified per step, if apart")
    width: str | None = Field(default=None, description="the flag of a draft tree's width (topk), if any")
    unit: str = Field(default="step", description="what the depth counts, as the output says it")

    def flags(self) -> set[str]:
        return {f for f in (self.method, self.depth, self.draft_model, self.draft_tokens, self.width) if f}


class ScheduleForm(ABC):
    """How one engine runs a speculation schedule: which configurations can be a tier, and the launch
    flags (and file) that run a depth per batch-size slot."""

    what: ClassVar[str]
    """What runs the schedule, as the output names it."""
    config_label: ClassVar[str] = ""
    """How the output introduces :meth:`config_text`."""
    per_tier: ClassVar[frozenset[str]]
    """Flags that differ between tiers; every other flag is one value for the whole server."""
    config_flag: ClassVar[str | None] = None
    """The flag naming the file of :meth:`config` (None: no file)."""
    running_flag: ClassVar[str | None] = None
    """The flag whose resolved value is how many requests the server runs at once (None: not read)."""

    @abstractmethod
    def tier_depth(self, flags: Mapping[str, FlagValue]) -> int | str:
        """The depth a schedule would run a configuration at (0: no drafting), or why it cannot."""

    @abstractmethod
    def drafts(self, shared: Mapping[str, FlagValue]) -> bool:
        """Whether the shared flags name a draft (else there is nothing to schedule)."""

    def config(self, slots: Mapping[int, int]) -> ScheduleConfig | None:
        """The file the server reads (None: the schedule travels in the flags)."""
        return None

    @abstractmethod
    def launch_flags(
        self, shared: Mapping[str, FlagValue], slots: Mapping[int, int], *, start: int, config_path: str
    ) -> dict[str, FlagValue]:
        """The server's flags; ``slots`` maps each slot's smallest batch size to its depth, ``start``
        is the primary level's depth, ``config_path`` where :meth:`config` is written."""

    @abstractmethod
    def config_text(self, shared: Mapping[str, FlagValue], slots: Mapping[int, int]) -> str:
        """What the engine reads, as the output shows it."""
