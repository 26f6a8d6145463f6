"""The verdicts table: a run split over several reports counted as one, each count the reports' sum."""

from __future__ import annotations

import json

import pytest

from benchmarks import verdict_tables
from tests.conftest import ROOT

SCOREBOARD = ROOT / "benchmarks" / "results" / "scoreboard-2026-12-07"


def test_a_run_split_over_two_reports_sums_their_counts(capsys: pytest.CaptureFixture[str]) -> None:
    parts = [SCOREBOARD / "verdicts-53400.json", SCOREBOARD / "verdicts-53410.json"]
    judged = [json.loads(p.read_text())["totals"]["judged"] for p in parts]
    verdict_tables.main([f"both={parts[0]},{parts[1]}", f"first={parts[0]}"])
    rows = capsys.readouterr().out.splitlines()[2:]
    assert rows[0].startswith(f"| both | {sum(judged)}/{sum(judged)} | 0/{sum(judged)} (0 %) |")
    assert rows[1].startswith(f"| first | {judged[0]}/{judged[0]} |")


@pytest.mark.parametrize(("arg", "says"), [("nameonly", "expected NAME=FILE"), ("x=missing.json", "no such report")])
def test_a_run_of_another_form_is_refused_in_one_line(capsys: pytest.CaptureFixture[str], arg: str, says: str) -> None:
    with pytest.raises(SystemExit) as exit_:
        verdict_tables.main([arg])
    assert exit_.value.code == 2
    assert says in capsys.readouterr().err
