"""A study's measured launches as calibration points: the lines of the POINTS.jsonl that
``python -m autotune_twin calibrate`` fits a twin profile to (docs/twin-profile.md, "Calibrating and
predicting"). Pure functions over :class:`~autotune.records.TrialRecord`."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import Field

from autotune.engines import DEFAULT_ENGINE, get_engine
from autotune.models import Frozen
from autotune.records import MetricRecord, TrialRecord


class CalibrationPoint(Frozen):
    """One measured launch at one concurrency, as one line of POINTS.jsonl."""

    flags: dict[str, Any] = Field(description="the speculative flags as the engine spells them; {}: no speculation")
    concurrency: int
    input_len: int = Field(description="mean prompt tokens a request; 0 where the study did not record them")
    output_len: int = Field(description="mean completion tokens a request")
    tok_s: float = Field(description="the total output rate at this concurrency")
    accept_length: float | None = Field(
        default=None, description="the measured accept length, or the one the launch set (vLLM's synthetic acceptance)"
    )


class CalibrationPoints(Frozen):
    """The points of a study, and what could not be told from its records."""

    points: list[CalibrationPoint] = Field(default_factory=list)
    without_prompt_tokens: int = Field(
        default=0, description="points whose input_len is 0: measured before autotune recorded prompt_tokens"
    )
    other_engines: list[int] = Field(
        default_factory=list, description="measured trials left out: the twin does not simulate their engine"
    )


def calibration_points(records: Iterable[TrialRecord], *, concurrency: int) -> CalibrationPoints:
    """A point per measured launch (relaunches of finalists included) at ``concurrency``, the
    objective's; in a levels study, one per level instead. Trials that borrowed another's measurement,
    failed, or have no output rate give none."""
    points: list[CalibrationPoint] = []
    without_prompt = 0
    other_engines: list[int] = []
    for record in records:
        if not record.served:
            continue
        engine = get_engine(record.engine or DEFAULT_ENGINE)
        flags = engine.calibration_flags(record.flags)
        if flags is None:
            other_engines.append(record.number)
            continue
        set_length = engine.set_accept_length(record.flags)
        by_level = [(level.concurrency, level.metrics) for level in record.measurement.levels.values()]
        for at, metrics in by_level or [(concurrency, record.measurement.metrics)]:
            point = _point(flags, at, metrics, set_length)
            if point is not None:
                points.append(point)
                if "prompt_tokens" not in metrics:
                    without_prompt += 1
    return CalibrationPoints(points=points, without_prompt_tokens=without_prompt, other_engines=other_engines)


def _point(
    flags: dict[str, Any], concurrency: int, metrics: Mapping[str, MetricRecord], set_length: float | None
) -> CalibrationPoint | None:
    """The point of one measurement; None without an output rate or a token count. A launch that set
    its accept length carries that one: the pass cost it measured is at exactly that length, which the
    measured figure (one draw of the set rates, rounded per request) only approaches."""
    tok_s = _value(metrics, "output_tok_s")
    output_len = _per_request(metrics, "completion_tokens")
    if tok_s is None or tok_s <= 0 or output_len is None or output_len < 1:
        return None
    return CalibrationPoint(
        flags=flags,
        concurrency=concurrency,
        input_len=_per_request(metrics, "prompt_tokens") or 0,
        output_len=output_len,
        tok_s=tok_s,
        accept_length=set_length if set_length is not None else _value(metrics, "accept_length"),
    )


def _value(metrics: Mapping[str, MetricRecord], name: str) -> float | None:
    metric = metrics.get(name)
    return metric.value if metric is not None else None


def _per_request(metrics: Mapping[str, MetricRecord], name: str) -> int | None:
    """A token total over its requests (the metric's n), rounded to whole tokens."""
    metric = metrics.get(name)
    if metric is None or metric.value is None or not metric.n:
        return None
    return round(metric.value / metric.n)
