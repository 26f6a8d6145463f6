"""autotune: find the fastest launch configuration of an LLM inference server by experiment.

The flow: search space -> candidate -> launch plan -> server process -> measurement -> trial
outcome -> Optuna storage -> profile. The names below are what a user scripts against.
"""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

from autotune.errors import AutotuneError, UserError

if _typing.TYPE_CHECKING:
    from autotune.profile import Profile, load_profile
    from autotune.space import Candidate, SearchSpace, load_space

__version__ = "0.1.0"

# Imported on first use (PEP 562), so ``autotune --help`` does not pay for pydantic and the engines.
_LAZY = {
    "Profile": "autotune.profile",
    "load_profile": "autotune.profile",
    "Candidate": "autotune.space",
    "SearchSpace": "autotune.space",
    "load_space": "autotune.space",
}


def __getattr__(name: str) -> _typing.Any:
    if name in _LAZY:
        value = getattr(_importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module 'autotune' has no attribute {name!r}")


__all__ = [
    "AutotuneError",
    "Candidate",
    "Profile",
    "SearchSpace",
    "UserError",
    "__version__",
    "load_profile",
    "load_space",
]
