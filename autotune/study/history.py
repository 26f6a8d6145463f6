"""The study's trials as one trial's rules see them: records read once per trial, before deciding."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from autotune.records import TrialRecord


@dataclass(frozen=True)
class History:
    """Every trial of the study (finished and running), as records, when trial ``number`` decides."""

    records: Sequence[TrialRecord]
    number: int

    @cached_property
    def served(self) -> list[TrialRecord]:
        """Trials whose own launch served and was measured, oldest first."""
        return [r for r in self.records if r.served and r.number != self.number]

    @cached_property
    def finished(self) -> list[TrialRecord]:
        """Completed trials other than this one, oldest first."""
        return [r for r in self.records if r.state == "COMPLETE" and r.number != self.number]
