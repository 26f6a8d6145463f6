"""Stop rules: small strategies over the finished trials, each saying why it fired.

The study loop (``StudyRunner.run`` in :mod:`autotune.study.runner`) asks every rule after each
trial; the first reason returned stops the study and is stored in it (and shown by the report).
The trial cap is Optuna's own ``n_trials``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from autotune.errors import UserError
from autotune.records import TrialRecord

StopRule = Callable[[Sequence[TrialRecord]], "str | None"]


@dataclass
class TimeBudget:
    """Stop once the budget is spent (checked between trials)."""

    seconds: float
    clock: Callable[[], float] = time.monotonic
    started: float = field(init=False)

    def __post_init__(self) -> None:
        self.started = self.clock()

    def __call__(self, records: Sequence[TrialRecord]) -> str | None:
        if self.clock() - self.started >= self.seconds:
            return f"time budget spent ({self.seconds / 3600:.2g} h)"
        return None


@dataclass
class NoImprovement:
    """Stop after ``patience`` measured trials without beating the best by more than its noise.

    A trial improves when its value exceeds the best so far by more than the larger of
    ``min_rel_gain`` and the best's own relative 95% CI: a gain inside the noise is not a gain.
    Duplicates (measured once, reused) do not count.
    """

    patience: int
    min_rel_gain: float = 0.01

    def __call__(self, records: Sequence[TrialRecord]) -> str | None:
        best: float | None = None
        best_rel_ci = 0.0
        since = 0
        for record in records:
            if record.reused_from is not None or record.state != "COMPLETE":
                continue
            value = record.value if record.feasible else None
            margin = max(self.min_rel_gain, best_rel_ci)
            if value is not None and (best is None or value > best * (1 + margin)):
                best, since = value, 0
                ci = record.metric_ci95("decode_tok_s")
                best_rel_ci = float(ci) / value if isinstance(ci, (int, float)) and value else 0.0
            else:
                since += 1
        if best is not None and since >= self.patience:
            return f"no improvement beyond the noise in {since} trials (patience {self.patience})"
        return None


@dataclass
class TotalTrials:
    """Stop once the study holds this many finished trials, whichever worker ran them."""

    total: int

    def __call__(self, records: Sequence[TrialRecord]) -> str | None:
        finished = sum(1 for r in records if r.state in ("COMPLETE", "FAIL"))
        return f"the study has {finished} trials (total {self.total})" if finished >= self.total else None


REPEATED_FAILURE = "the same failure"
# Outcomes that say nothing about the sampled configuration: when one repeats identically launch
# after launch (a wrong key, a missing model, a launcher that cannot start), more trials cannot help.
_INFRASTRUCTURE = frozenset({"crashed", "launch-timeout", "measurement-failed", "error", "port-in-use"})
_NUMBERS = re.compile(r"\d+")


@dataclass
class RepeatedFailure:
    """Stop when the last ``times`` launches all failed with the same reason and nothing succeeded
    in between: a fault of the set-up, not of the configuration, that would fail all night.

    Reasons are compared with their numbers blanked (ports, pids, timings differ per launch).
    Duplicates, predictions and interrupted trials neither count nor break the streak; a measured
    trial or a memory/config failure (a launch that got far enough to teach something) breaks it.
    Once the set-up has served a launch, the same failure may belong to a region of the space
    the sampler is still leaving (a drafter of the wrong kind, say): the streak must then be
    ``times_after_served`` long, still a few launches of a night.
    """

    times: int = 3
    times_after_served: int = 6

    def __call__(self, records: Sequence[TrialRecord]) -> str | None:
        streak: list[TrialRecord] = []
        served = False
        for record in sorted(records, key=lambda r: r.number):
            if record.state not in ("COMPLETE", "FAIL") or record.reused_from is not None:
                continue
            if record.outcome in _INFRASTRUCTURE:
                shape = (record.outcome, _NUMBERS.sub("#", record.reason or ""))
                if streak and (streak[-1].outcome, _NUMBERS.sub("#", streak[-1].reason or "")) != shape:
                    streak = []
                streak.append(record)
            elif record.outcome in ("ok", "invalid-config") or record.outcome.startswith("infeasible"):
                streak = []
                served = served or record.served
        if len(streak) < (self.times_after_served if served else self.times):
            return None
        last = streak[-1]
        numbers = ", ".join(str(r.number) for r in streak[-self.times :])
        return (
            f"{REPEATED_FAILURE} in {len(streak)} launches in a row (trials {numbers}): {last.outcome}: "
            f"{last.reason or 'no reason given'}; it does not depend on the configuration: fix it "
            "(see the trial's log), then run the same command to resume"
        )


def first_reason(rules: Sequence[StopRule], records: Sequence[TrialRecord]) -> str | None:
    for rule in rules:
        reason = rule(records)
        if reason is not None:
            return reason
    return None


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``8h``, ``1h30m`` or plain seconds -> seconds."""
    text = text.strip().lower()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or _DURATION.sub("", text).strip():
        raise UserError(f"cannot read duration {text!r}; write e.g. 90s, 30m, 8h or 1h30m")
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(float(n) * scale[u] for n, u in parts)
