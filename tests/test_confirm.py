"""A best that survives a second look: finalists raced on fresh, interleaved launches; equals resolved
toward the engine's defaults; hopeless trials stopped early without changing the best.

Driven through the study runner's front door (an in-memory storage) with the twin's landscape as the
launcher, so every launch is a noisy measurement of a known true speed.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.engines.base import LaunchPlan
from autotune.measure.protocol import EarlyStop
from autotune.report.console import trial_detail
from autotune.study import StudyView, make_sampler
from autotune.study.race import FinalistsRace, race_finalists
from autotune.trial import TrialOutcome
from benchmarks.nights import LandscapeLauncher, make_runner, run_study
from benchmarks.problems import load_problem, solve
from tests.conftest import TWIN_SPACE

HAND_FOUND = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3, "speculative-eagle-topk": 1,
              "speculative-num-draft-tokens": 4, "mem-fraction-static": 0.88, "max-running-requests": 16,
              "mamba-full-memory-ratio": 0.5}  # fmt: skip
BEST_DEPTH = {"speculative-num-steps": 4, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 5}


def _problem(tmp_path: Path, baselines: list[dict[str, Any]]):  # type: ignore[no-untyped-def]
    data = yaml.safe_load(TWIN_SPACE.read_text())
    data["baselines"] = baselines
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data))
    return load_problem("qwen3.6-27b-2xa6000", space)


class Lucky:
    """The landscape, except that the first launch of one configuration measures ``boost`` too high."""

    def __init__(self, inner: Any, flags: dict[str, Any], boost: float) -> None:
        self.inner, self.flags, self.boost, self.used = inner, flags, boost, False

    def __call__(
        self, plan: LaunchPlan, log_path: Path, phase: Any, early_stop: EarlyStop | None = None
    ) -> TrialOutcome:
        outcome: TrialOutcome = self.inner(plan, log_path, phase, early_stop)
        if self.used or any(plan.flags.get(k) != v for k, v in self.flags.items()) or outcome.measurement is None:
            return outcome
        self.used = True
        measurement = outcome.measurement
        metrics = [m.model_copy(update={"value": m.value * self.boost}) if m.name == "decode_tok_s" else m
                   for m in measurement.metrics]  # fmt: skip
        return outcome.model_copy(update={"measurements": [measurement.model_copy(update={"metrics": metrics})]})


def _runner(problem, tmp_path: Path, seed: int, *, launcher: Any = None):  # type: ignore[no-untyped-def]
    launcher = launcher or LandscapeLauncher(problem, problem.landscape(seed), random.Random(seed))
    return make_runner(problem, tmp_path, sampler=make_sampler("tpe", seed), launcher=launcher,
                             storage=optuna.storages.InMemoryStorage())  # fmt: skip


def test_two_configurations_of_equal_speed_are_a_tie_resolved_toward_less_memory(tmp_path: Path) -> None:
    # The twin's decode speed at concurrency 1 does not depend on the static memory fraction.
    problem = _problem(tmp_path, [{"name": "roomy", "flags": HAND_FOUND},
                                  {"name": "lean", "flags": {**HAND_FOUND, "mem-fraction-static": 0.8}}])  # fmt: skip
    land = problem.landscape(0)
    flags = [problem.normalise({**problem.space.fixed, **b.flags}) for b in problem.space.baselines]
    assert land.true_value(flags[0]) == land.true_value(flags[1])
    ties = 0
    for seed in range(5):
        runner = _runner(problem, tmp_path / str(seed), seed)
        runner.enqueue_baselines()
        runner.run(trials=2, timeout_s=None)
        # Equivalence within ±2 % takes launches to show: the budget is raised past the search's two.
        result = race_finalists(runner, FinalistsRace(top=2, launches=8, budget=16))
        assert result is not None and len(result.finalists) == 2
        assert all(2 <= len(f.values) <= 8 for f in result.finalists)  # fresh launches; a settled race stops
        if result.tied_with:
            ties += 1
            assert StudyView(runner.study).best().baseline == "lean"  # type: ignore[union-attr]
            assert "lean" in result.note
    assert ties >= 3, f"equal speeds were not shown equal in {5 - ties} of 5 seeds (4 of 5 when written)"


def test_a_lucky_first_measurement_is_corrected_by_confirmation(tmp_path: Path) -> None:
    best_flags = {**HAND_FOUND, **BEST_DEPTH}
    problem = _problem(tmp_path, [{"name": "hand-found", "flags": HAND_FOUND}, {"name": "deeper", "flags": best_flags}])
    land = problem.landscape(1)
    hand, deeper = (problem.normalise({**problem.space.fixed, **b.flags}) for b in problem.space.baselines)
    assert land.true_value(deeper) > land.true_value(hand) * 1.03  # truly better by a few percent
    inner = LandscapeLauncher(problem, land, random.Random(1))
    runner = _runner(problem, tmp_path, 1, launcher=Lucky(inner, HAND_FOUND, boost=1.15))
    runner.enqueue_baselines()
    runner.run(trials=2, timeout_s=None)
    view = StudyView(runner.study)
    assert view.best().baseline == "hand-found"  # type: ignore[union-attr]  # the lucky single measurement
    assert view.best().measurement.confirmed_launches is None  # type: ignore[union-attr]
    result = race_finalists(runner, FinalistsRace(top=2, launches=2))
    assert result is not None
    view = StudyView(runner.study)
    best = view.best()
    assert best is not None and best.baseline == "deeper" and best.measurement.confirmed_launches == 2
    assert result.first_best == view.first_best().number  # type: ignore[union-attr]
    assert view.profile(best).confirmed_launches == 2
    assert best.value == pytest.approx(land.true_value(deeper), rel=0.03)  # the mean over launches, not the max
    # the runner-up exported by number (export --trial) carries its race too, not its lucky first figure
    lucky = next(r for r in view.records() if r.baseline == "hand-found" and r.confirm_of is None)
    raced = view.raced_record(lucky.number)
    assert raced is not None and raced.measurement.confirmed_launches == 2 and view.profile(raced).confirmed_launches
    assert raced.value == pytest.approx(land.true_value(hand), rel=0.03) and lucky.value > raced.value * 1.08
    finalist = next(f for f in result.finalists if f.trial == lucky.number)
    detail = trial_detail(lucky, finalist).renderables[0]
    labels, texts = (list(map(str, column._cells)) for column in detail.columns)  # type: ignore[attr-defined]
    rows = dict(zip(labels, texts, strict=True))
    assert rows["race"].startswith(f"{finalist.mean:.4g} ± ") and "over 2 relaunches" in rows["race"]
    assert rows["value"].startswith(f"{lucky.value:g}")  # show --trial keeps the first measurement beside it


class Swinging:
    """The landscape, with each launch's decode rate scaled by the next of ``factors`` in turn (a noisy
    machine whose swings average out over every config's launches)."""

    def __init__(self, inner: Any, factors: list[float]) -> None:
        self.inner, self.factors, self.launches = inner, factors, 0

    def __call__(
        self, plan: LaunchPlan, log_path: Path, phase: Any, early_stop: EarlyStop | None = None
    ) -> TrialOutcome:
        outcome: TrialOutcome = self.inner(plan, log_path, phase, early_stop)
        factor = self.factors[self.launches % len(self.factors)]
        self.launches += 1
        measurement = outcome.measurement
        assert measurement is not None
        metrics = [m.model_copy(update={"value": m.value * factor}) if m.name == "decode_tok_s" else m
                   for m in measurement.metrics]  # fmt: skip
        return outcome.model_copy(update={"measurements": [measurement.model_copy(update={"metrics": metrics})]})


