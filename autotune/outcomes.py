"""The outcome vocabulary: every way a trial can end, named once.

Engines classify a failed launch into one of these, ``trial.py`` adds what happened while measuring,
and the study adds what it decided without launching (a predicted memory failure, busy GPUs) or
what stopped the trial (Ctrl-C, a bug). The stored spelling is the enum's value.
"""

from __future__ import annotations

from enum import Enum
from typing import Literal

MemorySide = Literal["too-low", "too-high"]


class OutcomeKind(str, Enum):
    OK = "ok"
    MEMORY_TOO_LOW = "infeasible-memory-low"
    MEMORY_TOO_HIGH = "infeasible-memory-high"
    PREDICTED_MEMORY_TOO_LOW = "predicted-infeasible-memory-low"
    PREDICTED_MEMORY_TOO_HIGH = "predicted-infeasible-memory-high"
    INVALID_CONFIG = "invalid-config"
    PREDICTED_FAILURE = "predicted-failure"  # not launched: an earlier failure named values it shares
    LAUNCH_TIMEOUT = "launch-timeout"
    CRASHED = "crashed"
    PORT_IN_USE = "port-in-use"
    MEASUREMENT_FAILED = "measurement-failed"
    DIVERGED = "diverged"  # served and measured, but its greedy text departs from the reference: wrong, not fast
    SKIPPED_BUSY = "skipped-busy"
    INTERRUPTED = "interrupted"
    ERROR = "error"
    FAILED = "failed"  # failed by Optuna, not by autotune: its worker stopped beating (heartbeat)

    @property
    def memory_side(self) -> MemorySide | None:
        """Which side of the memory boundary a (measured or predicted) memory failure lies on."""
        if self in (OutcomeKind.MEMORY_TOO_LOW, OutcomeKind.PREDICTED_MEMORY_TOO_LOW):
            return "too-low"
        if self in (OutcomeKind.MEMORY_TOO_HIGH, OutcomeKind.PREDICTED_MEMORY_TOO_HIGH):
            return "too-high"
        return None

    @property
    def is_memory(self) -> bool:
        """A launch that died of memory (not a prediction)."""
        return self in (OutcomeKind.MEMORY_TOO_LOW, OutcomeKind.MEMORY_TOO_HIGH)

    @property
    def predicted(self) -> bool:
        """Decided without launching."""
        return self in (OutcomeKind.PREDICTED_MEMORY_TOO_LOW, OutcomeKind.PREDICTED_MEMORY_TOO_HIGH)

    @property
    def is_config_fault(self) -> bool:
        """The configuration itself is at fault (the sampler should learn to avoid it)."""
        return self.is_memory or self in (
            OutcomeKind.INVALID_CONFIG,
            OutcomeKind.DIVERGED,
            OutcomeKind.PREDICTED_FAILURE,
        )

    @property
    def is_server_failure(self) -> bool:
        """The server died or never became ready: the set-up's fault or the configuration's."""
        return self in (OutcomeKind.CRASHED, OutcomeKind.LAUNCH_TIMEOUT)

    @classmethod
    def predicted_for(cls, side: MemorySide) -> OutcomeKind:
        return cls.PREDICTED_MEMORY_TOO_LOW if side == "too-low" else cls.PREDICTED_MEMORY_TOO_HIGH


def outcome_kind(text: str | None) -> OutcomeKind | None:
    """The kind of a stored spelling; None for a spelling autotune never wrote."""
    try:
        return OutcomeKind(text)
    except ValueError:
        return None
