"""Rule ``fraction-inside``: where memory sizing cannot buy the objective and no served launch is alike,
a sampled memory fraction beyond what memory deaths of alike launches left open launches in the
middle of that window instead: the boundary is found in a few deaths rather than one per draw.
Built only for a study whose objective is one stream's decode rate.
"""

from __future__ import annotations

from autotune.decision import Decision, Launch
from autotune.engines.base import InvalidConfig, LaunchPlan
from autotune.space import FloatParam
from autotune.study.history import History
from autotune.study.rules.served_sizing import SizingRule, adjusted, alike_sizing


class FractionInside(SizingRule):
    name = "fraction-inside"
    for_baselines = False

    def decide(self, plan: LaunchPlan, history: History) -> Decision | None:
        engine, model = self.engines[plan.engine], self.feasibility[plan.engine]
        rules = engine.memory_rules
        if rules is None or alike_sizing(plan, history.served, engine, model) is not None:
            return None  # a served launch alike sizes it (rule served-sizing)
        param, fraction = self.space.tuned.get(rules.fraction_flag), plan.flags.get(rules.fraction_flag)
        if not isinstance(param, FloatParam) or not isinstance(fraction, (int, float)):
            return None
        window = model.fraction_window(plan.flags)
        middle = None if window.open(fraction) else window.middle(param.low, param.high, param.step)
        if middle is None:
            return None
        try:
            launched = engine.normalise({**plan.flags, rules.fraction_flag: middle})
        except InvalidConfig:
            return None
        deaths = [n for n in (window.low_trial, window.high_trial) if n is not None]
        why = "a fraction inside what the memory deaths of " + " and ".join(f"trial {n}" for n in deaths) + " left open"
        return Launch(plan=launched, adjusted=[adjusted(self.name, plan, launched, deaths, why)])
