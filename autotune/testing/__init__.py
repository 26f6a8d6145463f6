"""Driving autotune's own study loop without servers, GPUs or a database, as ``optuna.testing`` does
for Optuna.

The runner is built through its front door (a :class:`~autotune.study.Preflight`, a storage, a
launcher), so what runs is the product's loop. Only three things are stood in for: the launcher's
``--help`` (the space's own flag names), the GPUs (an inventory the caller gives) and the launches
(a launcher the caller gives; :func:`simulated_outcome` builds an outcome from a rate). The search
benchmark and the tests share this one harness; it never imports the twin nor the benchmarks.
"""

from __future__ import annotations

from autotune.testing.study import checked_space, memory_as_logged, simulated_outcome, study_runner

__all__ = ["checked_space", "memory_as_logged", "simulated_outcome", "study_runner"]
