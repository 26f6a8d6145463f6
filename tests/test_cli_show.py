"""``autotune show`` on an SQLite study reads it without SQLAlchemy's ORM and alembic (the snapshot),
and prints the same as a study opened through Optuna's storage; with the importance the runner kept
in the study, without Optuna at all, and the same as when it computes the importance itself."""

from __future__ import annotations

import json
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import optuna
import pytest

from tests.conftest import load_benchmark

# ``show --json`` in one interpreter, then which heavy modules it loaded.
PROBE = """
import json, sys
from autotune.cli import main
sys.argv = ["autotune", "show", "bench", "--json", "--studies-dir", sys.argv[1]]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
print("\\nMODULES " + json.dumps(sorted(m for m in sys.modules if m.split(".")[0] in ("sqlalchemy", "alembic"))))
"""


@pytest.mark.slow
def test_show_reads_sqlite_without_the_orm_and_prints_what_optuna_reads(tmp_path: Path) -> None:
    load_benchmark("cli_timing").build_study(tmp_path, 12)  # the benchmark's own 12-trial study, on SQLite
    proc = subprocess.run([sys.executable, "-c", PROBE, str(tmp_path)], capture_output=True, text=True, check=True)
    shown, _, modules = proc.stdout.rpartition("\nMODULES ")
    assert json.loads(modules) == []

    from autotune.study import StudyView, load_existing_study

    through_optuna = StudyView(load_existing_study("bench", f"sqlite:///{tmp_path}/bench.db"))
    trials = json.loads(shown)["trials"]
    assert len(trials) == 12
    assert trials == [r.model_dump(mode="json") for r in through_optuna.records()]


# ``show`` (its arguments after the script's), then which modules a read-only command should not need.
SHOW = """
import json, sys
from autotune.cli import main
sys.argv = ["autotune", "show", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    assert not exc.code, exc.code
heavy = ("optuna", "numpy", "sqlalchemy", "httpx")
print("\\nMODULES " + json.dumps(sorted(m for m in heavy if m in sys.modules)))
"""


def show(folder: Path, *args: str) -> tuple[str, list[str]]:
    """What ``show`` printed and the heavy modules it imported."""
    proc = subprocess.run([sys.executable, "-c", SHOW, "bench", "--studies-dir", str(folder), *args],
                          capture_output=True, text=True, check=True)  # fmt: skip
    shown, _, modules = proc.stdout.rpartition("\nMODULES ")
    return shown, json.loads(modules)


@pytest.fixture(scope="module")
def kept(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A 12-trial study whose runner kept the importance in it."""
    folder = tmp_path_factory.mktemp("kept")
    load_benchmark("cli_timing").build_study(folder, 12)
    return folder


def _copy(kept: Path, to: Path) -> str:
    shutil.copy(kept / "bench.db", to / "bench.db")
    return f"sqlite:///{to / 'bench.db'}"


@pytest.mark.slow
def test_show_with_the_kept_importance_imports_no_optuna_and_prints_what_computing_it_prints(
    kept: Path, tmp_path: Path
) -> None:
    cached, modules = show(kept)
    assert modules == []
    assert "parameter importance (PED-ANOVA, 12 completed trials)" in cached
    as_json, modules = show(kept, "--json")
    assert modules == []
    with sqlite3.connect(_copy(kept, tmp_path).removeprefix("sqlite:///")) as db:  # as a study kept before the cache
        assert db.execute("DELETE FROM study_user_attributes WHERE key = 'importance'").rowcount == 1
    computed, modules = show(tmp_path)
    assert "optuna" in modules
    assert computed == cached
    assert show(tmp_path, "--json")[0] == as_json


@pytest.mark.slow
def test_a_kept_importance_older_than_the_trials_is_computed_afresh(kept: Path, tmp_path: Path) -> None:
    from autotune.study import StudyView
    from autotune.study.importance import compute_importance

    url = _copy(kept, tmp_path)
    kept_one = StudyView.open("bench", url).importance()
    assert kept_one.trials_used == 12 and kept_one.values
    study = optuna.load_study(study_name="bench", storage=url)
    assert kept_one == compute_importance(study, levels=0)
    # a trial completed after the runner kept it (another worker's, say)
    last = study.trials[-1]
    study.add_trial(optuna.trial.create_trial(params=last.params, distributions=last.distributions, value=1.0))
    fresh = StudyView.open("bench", url).importance()
    assert fresh.trials_used == 13
    assert fresh == compute_importance(study, levels=0)
    assert "optuna" in show(tmp_path)[1]
