"""Driving autotune's own study loop without servers, GPUs or a database, as ``optuna.testing`` does
for Optuna.

The study runner is built through its front door (a :class:`~autotune.study.Preflight`, a storage, a
launcher), so what runs is the product's loop: the sampler, the baselines, the pre-launch rules, the
memory learning and the constraints. Only three things are stood in for:

- the launcher's ``--help``: the flag set is the space's own flag names (nothing is started to read it);
- the GPUs: an inventory given by the caller (nothing reads NVML or an inventory command);
- the launches: a launcher given by the caller turns each plan into a
  :class:`~autotune.trial.TrialOutcome` (:func:`simulated_outcome` builds one from a rate).

It is part of the package so that the search benchmark (``benchmarks/search_efficiency.py``, which
launches on the twin's landscape) and the tests share one harness instead of each building its own.
It never imports the twin nor the benchmarks: what a launch returns is the caller's business.
"""

from __future__ import annotations

from autotune.testing.study import checked_space, memory_as_logged, simulated_outcome, study_runner

__all__ = ["checked_space", "memory_as_logged", "simulated_outcome", "study_runner"]
