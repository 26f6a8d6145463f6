"""Rule ``served-sizing``: where memory sizing cannot buy the objective, a new configuration launches
with the memory sizing of a served launch like it, not the sampled sizing.

The sampled sizing could only add a memory death. The served launch chosen is one that vouches for
the configuration (it fitted with demands no smaller), else the one it exceeds in the fewest demands;
of those, the sizing that differs least from the sampled one (the latest on a tie). Built only for a
study whose objective is one stream's decode rate.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autotune.decision import Adjusted, Adjustment, Decision, Launch
from autotune.engines.base import Engine, InvalidConfig, LaunchPlan
from autotune.feasibility import FeasibilityModel
from autotune.records import TrialRecord
from autotune.space import SearchSpace
from autotune.study.history import History


class SizingRule:
    """A rule that sizes memory from the space's offered values and each engine's learned model
    (``fraction-inside``, ``make-room``)."""

    def __init__(
        self, space: SearchSpace, engines: Mapping[str, Engine], feasibility: Mapping[str, FeasibilityModel]
    ) -> None:
        self.space = space
        self.engines = engines
        self.feasibility = feasibility


class ServedSizing:
    name = "served-sizing"
    for_baselines = False

    def __init__(self, engines: Mapping[str, Engine], feasibility: Mapping[str, FeasibilityModel]) -> None:
        self.engines = engines
        self.feasibility = feasibility

    def decide(self, plan: LaunchPlan, history: History) -> Decision | None:
        sized = alike_sizing(plan, history.served, self.engines[plan.engine], self.feasibility[plan.engine])
        if sized is None:
            return None
        launched, source = sized
        if source is None:  # a served launch vouches for the sampled sizing
            return None
        why = f"the memory sizing of served trial {source.number}"
        return Launch(plan=launched, adjusted=[adjusted(self.name, plan, launched, [source.number], why)])


def alike_sizing(
    plan: LaunchPlan, served: Sequence[TrialRecord], engine: Engine, model: FeasibilityModel
) -> tuple[LaunchPlan, TrialRecord | None] | None:
    """The plan with the memory sizing of the served launch chosen for it (module docstring), and that
    launch; the plan as sampled, with no source, where a served launch vouches for its sizing; None
    when no served launch is alike, or when the config exceeds the chosen one while launches like it
    died of headroom at or below its fraction (more draft tokens at a borrowed sizing that already
    killed some)."""
    sizing = set(engine.memory_sizing_flags)
    if not sizing:
        return None
    kept = {name: value for name, value in plan.flags.items() if name not in sizing}
    chosen: tuple[tuple[int, int], LaunchPlan, TrialRecord] | None = None
    for record in reversed(served):
        if record.engine != plan.engine:
            continue
        flags = {**kept, **{name: value for name, value in record.flags.items() if name in sizing}}
        excess = model.excess(record.flags, flags)
        if excess is None:
            continue
        rank = (excess, sum(flags.get(name) != plan.flags.get(name) for name in sizing))
        if rank == (0, 0):
            return plan, None
        if chosen is None or rank < chosen[0]:
            try:
                chosen = (rank, engine.normalise(flags), record)
            except InvalidConfig:
                continue
    if chosen is None:
        return None
    (excess, _), sized, source = chosen
    fraction = sized.flags.get(model.rules.fraction_flag) if model.rules is not None else None
    died_above = model.fraction_window(plan.flags).high
    if excess and isinstance(fraction, (int, float)) and died_above is not None and fraction >= died_above:
        return None
    return sized, source


def adjusted(rule: str, sampled: LaunchPlan, launched: LaunchPlan, trials: list[int], why: str) -> Adjusted:
    """What ``rule`` changed from the ``sampled`` plan to the ``launched`` one."""
    names = sorted(
        name for name in {*sampled.flags, *launched.flags} if sampled.flags.get(name) != launched.flags.get(name)
    )
    values = [Adjustment(flag=n, sampled=sampled.flags.get(n), launched=launched.flags.get(n)) for n in names]
    return Adjusted(rule=rule, values=values, trials=trials, why=why)
