"""A :class:`~autotune.records.TrialRecord` built from the facts a test names, the rest as storage
reads back a trial that never wrote them."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autotune.decision import Decision
from autotune.feasibility import MemoryLesson
from autotune.records import (
    LaunchRecord,
    Lessons,
    LevelRecord,
    MeasurementRecord,
    MetricRecord,
    Proposal,
    TrialRecord,
)
from autotune.space import FlagValue


def trial_record(
    number: int,
    *,
    state: str = "COMPLETE",
    outcome: str = "ok",
    reason: str | None = None,
    value: float | None = None,
    feasible: bool | None = None,
    baseline: str | None = None,
    decision: Decision | None = None,
    confirm_of: int | None = None,
    engine: str | None = None,
    flags: Mapping[str, FlagValue] | None = None,
    config_key: str | None = None,
    effective: Mapping[str, FlagValue | None] | None = None,
    host: str | None = None,
    gpus: Sequence[str] = (),
    metrics: Mapping[str, MetricRecord] | None = None,
    levels: Mapping[int, LevelRecord] | None = None,
    roofline_share: float | None = None,
    memory: MemoryLesson | None = None,
    failure_names: Mapping[str, str] | None = None,
) -> TrialRecord:
    """A trial as :func:`~autotune.study.attrs.trial_record` reads it; ``feasible`` follows the outcome
    unless given (as the study writes it)."""
    return TrialRecord(
        number=number,
        state=state,
        outcome=outcome,
        reason=reason,
        value=value,
        feasible=outcome == "ok" if feasible is None else feasible,
        baseline=baseline,
        decision=decision,
        proposal=Proposal(confirm_of=confirm_of),
        launch=LaunchRecord(
            engine=engine,
            flags=dict(flags or {}),
            config_key=config_key,
            effective=dict(effective or {}),
            host=host,
            gpus=list(gpus),
        ),
        measurement=MeasurementRecord(
            metrics=dict(metrics or {}), levels=dict(levels or {}), roofline_share=roofline_share
        ),
        lessons=Lessons(memory=memory, failure_names=dict(failure_names or {})),
    )
