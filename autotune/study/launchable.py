"""Whether a sampler's partial proposal would be launched: the study's pre-launch rules asked before the
proposal is made, for the model-guided search (:mod:`autotune.study.guided`), which chooses some flags
and leaves the rest (memory sizing) to TPE.

The runner builds a :class:`WouldLaunch` over its own rules and records and hands it to the sampler, so
knowledge flows one way: the rules stay the only judges of a launch, the sampler only asks.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from autotune.decision import Launch
from autotune.engines.base import Engine, InvalidConfig, LaunchPlan
from autotune.records import TrialRecord
from autotune.space import CategoricalParam, FloatParam, IntParam, SearchSpace, suggest
from autotune.study.guided_reads import Draw
from autotune.study.history import History
from autotune.study.rules import Rule, decide

# Whose other flags complete a partial proposal: the best measured launch's and the latest few measured
# launches'; before any launch served, this many random draws.
LATEST = 3
DRAWS = 16


class WouldLaunch:
    """``(params) -> params | None``: ``params`` (some of the space's tuned flags) with the memory sizing
    (the engine's fraction, graph batch and its cap, context, where tuned) at which the rules would launch
    them, the other tuned flags as the best measured launch or one of the :data:`LATEST` latest measured
    launches set them (before any served, one of :data:`DRAWS` random draws; the first that launches);
    None where none would. Before any trial finished, ``params`` as given."""

    def __init__(
        self,
        space: SearchSpace,
        engines: Mapping[str, Engine],
        rules: Sequence[Rule],
        records: Callable[[], list[TrialRecord]],
    ) -> None:
        self.space = space
        self.engines = engines
        self.rules = rules
        self.records = records
        memory = engines[space.engine].memory_rules if space.engine in engines else None
        sizing = (
            (memory.fraction_flag, memory.graph_batch_flag, memory.graph_batch_cap_flag, memory.context_flag)
            if memory is not None
            else ()
        )
        # What the proposal pins besides ``params``: the memory sizing; the rest (a kernel, a cache dtype) is
        # the other sampler's to draw.
        self.sizing = frozenset(name for name in sizing if name in space.tuned)
        self._verified: dict[int, float] = {}  # a served trial's tokens a pass (a finished trial does not change)

    def __call__(self, params: Mapping[str, Any]) -> dict[str, Any] | None:
        records = self.records()
        finished = [r for r in records if r.state == "COMPLETE" and r.confirm_of is None]
        if not finished:
            return dict(params)
        history = History(records, number=max(r.number for r in records) + 1)
        served = [r for r in finished if r.served]
        rng = random.Random(len(records))  # a study repeats its proposals
        # Once a launch served, only sizings that served: exploring the sizing is TPE's (the rules cannot
        # tell every death ahead, and a draw they let through died on the tight members time and again).
        if not served:
            completions: list[dict[str, Any]] = [{} for _ in range(DRAWS)]
        else:
            tokens = self._tokens(suggest(self.space, Draw(random.Random(0), dict(params))).flags)
            for r in served:
                if r.number not in self._verified:
                    self._verified[r.number] = self._tokens(r.flags) or 0.0
            deep = [r for r in served if self._verified[r.number] >= (tokens or 0.0)]
            shallow = [r for r in _picked(served) if r not in deep]
            completions = [
                *(self._tuned(r.flags) for r in _picked(deep)),
                *(self._least_graphs(self._tuned(r.flags)) for r in shallow),
            ]
        for completion in completions:
            candidate = suggest(self.space, Draw(rng, {**completion, **params}))
            if self._launches(candidate.flags, history):
                return {k: v for k, v in candidate.params.items() if k in params or k in self.sizing}
        return None

    def _tokens(self, flags: Mapping[str, Any]) -> float | None:
        """Tokens a pass of ``flags``' draft verifies (1: none); None where the engine refuses them."""
        plan = self._plan(flags)
        return self.engines[self.space.split_engine(flags)[0]].verify_tokens(plan.flags) if plan else None

    def _least_graphs(self, completion: dict[str, Any]) -> dict[str, Any]:
        """A served launch's sizing for a draft deeper than its own: with the smallest graph batch the space
        offers from the measured concurrency up (one stream's rate does not change), as its graphs capture
        more tokens a pass and their memory grows with them. A deep draft at a shallow one's sizing died on
        the tight members time and again, where the rules, which price the headroom, let it through."""
        engine = self.engines.get(self.space.engine)
        flag = engine.memory_rules.graph_batch_flag if engine is not None and engine.memory_rules else None
        param = self.space.tuned.get(flag) if flag is not None else None
        if flag is None or param is None:
            return completion
        offered = [v for v in _numbers(param) if v >= self.space.objective.concurrency]
        return {**completion, flag: min(offered)} if offered else completion

    def _tuned(self, flags: Mapping[str, Any]) -> dict[str, Any]:
        """A trial's tuned flags as parameters the space can draw (a value a rule adjusted off the space's
        choices is left to draw); a flag it left out is ``false`` where the space allows that."""
        out: dict[str, Any] = {}
        for name, param in self.space.tuned.items():
            value = flags.get(name, False)
            if isinstance(param, CategoricalParam):
                if value in param.choices:
                    out[name] = value
            elif value is not False and not isinstance(value, (bool, str)) and param.low <= value <= param.high:
                out[name] = value
        return out

    def _plan(self, flags: Mapping[str, Any]) -> LaunchPlan | None:
        """The engine's plan of ``flags``; None where it refuses them."""
        engine, chosen = self.space.split_engine(flags)
        try:
            return self.engines[engine].normalise({k: v for k, v in chosen.items() if v is not False})
        except InvalidConfig:
            return None

    def _launches(self, flags: Mapping[str, Any], history: History) -> bool:
        plan = self._plan(flags)
        return plan is not None and isinstance(decide(self.rules, plan, history, baseline=False), Launch)


def _picked(served: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Whose sizing completes a proposal: the best of ``served`` and its :data:`LATEST` latest."""
    best = [max(served, key=lambda r: r.value or 0.0)] if served else []
    return [*best, *(r for r in served[-LATEST:] if r not in best)]


def _numbers(param: IntParam | FloatParam | CategoricalParam) -> list[int]:
    """The whole numbers a space's parameter offers (a categorical's numeric choices, an int range's steps)."""
    if isinstance(param, CategoricalParam):
        return [v for v in param.choices if isinstance(v, int) and not isinstance(v, bool)]
    if isinstance(param, IntParam):
        return list(range(param.low, param.high + 1, param.step))
    return []
