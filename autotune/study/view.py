"""A stored study as the CLI and the report read it: its info, trial records, best, measurements,
parameter importance and the exported profile of a trial. Nothing here writes."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import optuna
from optuna.trial import TrialState
from pydantic import Field

from autotune.breakeven import BreakEven, break_even, speed_point
from autotune.measure import Measurement
from autotune.models import Frozen
from autotune.profile import Profile, ProfileMetric
from autotune.records import TrialRecord
from autotune.study import artifacts, attrs
from autotune.study.attrs import StudyInfo
from autotune.study.confirm import Confirmation, best_first_measured
from autotune.study.levels import LoadLevels, level_best, load_levels
from autotune.study.snapshot import read_sqlite_study
from autotune.study.storage import load_existing_study, sqlite_path


class Importance(Frozen):
    """Which tuned flags mattered for the objective, as shares that add up to 1."""

    method: str = "PED-ANOVA"
    values: dict[str, float] = Field(default_factory=dict, description="flag -> share, largest first")
    trials_used: int = 0
    note: str | None = Field(default=None, description="why there are no values, or a caveat about them")


class ParetoPoint(Frozen):
    trial: int
    values: list[float]
    on_front: bool


def best_of(records: list[TrialRecord], confirmation: Confirmation | None, *, objective: str) -> TrialRecord | None:
    """The confirmed best, carrying its confirmed mean and CI; without a confirmation, the best
    single first measurement (feasibility-aware, like ``study.best_trial``), unconfirmed."""
    if confirmation is not None:
        finalist = next(f for f in confirmation.finalists if f.trial == confirmation.best)
        record = next((r for r in records if r.number == finalist.trial), None)
        if record is not None:
            measured = record.metrics.get(objective)
            metrics = dict(record.metrics)
            if measured is not None:
                metrics[objective] = measured.model_copy(
                    update={"value": finalist.mean, "ci95": finalist.ci95, "n": len(finalist.values)}
                )
            return record.model_copy(
                update={"value": finalist.mean, "metrics": metrics, "confirmed_launches": len(finalist.values)}
            )
    return best_first_measured(records)


class StudyView:
    """One stored study, read through :mod:`autotune.study.attrs` into autotune's models."""

    def __init__(self, study: optuna.Study, *, artifacts_dir: Path | None = None) -> None:
        self._study = study
        self._store = artifacts.artifact_store(artifacts_dir)
        self.artifacts_dir = artifacts_dir
        self.info: StudyInfo = attrs.study_info(study)
        self._records: list[TrialRecord] | None = None

    @classmethod
    def open(cls, name: str, storage_url: str, *, artifacts_dir: Path | None = None) -> StudyView:
        """An SQLite study is read in one go (:mod:`~autotune.study.snapshot`), any other through Optuna."""
        path = sqlite_path(storage_url)
        study = read_sqlite_study(path, name) if path is not None else None
        return cls(study or load_existing_study(name, storage_url), artifacts_dir=artifacts_dir)

    @property
    def name(self) -> str:
        return self._study.study_name

    @property
    def has_artifacts(self) -> bool:
        return self._store is not None

    @property
    def directions(self) -> list[str]:
        return [d.name.lower() for d in self._study.directions]

    def records(self) -> list[TrialRecord]:
        """Every trial, read once (a view is a snapshot: open another to see later trials)."""
        if self._records is None:
            self._records = [attrs.trial_record(t) for t in self._study.get_trials(deepcopy=False)]
        return self._records

    def best(self) -> TrialRecord | None:
        return best_of(self.records(), self.info.confirmation, objective=self.info.objective_metric)

    def first_best(self) -> TrialRecord | None:
        """The best single first measurement (what an unconfirmed tuner would report)."""
        return best_first_measured(self.records())

    def load_levels(self) -> LoadLevels | None:
        """Winner per load level and the per-user vs per-GPU front; None for a study of one level."""
        levels, space = self.info.levels, self.info.space
        if not levels or space is None:
            return None
        gpus = len(space.gpus.devices) if space.gpus.devices else max(len(self.info.gpus), 1)
        return load_levels(self.records(), levels, metric=self.info.objective_metric, primary_best=self.best(),
                           gpus=gpus)  # fmt: skip

    def best_at(self, concurrency: int) -> TrialRecord | None:
        """The winner at one load level: the study's best at the primary level, else by first measurement."""
        if concurrency == self.info.objective_concurrency:
            return self.best()
        return level_best(self.records(), concurrency, metric=self.info.objective_metric)

    def break_even(self) -> BreakEven:
        """The accept length each measured drafter must reach to beat the best (see :mod:`autotune.breakeven`)."""
        best = self.best()
        engine = self.info.space.engine if self.info.space else "sglang"
        points = [p for r in self.records() if (p := speed_point(r, engine=engine)) is not None]
        best_tok_s = best.metric_value("decode_tok_s") if best is not None else None
        return break_even(points, best_tok_s=best_tok_s, best_trial=best.number if best is not None else None)

    def record(self, number: int) -> TrialRecord | None:
        return next((r for r in self.records() if r.number == number), None)

    def measurements(self, number: int) -> list[Measurement]:
        """The measurements trial ``number`` uploaded; a duplicate reads its original's."""
        record = self.record(number)
        if record is None:
            return []
        original = record.duplicate_of if record.duplicate_of is not None else number
        return artifacts.measurements(self._study, original, self._store)

    def importance(self) -> Importance:
        """Optuna's parameter importance (PED-ANOVA) over the completed trials; infeasible ones count as 0.

        Optuna's warnings (e.g. too few trials in some regime) become the note instead of going to stderr.
        """
        study = self._study
        complete = [t for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)) if t.params]
        levels = len(self.info.levels)
        if len(study.directions) != max(levels, 1):
            return Importance(note="importance is computed for single-objective studies only")
        if len(complete) < 2:
            return Importance(trials_used=len(complete), note="needs at least 2 completed trials")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                # A levels study: importance for its primary level (the first value).
                primary = (lambda t: t.values[0]) if levels else None
                values = optuna.importance.get_param_importances(study, target=primary)
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

    def pareto(self) -> list[ParetoPoint] | None:
        study = self._study
        if len(study.directions) != 2 or self.info.levels:  # a levels study draws its own front
            return None
        front = {t.number for t in study.best_trials}
        return [
            ParetoPoint(trial=t.number, values=list(t.values), on_front=t.number in front)
            for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
            if t.values is not None
        ]

    def profile(self, record: TrialRecord, *, concurrency: int | None = None) -> Profile:
        """The exported profile of one measured trial (measured at ``concurrency``, default the objective's)."""
        space = self.info.space
        if space is None:
            raise ValueError(f"study {self.name!r} does not record its search space")
        metrics = {
            name: ProfileMetric(value=float(m.value or 0.0), unit=m.unit, ci95=m.ci95, n=m.n)
            for name, m in record.metrics.items()
        }
        engine = record.engine or space.engine
        return Profile(
            study=self.name,
            trial=record.number,
            engine=engine,
            engine_version=record.engine_version,
            model=space.model,
            launcher=space.launcher_for(engine),
            flags=record.flags,
            env=self.info.env,
            gpu_devices=space.gpus.devices,
            gpus=self.info.gpus,
            simulated=self.info.simulated,
            suite=self.info.suite_ref or space.measurement.suite,
            measure=space.measure_settings().model_copy(update={"concurrency": concurrency})
            if concurrency is not None
            else space.measure_settings(),
            metrics=metrics,
            confirmed_launches=record.confirmed_launches,
        )
