"""The study's sampler: Optuna's TPE, or random draws.

TPE is multivariate (flags modelled jointly), grouped (a flag present only under a condition is
modelled with the trials that have it), with a constant liar so parallel workers do not propose the
same thing. What the study adds around the sampler (pre-launch rules, the race) stays outside it;
the heuristics once layered on TPE were judged and removed (docs/search.md).
"""

from __future__ import annotations

import warnings
from typing import Literal

import optuna

SamplerName = Literal["tpe", "random"]


def make_sampler(name: SamplerName, seed: int | None) -> optuna.samplers.BaseSampler:
    """The study's sampler: TPE (module docstring) or Optuna's random sampler; ``seed`` seeds it."""
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=2, n_ei_candidates=64
        )
