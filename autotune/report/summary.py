"""What a study found, computed from Optuna storage: the numbers the report and ``show`` present.

Arrow: a stored study (:class:`~autotune.study.StudyView`) -> :class:`StudySummary`: trial records,
Optuna's parameter importance (PED-ANOVA, its default), and the per-category statistics kept in
each trial's measurement artifact. Nothing here draws or renders.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone

from pydantic import Field

from autotune.engines import DEFAULT_ENGINE, engine_names, get_engine
from autotune.errors import AutotuneError
from autotune.measure.client import OBJECTIVE_UNITS, CategoryStats, Measurement
from autotune.models import Frozen
from autotune.profile import EXPORT_HOST, EXPORT_PORT, Profile, render_shell
from autotune.records import TrialRecord
from autotune.study.breakeven import BreakEven
from autotune.study.confirm import Confirmation
from autotune.study.importance import Importance
from autotune.study.levels import LoadLevels
from autotune.study.schedule import ScheduleVerdict
from autotune.study.view import ParetoPoint, StudyView


class FigureFlags(Frozen):
    """The engine's flags the configuration figures plot ("": the engine has no such flag); a figure
    about one is drawn only when the study tuned it."""

    memory: str = ""
    depth: str = ""
    draft_tokens: str = ""
    width: str = ""


def figure_flags(engine: str | None) -> FigureFlags:
    """The flags of the study's engine (of the first registered one, for a study choosing among several)."""
    names = [n.strip() for n in (engine or "").split(",") if n.strip() in engine_names()] or [DEFAULT_ENGINE]
    chosen = get_engine(names[0])
    speculation = chosen.speculation
    if speculation is None:
        return FigureFlags(memory=chosen.verdict_memory_flag or "")
    return FigureFlags(
        memory=chosen.verdict_memory_flag or "",
        depth=speculation.depth,
        draft_tokens=speculation.draft_tokens or "",
        width=speculation.width or "",
    )


class TrialCategories(Frozen):
    """Per prompt category numbers of one measured trial (at the objective's concurrency)."""

    trial: int
    label: str
    categories: list[CategoryStats]


class BaselineComparison(Frozen):
    name: str
    trial: int
    outcome: str
    value: float | None
    best_gain: float | None = Field(default=None, description="(best - baseline) / baseline")
    confirmed: bool = Field(default=False, description="its value is the mean over its confirmation launches")


class StudySummary(Frozen):
    """Everything the report shows, computed from one study."""

    study: str
    generated_at: datetime
    simulated: bool
    engine: str | None
    model: str | None
    gpus: list[str]
    objective: str
    objective_metric: str
    objective_unit: str
    directions: list[str]
    tuned: list[str]
    stop_reason: str | None
    trials: list[TrialRecord]
    outcome_counts: dict[str, int]
    best: TrialRecord | None
    baselines: list[BaselineComparison]
    importance: Importance
    categories: list[TrialCategories] = Field(description="the best trial first, then measured baselines")
    launch_s_total: float
    measure_s_total: float
    best_readings: dict[str, float | int | str] = Field(
        default_factory=dict, description="the best trial's roofline share and memory readings, when recorded"
    )
    profile: Profile | None
    launch_script: str | None
    pareto: list[ParetoPoint] | None = Field(default=None, description="only for studies with two objectives")
    confirmation: Confirmation | None = Field(default=None, description="the finalists measured again")
    load_levels: LoadLevels | None = Field(default=None, description="winner per load level, per-user vs per-GPU")
    break_even: BreakEven | None = Field(default=None, description="accept length each drafter needs to beat the best")
    schedule: ScheduleVerdict | None = Field(default=None, description="the speculation schedule's race, if run")
    notes: list[str] = Field(default_factory=list)

    @property
    def best_value(self) -> float | None:
        return self.best.metric_value(self.objective_metric) if self.best else None

    @property
    def best_ci95(self) -> float | None:
        if self.best is None:
            return None
        ci = self.best.metric_ci95(self.objective_metric)
        return float(ci) if isinstance(ci, (int, float)) else None


def _objective_measurement(measurements: Sequence[Measurement], concurrency: int) -> Measurement | None:
    return next((m for m in measurements if m.concurrency == concurrency), measurements[0] if measurements else None)


def trial_categories(view: StudyView, number: int, label: str) -> TrialCategories | None:
    """Per-category statistics of trial ``number`` at the objective's concurrency, from its artifact."""
    measurement = _objective_measurement(view.measurements(number), view.info.objective_concurrency)
    if measurement is None or not measurement.categories:
        return None
    return TrialCategories(trial=number, label=label, categories=list(measurement.categories))


