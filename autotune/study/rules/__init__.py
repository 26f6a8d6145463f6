"""The study's pre-launch decisions as named rules, applied in a stated order.

A rule looks at a normalised plan and the study's history and says nothing (``None``), or decides:
launch an adjusted plan (the next rules see the adjusted one), reuse a measured result, or skip.
The first reuse or skip ends the chain; a plan no rule stopped is launched with every adjustment
recorded. Rules are built once per study from its space, engines and memory models
(:func:`build_rules`); a rule that does not apply to a space is left out there, and any rule can be
switched off by name (the search benchmark's ablation does). A baseline is measured as the user
wrote it: only rules that never reuse nor change a plan apply to it. A confirmation relaunches
exactly what its trial launched and goes through no rule.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Protocol

from autotune.decision import Decision, Launch, Wait
from autotune.engines.base import Engine, LaunchPlan
from autotune.feasibility import FeasibilityModel
from autotune.kv_layout import kv_layout
from autotune.space import SearchSpace
from autotune.study.history import History
from autotune.study.rules.context_fit import ContextFit
from autotune.study.rules.duplicate import Duplicate
from autotune.study.rules.fraction_inside import FractionInside
from autotune.study.rules.make_room import MakeRoom
from autotune.study.rules.memory import PredictedMemory
from autotune.study.rules.named_failure import NamedFailure
from autotune.study.rules.same_rate import SameRate
from autotune.study.rules.served_sizing import ServedSizing


class Rule(Protocol):
    """One pre-launch decision."""

    name: str
    for_baselines: bool  # applies to a baseline too (it neither reuses nor changes what is launched)

    def decide(self, plan: LaunchPlan, history: History) -> Decision | Wait | None: ...


RULE_NAMES = (
    "duplicate",
    "same-rate",
    "served-sizing",
    "fraction-inside",
    "make-room",
    "context-fit",
    "named-failure",
    "memory",
)


def one_stream_rate(space: SearchSpace) -> bool:
    """Whether the objective is one stream's decode rate (one level, no SLO): memory sizing cannot buy it."""
    objective, measured = space.objective, space.measurement.concurrency
    single = objective.metric == "decode_tok_s" and not objective.levels and measured == [1]
    return single and not space.slo.limits()


def build_rules(
    space: SearchSpace,
    engines: Mapping[str, Engine],
    feasibility: Mapping[str, FeasibilityModel],
    *,
    off: Collection[str] = (),
) -> list[Rule]:
    """The rules of a study, in the order they apply; ``off`` names rules switched off."""
    unknown = set(off) - set(RULE_NAMES)
    if unknown:
        raise ValueError(f"unknown rules {sorted(unknown)}; known: {', '.join(RULE_NAMES)}")
    rules: list[Rule] = [Duplicate()]
    if one_stream_rate(space):  # sizing cannot change the objective: the sizing rules apply
        rules += [SameRate(engines), ServedSizing(engines, feasibility), FractionInside(space, engines, feasibility)]
    rules += [
        MakeRoom(space, engines, feasibility),
        ContextFit(space, engines, feasibility, layout=kv_layout(space.model, space.named_config())),
        NamedFailure(),
        PredictedMemory(feasibility),
    ]
    return [rule for rule in rules if rule.name not in off]


def decide(rules: Sequence[Rule], plan: LaunchPlan, history: History, *, baseline: bool) -> Decision | Wait:
    """Apply ``rules`` in order (only those for baselines to a baseline): the first reuse, skip or
    wait ends the chain; adjustments accumulate into the launch. A plan the rules changed is checked
    again by the duplicate rule: two proposals they turn into one effective configuration are one."""
    proposed, adjusted = plan, []
    for rule in rules:
        if baseline and not rule.for_baselines:
            continue
        decision = rule.decide(plan, history)
        if isinstance(decision, Launch):
            plan = decision.plan
            adjusted += decision.adjusted
        elif decision is not None:
            return decision
    if plan.config_key != proposed.config_key:
        for rule in rules:
            if rule.name == Duplicate.name and (decision := rule.decide(plan, history)) is not None:
                return decision
    return Launch(plan=plan, adjusted=adjusted)
