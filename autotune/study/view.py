"""A stored study as the CLI and the report read it: its info, trial records, best, measurements,
parameter importance and the exported profile of a trial. Nothing here writes."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from autotune.engines import DEFAULT_ENGINE
from autotune.measure.client import Measurement
from autotune.models import Frozen
from autotune.pass_setup import PassSetup
from autotune.profile import Profile, ProfileGain, ProfileMetric
from autotune.records import TrialRecord
from autotune.study import artifacts, attrs
from autotune.study.attrs import StudyInfo
from autotune.study.breakeven import BreakEven, break_even, speed_point
from autotune.study.confirm import Confirmation, best_first_measured
from autotune.study.importance import Importance, compute_importance
from autotune.study.levels import LoadLevels, level_best, load_levels
from autotune.study.paths import sqlite_path
from autotune.study.snapshot import StoredStudy, from_optuna, read_sqlite_study

if TYPE_CHECKING:
    import optuna

    from autotune.study.schedule import ScheduleVerdict


class ParetoPoint(Frozen):
    trial: int
    values: list[float]
    on_front: bool


def best_of(records: list[TrialRecord], confirmation: Confirmation | None, *, objective: str) -> TrialRecord | None:
    """The confirmed best, carrying its confirmed mean and CI; without a confirmation, the best
    single first measurement (feasibility-aware, like ``study.best_trial``), unconfirmed."""
    if confirmation is not None:
        record = next((r for r in records if r.number == confirmation.best), None)
        if record is not None:
            return as_raced(record, confirmation, objective=objective)
    return best_first_measured(records)


def as_raced(record: TrialRecord, confirmation: Confirmation | None, *, objective: str) -> TrialRecord:
    """``record`` carrying its race's mean and CI where it was a finalist, else as first measured."""
    finalist = confirmation.finalist(record.number) if confirmation is not None else None
    if finalist is None:
        return record
    measured = record.measurement.metrics.get(objective)
    metrics = dict(record.measurement.metrics)
    if measured is not None:
        metrics[objective] = measured.model_copy(
            update={"value": finalist.mean, "ci95": finalist.ci95, "n": len(finalist.values)}
        )
    confirmed = record.measurement.model_copy(update={"metrics": metrics, "confirmed_launches": len(finalist.values)})
    return record.model_copy(update={"value": finalist.mean, "measurement": confirmed})


