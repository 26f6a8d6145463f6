"""Rule ``make-room``: a proposal that would run out of pool memory as an earlier launch did
(:mod:`autotune.study.pool_deaths`) is launched with the room it lacks, where the space offers it,
before its region is written off: the smallest fraction the space offers that holds one request by the
death's printed figures, its headroom judged by the memory model for the proposal's own graphs (without
the figures: halfway to the top of what is left, below the fraction at which launches like it ran out of
headroom) (a proposal that leaves the fraction to the engine is asked at the
most the engine's fraction for it can be, :class:`~autotune.study.pool_deaths.EngineFractions`); with the
smallest graph batch the space offers when the memory model says the headroom left cannot hold the graphs
otherwise. Where a launch alike (same weights and tensor-parallel size) ran out of headroom at that
fraction or a higher one, graphs of more tokens than any alike launch served with there are not trusted:
the largest offered graph batch within those tokens is tried before the sampled one
(:func:`graph_batches`). A proposal that dies only at that bounded engine fraction, and that no offered
fraction makes room for, is skipped (``predicted-infeasible-memory-low``), as is one a death speaks for
as it is, given or engine's fraction alike (:func:`without_room`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from autotune.decision import Decision, Launch, Skip
from autotune.engines.base import InvalidConfig, LaunchPlan
from autotune.feasibility import FeasibilityModel
from autotune.memory_types import MemoryRules
from autotune.outcomes import OutcomeKind
from autotune.space import CategoricalParam, FlagValue, FloatParam, IntParam
from autotune.study.history import History
from autotune.study.pool_deaths import (
    DiesLike,
    EngineFractions,
    PoolDeath,
    first_death,
    pool_deaths,
    same_pool_per_token,
)
from autotune.study.rules.served_sizing import SizingRule, adjusted

# Above the printed figures' bare minimum: the pool is rounded to pages, and the log to two decimals.
FRACTION_MARGIN = 0.002


def offered(param: IntParam | FloatParam | CategoricalParam | None) -> list[float]:
    """The numbers a tuned parameter offers, ascending (a float range on its step grid)."""
    if isinstance(param, CategoricalParam):
        return sorted({float(c) for c in param.choices if isinstance(c, (int, float)) and not isinstance(c, bool)})
    if isinstance(param, (IntParam, FloatParam)) and param.step:
        count = int(round((param.high - param.low) / param.step))
        return [round(param.low + i * param.step, 10) for i in range(count + 1)]
    return []


def fraction_needed(
    death: PoolDeath, plan: LaunchPlan, rules: MemoryRules, deaths: Sequence[PoolDeath]
) -> float | None:
    """The smallest fraction whose pool holds one request of ``plan``: by ``death``'s printed figures,
    else by those of any death whose pool per token is ``plan``'s (the most any of them calls for)."""
    if death.fraction_needed is not None:
        return death.fraction_needed
    known = [d.fraction_needed for d in deaths if d.fraction_needed is not None and same_pool_per_token(d, plan, rules)]
    return max(known, default=None)


def _at_least(flags: Mapping[str, FlagValue], flag: str, fraction: float) -> bool:
    value = flags.get(flag)
    return isinstance(value, (int, float)) and not isinstance(value, bool) and value >= fraction


