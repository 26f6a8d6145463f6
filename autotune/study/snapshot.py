"""A stored study as plain data, read in one go for the commands that only read (``show``, ``export``,
``report``).

Importing Optuna (with numpy) takes about 0.5 s, and its RDB storage imports alembic to check the
schema and builds one ORM object per stored attribute (about 11,000 for 300 trials): seconds before
``show`` prints a line. For an SQLite file of the schema this Optuna writes, the same tables are
read here with :mod:`sqlite3`, in one read transaction (a consistent snapshot beside a running
tuner), into a :class:`StoredStudy`: what autotune reads of a study, without Optuna. The questions
only Optuna answers (importance not kept in the study, the Pareto front) ask :attr:`StoredStudy.optuna`,
an in-memory Optuna study built from the same rows on first use. Any other file, schema or URL goes
through Optuna's storage (:func:`from_optuna`).
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from functools import cache, cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import optuna
    from optuna.distributions import BaseDistribution

# optuna.storages._rdb.models.SCHEMA_VERSION of the Optuna whose tables this reads (a test keeps them
# equal); importing that module costs what this one saves.
SCHEMA_VERSION = 12
_SPECIAL = {"INF_POS": float("inf"), "INF_NEG": float("-inf"), "NAN": float("nan")}


@dataclass(frozen=True)
class StoredTrial:
    """One trial as autotune reads it (the part of Optuna's ``FrozenTrial`` that it reads)."""

    number: int
    state: str  # the name of Optuna's TrialState: COMPLETE, FAIL, RUNNING, WAITING, PRUNED
    values: list[float] | None
    user_attrs: dict[str, Any]
    system_attrs: dict[str, Any]


@dataclass
class StoredStudy:
    """One study as autotune reads it; :attr:`optuna` is the same study as Optuna's object."""

    study_name: str
    directions: list[str]  # MAXIMIZE or MINIMIZE per objective
    user_attrs: dict[str, Any]
    trials: list[StoredTrial]  # every trial, by number
    load: Callable[[], optuna.Study] = field(repr=False)

    @cached_property
    def optuna(self) -> optuna.Study:
        """The study as Optuna's object (imports Optuna: for what only Optuna computes)."""
        return self.load()

    @property
    def complete_trials(self) -> int:
        return sum(t.state == "COMPLETE" for t in self.trials)


def from_optuna(study: optuna.Study) -> StoredStudy:
    """A study opened through Optuna (a live one, or one of another storage) as the same plain data."""
    trials = [
        StoredTrial(
            number=t.number, state=t.state.name, values=t.values, user_attrs=t.user_attrs, system_attrs=t.system_attrs
        )
        for t in study.get_trials(deepcopy=False)
    ]
    directions = [d.name for d in study.directions]
    return StoredStudy(study.study_name, directions, study.user_attrs, trials, load=lambda: study)


def read_sqlite_study(path: Path, name: str) -> StoredStudy | None:
    """The study ``name`` of the SQLite file ``path``, or None where this reader does not apply (no
    such file or study, another schema): the caller then asks Optuna."""
    if not path.is_file():
        return None
    try:
        with contextlib.closing(sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)) as db:
            db.isolation_level = None  # explicit BEGIN: every SELECT below sees the same snapshot
            db.execute("BEGIN")
            version = db.execute("SELECT schema_version FROM version_info").fetchone()
            found = db.execute("SELECT study_id FROM studies WHERE study_name = ?", (name,)).fetchone()
            if version is None or version[0] != SCHEMA_VERSION or found is None:
                return None
            return _read(db, name, found[0])
    except sqlite3.Error:
        return None


@dataclass(frozen=True)
class _Rows:
    """The rows only Optuna's objects need, kept from the snapshot's transaction for :func:`_in_memory`."""

    study_system: list[tuple[str, str]]
    trials: list[tuple[int, int, str, str | None, str | None]]  # trial_id, number, state, start, complete
    params: list[tuple[int, str, float, str]]  # trial_id, name, internal value, distribution JSON
    steps: list[tuple[int, int, float | None, str]]  # trial_id, step, value, value type


