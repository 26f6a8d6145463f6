"""A stored SQLite study read in one go for the commands that only read (``show``, ``export``, ``report``).

Optuna's RDB storage imports alembic to check the schema and builds one ORM object per stored
attribute (about 11,000 for 300 trials): seconds before ``show`` prints a line. For an SQLite file
of the schema this Optuna writes, the same tables are read here with :mod:`sqlite3`, in one read
transaction (a consistent snapshot beside a running tuner), into an in-memory Optuna study that
answers like the stored one. Any other file, schema or URL goes through Optuna's storage.
"""

from __future__ import annotations

import contextlib
import json
import sqlite3
from collections import defaultdict
from datetime import datetime, timezone
from functools import cache
from pathlib import Path
from typing import Any

import optuna
from optuna.distributions import BaseDistribution, json_to_distribution
from optuna.study import StudyDirection
from optuna.trial import FrozenTrial, TrialState

# optuna.storages._rdb.models.SCHEMA_VERSION of the Optuna whose tables this reads (a test keeps them
# equal); importing that module costs what this one saves.
SCHEMA_VERSION = 12
_SPECIAL = {"INF_POS": float("inf"), "INF_NEG": float("-inf"), "NAN": float("nan")}


def read_sqlite_study(path: Path, name: str) -> optuna.Study | None:
    """The study ``name`` of the SQLite file ``path`` as an in-memory study, or None where this
    reader does not apply (no such file or study, another schema): the caller then asks Optuna."""
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
            return _in_memory(db, name, found[0])
    except sqlite3.Error:
        return None


def _in_memory(db: sqlite3.Connection, name: str, study_id: int) -> optuna.Study:
    query = "SELECT direction FROM study_directions WHERE study_id = ? ORDER BY objective"
    directions = [StudyDirection[d] for (d,) in db.execute(query, (study_id,))]
    storage = optuna.storages.InMemoryStorage()
    new_id = storage.create_new_study(directions, study_name=name)  # its INFO line: silenced in storage.py
    for key, value in _attrs(db, "study_user_attributes", "study_id", study_id):
        storage.set_study_user_attr(new_id, key, value)
    for key, value in _attrs(db, "study_system_attributes", "study_id", study_id):
        storage.set_study_system_attr(new_id, key, value)
    for trial in _trials(db, study_id):
        storage.create_new_trial(new_id, template_trial=trial)
    return optuna.Study(study_name=name, storage=storage)


def _attrs(db: sqlite3.Connection, table: str, column: str, owner: int) -> list[tuple[str, Any]]:
    query = f"SELECT key, value_json FROM {table} WHERE {column} = ? ORDER BY 1"  # table and column names are ours
    return [(key, json.loads(value)) for key, value in db.execute(query, (owner,))]


def _trials(db: sqlite3.Connection, study_id: int) -> list[FrozenTrial]:
    """Every trial of the study, built as Optuna's RDB storage builds them (``_build_frozen_trial``)."""
    rows = db.execute(
        "SELECT trial_id, number, state, datetime_start, datetime_complete FROM trials WHERE study_id = ? "
        "ORDER BY number",
        (study_id,),
    ).fetchall()
    of_study = "trial_id IN (SELECT trial_id FROM trials WHERE study_id = ?)"
    values: dict[int, dict[int, float]] = defaultdict(dict)
    for trial_id, objective, value, kind in db.execute(
        f"SELECT trial_id, objective, value, value_type FROM trial_values WHERE {of_study}", (study_id,)
    ):
        values[trial_id][objective] = _float(value, kind)
    steps: dict[int, dict[int, float]] = defaultdict(dict)
    for trial_id, step, value, kind in db.execute(
        f"SELECT trial_id, step, intermediate_value, intermediate_value_type FROM trial_intermediate_values "
        f"WHERE {of_study}",
        (study_id,),
    ):
        steps[trial_id][step] = _float(value, kind)
    params: dict[int, dict[str, Any]] = defaultdict(dict)
    dists: dict[int, dict[str, BaseDistribution]] = defaultdict(dict)
    for trial_id, param, internal, dist_json in db.execute(
        f"SELECT trial_id, param_name, param_value, distribution_json FROM trial_params WHERE {of_study} "
        "ORDER BY param_id",
        (study_id,),
    ):
        dist = _distribution(dist_json)
        params[trial_id][param] = dist.to_external_repr(internal)
        dists[trial_id][param] = dist
    user = _trial_attrs(db, "trial_user_attributes", of_study, study_id)
    system = _trial_attrs(db, "trial_system_attributes", of_study, study_id)
    return [
        FrozenTrial(
            number=number,
            state=TrialState[state],
            value=None,
            values=[values[trial_id][i] for i in sorted(values[trial_id])] if values[trial_id] else None,
            datetime_start=_local(start),
            datetime_complete=_local(complete),
            params=params[trial_id],
            distributions=dists[trial_id],
            user_attrs=user[trial_id],
            system_attrs=system[trial_id],
            intermediate_values=steps[trial_id],
            trial_id=trial_id,
        )
        for trial_id, number, state, start, complete in rows
    ]


def _trial_attrs(db: sqlite3.Connection, table: str, of_study: str, study_id: int) -> dict[int, dict[str, Any]]:
    found: dict[int, dict[str, Any]] = defaultdict(dict)
    query = f"SELECT trial_id, key, value_json FROM {table} WHERE {of_study} ORDER BY 1, 2"
    for trial_id, key, value in db.execute(query, (study_id,)):
        found[trial_id][key] = json.loads(value)
    return found


@cache
def _distribution(text: str) -> BaseDistribution:
    return json_to_distribution(text)  # a study repeats a handful of distributions thousands of times


def _float(value: float | None, kind: str) -> float:
    return float(value) if kind == "FINITE" and value is not None else _SPECIAL[kind]


def _local(stored: str | None) -> datetime | None:
    """Optuna stores naive UTC and hands out naive local time."""
    if stored is None:
        return None
    return datetime.fromisoformat(stored).replace(tzinfo=timezone.utc).astimezone().replace(tzinfo=None)
