"""The study's sampler: Optuna's TPE, or random draws.

TPE is multivariate (flags modelled jointly), grouped (a flag present only under a condition is
modelled with the trials that have it), with a constant liar so parallel workers do not propose the
same thing; it models from the third trial on (the baselines count as start-up trials) and scores 64
candidates a draw. What the study loop adds around it, it adds outside the sampler: duplicates and
predicted failures cost no launch (the pre-launch rules), a close challenger and its incumbent are
measured again (the runner's intensification), and the finalists are raced at the end.

Six heuristics once sat on top of TPE (neighbours of the best, moving on along the number that made
the best, draft-tree sizes scaled with depth and width, a named failure's pairing moved whole,
repeats redrawn, sizing learned only from launches that used it). Each was switched off in turn on a
held-out family slice and the recorded real landscapes; none improved the median or the p90 of
launches to 2 % by more than the noise, so they were removed (benchmarks/results/ablation-2026-12-02/).
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
