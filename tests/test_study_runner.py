"""The study runner driven through its front door: an in-memory storage and the twin's landscape as
the launcher (no processes), so these run in seconds.

What a trial taught about memory is stored exactly and learned the same way by a resumed study.
"""

from __future__ import annotations

import random
from pathlib import Path

import optuna
import yaml

from autotune.feasibility import FeasibilityModel
from autotune.outcomes import OutcomeKind
from autotune.study import StudyView, make_sampler
from autotune.study.memory import feasibility_models
from benchmarks.nights import LandscapeLauncher, make_runner
from benchmarks.problems import load_problem
from tests.conftest import TWIN_SPACE


def _wide_problem(tmp_path: Path):  # type: ignore[no-untyped-def]
    """The built-in space with fractions up to 0.97: launches die of memory on both sides."""
    data = yaml.safe_load(TWIN_SPACE.read_text())
    data["tuned"]["mem-fraction-static"]["high"] = 0.97
    data["tuned"]["mem-fraction-static"]["low"] = 0.55
    space = tmp_path / "wide.yaml"
    space.write_text(yaml.safe_dump(data))
    return load_problem("qwen3.6-27b-2xa6000", space)


def _runner(problem, tmp_path: Path, storage: optuna.storages.BaseStorage, seed: int):  # type: ignore[no-untyped-def]
    launcher = LandscapeLauncher(problem, problem.landscape(seed), random.Random(seed))
    return make_runner(
        problem, tmp_path, sampler=make_sampler("random", seed), launcher=launcher, storage=storage
    )


def _candidates(problem) -> list[dict[str, object]]:  # type: ignore[no-untyped-def]
    """Normalised flags over the memory-relevant knobs."""
    base = {**problem.space.fixed, "speculative-algorithm": "NEXTN"}  # tuned in the space (NEXTN or DFLASH)
    flags = []
    for fraction in (0.55, 0.6, 0.7, 0.8, 0.85, 0.9, 0.93, 0.95, 0.97):
        for graph in (4, 16, 48):
            for steps in (1, 3, 6):
                for ratio in (0.3, 0.6, 1.0):
                    candidate = {**base, "mem-fraction-static": fraction, "cuda-graph-max-bs-decode": graph,
                                 "speculative-num-steps": steps, "speculative-eagle-topk": 1,
                                 "mamba-full-memory-ratio": ratio, "max-running-requests": 16}  # fmt: skip
                    normalised = problem.normalise(candidate)
                    if normalised is not None:
                        flags.append(normalised)
    return flags


def test_a_resumed_study_predicts_memory_exactly_as_the_live_one(tmp_path: Path) -> None:
    problem = _wide_problem(tmp_path)
    storage = optuna.storages.InMemoryStorage()
    live = _runner(problem, tmp_path, storage, seed=3)
    live.enqueue_baselines()
    live.run(trials=40, timeout_s=None)
    records = live.records()
    died = [r for r in records if r.outcome in (OutcomeKind.MEMORY_TOO_LOW.value, OutcomeKind.MEMORY_TOO_HIGH.value)]
    assert died, "the wide space should make some launches die of memory"
    assert all(r.lessons.memory is not None and r.lessons.memory.side is not None for r in died)

    resumed = _runner(problem, tmp_path, storage, seed=4)  # a new process reading the same storage
    untaught: FeasibilityModel = feasibility_models(problem.space, live.engines, live.inventory)["sglang"]
    candidates = _candidates(problem)
    live_verdicts = [live.feasibility["sglang"].predict(f) for f in candidates]
    assert [resumed.feasibility["sglang"].predict(f) for f in candidates] == live_verdicts
    assert live_verdicts != [untaught.predict(f) for f in candidates], "the lessons should change predictions"


def test_records_carry_the_measurement_and_the_view_reads_them(tmp_path: Path) -> None:
    problem = _wide_problem(tmp_path)
    storage = optuna.storages.InMemoryStorage()
    runner = _runner(problem, tmp_path, storage, seed=1)
    runner.enqueue_baselines()
    runner.run(trials=8, timeout_s=None)
    view = StudyView(runner.study)
    records = view.records()
    assert [r.baseline for r in records[:2]] == [b.name for b in problem.space.baselines]
    measured = [r for r in records if r.outcome == OutcomeKind.OK.value and r.reused_from is None]
    assert measured
    for record in measured:
        speed = record.measurement.metrics["decode_tok_s"]
        assert speed.unit == "tok/s" and speed.value == record.value
    best = view.best()  # unconfirmed: the best first measurement (a relaunch is not one)
    first_measured = [r.value or 0.0 for r in records if r.feasible and r.confirm_of is None]
    assert best is not None and best.value == max(first_measured)
    assert view.info.space is not None and view.info.tuned == list(problem.space.tuned)
    profile = view.profile(best)
    assert profile.flags == best.flags and profile.metrics["decode_tok_s"].value == best.value
