"""Rule ``named-failure``: a server failure that named flag values predicts the same failure for
every configuration sharing them, until one with them serves (:mod:`autotune.study.named_failures`)."""

from __future__ import annotations

from autotune.decision import Decision, Skip
from autotune.engines.base import LaunchPlan
from autotune.outcomes import OutcomeKind
from autotune.study.history import History
from autotune.study.named_failures import predicted_failure


class NamedFailure:
    name = "named-failure"
    for_baselines = False

    def decide(self, plan: LaunchPlan, history: History) -> Decision | None:
        failed = predicted_failure(plan.flags, history.records)
        if failed is None:
            return None
        shared = ", ".join(f"--{name} {value}" for name, value in failed.lessons.failure_names.items())
        reason = f"predicted without launching: trial {failed.number} with {shared} failed: {failed.reason}"
        return Skip(
            rule=self.name,
            outcome=OutcomeKind.PREDICTED_FAILURE,
            reason=reason,
            constraint="config",
            trials=[failed.number],
        )