def _read(db: sqlite3.Connection, name: str, study_id: int) -> StoredStudy:
    query = "SELECT direction FROM study_directions WHERE study_id = ? ORDER BY objective"
    directions = [d for (d,) in db.execute(query, (study_id,))]
    study_user = dict(_attrs(db, "study_user_attributes", study_id))
    of_study = "trial_id IN (SELECT trial_id FROM trials WHERE study_id = ?)"
    rows = _Rows(
        study_system=db.execute(
            "SELECT key, value_json FROM study_system_attributes WHERE study_id = ? ORDER BY 1", (study_id,)
        ).fetchall(),
        trials=db.execute(
            "SELECT trial_id, number, state, datetime_start, datetime_complete FROM trials WHERE study_id = ? "
            "ORDER BY number",
            (study_id,),
        ).fetchall(),
        params=db.execute(
            f"SELECT trial_id, param_name, param_value, distribution_json FROM trial_params WHERE {of_study} "
            "ORDER BY param_id",
            (study_id,),
        ).fetchall(),
        steps=db.execute(
            f"SELECT trial_id, step, intermediate_value, intermediate_value_type FROM trial_intermediate_values "
            f"WHERE {of_study}",
            (study_id,),
        ).fetchall(),
    )
    values: dict[int, dict[int, float]] = defaultdict(dict)
    for trial_id, objective, value, kind in db.execute(
        f"SELECT trial_id, objective, value, value_type FROM trial_values WHERE {of_study}", (study_id,)
    ):
        values[trial_id][objective] = _float(value, kind)
    user = _trial_attrs(db, "trial_user_attributes", of_study, study_id)
    system = _trial_attrs(db, "trial_system_attributes", of_study, study_id)
    trials = [
        StoredTrial(
            number=number,
            state=state,
            values=[values[trial_id][i] for i in sorted(values[trial_id])] if values[trial_id] else None,
            user_attrs=user[trial_id],
            system_attrs=system[trial_id],
        )
        for trial_id, number, state, _, _ in rows.trials
    ]
    stored = StoredStudy(name, directions, study_user, trials, load=lambda: _in_memory(stored, rows))
    return stored


def _attrs(db: sqlite3.Connection, table: str, study_id: int) -> list[tuple[str, Any]]:
    query = f"SELECT key, value_json FROM {table} WHERE study_id = ? ORDER BY 1"  # the table name is ours
    return [(key, json.loads(value)) for key, value in db.execute(query, (study_id,))]


def _trial_attrs(db: sqlite3.Connection, table: str, of_study: str, study_id: int) -> dict[int, dict[str, Any]]:
    found: dict[int, dict[str, Any]] = defaultdict(dict)
    query = f"SELECT trial_id, key, value_json FROM {table} WHERE {of_study} ORDER BY 1, 2"
    for trial_id, key, value in db.execute(query, (study_id,)):
        found[trial_id][key] = json.loads(value)
    return found


def _in_memory(stored: StoredStudy, rows: _Rows) -> optuna.Study:
    """The snapshot as an in-memory Optuna study; its trials built as Optuna's RDB storage builds them
    (``_build_frozen_trial_from_trial_model``)."""
    import optuna

    import autotune.study.storage  # noqa: F401  (its import quiets Optuna's logger: no INFO line for this study)

    params: dict[int, dict[str, Any]] = defaultdict(dict)
    dists: dict[int, dict[str, BaseDistribution]] = defaultdict(dict)
    for trial_id, param, internal, dist_json in rows.params:
        dist = _distribution(dist_json)
        params[trial_id][param] = dist.to_external_repr(internal)
        dists[trial_id][param] = dist
    steps: dict[int, dict[int, float]] = defaultdict(dict)
    for trial_id, step, value, kind in rows.steps:
        steps[trial_id][step] = _float(value, kind)
    memory = optuna.storages.InMemoryStorage()
    directions = [optuna.study.StudyDirection[d] for d in stored.directions]
    study_id = memory.create_new_study(directions, study_name=stored.study_name)
    for key, value in stored.user_attrs.items():
        memory.set_study_user_attr(study_id, key, value)
    for key, text in rows.study_system:
        memory.set_study_system_attr(study_id, key, json.loads(text))
    for trial, (trial_id, _, _, start, complete) in zip(stored.trials, rows.trials, strict=True):
        frozen = optuna.trial.FrozenTrial(
            number=trial.number,
            state=optuna.trial.TrialState[trial.state],
            value=None,
            values=trial.values,
            datetime_start=_local(start),
            datetime_complete=_local(complete),
            params=params[trial_id],
            distributions=dists[trial_id],
            user_attrs=trial.user_attrs,
            system_attrs=trial.system_attrs,
            intermediate_values=steps[trial_id],
            trial_id=trial_id,
        )
        memory.create_new_trial(study_id, template_trial=frozen)  # a deep copy: the snapshot stays as read
    return optuna.Study(study_name=stored.study_name, storage=memory)


@cache
def _distribution(text: str) -> BaseDistribution:
    from optuna.distributions import json_to_distribution

    return json_to_distribution(text)  # a study repeats a handful of distributions thousands of times


def _float(value: float | None, kind: str) -> float:
    return float(value) if kind == "FINITE" and value is not None else _SPECIAL[kind]


def _local(stored: str | None) -> datetime | None:
    """Optuna stores naive UTC and hands out naive local time."""
    if stored is None:
        return None
    return datetime.fromisoformat(stored).replace(tzinfo=timezone.utc).astimezone().replace(tzinfo=None)
