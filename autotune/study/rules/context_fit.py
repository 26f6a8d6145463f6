"""Rule ``context-fit``: a plan whose KV pool, by the tokens earlier launches' pools held
(:mod:`autotune.study.pool_tokens`), cannot hold one request of its context is not launched: at its own
fraction, and, said so, where no fraction the space allows would hold it either (with the state ratio
and KV dtype the space offers that leave the KV the most room); where the engine picks the fraction
(a baseline of its defaults), where even the whole memory (fraction 1) would not hold it. Before any
launch stated its pool, the model's KV layout from its ``config.json`` (:mod:`autotune.kv_layout`)
estimates it. Applied after ``make-room``, which may have given the plan a larger fraction.

The same estimate keeps the sampler from proposing such contexts at all (:meth:`ContextFit.ruled_out`,
read by :class:`~autotune.study.sampler.PossibleContexts`): for a proposal's other flags, the contexts this
rule would skip at every fraction.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from autotune.decision import Decision, Skip
from autotune.engines.base import Engine, InvalidConfig, LaunchPlan
from autotune.feasibility import FeasibilityModel
from autotune.kv_layout import KvLayout
from autotune.memory_types import MemoryRules
from autotune.outcomes import OutcomeKind
from autotune.records import TrialRecord
from autotune.space import ENGINE_PARAM, CategoricalParam, FlagValue, SearchSpace
from autotune.study.history import History
from autotune.study.pool_tokens import (
    PoolEstimate,
    engine_cell,
    largest_fraction,
    most_room,
    needed_tokens,
    pool_points,
    prior_tokens,
    tokens_at,
    too_small,
)

Estimator = Callable[[Mapping[str, FlagValue], float], PoolEstimate | None]


class ContextFit:
    name = "context-fit"
    for_baselines = True  # launching a pool that cannot hold one request teaches nothing new

    def __init__(
        self,
        space: SearchSpace,
        engines: Mapping[str, Engine],
        feasibility: Mapping[str, FeasibilityModel],
        *,
        layout: KvLayout | None = None,
    ) -> None:
        self.space = space
        self.engines = engines
        self.feasibility = feasibility
        self.layout = layout

    def _estimator(self, engine: str, rules: MemoryRules, records: Sequence[TrialRecord]) -> Estimator:
        """The most tokens a plan's pool holds at a fraction: by the launches' pools, else config.json."""
        model = self.feasibility[engine]
        budget = model.total_bytes if rules.budget_of == "total" else model.start_free_bytes
        points = pool_points(records, rules, engine, budget_bytes=budget)

        def estimate(flags: Mapping[str, FlagValue], at: float) -> PoolEstimate | None:
            found = tokens_at(points, rules, flags, at)
            if found is not None or self.layout is None:
                return found
            weights, cell = model.weights_per_gpu(flags), engine_cell(records, rules, engine, flags)
            return prior_tokens(
                self.layout, rules, flags, at, budget_bytes=budget, weights_per_gpu=weights, logged_cell=cell
            )

        return estimate

    def _at_most_room(
        self, rules: MemoryRules, flags: Mapping[str, FlagValue], estimate: Estimator
    ) -> tuple[PoolEstimate | None, dict[str, FlagValue], float | None]:
        """The most tokens any variant of ``flags`` the space allows holds (the largest fraction, the state
        ratio and KV dtype that leave the KV the most room), with that variant and its fraction."""
        room = most_room(self.space, rules, flags)
        top = largest_fraction(self.space, rules, flags)
        return (estimate(room, top) if top is not None else None), room, top

    def ruled_out(self, engine: str, flags: Mapping[str, FlagValue], records: Sequence[TrialRecord]) -> frozenset[int]:
        """The contexts the space tunes that a plan with ``flags`` (a proposal's, its context aside) could
        not hold one request of at any fraction the space allows, by the study's ``records``: what this
        rule would skip at every fraction."""
        rules = self.engines[engine].memory_rules
        param = self.space.tuned.get(rules.context_flag) if rules is not None and rules.context_flag else None
        if rules is None or rules.context_flag is None or not isinstance(param, CategoricalParam):
            return frozenset()
        estimate = self._estimator(engine, rules, records)
        out = set()
        for context in {int(c) for c in param.choices if isinstance(c, (int, float)) and not isinstance(c, bool)}:
            best, _, _ = self._at_most_room(rules, {**flags, rules.context_flag: context}, estimate)
            if best is not None and too_small(best, context):
                out.add(context)
        return frozenset(out)

    def context_flags(self) -> frozenset[str]:
        """The context flags the space tunes, of its engines that have one."""
        found = (engine.memory_rules.context_flag for engine in self.engines.values() if engine.memory_rules)
        return frozenset(name for name in found if name is not None and name in self.space.tuned)

    def proposal(self, params: Mapping[str, FlagValue], records: Sequence[TrialRecord]) -> dict[str, frozenset[int]]:
        """For a proposal's parameters so far (a sampler's), the contexts this rule would skip at every
        fraction (:meth:`ruled_out`); none where the engine is not chosen yet or refuses the flags."""
        if self.space.engines is not None and ENGINE_PARAM not in params:
            return {}
        chosen: dict[str, FlagValue] = dict(self.space.fixed)
        for name, param in self.space.tuned.items():  # as suggest() would: a grouped TPE samples inactive flags too
            if name in params and (param.when is None or param.when.holds(chosen)):
                chosen[name] = params[name]
        engine, flags = self.space.split_engine(chosen)
        rules = self.engines[engine].memory_rules
        if rules is None or rules.context_flag is None:
            return {}
        try:
            plan = self.engines[engine].normalise({k: v for k, v in flags.items() if v is not False})
        except InvalidConfig:
            return {}
        return {rules.context_flag: self.ruled_out(engine, plan.flags, records)}

    def decide(self, plan: LaunchPlan, history: History) -> Decision | None:
        rules = self.engines[plan.engine].memory_rules
        if rules is None:
            return None
        needed = needed_tokens(rules, plan.flags)
        fraction = plan.flags.get(rules.fraction_flag)
        fraction = fraction if isinstance(fraction, (int, float)) else rules.default_fraction
        if needed is None:
            return None
        estimate = self._estimator(plan.engine, rules, history.finished)
        said = f"--{rules.context_flag} {needed} needs {needed} tokens for one request"
        if fraction is None:  # the engine picks it: whatever it picks, the pool is at most the whole memory's
            whole = estimate(plan.flags, 1.0)
            if whole is None or not too_small(whole, needed):
                return None
            reason = (
                f"predicted without launching: {said}; the engine picks --{rules.fraction_flag}, and even at 1 the "
                f"pool would hold about {whole.tokens:.0f} ({self._source(whole)})"
            )
            return self._skip(reason, whole.trials + whole.cell_trials)
        here = estimate(plan.flags, float(fraction))
        if here is None or not too_small(here, needed):
            return None
        best, room, top = self._at_most_room(rules, plan.flags, estimate)
        if best is not None and too_small(best, needed):
            varied = [f"{name} {room[name]}" for name in room if room[name] != plan.flags.get(name)]
            assert top is not None  # an estimate at the most room has its fraction
            at = ", ".join([f"{rules.fraction_flag} {top:g}", *(v for v in varied if rules.fraction_flag not in v)])
            reason = (
                f"predicted without launching: {said}; no fraction the space allows holds it: at most about "
                f"{best.tokens:.0f} tokens at {at} ({self._source(best)})"
            )
            trials = best.trials + best.cell_trials
        else:
            reason = (
                f"predicted without launching: {said}; at {rules.fraction_flag} {fraction:g} the pool holds about "
                f"{here.tokens:.0f} ({self._source(here)})"
            )
            trials = here.trials + here.cell_trials
        return self._skip(reason, trials)

    def _skip(self, reason: str, trials: Sequence[int]) -> Skip:
        return Skip(
            rule=self.name,
            outcome=OutcomeKind.predicted_for("too-low"),
            reason=reason,
            constraint="memory",
            trials=list(trials),
        )

    def _source(self, estimate: PoolEstimate) -> str:
        """Who said it: the launches whose pools did, or, before any, the model's config.json."""
        if estimate.trials:
            return "the pools of trials " + ", ".join(str(n) for n in estimate.trials)
        layout = self.layout
        assert layout is not None
        if estimate.cell_trials:
            logged = ", ".join(str(n) for n in estimate.cell_trials)
            return (
                f"before any alike launch stated its pool, by the free memory and the weights over the KV bytes "
                f"per token trials {logged} logged, fewer than the model's config.json counts"
            )
        return (
            f"before any launch stated its pool, by the model's config.json: {layout.full_attention_layers} "
            f"full-attention layers of {layout.kv_heads} KV heads x {layout.head_dim}, the free memory and the weights"
        )
