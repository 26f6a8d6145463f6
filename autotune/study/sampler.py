"""The study's sampler: Optuna's TPE, random draws, or the model-guided search (:mod:`autotune.study.guided`).

TPE is multivariate (flags modelled jointly), grouped (a flag present only under a condition is
modelled with the trials that have it), with a constant liar so parallel workers do not propose the
same thing. What the study adds around the sampler (pre-launch rules, the race) stays outside it;
the heuristics once layered on TPE were judged and removed (docs/search.md).

One exception, :class:`Unstuck`: a proposal the rules answer without a launch (reused, or skipped as
predicted to fail) tells TPE nothing it did not know, so a TPE whose only served region is measured
already proposes it again and again and the night stops launching. After :data:`STALL_PROPOSALS` such
proposals in a row, the next is a random draw, until one launches.

And :class:`PossibleContexts`, around whichever sampler runs: a context the study already knows cannot
hold one request at any fraction the space allows (the rule ``context-fit``'s knowledge) is not
proposed; the sampler's draw of it is replaced by a draw among the contexts still possible, so the trial's
parameters are what ran (as Optuna's ``PartialFixedSampler`` fixes values). Without it, TPE and random
draws keep proposing such a context, every proposal is skipped unlaunched, and a night runs out of
proposals before it runs out of launches.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.study import attrs

SamplerName = Literal["tpe", "random", "model"]

# Proposals answered without a launch, in a row, before a random draw; chosen on the dev slice
# (benchmarks/results/memory-budget-2026-12-05/).
STALL_PROPOSALS = 3


def unlaunched_in_a_row(trials: Sequence[FrozenTrial]) -> int:
    """How many of the latest finished proposals, in a row, the rules answered without a launch."""
    count = 0
    for trial in reversed(trials):
        if not attrs.answered_without_launch(trial):
            break
        count += 1
    return count


class Wrapping(optuna.samplers.BaseSampler):
    """A sampler around ``base``: every call passes through unless a subclass changes it (Optuna's
    samplers keep state per trial in these hooks, so a wrapper must forward them all)."""

    def __init__(self, base: optuna.samplers.BaseSampler) -> None:
        self.base = base

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        return self.base.sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        self.base.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()


class Unstuck(Wrapping):
    """``base`` (TPE), but a random draw after ``after`` proposals in a row were answered without a launch."""

    def __init__(self, base: optuna.samplers.BaseSampler, seed: int | None, *, after: int = STALL_PROPOSALS) -> None:
        super().__init__(base)
        self.random = optuna.samplers.RandomSampler(seed=seed)
        self.after = after
        self._stalled_at: tuple[int, bool] | None = None  # (trial number, stalled): read once per trial

    def _stalled(self, study: optuna.Study, trial: FrozenTrial) -> bool:
        if self._stalled_at is None or self._stalled_at[0] != trial.number:
            finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.PRUNED))
            stalled = unlaunched_in_a_row(sorted(finished, key=lambda t: t.number)) >= self.after
            self._stalled_at = (trial.number, stalled)
        return self._stalled_at[1]

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if self._stalled(study, trial):
            return {}
        return self.base.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space:
            return {}
        return self.base.sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        sampler = self.random if self._stalled(study, trial) else self.base
        return sampler.sample_independent(study, trial, param_name, param_distribution)

    def reseed_rng(self) -> None:
        super().reseed_rng()
        self.random.reseed_rng()


class PossibleContexts(Wrapping):
    """``base``, but where its draw of a flag in ``names`` is a value ``ruled_out`` names for the
    proposal's other parameters, a value it does not name, drawn uniformly (seeded by the trial's number:
    a study repeats its proposals, workers draw apart); left as drawn when it names every choice."""

    def __init__(
        self,
        base: optuna.samplers.BaseSampler,
        names: frozenset[str],
        ruled_out: Callable[[Mapping[str, Any]], Mapping[str, frozenset[int]]],
    ) -> None:
        super().__init__(base)
        self.names = names
        self.ruled_out = ruled_out

    def _possible(
        self, trial: FrozenTrial, params: Mapping[str, Any], name: str, distribution: BaseDistribution, value: Any
    ) -> Any:
        if name not in self.names or not isinstance(distribution, optuna.distributions.CategoricalDistribution):
            return value
        ruled = self.ruled_out({k: v for k, v in params.items() if k != name}).get(name, frozenset())
        if value not in ruled:
            return value
        left = [c for c in distribution.choices if c not in ruled]
        return random.Random(trial.number).choice(left) if left else value

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        sampled = self.base.sample_relative(study, trial, search_space)
        params = {**trial.params, **sampled}
        return {
            name: self._possible(trial, params, name, search_space[name], value) if name in search_space else value
            for name, value in sampled.items()
        }

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        value = self.base.sample_independent(study, trial, param_name, param_distribution)
        return self._possible(trial, trial.params, param_name, param_distribution, value)


def make_sampler(name: SamplerName, seed: int | None, *, unstuck: bool = True) -> optuna.samplers.BaseSampler:
    """The study's sampler: TPE (module docstring), Optuna's random sampler, or the model-guided search
    (speculative flags from the calibrated pass model, the rest and its fallback TPE); ``seed`` seeds it;
    ``unstuck``: TPE draws at random when proposals stop launching (:class:`Unstuck`)."""
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "model":
        from autotune.study.guided import ModelGuided

        return ModelGuided(make_sampler("tpe", seed, unstuck=unstuck), seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        tpe = optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=2, n_ei_candidates=64
        )
    return Unstuck(tpe, seed) if unstuck else tpe
