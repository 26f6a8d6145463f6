"""What a study found, computed from Optuna storage: the numbers the report and ``show`` present.

Arrow: Optuna storage -> :class:`StudySummary`: trial records (:func:`autotune.study.records`),
Optuna's parameter importance (PED-ANOVA, its default), and the per-category statistics kept in
each trial's measurement artifact. Nothing here draws or renders.
"""

from __future__ import annotations

import re
import warnings
from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import optuna
from optuna.artifacts import FileSystemArtifactStore, get_all_artifact_meta
from optuna.trial import FrozenTrial, TrialState
from pydantic import Field, ValidationError

from autotune.errors import AutotuneError
from autotune.measure import OBJECTIVE_UNITS, CategoryStats, Measurement
from autotune.models import Frozen
from autotune.profile import Profile, render_shell
from autotune.records import TrialRecord
from autotune.study import MeasurementList, best_record, build_profile, records

MEASUREMENT_SUFFIX = ".measurement.json"
# The knobs the issue names; a figure about one is drawn only when the study tuned it.
MEM_FRACTION = "mem-fraction-static"
DRAFT_DEPTH = "speculative-num-steps"
DRAFT_TOKENS = "speculative-num-draft-tokens"
TOPK = "speculative-eagle-topk"
# User attrs shown as the winner's readings when a study recorded them (e.g. "roofline_share", "memory_kv_gb").
READING_PREFIXES = ("roofline", "memory")


class Importance(Frozen):
    """Which tuned flags mattered for the objective, as shares that add up to 1."""

    method: str = "PED-ANOVA"
    values: dict[str, float] = Field(default_factory=dict, description="flag -> share, largest first")
    trials_used: int = 0
    note: str | None = Field(default=None, description="why there are no values, or a caveat about them")


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


class ParetoPoint(Frozen):
    trial: int
    values: list[float]
    on_front: bool


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
    notes: list[str] = Field(default_factory=list)

    @property
    def best_value(self) -> float | None:
        return self.best.metric_value(self.objective_metric) if self.best else None

    @property
    def best_ci95(self) -> float | None:
        if self.best is None:
            return None
        ci = self.best.metrics.get(self.objective_metric, {}).get("ci95")
        return float(ci) if isinstance(ci, (int, float)) else None


def artifact_store(folder: Path | None) -> FileSystemArtifactStore | None:
    """The study's file-system artifact store, if it has one (a study of only invalid configs has none)."""
    if folder is None or not folder.is_dir():
        return None
    return FileSystemArtifactStore(str(folder))


def trial_measurements(
    study: optuna.Study, trial: FrozenTrial, store: FileSystemArtifactStore | None
) -> list[Measurement]:
    """The measurements a trial uploaded as ``trial-NNNN.measurement.json`` (one per concurrency level).

    A trial that reused another's measurement (same effective config) reads the original's.
    """
    if store is None:
        return []
    original = trial.user_attrs.get("duplicate_of")
    if isinstance(original, int):
        trial = study.get_trials(deepcopy=False)[original]
    for meta in get_all_artifact_meta(trial, storage=study._storage):
        if not meta.filename.endswith(MEASUREMENT_SUFFIX):
            continue
        try:
            with store.open_reader(meta.artifact_id) as reader:
                return MeasurementList.model_validate_json(reader.read()).root
        except (OSError, ValidationError, optuna.artifacts.exceptions.ArtifactNotFound):
            return []
    return []


def _objective_measurement(measurements: Sequence[Measurement], concurrency: int) -> Measurement | None:
    return next((m for m in measurements if m.concurrency == concurrency), measurements[0] if measurements else None)


def trial_categories(
    study: optuna.Study, number: int, label: str, store: FileSystemArtifactStore | None
) -> TrialCategories | None:
    """Per-category statistics of trial ``number`` at the objective's concurrency, from its artifact."""
    concurrency = int(study.user_attrs.get("space", {}).get("objective", {}).get("concurrency", 1))
    trial = study.get_trials(deepcopy=False)[number]
    measurement = _objective_measurement(trial_measurements(study, trial, store), concurrency)
    if measurement is None or not measurement.categories:
        return None
    return TrialCategories(trial=number, label=label, categories=list(measurement.categories))