def summarise(view: StudyView, *, schedule: ScheduleVerdict | None = None) -> StudySummary:
    """Compute every number of the report from the study's records and artifact store."""
    info = view.info
    metric = info.objective_metric
    notes: list[str] = []
    if not view.has_artifacts:
        notes.append(f"no artifact store at {view.artifacts_dir}: per-category numbers are not shown")
    multi = len(view.directions) > max(1, len(info.levels))  # a levels study has one objective per level
    all_records = [] if multi else view.records()
    best = None if multi else view.best()
    if multi:
        notes.append("this study has several objectives: the trial table and the winner are not shown")

    baselines = _baseline_comparisons(all_records, best, metric, view.info.confirmation)
    categories = _summary_categories(view, best, baselines, notes)
    profile, launch_script = _winner_profile(view, best, notes)
    measured = [r for r in all_records if r.reused_from is None]
    return StudySummary(
        study=view.name,
        generated_at=datetime.now(timezone.utc),
        simulated=info.simulated,
        engine=info.engine,
        model=info.model,
        gpus=info.gpus,
        objective=info.objective or metric,
        objective_metric=metric,
        objective_unit=OBJECTIVE_UNITS.get(metric, ""),
        directions=view.directions,
        tuned=info.tuned,
        stop_reason=info.last_stop_reason,
        trials=all_records,
        outcome_counts=dict(Counter(r.outcome for r in all_records)),
        best=best,
        baselines=baselines,
        importance=view.importance(),
        categories=categories,
        launch_s_total=round(sum(r.launch.launch_s or 0.0 for r in measured), 1),
        measure_s_total=round(sum(r.measurement.measure_s or 0.0 for r in measured), 1),
        best_readings=best.measurement.readings if best is not None else {},
        profile=profile,
        launch_script=launch_script,
        pareto=view.pareto(),
        confirmation=info.confirmation,
        load_levels=view.load_levels(),
        schedule=schedule,
        break_even=view.break_even(),
        notes=notes,
    )


def _baseline_comparisons(
    records: Sequence[TrialRecord], best: TrialRecord | None, metric: str, confirmation: Confirmation | None
) -> list[BaselineComparison]:
    """Each completed baseline once (its search launch, not its confirmation relaunches): its value
    (the confirmed mean where the race measured it again) and how much better the best is."""
    confirmed = {f.trial: f.mean for f in confirmation.finalists if f.confirmed} if confirmation else {}
    baselines = []
    for r in records:
        if r.baseline is None or r.state != "COMPLETE" or r.confirm_of is not None:
            continue
        value = confirmed.get(r.number, r.metric_value(metric) if r.outcome == "ok" else None)
        best_value = best.metric_value(metric) if best else None
        gain = (best_value - value) / value if best_value is not None and value else None
        baselines.append(
            BaselineComparison(
                name=r.baseline,
                trial=r.number,
                outcome=r.outcome,
                value=value,
                best_gain=gain,
                confirmed=r.number in confirmed,
            )
        )
    return baselines


def _summary_categories(
    view: StudyView, best: TrialRecord | None, baselines: Sequence[BaselineComparison], notes: list[str]
) -> list[TrialCategories]:
    """Per-category numbers of the best trial, then of the measured baselines; a note when the best has none."""
    categories = []
    if best is not None:
        found = trial_categories(view, best.number, f"best (#{best.number})")
        if found is not None:
            categories.append(found)
        elif view.has_artifacts:
            notes.append(f"trial {best.number} has no readable measurement artifact: no per-category numbers")
    for b in baselines:
        if b.outcome == "ok" and (best is None or b.trial != best.number):
            found = trial_categories(view, b.trial, f"{b.name} (#{b.trial})")
            if found is not None:
                categories.append(found)
    return categories


def _winner_profile(view: StudyView, best: TrialRecord | None, notes: list[str]) -> tuple[Profile | None, str | None]:
    """The best trial's profile and launch script; a note when the script cannot be rendered here."""
    profile = launch_script = None
    if best is not None and view.info.space is not None:
        profile = view.profile(best)
        try:
            launch_script = render_shell(profile, host=EXPORT_HOST, port=EXPORT_PORT)
        except AutotuneError as exc:
            notes.append(f"the winner's launch command cannot be rendered here: {exc.message}")
    return profile, launch_script


__all__ = [
    "StudySummary",
    "TrialCategories",
    "summarise",
    "trial_categories",
]
