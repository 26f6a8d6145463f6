"""The snapshot reader gives ``show``/``export``/``report`` the same study Optuna's storage gives,
from a real SQLite database written by Optuna, without alembic or the ORM."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import optuna
import pytest
from optuna.storages._rdb import models

from autotune.engines.base import LaunchPlan
from autotune.errors import StorageError
from autotune.measure.client import CategoryStats, Measurement
from autotune.measure.statistics import Metric
from autotune.outcomes import OutcomeKind
from autotune.study import StudyView, artifacts
from autotune.study.snapshot import SCHEMA_VERSION, read_sqlite_study
from autotune.trial import TrialOutcome

pytestmark = pytest.mark.filterwarnings("ignore::optuna.exceptions.ExperimentalWarning")  # set_metric_names


def write_studies(path: Path) -> None:
    """Studies with every kind of stored row: states, infinite values, intermediate values (NaN and
    inf too), three distribution kinds, user and system attrs on trials and on the study."""
    url = f"sqlite:///{path}"
    single = optuna.create_study(study_name="s", storage=url, direction="maximize")
    multi = optuna.create_study(study_name="m", storage=url, directions=["maximize", "minimize"])
    for study in (single, multi):
        study.set_user_attr("space", {"engine": "sglang", "tuned": ["a", "b"]})
        study.set_metric_names(["tok/s"] if study is single else ["tok/s", "GiB"])
        for i in range(6):
            trial = study.ask()
            trial.suggest_int("a", 1, 8)
            trial.suggest_float("b", 0.5, 0.9, step=0.01)
            trial.suggest_categorical("c", ["x", None, 3])
            trial.set_user_attr("outcome", {"kind": "ok", "n": i, "notes": ["é", 1.5]})
            if study is single:
                trial.report(float(i), step=0)
                trial.report(float("nan") if i % 2 else float("inf"), step=1)
            if i == 4:
                study.tell(trial, state=optuna.trial.TrialState.FAIL)
            elif i < 4:
                worst = float("-inf") if i == 2 else float(i) * 1.5
                study.tell(trial, worst if study is single else [worst, 2.0])
        study.enqueue_trial({"a": 2, "b": 0.6, "c": "x"})


def fields(trial: optuna.trial.FrozenTrial) -> tuple[object, ...]:
    return (trial.number, trial.state, trial.values, trial.params, trial.distributions, trial.user_attrs,
            trial.system_attrs, trial.intermediate_values, trial.datetime_start, trial.datetime_complete)  # fmt: skip


@pytest.mark.parametrize("name", ["s", "m"])
def test_the_snapshot_equals_optunas_own_read(tmp_path: Path, name: str) -> None:
    write_studies(tmp_path / "s.db")
    stored = optuna.load_study(study_name=name, storage=f"sqlite:///{tmp_path / 's.db'}")
    snap = read_sqlite_study(tmp_path / "s.db", name)
    assert snap is not None
    assert [t.state.name for t in stored.trials] == ["COMPLETE"] * 4 + ["FAIL", "RUNNING", "WAITING"]
    # what autotune reads, without Optuna
    assert [(t.number, t.state, t.values, t.user_attrs, t.system_attrs) for t in snap.trials] == [
        (t.number, t.state.name, t.values, t.user_attrs, t.system_attrs) for t in stored.trials
    ]
    assert snap.study_name == name and snap.user_attrs == stored.user_attrs
    assert snap.directions == [d.name for d in stored.directions] and snap.complete_trials == 4
    # and as an Optuna study, for what only Optuna computes; NaN != NaN: compare intermediate values by their text
    built = snap.optuna
    assert [repr(fields(t)) for t in built.trials] == [repr(fields(t)) for t in stored.trials]
    assert built.user_attrs == stored.user_attrs
    assert built.directions == stored.directions and built.metric_names == stored.metric_names  # a system attr


def test_the_schema_it_reads_is_the_one_this_optuna_writes() -> None:
    assert SCHEMA_VERSION == models.SCHEMA_VERSION


def test_another_schema_or_study_is_left_to_optuna(tmp_path: Path) -> None:
    db = tmp_path / "s.db"
    write_studies(db)
    assert read_sqlite_study(db, "nope") is None
    assert read_sqlite_study(tmp_path / "missing.db", "s") is None
    with pytest.raises(StorageError, match="no study named 'nope'.*studies there: s, m"):
        StudyView.open("nope", f"sqlite:///{db}")
    with sqlite3.connect(db) as conn:
        conn.execute("UPDATE version_info SET schema_version = ?", (SCHEMA_VERSION - 1,))
    assert read_sqlite_study(db, "s") is None


def test_measurements_are_read_from_optunas_artifact_store_without_optuna(tmp_path: Path) -> None:
    """What the runner uploads through Optuna's artifact store, the view reads back from the files and
    the trial's system attrs alone."""
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="s", storage=url, direction="maximize")
    speed = Metric(name="decode_tok_s", unit="tok/s", value=50.0, ci95=1.0, n=2)
    measured = Measurement(
        objective="decode_tok_s", concurrency=1, max_tokens_cap=None, ignore_eos=False, warmup_requests=0,
        rounds=2, round_values=[49.0, 51.0], precision_target=0.02, precision_reached=True, stop_reason="precision",
        steadiness=None, metrics=[speed], duration_s=3.0, requests=[],
        categories=[CategoryStats(category="chat", requests=2, decode_tok_s=speed, accept_length=None)],
    )  # fmt: skip
    log = tmp_path / "trial-0000.log"
    log.write_text("the server's log\n")
    outcome = TrialOutcome(kind=OutcomeKind.OK, plan=LaunchPlan(engine="sglang", flags={}), measurements=[measured],
                           log_path=log)  # fmt: skip
    trial = study.ask()
    artifacts.upload(artifacts.artifact_store(tmp_path / "artifacts"), trial, outcome)
    study.tell(trial, 50.0)
    assert artifacts.ARTIFACT_PREFIX == optuna.artifacts._upload.ARTIFACTS_ATTR_PREFIX
    assert StudyView.open("s", url, artifacts_dir=tmp_path / "artifacts").measurements(0) == [measured]
    assert StudyView.open("s", url, artifacts_dir=tmp_path / "elsewhere").measurements(0) == []
