"""The race's rounds as a fit: each launch's log figure is configuration effect + round effect, so drift
cancels; after each round, every configuration against the leader (behind, equivalent within the margin,
or open), and how many launches would settle what is open. Pure functions over the relaunches by round;
:mod:`autotune.study.confirm` states the verdict from them, :mod:`autotune.study.race` launches.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Collection, Sequence
from statistics import NormalDist
from typing import Literal

from pydantic import Field

from autotune.measure.statistics import t95
from autotune.models import Frozen
from autotune.outcomes import OutcomeKind
from autotune.records import TrialRecord

# Relaunching the same configuration moved a real H200's decode figure by 1-5 % (up to 19 % for long
# drafts, llama.cpp): the prior for the between-launch noise until a study measures it.
PRIOR_LAUNCH_NOISE = 0.05


class Fit(Frozen):
    """Log objective = configuration effect + round effect + noise, fitted to the confirmation launches:
    the round effect is what drift did to every launch of that round, so it cancels from comparisons."""

    effects: dict[int, float] = Field(description="per configuration (its first trial): mean log value")
    counts: dict[int, int]
    sd: float | None = Field(description="residual sd of a log value (relative sd of one launch)")
    dof: int

    def interval(self, a: int, b: int, *, comparisons: int = 1) -> tuple[float, float | None]:
        """log(a / b) and the half width of its 95 % interval, widened for ``comparisons`` made at once
        (Bonferroni: the leader was picked as the highest of several); None without a noise."""
        difference = self.effects[a] - self.effects[b]
        if self.sd is None or not self.dof:
            return difference, None
        widen = NormalDist().inv_cdf(1 - 0.025 / comparisons) / NormalDist().inv_cdf(0.975) if comparisons > 1 else 1.0
        return difference, widen * t95(self.dof) * self.sd * math.sqrt(1 / self.counts[a] + 1 / self.counts[b])


def fit(launches: dict[int, dict[int, float]]) -> Fit:
    """Configuration and round effects by alternating least squares (the design is unbalanced once
    the race drops configurations), from ``launches``: configuration -> round -> objective."""
    cells = [(c, r, math.log(v)) for c, by_round in launches.items() for r, v in by_round.items() if v > 0]
    configs = sorted({c for c, _, _ in cells})
    rounds = sorted({r for _, r, _ in cells})
    effect = dict.fromkeys(configs, 0.0)
    shift = dict.fromkeys(rounds, 0.0)
    for _ in range(50):
        for c in configs:
            effect[c] = statistics.fmean([y - shift[r] for cc, r, y in cells if cc == c])
        for r in rounds:
            shift[r] = statistics.fmean([y - effect[c] for c, rr, y in cells if rr == r])
        centre = statistics.fmean(shift.values())
        shift = {r: v - centre for r, v in shift.items()}
    dof = max(len(cells) - len(configs) - len(rounds) + 1, 0)
    squares = sum((y - effect[c] - shift[r]) ** 2 for c, r, y in cells)
    counts = {c: sum(1 for cc, _, _ in cells if cc == c) for c in configs}
    return Fit(effects=effect, counts=counts, sd=math.sqrt(squares / dof) if dof else None, dof=dof)


def relaunches_by_round(
    records: Sequence[TrialRecord], finalists: Sequence[TrialRecord]
) -> dict[int, dict[int, float]]:
    """Each finalist's served relaunches by round: the relaunches queued together. Relaunches kept
    before rounds were recorded count by order: a configuration's n-th relaunch in round -n. Only a
    positive objective counts (the fit works on its log): a finalist without one is not confirmed."""
    launches: dict[int, dict[int, float]] = {f.number: {} for f in finalists}
    relaunches = {f.number: [r for r in records if r.confirm_of == f.number] for f in finalists}
    for number, runs in relaunches.items():
        for index, run in enumerate(sorted(runs, key=lambda r: r.number)):
            if run.outcome == OutcomeKind.OK.value and run.value is not None and run.value > 0:
                launch_round = run.proposal.launch_round
                launches[number][launch_round if launch_round is not None else -1 - index] = run.value
    return launches


class Standing(Frozen):
    """Where the race stands after a round: who is still relaunched, and whether the verdict is decided."""

    racing: list[int] = Field(
        description="the leader, then the configurations whose comparison with it is open "
        "(the decisive ones first); a configuration whose comparisons are decided is not "
        "relaunched"
    )
    leader: int | None
    equivalent: list[int] = Field(default_factory=list, description="within the margin of the leader")
    decisive: list[int] = Field(default_factory=list, description="open comparisons the verdict waits for")
    settled: bool


RaceStop = Literal["baseline", "all"]
# Stop once the leader is decided against the best baseline ("baseline"), or against every configuration
# it could still lose to ("all"); chosen on the dev slice (benchmarks/results/race-2026-12-04/).
RACE_STOP: RaceStop = "all"


def _claims(effects: Collection[int], baselines: Collection[int]) -> int:
    """How many configurations the leader was picked from: its gain is judged as one of that many claims."""
    return max(sum(1 for c in effects if c not in baselines), 1)


def standing(
    launches: dict[int, dict[int, float]],
    *,
    margin: float,
    baselines: Collection[int] = (),
    until: RaceStop | None = None,
) -> Standing:
    """After a round, each configuration against the leader: significantly behind (decided, no longer
    relaunched), equivalent (both ends of the interval within ``margin``: decided), or open. The
    comparison with the best baseline is judged as the verdict judges it (widened for the number of
    configurations the leader was picked from). Settled when the comparisons the verdict rests on are
    decided: with ``until="all"`` every comparison with the leader; with ``until="baseline"`` the leader
    against the best baseline (or, when the leader is a baseline, against every other configuration that
    could beat it)."""
    until = until or RACE_STOP
    served = {c: v for c, v in launches.items() if v}
    if not served:
        return Standing(racing=[], leader=None, settled=True)
    model = fit(served)
    leader = max(model.effects, key=lambda c: model.effects[c])
    best_baseline = max((c for c in model.effects if c in baselines), key=lambda c: model.effects[c], default=None)
    claims = _claims(model.effects, baselines)
    equivalent, open_ = [leader], []
    bound = math.log(1 + margin)
    for config in sorted(model.effects, key=lambda c: -model.effects[c]):
        if config == leader:
            continue
        behind, half = model.interval(leader, config, comparisons=claims if config == best_baseline else 1)
        if half is not None and behind + half < bound:  # behind by less than the margin: an equal
            equivalent.append(config)
        elif half is None or behind - half <= 0:
            open_.append(config)
    if until == "all" or best_baseline is None:
        decisive = list(open_)
    elif leader in baselines:  # the verdict keeps it unless something beats it
        decisive = [c for c in open_ if c not in baselines]
    else:
        decisive = [c for c in open_ if c == best_baseline]
    settled = model.sd is not None and not decisive
    others = [c for c in open_ if c not in decisive]
    return Standing(
        racing=[leader, *decisive, *others], leader=leader, equivalent=equivalent, decisive=decisive, settled=settled
    )


# Degrees of freedom the prior launch noise counts as when the planning estimate shrinks the race's sd.
PRIOR_DOF = 4


def planning_sd(model: Fit) -> float:
    """The race's sd shrunk toward :data:`PRIOR_LAUNCH_NOISE` (as if measured on :data:`PRIOR_DOF` degrees
    of freedom): two rounds give a sd that may be far too small or large to plan with."""
    sd = model.sd if model.sd is not None else PRIOR_LAUNCH_NOISE
    return math.sqrt((model.dof * sd**2 + PRIOR_DOF * PRIOR_LAUNCH_NOISE**2) / (model.dof + PRIOR_DOF))


def launches_to_settle(
    model: Fit, leader: int, others: Sequence[int], *, margin: float, comparisons: int = 1
) -> int | None:
    """Launches of each configuration, in all, at which each open comparison would be decided if the
    observed difference held: clear of zero, or inside the margin. Planned with a normal quantile
    (widened for ``comparisons`` claims) and the sd shrunk toward the prior (:func:`planning_sd`), at
    least one launch more than the race gave it."""
    if not others:
        return None
    z = NormalDist().inv_cdf(1 - 0.025 / max(comparisons, 1))
    sd = planning_sd(model)
    needed = 0
    for other in others:
        difference = abs(model.effects[leader] - model.effects[other])
        room = max(difference, math.log(1 + margin) - difference)
        per_config = math.ceil(2 * (z * sd / max(room, 1e-9)) ** 2)
        needed = max(needed, per_config, model.counts[leader] + 1, model.counts[other] + 1)
    return needed