class StudyView:
    """One stored study, read through :mod:`autotune.study.attrs` into autotune's models."""

    def __init__(self, study: optuna.Study | StoredStudy, *, artifacts_dir: Path | None = None) -> None:
        self._study = study if isinstance(study, StoredStudy) else from_optuna(study)
        self.artifacts_dir = artifacts_dir
        self._artifacts = artifacts_dir if artifacts_dir is not None and artifacts_dir.is_dir() else None
        self.info: StudyInfo = attrs.study_info(self._study)
        self._records: list[TrialRecord] | None = None

    @classmethod
    def open(cls, name: str, storage_url: str, *, artifacts_dir: Path | None = None) -> StudyView:
        """An SQLite study is read in one go (:mod:`~autotune.study.snapshot`), any other through Optuna."""
        path = sqlite_path(storage_url)
        study = read_sqlite_study(path, name) if path is not None else None
        if study is None:
            from autotune.study.storage import load_existing_study

            return cls(load_existing_study(name, storage_url), artifacts_dir=artifacts_dir)
        return cls(study, artifacts_dir=artifacts_dir)

    @property
    def name(self) -> str:
        return self._study.study_name

    @property
    def has_artifacts(self) -> bool:
        return self._artifacts is not None

    @property
    def directions(self) -> list[str]:
        return [d.lower() for d in self._study.directions]

    def records(self) -> list[TrialRecord]:
        """Every trial, read once (a view is a snapshot: open another to see later trials)."""
        if self._records is None:
            self._records = [attrs.trial_record(t) for t in self._study.trials]
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
        return load_levels(
            self.records(), levels, metric=self.info.objective_metric, primary_best=self.best(), gpus=gpus
        )

    def pass_setup(self) -> PassSetup | None:
        """What the study's pass model is built from (None: recorded by no run of this version)."""
        return attrs.pass_setup(self._study)

    def schedule_verdict(self) -> ScheduleVerdict | None:
        """The speculation schedule's race as ``confirm --schedule`` kept it; None if never raced."""
        return attrs.schedule_verdict(self._study)

    def best_at(self, concurrency: int) -> TrialRecord | None:
        """The winner at one load level: the study's best at the primary level, else by first measurement."""
        if concurrency == self.info.objective_concurrency:
            return self.best()
        return level_best(self.records(), concurrency, metric=self.info.objective_metric)

    def break_even(self) -> BreakEven:
        """The accept length each measured drafter must reach to beat the best (see :mod:`autotune.study.breakeven`)."""
        best = self.best()
        engine = self.info.space.engine if self.info.space else DEFAULT_ENGINE
        points = [p for r in self.records() if (p := speed_point(r, engine=engine)) is not None]
        best_tok_s = best.metric_value("decode_tok_s") if best is not None else None
        return break_even(points, best_tok_s=best_tok_s, best_trial=best.number if best is not None else None)

    def record(self, number: int) -> TrialRecord | None:
        return next((r for r in self.records() if r.number == number), None)

    def raced_record(self, number: int) -> TrialRecord | None:
        """Trial ``number`` with its race's figures where the race relaunched it (:func:`as_raced`)."""
        record = self.record(number)
        if record is None:
            return None
        return as_raced(record, self.info.confirmation, objective=self.info.objective_metric)

    def measurements(self, number: int) -> list[Measurement]:
        """The measurements trial ``number`` uploaded; a duplicate reads its original's."""
        record = self.record(number)
        if record is None:
            return []
        original = record.reused_from if record.reused_from is not None else number
        return artifacts.measurements(self._study.trials[original], self._artifacts)

    def importance(self) -> Importance:
        """Optuna's parameter importance (:mod:`~autotune.study.importance`): as the study keeps it
        while current, else computed (which imports Optuna)."""
        kept = attrs.recorded_importance(self._study)
        if kept is not None:
            return kept
        return compute_importance(self._study.optuna, levels=len(self.info.levels))

    def pareto(self) -> list[ParetoPoint] | None:
        if len(self._study.directions) != 2 or self.info.levels:  # a levels study draws its own front
            return None
        front = {t.number for t in self._study.optuna.best_trials}
        return [
            ParetoPoint(trial=t.number, values=list(t.values), on_front=t.number in front)
            for t in self._study.trials
            if t.state == "COMPLETE" and t.values is not None
        ]

    def profile(self, record: TrialRecord, *, concurrency: int | None = None) -> Profile:
        """The exported profile of one measured trial (measured at ``concurrency``, default the objective's)."""
        space = self.info.space
        if space is None:
            raise ValueError(f"study {self.name!r} does not record its search space")
        metrics = {
            name: ProfileMetric(value=float(m.value or 0.0), unit=m.unit, ci95=m.ci95, n=m.n)
            for name, m in record.measurement.metrics.items()
        }
        engine = record.engine or space.engine
        return Profile(
            study=self.name,
            trial=record.number,
            engine=engine,
            engine_version=record.launch.engine_version,
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
            confirmed_launches=record.measurement.confirmed_launches,
            verdict=confirmation.note
            if (confirmation := self.info.confirmation) and confirmation.best == record.number
            else None,
            gain=_gain_of(confirmation, record.number),
        )


def _gain_of(confirmation: Confirmation | None, trial: int) -> ProfileGain | None:
    """The trial's gain over the verdict's reference baseline, as the race table shows it."""
    gain = next((g for g in confirmation.versus if g.trial == trial), None) if confirmation is not None else None
    if gain is None:
        return None
    return ProfileGain(over=gain.baseline, gain=gain.gain, low=gain.low, high=gain.high)
