"""The study's sampler: TPE as configured, or random draws; a seed repeats a study's proposals."""

from __future__ import annotations

from collections.abc import Mapping

import optuna
import pytest

from autotune.study.sampler import PossibleContexts, SamplerName, Unstuck, make_sampler


def _proposals(name: SamplerName, seed: int) -> list[dict[str, object]]:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(direction="maximize", sampler=make_sampler(name, seed))

    def objective(trial: optuna.Trial) -> float:
        steps = trial.suggest_int("steps", 1, 8)
        topk = trial.suggest_categorical("topk", [1, 2, 4])
        draft = trial.suggest_int("draft", 2, 16) if topk > 1 else steps + 1
        return steps * topk / draft

    study.optimize(objective, n_trials=8)
    return [t.params for t in study.trials]


def test_tpe_models_jointly_from_the_third_trial() -> None:
    unstuck = make_sampler("tpe", 3)
    assert isinstance(unstuck, Unstuck) and unstuck.after == 3  # random draws once proposals stop launching
    sampler = unstuck.base
    assert isinstance(sampler, optuna.samplers.TPESampler)
    assert sampler._multivariate and sampler._group and sampler._constant_liar
    assert sampler._n_startup_trials == 2 and sampler._n_ei_candidates == 64


@pytest.mark.parametrize("name", ["tpe", "random"])
def test_a_seed_repeats_the_proposals(name: SamplerName) -> None:
    assert _proposals(name, 3) == _proposals(name, 3)
    assert _proposals(name, 3) != _proposals(name, 4)
    assert isinstance(make_sampler("random", 1), optuna.samplers.RandomSampler)


@pytest.mark.parametrize("name", ["tpe", "random"])
def test_a_context_ruled_out_for_the_other_flags_is_redrawn_among_the_possible(name: SamplerName) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    asked: list[dict[str, object]] = []

    def ruled_out(params: Mapping[str, object]) -> dict[str, frozenset[int]]:
        asked.append(dict(params))  # with a draft, the two longest contexts cannot fit; without, the longest
        return {"context-length": frozenset({262144, 131072} if params.get("draft") else {262144})}

    sampler = PossibleContexts(make_sampler(name, 3), frozenset({"context-length"}), ruled_out)
    study = optuna.create_study(direction="maximize", sampler=sampler)

    def objective(trial: optuna.Trial) -> float:
        draft = trial.suggest_categorical("draft", [False, True])
        context = trial.suggest_categorical("context-length", [262144, 131072, 65536])
        return context / 65536 + draft

    study.optimize(objective, n_trials=30)
    drawn = [(t.params["draft"], t.params["context-length"]) for t in study.trials]
    assert all(c != 262144 and not (d and c == 131072) for d, c in drawn)
    assert {c for _, c in drawn} == {131072, 65536}
    assert any("draft" in params for params in asked)  # the other flags reach the question
