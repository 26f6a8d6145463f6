"""Rule ``ordered-demand``: a configuration that needs at least the pool memory a dead launch needed, at
the same or a smaller fraction (the engine's own one included), is not launched
(:mod:`autotune.study.rules.pool_deaths`). Where the death printed its pool's tokens, a larger fraction
whose pool still holds fewer than one request is not launched either.
"""

from __future__ import annotations

from collections.abc import Mapping

from autotune.decision import Decision, Skip
from autotune.engines.base import Engine, LaunchPlan
from autotune.outcomes import OutcomeKind
from autotune.study.history import History
from autotune.study.rules.pool_deaths import first_death, pool_deaths


class OrderedDemand:
    name = "ordered-demand"
    for_baselines = True

    def __init__(self, engines: Mapping[str, Engine]) -> None:
        self.engines = engines

    def decide(self, plan: LaunchPlan, history: History) -> Decision | None:
        engine = self.engines[plan.engine]
        rules = engine.memory_rules
        if rules is None:
            return None
        found = first_death(pool_deaths(history.finished, engine, plan.engine), plan, rules)
        if found is None:
            return None
        death, why = found
        return Skip(rule=self.name, outcome=OutcomeKind.predicted_for("too-low"), constraint="memory",
                    reason=f"predicted without launching: trial {death.trial} ran out of pool memory and this "
                    f"configuration needs no less at {why}", trials=[death.trial])  # fmt: skip
