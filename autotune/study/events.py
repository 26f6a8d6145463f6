"""What a running study tells the live view, apart from the runner (the live view lives with the
rich output, which the read-only commands import without the runner and Optuna)."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from autotune.records import TrialRecord
    from autotune.space import Candidate


class StudyEvents:
    """Hooks the live view implements; the defaults do nothing."""

    def trial_started(self, number: int, candidate: Candidate) -> None: ...

    def phase(self, name: str, detail: str) -> None: ...

    def trial_finished(self, record: TrialRecord) -> None: ...

    def note(self, text: str) -> None:
        """A line the study says once (the search changing its strategy mid-night)."""
