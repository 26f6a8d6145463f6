"""Rule ``measure-again``: a configuration the sampler proposes again while it is not significantly
behind the best is launched again, instead of reusing its measurement.

"Again" is the same effective configuration, or, where the objective is one stream's decode rate,
one with the same rate (what rule ``same-rate`` would reuse); the configuration measured first is
launched again, exactly as it launched.

The same configuration measures differently from one launch to the next (about 4 % on an H200), and
the search keeps one launch of most configurations. Reused, one unlucky launch of the best
configuration stands for it forever while a lucky launch of a worse one is taken as the best. A
repeat proposal is the sampler asking about a configuration again; for a contender the answer is a
fresh launch, exactly as it first launched, until it has :data:`MEASURE_LAUNCHES` launches; after
that, and for a configuration significantly behind the best, rules ``duplicate`` and ``same-rate``
reuse.
"Significantly behind": the gap between the two means exceeds 1.96 standard errors of their
difference, with the study's own launch-to-launch noise (a prior until it has measured any).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping

from autotune.decision import Decision, Launch
from autotune.engines.base import Engine, LaunchPlan
from autotune.records import TrialRecord
from autotune.study.confirm import launched_values, measure_noise
from autotune.secrets import redact_flags
from autotune.study.history import History

MEASURE_LAUNCHES = 3  # launches of one configuration during the search; the race adds its own after


class MeasureAgain:
    name = "measure-again"
    for_baselines = False

    def __init__(self, objective: str, rate_engines: Mapping[str, Engine] | None = None) -> None:
        """``rate_engines``: the engines whose rate keys say which configurations measure the same
        rate (given only where the objective is one stream's decode rate)."""
        self.objective = objective
        self.rate_engines = rate_engines
        self.rate_keys: dict[int, str | None] = {}  # a served trial's rate key, computed once

    def _rate_key(self, plan: LaunchPlan) -> str | None:
        return self.rate_engines[plan.engine].rate_key(plan) if self.rate_engines is not None else None

    def _same(self, record: TrialRecord, plan: LaunchPlan, rate: str | None) -> bool:
        if record.config_key == plan.config_key:
            return True
        if rate is None:
            return False
        if record.number not in self.rate_keys:
            launched = LaunchPlan(engine=record.engine or plan.engine, flags=record.flags)
            self.rate_keys[record.number] = self._rate_key(launched)
        return self.rate_keys[record.number] == rate

    def decide(self, plan: LaunchPlan, history: History) -> Decision | None:
        rate = self._rate_key(plan.model_copy(update={"flags": redact_flags(plan.flags)}))  # as storage holds flags
        first = next(
            (r for r in history.served if r.confirm_of is None and r.measures_again_of is None
             and self._same(r, plan, rate)),
            None,
        )  # fmt: skip
        if first is None:
            return None
        values = launched_values(history.served)
        mine = values.get(first.number)
        if not mine or len(mine) >= MEASURE_LAUNCHES:
            return None
        best = max(values.values(), key=statistics.fmean)
        noise = measure_noise(history.served, self.objective).total
        error = noise * statistics.fmean(best) * math.sqrt(1 / len(mine) + 1 / len(best))
        if statistics.fmean(best) - statistics.fmean(mine) > 1.96 * error:
            return None
        again = LaunchPlan(engine=first.engine or plan.engine, flags=first.flags)
        return Launch(plan=again, adjusted=first.adjusted, measures_again_of=first.number)
