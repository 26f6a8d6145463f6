"""Faults and drift the twin can be told to show, so tests can cause them on demand.

A fault comes from ``--twin-fault KIND`` or, for a whole study, from a schedule: the JSON list of
kinds named by the environment variable ``AUTOTUNE_TWIN_FAULT_SCHEDULE``; each launch takes the
next entry (a counter file beside the schedule, under a lock), ``none`` or past the end: no fault.
"""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import dataclass
from pathlib import Path

from passmodel.config import SpecConfig

SCHEDULE_ENV = "AUTOTUNE_TWIN_FAULT_SCHEDULE"
FAULT_KINDS = (
    "none",
    "exit-on-start",  # dies during start-up with a non-memory error
    "never-ready",  # port open, /health 503 forever
    "die-mid-measurement",  # the process exits after --twin-fault-after requests
    "hang-mid-measurement",  # stops answering (and ignores SIGTERM) after --twin-fault-after requests
    "port-taken",  # (SGLang) the HTTP port was taken between autotune choosing it and the bind
    "diverge",  # with speculative decoding on, the text departs from the greedy text (a broken drafter)
)
# Tokens a diverging drafter leaves as the greedy text before it departs from it.
DIVERGE_AFTER_TOKENS = 4


@dataclass(frozen=True)
class Fault:
    kind: str = "none"
    after_requests: int = 2

    @property
    def active(self) -> bool:
        return self.kind != "none"


NO_FAULT = Fault()


def next_scheduled(schedule: Path) -> str:
    """The kind for this launch from a schedule file (advances its counter)."""
    kinds = json.loads(schedule.read_text())
    counter = schedule.with_name(schedule.name + ".count")
    with counter.open("a+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        handle.seek(0)
        launches = int(handle.read() or 0)
        handle.seek(0)
        handle.truncate()
        handle.write(str(launches + 1))
    return str(kinds[launches]) if launches < len(kinds) else "none"


def resolve_fault(kind: str | None, after_requests: int) -> Fault:
    """``--twin-fault`` wins; else the schedule named in the environment; else none."""
    if kind is None and os.environ.get(SCHEDULE_ENV):
        kind = next_scheduled(Path(os.environ[SCHEDULE_ENV]))
    kind = kind or "none"
    if kind not in FAULT_KINDS:
        raise ValueError(f"unknown twin fault {kind!r}; known: {', '.join(FAULT_KINDS)}")
    return Fault(kind=kind, after_requests=after_requests)


def diverges(fault: Fault, spec: SpecConfig) -> bool:
    """Whether this launch's text departs from the greedy text: speculation is on and either the
    ``diverge`` fault is injected or the drafter is marked broken (``diverges: true``)."""
    broken = spec.drafter is not None and spec.drafter.diverges
    return spec.enabled and (fault.kind == "diverge" or broken)


def drift_factor(drift_per_minute: float, seconds_since_ready: float) -> float:
    """How much longer a pass takes after drifting for that long (1.0 = no drift)."""
    return 1.0 + drift_per_minute * seconds_since_ready / 60.0
