"""What a night left: each trial as a step (launched or not, what it measured, what is true) and the
night's answer, summarised against the landscape's optimum. Every method's night is a :class:`Run`.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from typing import Any

WITHIN = 0.02  # "reached": the incumbent's true value is within 2 % of the optimum
PREDICTED_AFTER = (3, 5, 10)  # the launch predicted after this many measured launches is judged (issue 53)


@dataclass
class Step:
    """One trial: launched or not, its outcome, what it measured and what is true."""

    launched: bool
    outcome: str
    seconds: float = 0.0
    measured: float | None = None
    true: float | None = None
    flags: dict[str, Any] | None = None
    predicted: float | None = None  # the rate the model-guided search predicted before the launch


@dataclass
class Run:
    method: str
    seed: int
    steps: list[Step] = field(default_factory=list)
    wall_s: float = 0.0
    confirmed_true: float | None = None  # the true value of the study's confirmed best (recorded replays)
    confirm_launches: int = 0
    claims: int = 0  # gains over a baseline the race marked significant
    false_claims: int = 0  # of those, the ones whose sign the truth does not have (as verdicts.py counts)
    defaults_true: float | None = None  # the engine's defaults' true value: an answer below it is harmful

    def summary(self, optimum: float, gpus: int) -> dict[str, Any]:
        """Launches, trials and GPU-hours until the incumbent is within 2 %, memory deaths, final gap.

        The incumbent is the configuration with the highest mean over its launches so far (a study
        launches one again to re-measure it), which a user would deploy. ``launches_to_find_2pct``:
        until any launched configuration is truly within 2 %, whatever it measured; the rest of the
        way to the incumbent is selection under the launch noise, not search."""
        incumbent_true = 0.0
        measured: dict[str, list[float]] = {}
        truth: dict[str, float] = {}
        launches = trials = 0
        seconds = 0.0
        reached: dict[str, Any] | None = None
        found: int | None = None
        memory = 0
        for number, step in enumerate(self.steps):
            trials += 1
            seconds += step.seconds
            if step.launched:
                launches += 1
                memory += step.outcome.startswith("infeasible-memory")
                if step.measured is not None:
                    key = json.dumps(step.flags, sort_keys=True) if step.flags else f"step {number}"
                    measured.setdefault(key, []).append(step.measured)
                    truth[key] = step.true or 0.0
                    best = max(measured, key=lambda k: statistics.fmean(measured[k]))
                    incumbent_true = truth[best]
                    if found is None and truth[key] >= (1 - WITHIN) * optimum:
                        found = launches
            if reached is None and incumbent_true >= (1 - WITHIN) * optimum:
                reached = {"launches": launches, "trials": trials, "gpu_hours": seconds * gpus / 3600}
        answer = self.confirmed_true if self.confirmed_true is not None else incumbent_true
        return {
            "launches_to_2pct": reached["launches"] if reached else None,
            "launches_to_find_2pct": found,
            "trials_to_2pct": reached["trials"] if reached else None,
            "gpu_hours_to_2pct": reached["gpu_hours"] if reached else None,
            "launches": launches,
            "trials": trials,
            "memory_deaths": memory,
            "memory_death_rate": memory / launches if launches else 0.0,
            "gpu_hours": seconds * gpus / 3600,
            "final_gap": 1 - incumbent_true / optimum,
            "final_true_tok_s": incumbent_true,
            "confirmed_gap": None if self.confirmed_true is None else 1 - self.confirmed_true / optimum,
            "confirm_launches": self.confirm_launches,
            "night_launches": launches + self.confirm_launches,
            "claims": self.claims,
            "false_claims": self.false_claims,
            # The night's answer: the race's (or the peer's) pick, else the incumbent by mean.
            "regret_pct": 100 * (1 - answer / optimum),
            "harmful": self.defaults_true is not None and answer < self.defaults_true,
            "predicted_error_after": self.predicted_errors(),
        }

    def predicted_errors(self) -> dict[str, float | None]:
        """After k measured launches (k in :data:`PREDICTED_AFTER`), the next measured launch's error
        |predicted / measured - 1|, of the rate predicted before it; None where it had no prediction."""
        measured = [s for s in self.steps if s.launched and s.measured]
        errors: dict[str, float | None] = {}
        for k in PREDICTED_AFTER:
            step = measured[k] if len(measured) > k else None
            ok = step is not None and step.predicted is not None and step.measured
            errors[str(k)] = abs(step.predicted / step.measured - 1) if ok else None  # type: ignore[union-attr,operator]
        return errors