def graph_batches(
    model: FeasibilityModel, plan: LaunchPlan, fraction: float, offered_batches: list[float]
) -> list[float | None]:
    """The graph batches to try at ``fraction``, the sampled one (None) included: where an alike launch
    ran out of headroom at ``fraction`` or a higher one and the sampled graphs capture more tokens than
    any alike launch served with there, the largest offered batch within those tokens comes first; the
    smallest offered batch last."""
    rules = model.rules
    assert rules is not None and rules.graph_batch_flag is not None
    smallest: list[float | None] = list(offered_batches[:1])
    flag, same = rules.fraction_flag, rules.weights_flags | {rules.tp_flag}

    def alike(flags: Mapping[str, FlagValue]) -> bool:
        return all(flags.get(name) == plan.flags.get(name) for name in same) and _at_least(flags, flag, fraction)

    if not any(f.side == "too-high" and alike(f.flags) for f in model.failures):
        return [None, *smallest]
    held = [model.graph_tokens(served) for served in model.served if alike(served)]
    most = max((t for t in held if t is not None), default=None)
    sampled = model.graph_tokens({**plan.flags, flag: fraction})
    if most is None or sampled is None or sampled <= most:
        return [None, *smallest]
    fitting = []
    for batch in offered_batches:
        tokens = model.graph_tokens({**plan.flags, flag: fraction, rules.graph_batch_flag: int(batch)})
        if tokens is not None and tokens <= most:
            fitting.append(batch)
    return [*fitting[-1:], None, *smallest]


def without_room(rule: str, found: DiesLike) -> Skip | None:
    """A proposal a death speaks for, and that no offered fraction makes room for: not launched."""
    return Skip(
        rule=rule,
        outcome=OutcomeKind.predicted_for("too-low"),
        constraint="memory",
        reason=f"predicted without launching: trial {found.death.trial} ran out of pool memory, and at "
        f"{found.why}; no offered fraction holds it",
        trials=[found.death.trial],
    )


class MakeRoom(SizingRule):
    name = "make-room"
    for_baselines = False

    def decide(self, plan: LaunchPlan, history: History) -> Decision | None:
        engine, model = self.engines[plan.engine], self.feasibility[plan.engine]
        rules = engine.memory_rules
        if rules is None:
            return None
        deaths = pool_deaths(history.finished, engine, plan.engine)
        found = first_death(deaths, plan, rules, EngineFractions(engine, model))
        if found is None:
            return None
        death = found.death
        fractions = offered(self.space.tuned.get(rules.fraction_flag))
        graph_flag = rules.graph_batch_flag
        graphs = offered(self.space.tuned.get(graph_flag)) if graph_flag else []
        for fraction in self._fractions(death, plan, model, fractions, deaths) if fractions else []:
            for graph in graph_batches(model, plan, fraction, graphs) if graph_flag else [None]:
                changes: dict[str, FlagValue] = {rules.fraction_flag: fraction}
                if graph_flag is not None and graph is not None:
                    changes[graph_flag] = int(graph)
                try:
                    launched = engine.normalise({**plan.flags, **changes})
                except InvalidConfig:
                    continue
                if first_death(deaths, launched, rules) is None and model.predict(launched.flags).feasible:
                    why = f"the pool memory that trial {death.trial} ran out of"
                    return Launch(plan=launched, adjusted=[adjusted(self.name, plan, launched, [death.trial], why)])
        return without_room(self.name, found)

    def _fractions(
        self,
        death: PoolDeath,
        plan: LaunchPlan,
        model: FeasibilityModel,
        fractions: list[float],
        deaths: Sequence[PoolDeath],
    ) -> list[float]:
        """The offered fractions worth trying, the most promising first: from the one the death's figures
        call for upwards, the memory model judging each one's headroom for the plan's own graphs (a
        headroom death of larger graphs does not close it); without the figures, from halfway up what is
        left, below where alike launches ran out of headroom."""
        assert model.rules is not None
        flag = model.rules.fraction_flag
        window = model.fraction_window(plan.flags)
        shortfall = death.shortfall
        died_at = death.flags.get(flag)
        floor = float(died_at) if isinstance(died_at, (int, float)) else shortfall.fraction if shortfall else 0.0
        needed = fraction_needed(death, plan, model.rules, deaths)
        if needed is not None:
            return [f for f in fractions if f > floor and f >= needed + FRACTION_MARGIN and window.open_above(f)]
        open_ = [f for f in fractions if f > floor and window.open(f)]
        if not open_:
            return []
        middle = (floor + (window.high if window.high is not None else open_[-1])) / 2
        return [f for f in open_ if f >= middle] + [f for f in reversed(open_) if f < middle]
