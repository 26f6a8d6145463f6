"""Rule ``memory``: a configuration the study's memory model predicts cannot fit is not launched.

The model (:mod:`autotune.feasibility`) starts from what NVML and the model's files say and learns
from every launch; a baseline is held to it too (launching one that cannot fit teaches nothing new).
"""

from __future__ import annotations

from collections.abc import Mapping

from autotune.decision import Decision, Skip
from autotune.engines.base import LaunchPlan
from autotune.feasibility import FeasibilityModel
from autotune.outcomes import OutcomeKind
from autotune.study.history import History


class PredictedMemory:
    name = "memory"
    for_baselines = True

    def __init__(self, feasibility: Mapping[str, FeasibilityModel]) -> None:
        self.feasibility = feasibility

    def decide(self, plan: LaunchPlan, history: History) -> Decision | None:
        prediction = self.feasibility[plan.engine].predict(plan.flags)
        if prediction.feasible or prediction.side is None:
            return None
        pool = round(prediction.pool_bytes / 2**30, 2) if prediction.pool_bytes is not None else None
        return Skip(
            rule=self.name,
            outcome=OutcomeKind.predicted_for(prediction.side),
            reason=f"predicted without launching: {prediction.reason}",
            constraint="memory",
            predicted_pool_gib=pool,
        )
