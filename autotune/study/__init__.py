"""The study: Optuna as a package, split by concern.

- :mod:`~autotune.study.attrs`: the only code that reads or writes Optuna's user attrs (outcome ->
  attrs, attrs -> :class:`~autotune.records.TrialRecord` and :class:`~autotune.study.attrs.StudyInfo`);
- :mod:`~autotune.study.paths`: a study's database file and folder;
- :mod:`~autotune.study.storage`: storage URLs, the lock across workers;
- :mod:`~autotune.study.snapshot`: a stored study as plain data (an SQLite one read without Optuna);
- :mod:`~autotune.study.recovery`: orphans, stale trials, re-queued interruptions and baselines;
- :mod:`~autotune.study.memory`: memory learning (one path for live and resumed studies), roofline;
- :mod:`~autotune.study.artifacts`: server logs and measurement JSON beside the study;
- :mod:`~autotune.study.importance`: which flags mattered, computed by Optuna and kept in the study;
- :mod:`~autotune.study.preflight_checks`: the space checked against its engines before the first launch;
- :mod:`~autotune.study.rules`: the named pre-launch rules (one module each) and their order;
- :mod:`~autotune.study.history`: the study's records as one trial's rules read them;
- :mod:`~autotune.study.pool_deaths`: what a launch that ran out of pool memory says about others;
- :mod:`~autotune.study.sampler`: Optuna's TPE (or random draws);
- :mod:`~autotune.study.launcher`: the launch path (the plan, the wait for idle GPUs, the launcher);
- :mod:`~autotune.study.runner`: the search (suggest -> normalise -> decide -> record -> launch -> learn);
- :mod:`~autotune.study.race`: the finalists' race and the schedule's race, their budget;
- :mod:`~autotune.study.night`: a night, the search then the race, on one split;
- :mod:`~autotune.study.confirm`, :mod:`~autotune.study.schedule`, :mod:`~autotune.study.levels`,
  :mod:`~autotune.study.breakeven`: pure functions over records (the race's verdict, the schedule's,
  per-level winners, break-even acceptance);
- :mod:`~autotune.study.view`: a stored study as the CLI and the report read it.

The runner and the storage import Optuna (~0.5 s with numpy): they are imported on first use of
their names here, so the commands that only read a study (show, export) never load it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from autotune.study.attrs import StudyInfo
from autotune.study.events import StudyEvents
from autotune.study.importance import Importance
from autotune.study.paths import StudyPaths
from autotune.study.view import StudyView, best_of

if TYPE_CHECKING:
    from autotune.study.launcher import Launcher
    from autotune.study.preflight_checks import Preflight, PreparedEngine, preflight
    from autotune.study.runner import StudyRunner, TrialFault
    from autotune.study.sampler import make_sampler
    from autotune.study.storage import load_existing_study, open_storage

_LAZY = {
    "Launcher": "launcher",
    "Preflight": "preflight_checks",
    "PreparedEngine": "preflight_checks",
    "StudyRunner": "runner",
    "TrialFault": "runner",
    "make_sampler": "sampler",
    "preflight": "preflight_checks",
    "load_existing_study": "storage",
    "open_storage": "storage",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


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