def param_importance(study: optuna.Study) -> Importance:
    """Optuna's parameter importance (PED-ANOVA) over the completed trials; infeasible ones count as 0.

    Optuna's warnings (e.g. too few trials in some regime) become the note instead of going to stderr.
    """
    complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.params]
    if len(study.directions) != 1:
        return Importance(note="importance is computed for single-objective studies only")
    if len(complete) < 2:
        return Importance(trials_used=len(complete), note="needs at least 2 completed trials")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            values = optuna.importance.get_param_importances(study)
        except (ValueError, RuntimeError) as exc:
            return Importance(trials_used=len(complete), note=f"Optuna could not compute it: {exc}")
    note = None
    if caught:
        named = sorted({m for w in caught for m in re.findall(r"`([^`]+)`", str(w.message))})
        where = f" of {', '.join('--' + n for n in named)}" if named else ""
        note = (
            f"a rough estimate from {len(complete)} completed trials: Optuna warns that some value ranges{where} "
            "hold fewer than 2 trials"
            if named
            else f"a rough estimate from {len(complete)} completed trials (Optuna: {caught[0].message})"
        )
    ordered = dict(sorted(((k, float(v)) for k, v in values.items()), key=lambda kv: -kv[1]))
    return Importance(values=ordered, trials_used=len(complete), note=note)


def _pareto(study: optuna.Study) -> list[ParetoPoint] | None:
    if len(study.directions) != 2:
        return None
    front = {t.number for t in study.best_trials}
    return [
        ParetoPoint(trial=t.number, values=list(t.values), on_front=t.number in front)
        for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        if t.values is not None
    ]


def summarise(study: optuna.Study, *, artifacts_dir: Path | None) -> StudySummary:
    """Compute every number of the report from the study's storage and artifact store."""
    attrs = study.user_attrs
    space: dict[str, Any] = attrs.get("space", {})
    metric = str(space.get("objective", {}).get("metric", "decode_tok_s"))
    store = artifact_store(artifacts_dir)
    notes: list[str] = []
    if store is None:
        notes.append(f"no artifact store at {artifacts_dir}: per-category numbers are not shown")
    multi = len(study.directions) > 1
    all_records = [] if multi else records(study)
    best = None if multi else best_record(study)
    if multi:
        notes.append("this study has several objectives: the trial table and the winner are not shown")

    baselines = []
    for r in all_records:
        if r.baseline is None or r.state != "COMPLETE":
            continue
        value = r.metric_value(metric) if r.outcome == "ok" else None
        best_value = best.metric_value(metric) if best else None
        gain = (best_value - value) / value if best_value is not None and value else None
        baselines.append(
            BaselineComparison(name=r.baseline, trial=r.number, outcome=r.outcome, value=value, best_gain=gain)
        )

    categories = []
    if best is not None:
        found = trial_categories(study, best.number, f"best (#{best.number})", store)
        if found is not None:
            categories.append(found)
        elif store is not None:
            notes.append(f"trial {best.number} has no readable measurement artifact: no per-category numbers")
    for b in baselines:
        if b.outcome == "ok" and (best is None or b.trial != best.number):
            found = trial_categories(study, b.trial, f"{b.name} (#{b.trial})", store)
            if found is not None:
                categories.append(found)

    profile = launch_script = None
    readings: dict[str, float | int | str] = {}
    if best is not None:
        for key, value in study.get_trials(deepcopy=False)[best.number].user_attrs.items():
            if (
                key.startswith(READING_PREFIXES)
                and isinstance(value, (int, float, str))
                and not isinstance(value, bool)
            ):
                readings[key] = value
    if best is not None and "space" in attrs:
        profile = build_profile(study, best)
        try:
            launch_script = render_shell(profile, host="127.0.0.1", port=30000)
        except AutotuneError as exc:
            notes.append(f"the winner's launch command cannot be rendered here: {exc.message}")

    measured = [r for r in all_records if r.duplicate_of is None]
    return StudySummary(
        study=study.study_name,
        generated_at=datetime.now(timezone.utc),
        simulated=bool(attrs.get("simulated", False)),
        engine=attrs.get("engine"),
        model=attrs.get("model"),
        gpus=list(attrs.get("gpus", [])),
        objective=str(attrs.get("objective", metric)),
        objective_metric=metric,
        objective_unit=OBJECTIVE_UNITS.get(metric, ""),
        directions=[d.name.lower() for d in study.directions],
        tuned=list(space.get("tuned", {})),
        stop_reason=attrs.get("last_stop_reason"),
        trials=all_records,
        outcome_counts=dict(Counter(r.outcome for r in all_records)),
        best=best,
        baselines=baselines,
        importance=param_importance(study),
        categories=categories,
        launch_s_total=round(sum(r.launch_s or 0.0 for r in measured), 1),
        measure_s_total=round(sum(r.measure_s or 0.0 for r in measured), 1),
        best_readings=readings,
        profile=profile,
        launch_script=launch_script,
        pareto=_pareto(study),
        notes=notes,
    )


__all__ = [
    "Importance",
    "StudySummary",
    "TrialCategories",
    "artifact_store",
    "param_importance",
    "summarise",
    "trial_categories",
    "trial_measurements",
]
