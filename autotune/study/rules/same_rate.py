"""Rule ``same-rate``: where the objective is one stream's decode rate, a configuration that differs
from a measured one only in flags that size memory is not launched.

Its rate is known (the engine's rate key says which flags cannot change one stream's decode); what a
launch would add is only another memory layout, or a memory death. Built only for a study whose
objective is that rate (:func:`autotune.study.rules.one_stream_rate`).
"""

from __future__ import annotations

from collections.abc import Mapping

from autotune.decision import Decision, Reuse
from autotune.engines.base import Engine, LaunchPlan
from autotune.secrets import redact_flags
from autotune.study.history import History


class SameRate:
    name = "same-rate"
    for_baselines = False

    def __init__(self, engines: Mapping[str, Engine]) -> None:
        self.engines = engines
        self.keys: dict[int, str | None] = {}  # a served trial's rate key, computed once

    def decide(self, plan: LaunchPlan, history: History) -> Decision | None:
        hidden = plan.model_copy(update={"flags": redact_flags(plan.flags)})  # as storage holds flags
        key = self.engines[plan.engine].rate_key(hidden)
        if key is None:
            return None
        for record in history.served:
            if record.number not in self.keys:
                launched = LaunchPlan(engine=record.engine or plan.engine, flags=record.flags)
                self.keys[record.number] = self.engines[launched.engine].rate_key(launched)
            if self.keys[record.number] == key:
                differing = sorted(
                    k for k in {*hidden.flags, *record.flags} if hidden.flags.get(k) != record.flags.get(k)
                )
                shown = ", ".join(f"--{name}" for name in differing) or "no flags"
                reason = (
                    f"same single-stream decode rate as trial {record.number} (differs only in {shown}, which "
                    "size memory); not launched"
                )
                return Reuse(rule=self.name, trial=record.number, same_config=False, reason=reason)
        return None
