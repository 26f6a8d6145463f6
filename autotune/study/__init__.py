"""The study: Optuna as a package, split by concern (each module: docs/how-it-works.md, "The flow").

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
