"""Server failures that name a flag's value: a failure predicted for every config that shares it.

A launch that died although the set-up has served before is most likely the configuration's doing.
When its message names values the configuration was given (a draft-model path, a backend name,
as real engines' errors do), any configuration with the same values is expected to fail the same
way, and is not launched, until one with those values serves. Pure functions over records.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from autotune.records import TrialRecord
from autotune.space import FlagValue

# Shorter values ("on", "1") are named by too many messages to mean anything.
MIN_NAMED_LENGTH = 3


def named_values(flags: Mapping[str, FlagValue], reason: str | None) -> dict[str, str]:
    """The text-valued flags whose value the failure's message names as a whole word or path."""
    if not reason:
        return {}
    named = {}
    for name, value in flags.items():
        if isinstance(value, str) and len(value) >= MIN_NAMED_LENGTH:
            if re.search(rf"(?<![\w./-]){re.escape(value)}(?![\w./-])", reason):
                named[name] = value
    return named


def open_failures(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """The failures that named values, each until a served trial had all of them (a served launch
    refutes the lesson)."""
    served = [r.flags for r in records if r.served]
    named = [(r, r.lessons.failure_names) for r in records if r.lessons.failure_names]
    return [r for r, names in named if not any(shares(flags, names) for flags in served)]


def predicted_failure(flags: Mapping[str, FlagValue], records: Sequence[TrialRecord]) -> TrialRecord | None:
    """The earliest open failure whose named values ``flags`` all share; None when no failure speaks
    for these flags."""
    return next((r for r in open_failures(records) if shares(flags, r.lessons.failure_names)), None)


def shares(flags: Mapping[str, object], named: Mapping[str, str]) -> bool:
    """Whether ``flags`` hold every named value."""
    return all(name in flags and flags[name] == value for name, value in named.items())
