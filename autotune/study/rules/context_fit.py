"""Rule ``context-fit``: a plan whose KV pool, by the tokens earlier launches' pools held
(:mod:`autotune.study.pool_tokens`), cannot hold one request of its context is not launched: at its own
fraction, and, said so, where no fraction the space allows would hold it either (with the state ratio
and KV dtype the space offers that leave the KV the most room). Before any launch stated its pool, the
model's KV layout from its ``config.json`` (:mod:`autotune.kv_layout`) estimates it. Applied after
``make-room``, which may have given the plan a larger fraction.
"""

from __future__ import annotations

from collections.abc import Mapping

from autotune.decision import Decision, Skip
from autotune.engines.base import Engine, LaunchPlan
from autotune.feasibility import FeasibilityModel
from autotune.kv_layout import KvLayout
from autotune.outcomes import OutcomeKind
from autotune.space import FlagValue, SearchSpace
from autotune.study.history import History
from autotune.study.pool_tokens import (
    PoolEstimate,
    largest_fraction,
    most_room,
    needed_tokens,
    pool_points,
    prior_tokens,
    tokens_at,
    too_small,
)


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

    def decide(self, plan: LaunchPlan, history: History) -> Decision | None:
        rules, model = self.engines[plan.engine].memory_rules, self.feasibility[plan.engine]
        if rules is None:
            return None
        needed = needed_tokens(rules, plan.flags)
        fraction = plan.flags.get(rules.fraction_flag)
        fraction = fraction if isinstance(fraction, (int, float)) else rules.default_fraction
        if needed is None or fraction is None:
            return None
        budget = model.total_bytes if rules.budget_of == "total" else model.start_free_bytes
        points = pool_points(history.finished, rules, plan.engine, budget_bytes=budget)

        def estimate(flags: Mapping[str, FlagValue], at: float) -> PoolEstimate | None:
            found = tokens_at(points, rules, flags, at)
            if found is not None or self.layout is None:
                return found
            weights = model.weights_per_gpu(flags)
            return prior_tokens(self.layout, rules, flags, at, budget_bytes=budget, weights_per_gpu=weights)

        here = estimate(plan.flags, float(fraction))
        if here is None or not too_small(here, needed):
            return None
        room = most_room(self.space, rules, plan.flags)
        top = largest_fraction(self.space, rules, plan.flags)
        best = estimate(room, top) if top is not None else None
        said = f"--{rules.context_flag} {needed} needs {needed} tokens for one request"
        if best is not None and too_small(best, needed):
            varied = [f"{name} {room[name]}" for name in room if room[name] != plan.flags.get(name)]
            at = ", ".join([f"{rules.fraction_flag} {top:g}", *(v for v in varied if rules.fraction_flag not in v)])
            reason = (
                f"predicted without launching: {said}; no fraction the space allows holds it: at most about "
                f"{best.tokens:.0f} tokens at {at} ({self._source(best)})"
            )
            trials = best.trials
        else:
            reason = (
                f"predicted without launching: {said}; at {rules.fraction_flag} {fraction:g} the pool holds about "
                f"{here.tokens:.0f} ({self._source(here)})"
            )
            trials = here.trials
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
        return (
            f"before any launch stated its pool, by the model's config.json: {layout.full_attention_layers} "
            f"full-attention layers of {layout.kv_heads} KV heads x {layout.head_dim}, the free memory and the weights"
        )
