"""Rule ``make-room``: a proposal that would run out of pool memory as an earlier launch did
(:mod:`autotune.study.pool_deaths`) is launched with the room it lacks, where the space offers it,
before its region is written off: the smallest fraction the space offers that holds one request by the
death's printed figures, its headroom judged by the memory model for the proposal's own graphs (without
the figures: halfway to the top of what is left, below the fraction at which launches like it ran out of
headroom, then past it as the memory model judges the plan's graphs) (a proposal that leaves the fraction
to the engine is asked at the most the engine's fraction for it can be,
:class:`~autotune.study.pool_deaths.EngineFractions`); with the smallest graph batch the space offers
when the memory model says the headroom left cannot hold the graphs otherwise. A proposal that dies only
at that bounded engine fraction, and that no offered fraction makes room for, is skipped
(``predicted-infeasible-memory-low``). A proposal no death speaks for, whose fraction (given, or the
engine's bounded) leaves no pool at all after the weights by the memory model, is launched at the
smallest offered fraction that fits rather than skipped: the weights alone rule it out.
"""

from __future__ import annotations

from collections.abc import Sequence

from autotune.decision import Decision, Launch, Skip
from autotune.engines.base import InvalidConfig, LaunchPlan
from autotune.feasibility import FeasibilityModel
from autotune.memory_types import MemoryRules
from autotune.outcomes import OutcomeKind
from autotune.space import CategoricalParam, FlagValue, FloatParam, IntParam
from autotune.study.history import History
from autotune.study.pool_deaths import EngineFractions, PoolDeath, first_death, pool_deaths, same_pool_per_token
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


class MakeRoom(SizingRule):
    name = "make-room"
    for_baselines = False

    def decide(self, plan: LaunchPlan, history: History) -> Decision | None:
        engine, model = self.engines[plan.engine], self.feasibility[plan.engine]
        rules = engine.memory_rules
        if rules is None:
            return None
        deaths = pool_deaths(history.finished, engine, plan.engine)
        fractions = offered(self.space.tuned.get(rules.fraction_flag))
        found = first_death(deaths, plan, rules, EngineFractions(engine, model))
        if found is None:
            return self._clear_of_weights(plan, rules, model, fractions, deaths)
        death = found.death
        tried = self._fractions(death, plan, model, fractions, deaths) if fractions else []
        why = f"the pool memory that trial {death.trial} ran out of"
        room = self._launch_at(plan, rules, model, tried, deaths, why, [death.trial])
        if room is not None:
            return room
        if found.at_bounded_fraction:
            return Skip(
                rule=self.name,
                outcome=OutcomeKind.predicted_for("too-low"),
                constraint="memory",
                reason=f"predicted without launching: trial {death.trial} ran out of pool memory, and at "
                f"{found.why}; no offered fraction holds it",
                trials=[death.trial],
            )
        return None

    def _launch_at(
        self,
        plan: LaunchPlan,
        rules: MemoryRules,
        model: FeasibilityModel,
        fractions: Sequence[float],
        deaths: Sequence[PoolDeath],
        why: str,
        trials: list[int],
    ) -> Launch | None:
        """``plan`` at the first of ``fractions`` (with its own graph batch, else the smallest offered)
        that no death speaks for and the memory model says fits."""
        graph_flag = rules.graph_batch_flag
        graphs = offered(self.space.tuned.get(graph_flag)) if graph_flag else []
        for fraction in fractions:
            for graph in [None, *graphs[:1]]:
                changes: dict[str, FlagValue] = {rules.fraction_flag: fraction}
                if graph_flag is not None and graph is not None:
                    changes[graph_flag] = int(graph)
                try:
                    launched = self.engines[plan.engine].normalise({**plan.flags, **changes})
                except InvalidConfig:
                    continue
                if first_death(deaths, launched, rules) is None and model.predict(launched.flags).feasible:
                    return Launch(plan=launched, adjusted=[adjusted(self.name, plan, launched, trials, why)])
        return None

    def _clear_of_weights(
        self,
        plan: LaunchPlan,
        rules: MemoryRules,
        model: FeasibilityModel,
        fractions: list[float],
        deaths: Sequence[PoolDeath],
    ) -> Launch | None:
        """A plan whose fraction (given, or the most the engine's own can be for it) leaves no pool at
        all after the weights, by the memory model, is launched at the smallest offered fraction above it
        that fits: the weights alone rule that fraction out, whatever the draft or the graphs."""
        flag = rules.fraction_flag
        given = plan.flags.get(flag)
        engine_at_most = EngineFractions(self.engines[plan.engine], model).at_most
        asked = given if isinstance(given, float) else engine_at_most(plan, deaths)
        if asked is None:
            return None
        short = model.predict({**plan.flags, flag: asked})
        if short.feasible or short.pool_bytes is None or short.pool_bytes > 0:
            return None
        why = f"the pool that {flag} {asked:g} leaves after the weights (none)"
        return self._launch_at(plan, rules, model, [f for f in fractions if f > asked], deaths, why, [])

    @staticmethod
    def _past_headroom_deaths(fractions: list[float], floor: float, open_: list[float]) -> list[float]:
        """The fractions above ``floor`` at or past where alike launches ran out of headroom, tried last:
        the memory model judges the plan's own graphs there (a headroom death of larger graphs, or a
        death of the weights alone, does not close them)."""
        return [f for f in fractions if f > floor and f not in open_]

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
        printed = shortfall.fraction if shortfall is not None else None
        floor = float(died_at) if isinstance(died_at, (int, float)) else printed if printed is not None else 0.0
        needed = fraction_needed(death, plan, model.rules, deaths)
        if needed is not None:
            return [f for f in fractions if f > floor and f >= needed + FRACTION_MARGIN and window.open_above(f)]
        open_ = [f for f in fractions if f > floor and window.open(f)]
        above = self._past_headroom_deaths(fractions, floor, open_)
        if not open_:
            return above
        middle = (floor + (window.high if window.high is not None else open_[-1])) / 2
        return [f for f in open_ if f >= middle] + [f for f in reversed(open_) if f < middle] + above
