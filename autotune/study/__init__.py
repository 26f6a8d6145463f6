"""The study: Optuna as a package, split by concern.

- :mod:`~autotune.study.attrs`: the only code that reads or writes Optuna's user attrs (outcome ->
  attrs, attrs -> :class:`~autotune.records.TrialRecord` and :class:`~autotune.study.attrs.StudyInfo`);
- :mod:`~autotune.study.storage`: storage URLs, the study's folder, the lock across workers;
- :mod:`~autotune.study.recovery`: orphans, stale trials, re-queued interruptions and baselines;
- :mod:`~autotune.study.memory`: memory learning (one path for live and resumed studies), roofline;
- :mod:`~autotune.study.artifacts`: server logs and measurement JSON beside the study;
- :mod:`~autotune.study.runner`: the loop, with its launcher, storage and GPU reading injected;
- :mod:`~autotune.study.view`: a stored study as the CLI and the report read it.
"""

from __future__ import annotations

from autotune.study.attrs import StudyInfo
from autotune.study.runner import (
    Launcher,
    Preflight,
    PreparedEngine,
    StudyEvents,
    StudyRunner,
    TrialFault,
    make_sampler,
    preflight,
)
from autotune.study.storage import StudyPaths, load_existing_study, open_storage
from autotune.study.view import Importance, StudyView, best_of

__all__ = [
    "Importance",
    "Launcher",
    "Preflight",
    "PreparedEngine",
    "StudyEvents",
    "StudyInfo",
    "StudyPaths",
    "StudyRunner",
    "StudyView",
    "TrialFault",
    "best_of",
    "load_existing_study",
    "make_sampler",
    "open_storage",
    "preflight",
]
