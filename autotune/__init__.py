"""autotune: find the fastest launch configuration of an LLM inference server by experiment.

The flow: search space -> candidate -> launch plan -> server process -> measurement -> trial
outcome -> Optuna storage -> profile. The names below are what a user scripts against.
"""

from __future__ import annotations

from autotune.errors import AutotuneError, UserError
from autotune.profile import Profile, load_profile
from autotune.space import Candidate, SearchSpace, load_space

__version__ = "0.1.0"

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
