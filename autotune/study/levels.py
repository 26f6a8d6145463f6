"""Load levels: the best configuration per concurrency, and the front of tokens/s per user against
tokens/s per GPU over every measured trial.

A levels study (``objective.levels``) measures every level on each launch and gives Optuna one
value per level. Winners are chosen here from the stored records, per level, among the levels that
keep the SLO; the primary level's winner is the study's best (confirmed when finalists were
re-measured). Pure functions over :class:`~autotune.records.TrialRecord`.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from autotune.models import Frozen
from autotune.outcomes import OutcomeKind
from autotune.records import TrialRecord

PER_USER = "decode_tok_s"
"""Tokens/s one user sees: the mean per-request decode speed."""
AGGREGATE = "output_tok_s"
"""Tokens/s the server delivers to all users together, divided by the GPUs for tokens/s per GPU."""


class LevelWinner(Frozen):
    """The best trial at one load level, by the objective's metric at that level."""

    concurrency: int
    trial: int | None = Field(default=None, description="None: no trial keeps the SLO at this level")
    baseline: str | None = None
    value: float | None = None
    ci95: float | None = None
    per_user_tok_s: float | None = None
    per_gpu_tok_s: float | None = None
    accept_length: float | None = None
    confirmed_launches: int | None = Field(default=None, description="set on the primary level's confirmed best")


class FrontPoint(Frozen):
    """One trial at one level, as tokens/s per user against tokens/s per GPU."""

    trial: int
    concurrency: int
    per_user_tok_s: float
    per_gpu_tok_s: float
    slo_broken: bool = False
    on_front: bool = False


class LoadLevels(Frozen):
    """What a levels study found: a winner per level and the per-user vs per-GPU front."""

    metric: str
    primary: int
    gpus: int = Field(description="GPUs per server, the divisor of tokens/s per GPU")
    winners: list[LevelWinner] = Field(description="one per level, in the space's order")
    front: list[FrontPoint] = Field(description="every measured (trial, level); on_front marks the front")


def measured(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Launched trials that measured their levels (a duplicate borrows its original's figures)."""
    return [r for r in records if r.outcome == OutcomeKind.OK.value and r.reused_from is None and r.measurement.levels]


def at_level(record: TrialRecord, concurrency: int) -> TrialRecord | None:
    """The trial as measured at one level: that level's metrics and objective value; None if unmeasured."""
    level = record.measurement.levels.get(concurrency)
    if level is None:
        return None
    measured = record.measurement.model_copy(update={"metrics": dict(level.metrics), "confirmed_launches": None})
    return record.model_copy(update={"measurement": measured})


def level_best(records: Sequence[TrialRecord], concurrency: int, *, metric: str) -> TrialRecord | None:
    """The best first measurement at a level, among trials that keep the SLO there (as ``at_level``)."""
    best: TrialRecord | None = None
    best_value = 0.0
    for record in measured(records):
        level = record.measurement.levels.get(concurrency)
        value = level.metric_value(metric) if level is not None and not level.slo_broken else None
        if record.confirm_of is None and value is not None and value > best_value:
            best, best_value = record, value
    return at_level(best, concurrency) if best is not None else None


def _winner(record: TrialRecord | None, concurrency: int, *, metric: str, gpus: int) -> LevelWinner:
    if record is None:
        return LevelWinner(concurrency=concurrency)
    aggregate = record.metric_value(AGGREGATE)
    return LevelWinner(
        concurrency=concurrency,
        trial=record.number,
        baseline=record.baseline,
        value=record.metric_value(metric),
        ci95=record.metric_ci95(metric),
        per_user_tok_s=record.metric_value(PER_USER),
        per_gpu_tok_s=aggregate / gpus if aggregate is not None else None,
        accept_length=record.metric_value("accept_length"),
        confirmed_launches=record.measurement.confirmed_launches,
    )


def front(records: Sequence[TrialRecord], *, gpus: int) -> list[FrontPoint]:
    """Every measured (trial, level) with both figures; the front is the points no other point beats
    on both axes at once, among those that keep the SLO."""
    points = []
    for record in measured(records):
        for concurrency, level in sorted(record.measurement.levels.items()):
            user, aggregate = level.metric_value(PER_USER), level.metric_value(AGGREGATE)
            if user is not None and aggregate is not None:
                points.append(
                    FrontPoint(
                        trial=record.number,
                        concurrency=concurrency,
                        per_user_tok_s=user,
                        per_gpu_tok_s=aggregate / gpus,
                        slo_broken=bool(level.slo_broken),
                    )
                )
    kept = [p for p in points if not p.slo_broken]

    def beaten(p: FrontPoint) -> bool:
        return any(
            q.per_user_tok_s >= p.per_user_tok_s
            and q.per_gpu_tok_s >= p.per_gpu_tok_s
            and (q.per_user_tok_s > p.per_user_tok_s or q.per_gpu_tok_s > p.per_gpu_tok_s)
            for q in kept
        )

    return [p.model_copy(update={"on_front": not p.slo_broken and not beaten(p)}) for p in points]


def load_levels(
    records: Sequence[TrialRecord], levels: Sequence[int], *, metric: str, primary_best: TrialRecord | None, gpus: int
) -> LoadLevels:
    """Winners per level (the primary level's is ``primary_best``, confirmed or not) and the front."""
    primary = levels[0]
    winners = []
    for concurrency in levels:
        if concurrency == primary and primary_best is not None:
            shown = at_level(primary_best, concurrency)
            # The confirmed mean replaces the single measurement of the primary's objective.
            best = primary_best.measurement
            record = (
                shown.model_copy(
                    update={
                        "measurement": shown.measurement.model_copy(
                            update={
                                "metrics": {**shown.measurement.metrics, metric: best.metrics[metric]},
                                "confirmed_launches": best.confirmed_launches,
                            }
                        )
                    }
                )
                if shown is not None and metric in best.metrics
                else shown
            )
        else:
            record = level_best(records, concurrency, metric=metric)
        winners.append(_winner(record, concurrency, metric=metric, gpus=gpus))
    return LoadLevels(metric=metric, primary=primary, gpus=gpus, winners=winners, front=front(records, gpus=gpus))
