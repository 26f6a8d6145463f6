"""``autotune show`` on an SQLite study reads it without SQLAlchemy's ORM and alembic (the snapshot),
and prints the same as a study opened through Optuna's storage."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
