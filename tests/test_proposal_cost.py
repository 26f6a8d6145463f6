"""The proposal-cost benchmark: every trial of a model-guided night gets its sampler's time, and the
model's own proposals are told from its fallback's (times not asserted: the machine may be loaded)."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import proposal_cost

pytestmark = pytest.mark.twin


def test_each_trial_of_a_model_night_is_timed_and_the_models_proposals_are_named(tmp_path: Path) -> None:
    problem, _ = proposal_cost.the_problem(None, tmp_path / "configs")
    baselines = len(problem.space.baselines)
    costs = proposal_cost.night_costs(problem, "model", baselines + 4, 1, tmp_path)
    assert [c.number for c in costs] == list(range(baselines + 4))  # one cost per trial, in order
    assert all(c.wall_s > 0 for c in costs)
    assert not any(c.by_model for c in costs[:baselines])  # the baselines are queued, not proposed
    assert any(c.by_model for c in costs[baselines:])  # the demo's space has a pass model: it proposes


def test_the_benchmark_prints_a_verdict_per_sampler(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    proposal_cost.main(["--trials", "5", "--samplers", "tpe"])
    out = capsys.readouterr().out
    assert "tpe: the last 10 proposals' worst" in out and "for 5 trials" in out