def test_under_heavy_noise_a_much_slower_config_is_no_tie_even_within_the_noise(tmp_path: Path) -> None:
    # Launches swing by ±30 %, not alike within a round: the interval spans both configs, but a 1-step
    # draft is far slower than the hand-found 3-step one; the simpler config must not win a "tie" it is
    # 20 % behind, and the verdict says the race is open.
    cautious = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 1, "speculative-eagle-topk": 1,
                "speculative-num-draft-tokens": 2}  # fmt: skip
    problem = _problem(tmp_path, [{"name": "hand-found", "flags": HAND_FOUND}, {"name": "cautious", "flags": cautious}])
    land = problem.landscape(2)
    hand, slow = (problem.normalise({**problem.space.fixed, **b.flags}) for b in problem.space.baselines)
    assert land.true_value(slow) < land.true_value(hand) * 0.9
    inner = LandscapeLauncher(problem, land, random.Random(2))
    # Interleaved launches A B | A B A B: the rounds swing the two configs opposite ways.
    runner = _runner(problem, tmp_path, 2, launcher=Swinging(inner, [1.0, 1.0, 1.3, 0.7, 0.7, 1.3]))
    runner.enqueue_baselines()
    runner.run(trials=2, timeout_s=None)
    result = race_finalists(runner, FinalistsRace(top=2, launches=2))
    assert result is not None
    top, other = result.finalists
    assert top.ci95 is not None and other.ci95 is not None and top.mean - other.mean < top.ci95 + other.ci95
    assert not result.tied_with and not result.settled and result.more_launches
    assert "would settle it" in result.note
    assert StudyView(runner.study).best().baseline == "hand-found"  # type: ignore[union-attr]


def test_hopeless_trials_stop_early_and_the_best_does_not_change(tmp_path: Path) -> None:
    problem = load_problem("qwen3.6-27b-2xa6000", TWIN_SPACE)
    optimum = solve(problem).tok_s
    on, off = (run_study(problem, 2, 25, early_stop=flag, name=str(flag)) for flag in (True, False))
    # The same values reach the sampler either way, so the same configurations are tried...
    assert [s.measured for s in on.steps] == [s.measured for s in off.steps]
    pairs = list(zip(on.steps, off.steps, strict=True))
    shorter = [i for i, (a, b) in enumerate(pairs) if a.seconds < b.seconds]
    assert shorter, "some clearly slower configurations should have been stopped early"
    # ...and only ones clearly below the best measured before them are cut short (the bar is the
    # incumbent's mean, the noise the study's own: its re-measurements show it about 1-2 % here).
    for i in shorter:
        before = max(s.measured or 0.0 for s in on.steps[:i])
        assert on.steps[i].measured is not None and on.steps[i].measured < 0.97 * before
    summary_on, summary_off = (run.summary(optimum, 2) for run in (on, off))
    assert summary_on["final_true_tok_s"] == summary_off["final_true_tok_s"]
    assert summary_on["gpu_hours"] < summary_off["gpu_hours"]
