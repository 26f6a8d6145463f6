"""Rule ``duplicate``: a configuration whose effective flags were measured already is not launched again.

Two candidates the engine's rules resolve to one effective configuration (the same config key) are
one configuration: the later one reuses the earlier one's measurement. One still being measured by
another worker is waited for: the older trial measures and the newer one waits, unless the newer one
decided first (its rules turned another proposal into this configuration after the older one had
looked), which then measures it.
"""

from __future__ import annotations

from autotune.decision import Decision, Reuse, Wait
from autotune.engines.base import LaunchPlan
from autotune.outcomes import outcome_kind
from autotune.study.history import History


class Duplicate:
    name = "duplicate"
    for_baselines = False

    def decide(self, plan: LaunchPlan, history: History) -> Decision | Wait | None:
        same = [r for r in history.records if r.launch.config_key == plan.config_key and r.number != history.number]
        for record in same:
            kind = outcome_kind(record.outcome)
            if record.state == "COMPLETE" and record.reused_from is None and kind and not kind.is_server_failure:
                return Reuse(rule=self.name, trial=record.number, same_config=True)
        measuring = [
            r.number for r in same if r.state == "RUNNING" and (r.number < history.number or r.decision is not None)
        ]
        return Wait(trial=measuring[0]) if measuring else None
