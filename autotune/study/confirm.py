"""A best that survives a second look: the noise of the objective, the race of finalists, the verdict.

The highest of many noisy measurements is biased upward. So the top few distinct configurations and
every baseline are relaunched in interleaved rounds; each launch's log figure is fitted as
configuration effect plus round effect (drift cancels), and the search's first measurement stays
out of the mean. What is significantly behind drops out (never the best baseline); configurations
within the margin of the leader (both ends of the interval inside it, once the race has decided it) are
equals, resolved toward the engine's defaults (fewer changed flags, then less memory). The verdict is
the leader's gain over each baseline with its interval, and a baseline that nothing beats significantly
is the recommendation. Pure functions over
:class:`~autotune.records.TrialRecord`; the rounds' fit is :mod:`autotune.study.rounds`, and
:mod:`autotune.study.race` launches.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pydantic import Field

from autotune.engines import DEFAULT_ENGINE, get_engine
from autotune.measure.protocol import EarlyStop
from autotune.measure.statistics import t95
from autotune.models import Frozen
from autotune.outcomes import OutcomeKind
from autotune.records import TrialRecord
from autotune.study.rounds import (
    PRIOR_LAUNCH_NOISE,
    Fit,
    Standing,
    fit,
    launches_to_settle,
    relaunches_by_round,
    standing,
)


class Noise(Frozen):
    """The relative noise of a configuration's objective value, as measured in this study."""

    within_launch: float | None = Field(default=None, description="relative sd between rounds of one launch")
    between_launches: float | None = Field(default=None, description="relative sd between launches")
    launches: int = Field(default=0, description="relaunches the between-launch figure rests on")

    @property
    def total(self) -> float:
        """Relative sd of one launch's value: both parts, the prior standing in for what is unmeasured."""
        between = self.between_launches if self.between_launches is not None else PRIOR_LAUNCH_NOISE
        return math.hypot(self.within_launch or 0.0, between)


class Finalist(Frozen):
    """One configuration in the race: the search's first measurement, then its confirmation launches."""

    trial: int = Field(description="the trial that first measured this configuration")
    label: str
    config_key: str | None
    baseline: bool = False
    first: float | None = Field(
        default=None, description="the search's measurement (chosen for being high: not in the mean)"
    )
    values: list[float] = Field(description="the objective of every confirmation launch that served, by round")
    rounds: list[int] = Field(default_factory=list, description="the round of each value")
    failed: list[str] = Field(default_factory=list, description="confirmation launches that did not serve, and why")
    mean: float = Field(description="over the confirmation launches (the first measurement where none served)")
    ci95: float | None = Field(default=None, description="from the race's fit (round effects out): relative sd x mean")
    changed_flags: int
    memory: float | None = Field(default=None, description="the engine's memory flag, or peak GiB where logged")
    dropped_after: int | None = Field(default=None, description="the round after which it was significantly behind")
    joined_after: int | None = Field(
        default=None, description="a challenger: the rounds the race had run before it was admitted against the leader"
    )

    @property
    def confirmed(self) -> bool:
        return bool(self.values)


class Gain(Frozen):
    """How much faster one configuration is than a baseline, paired by interleaved round."""

    trial: int
    baseline: str
    baseline_trial: int
    gain: float = Field(description="relative: 0.05 is 5 % faster")
    low: float | None = Field(default=None, description="95 % interval of the gain, low end")
    high: float | None = None
    rounds: int = Field(description="rounds in which both served")

    @property
    def significant(self) -> bool:
        return self.low is not None and self.high is not None and (self.low > 0 or self.high < 0)

    def text(self) -> str:
        if self.low is None or self.high is None:
            return f"{self.gain:+.1%} over {self.baseline} (one round: no interval, not significant)"
        verdict = "significant" if self.significant else "not significant"
        return f"{self.gain:+.1%} over {self.baseline} ({self.low:+.1%} to {self.high:+.1%}), {verdict}"

    def interval_text(self) -> str:
        """The gain and its interval alone: ``+7.7% (-0.3% to +16.5%)``."""
        if self.low is None or self.high is None:
            return f"{self.gain:+.1%} (one round)"
        return f"{self.gain:+.1%} ({self.low:+.1%} to {self.high:+.1%})"


class Confirmation(Frozen):
    """The finalists and baselines raced on fresh, interleaved launches, and the verdict."""

    rounds: int = Field(description="rounds of interleaved launches run")
    finalists: list[Finalist] = Field(description="highest mean first")
    best: int = Field(description="trial number of the recommended configuration")
    leader: int = Field(description="trial number of the configuration with the highest confirmed mean")
    tied_with: list[int] = Field(default_factory=list, description="finalists equivalent to the best within the margin")
    first_best: int | None = Field(default=None, description="the best by single first measurement")
    gains: list[Gain] = Field(default_factory=list, description="the leader's gain over each baseline")
    reference: int | None = Field(
        default=None, description="trial number of the best baseline: what the verdict compares the leader with"
    )
    versus: list[Gain] = Field(
        default_factory=list,
        description="each other confirmed configuration's gain over "
        "the reference, with the interval the verdict uses (paired by round, widened for the "
        "configurations the leader was picked from): what a table or figure shows",
    )
    settled: bool = Field(description="every comparison the verdict rests on is decided")
    more_launches: int | None = Field(default=None, description="launches per configuration that would settle it")
    margin: float = Field(description="gains within this relative margin are equivalent")
    note: str = Field(description="the verdict in one sentence")
    noise: Noise

    @property
    def recommended(self) -> Finalist:
        return next(f for f in self.finalists if f.trial == self.best)

    def finalist(self, trial: int | None) -> Finalist | None:
        """The race's entry for ``trial`` (None: not raced)."""
        return next((f for f in self.finalists if f.trial == trial), None)


def _objective_runs(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Launched, measured trials (duplicates borrow a measurement, so they are not launches)."""
    return [r for r in records if r.outcome == OutcomeKind.OK.value and r.reused_from is None and r.value]


def measure_noise(records: Sequence[TrialRecord], objective: str) -> Noise:
    """Within-launch noise from each launch's CI; between-launch noise from configurations launched
    more than once (finalists' confirmations), pooled over configurations."""
    within: list[float] = []
    groups: dict[str, list[float]] = {}
    for record in _objective_runs(records):
        metric = record.measurement.metrics.get(objective)
        if metric is not None and metric.ci95 and metric.n and metric.n >= 2 and metric.value:
            within.append(metric.ci95 / t95(metric.n - 1) * math.sqrt(metric.n) / metric.value)
        if record.launch.config_key and record.value:
            groups.setdefault(record.launch.config_key, []).append(record.value)
    squares, dof = 0.0, 0
    for values in groups.values():
        if len(values) >= 2:
            mean = statistics.fmean(values)
            squares += sum((v / mean - 1) ** 2 for v in values)
            dof += len(values) - 1
    return Noise(
        within_launch=statistics.median(within) if within else None,
        between_launches=math.sqrt(squares / dof) if dof else None,
        launches=dof,
    )


def best_first_measured(records: Sequence[TrialRecord]) -> TrialRecord | None:
    """The best by single measurement, as an unconfirmed study reports it."""
    feasible = [
        r for r in records if r.state == "COMPLETE" and r.feasible and r.value is not None and r.confirm_of is None
    ]
    return max(feasible, key=lambda r: r.value or 0.0) if feasible else None


def launched_means(records: Sequence[TrialRecord]) -> dict[int, float]:
    """The mean over every served launch of each feasible configuration (its first measurement and
    each relaunch's), keyed by the trial that first measured it."""
    values: dict[int, list[float]] = {}
    for record in sorted(_objective_runs(records), key=lambda r: r.number):
        if record.confirm_of is None and record.feasible:
            values.setdefault(record.number, []).append(record.value or 0.0)
        elif record.confirm_of is not None and record.confirm_of in values:
            values[record.confirm_of].append(record.value or 0.0)
    return {number: statistics.fmean(launches) for number, launches in values.items()}


def incumbent_mean(records: Sequence[TrialRecord]) -> float | None:
    """The highest mean over a configuration's launches: a lucky first draw that was measured again
    counts at its mean."""
    return max(launched_means(records).values(), default=None)


def early_stop_bar(records: Sequence[TrialRecord], objective: str) -> EarlyStop | None:
    """The bar a new configuration must plausibly reach to be measured in full: the best so far, with
    the study's own measured noise (a prior until it has relaunched anything)."""
    bar = incumbent_mean(records)
    if not bar:
        return None
    noise = measure_noise(records, objective).total
    if not noise:  # relaunches that all measured alike (replayed launches can): no spread to judge by
        return None
    return EarlyStop(bar=bar, noise_rel=min(noise, 0.5))


def choose_finalists(records: Sequence[TrialRecord], *, top: int) -> list[TrialRecord]:
    """The ``top`` best distinct configurations that are not baselines, by the mean of their launches so
    far (the first measurement where there is no other), plus every baseline that served (each
    configuration once): the race decides among them and states the gain over each baseline. A baseline
    that ranks among the best does not take a finalist's place."""
    means = launched_means(records)
    candidates = sorted(
        (r for r in _objective_runs(records) if r.confirm_of is None and r.feasible),
        key=lambda r: -means.get(r.number, r.value or 0.0),
    )
    # A search trial that launched a baseline's configuration is that baseline, not a finalist: the
    # baseline's own record stands for it, so the verdict still states the gain over that baseline.
    baseline_of: dict[str | None, TrialRecord] = {}
    for r in candidates:
        if r.baseline is not None and r.launch.config_key is not None:
            baseline_of.setdefault(r.launch.config_key, r)
    chosen: list[TrialRecord] = []
    keys: set[str | None] = set()
    others = 0
    for record in candidates:
        key = record.launch.config_key
        is_baseline = record.baseline is not None or key in baseline_of
        if key in keys or (others >= top and not is_baseline):
            continue
        chosen.append(baseline_of.get(key, record))
        keys.add(key)
        others += not is_baseline
    return chosen


def _changed_flags(record: TrialRecord, fixed: Sequence[str]) -> int:
    return len([name for name in record.flags if name not in fixed])


def _memory(record: TrialRecord) -> float | None:
    peak = record.measurement.readings.get("gpu_peak_used_gib")
    if isinstance(peak, (int, float)):
        return float(peak)
    flag = get_engine(record.engine or DEFAULT_ENGINE).verdict_memory_flag
    fraction = record.flags.get(flag) if flag is not None else None
    return float(fraction) if isinstance(fraction, (int, float)) else None


def verdict(
    records: Sequence[TrialRecord],
    finalists: Sequence[TrialRecord],
    *,
    objective: str,
    fixed: Sequence[str],
    margin: float,
) -> Confirmation | None:
    """The verdict from every relaunch of the finalists in the race (None when none was raced)."""
    launches = relaunches_by_round(records, finalists)
    if not finalists:
        return None
    now = standing(launches, margin=margin, baselines={f.number for f in finalists if f.baseline is not None})
    served = {c: v for c, v in launches.items() if v}
    model = fit(served) if served else None
    rounds = max((sum(1 for r in records if r.confirm_of == f.number) for f in finalists), default=0)
    built = _finalists(records, finalists, launches, model, fixed, rounds=rounds)
    by_trial = {f.trial: f for f in built}
    leader = by_trial[now.leader] if now.leader is not None else built[0]
    baselines = [f for f in built if f.baseline and f.confirmed]
    # The leader is the highest of the configurations raced: its gain is judged as one of that many claims.
    picked_from = max(sum(1 for f in built if f.confirmed and not f.baseline), 1)
    gains = [
        _gain(leader, b, model, launches, comparisons=picked_from)
        for b in baselines
        if b.trial != leader.trial and model is not None
    ]
    best_baseline = max(baselines, key=lambda f: f.mean, default=None)
    # Shown beside each configuration: an interval per configuration from the pooled sd can look clear of
    # the baseline's while the paired, widened one the verdict uses crosses zero.
    versus = [
        _gain(f, best_baseline, model, launches, comparisons=picked_from)
        for f in built
        if f.confirmed and best_baseline is not None and f.trial != best_baseline.trial and model is not None
    ]
    beats = next((g for g in gains if best_baseline is not None and g.baseline_trial == best_baseline.trial), None)
    chosen = _chosen(now, by_trial, leader, best_baseline, beats)
    more = None
    if model is not None:
        more = _more_launches(model, now, leader, best_baseline, margin=margin, picked_from=picked_from)
    first = best_first_measured(records)
    return Confirmation(
        rounds=rounds,
        finalists=built,
        best=chosen.trial,
        leader=leader.trial,
        tied_with=[t for t in now.equivalent if t != chosen.trial] if now.settled else [],
        first_best=first.number if first else None,
        gains=gains,
        reference=best_baseline.trial if best_baseline is not None else None,
        versus=versus,
        settled=now.settled,
        more_launches=more,
        margin=margin,
        note=_verdict(chosen, leader, beats, best_baseline, built, now, more),
        noise=measure_noise(records, objective),
    )


def _finalists(
    records: Sequence[TrialRecord],
    finalists: Sequence[TrialRecord],
    launches: dict[int, dict[int, float]],
    model: Fit | None,
    fixed: Sequence[str],
    *,
    rounds: int,
) -> list[Finalist]:
    """Each finalist as the race left it (the round after which it was dropped, if it was), highest mean first."""
    attempts = {f.number: [r for r in records if r.confirm_of == f.number] for f in finalists}
    numbered = {r.proposal.launch_round for runs in attempts.values() for r in runs}
    race_rounds = sorted(n for n in numbered if n is not None)

    def entered(runs: list[TrialRecord]) -> dict[str, int | None]:
        """The race rounds before a challenger joined; the round after which a finalist was no longer
        relaunched (behind), where that was before the race's last. Relaunches kept before rounds were
        recorded count by order."""
        own = [race_rounds.index(r.proposal.launch_round) for r in runs if r.proposal.launch_round is not None]
        if not race_rounds or not own:
            return {"dropped_after": len(runs) - 1 if 0 < len(runs) < rounds else None}
        return {
            "joined_after": min(own) or None,
            "dropped_after": max(own) if max(own) < len(race_rounds) - 1 else None,
        }

    built = (
        _finalist(f, records, launches[f.number], model, fixed).model_copy(update=entered(attempts[f.number]))
        for f in finalists
    )
    return sorted(built, key=lambda f: -f.mean)


def _chosen(
    now: Standing,
    by_trial: dict[int, Finalist],
    leader: Finalist,
    best_baseline: Finalist | None,
    beats: Gain | None,
) -> Finalist:
    """The configuration the verdict recommends. Equals are only those the race decided equivalent (the
    interval inside the margin): an open race's point gain inside the margin is not evidence of equality."""
    if now.settled and len(now.equivalent) > 1:  # equals within the margin: the nearest the engine's defaults
        return min([by_trial[t] for t in now.equivalent], key=_nearest_defaults)
    if leader.baseline or best_baseline is None or (beats is not None and beats.significant and beats.gain > 0):
        return leader
    return best_baseline  # nothing beat the best baseline significantly


def _more_launches(
    model: Fit, now: Standing, leader: Finalist, best_baseline: Finalist | None, *, margin: float, picked_from: int
) -> int | None:
    """Launches of each configuration that would settle what the verdict's sentence states."""
    decisive = [t for t in now.decisive if t != leader.trial] if not now.settled else []
    # The estimate is for the comparison the sentence states: the gain over the best baseline while that
    # is open (not a rival 1 % behind the leader, whose "hundreds of launches" the sentence never names).
    if best_baseline is not None and best_baseline.trial in decisive:
        return launches_to_settle(model, leader.trial, [best_baseline.trial], margin=margin, comparisons=picked_from)
    return launches_to_settle(model, leader.trial, decisive, margin=margin, comparisons=1)


def _finalist(
    record: TrialRecord,
    records: Sequence[TrialRecord],
    launches: dict[int, float],
    model: Fit | None,
    fixed: Sequence[str],
) -> Finalist:
    rounds = sorted(launches)
    values = [launches[r] for r in rounds]
    failed = [
        f"{r.outcome}: {r.reason}" if r.reason else r.outcome
        for r in records
        if r.confirm_of == record.number and not (r.outcome == OutcomeKind.OK.value and r.value)
    ]
    mean = statistics.fmean(values) if values else None  # what a reader can check; comparisons use the fit
    half = None
    if model is not None and model.sd is not None and model.dof and mean is not None:
        half = mean * t95(model.dof) * model.sd / math.sqrt(len(values))
    return Finalist(
        trial=record.number,
        label=f"baseline {record.baseline}" if record.baseline else f"trial {record.number}",
        config_key=record.launch.config_key,
        baseline=record.baseline is not None,
        first=record.value,
        values=values,
        rounds=rounds,
        failed=failed,
        mean=mean if mean is not None else (record.value or 0.0),
        ci95=half,
        changed_flags=_changed_flags(record, fixed),
        memory=_memory(record),
    )


def _nearest_defaults(finalist: Finalist) -> tuple[int, float, float]:
    """Among equals: fewest changed flags, then least memory, then the higher mean."""
    return finalist.changed_flags, finalist.memory if finalist.memory is not None else math.inf, -finalist.mean


def _gain(
    leader: Finalist, baseline: Finalist, model: Fit | None, launches: dict[int, dict[int, float]], *, comparisons: int
) -> Gain:
    assert model is not None
    shared = len(set(launches[leader.trial]) & set(launches[baseline.trial]))
    difference, half = model.interval(leader.trial, baseline.trial, comparisons=comparisons)
    return Gain(
        trial=leader.trial,
        baseline=baseline.label.removeprefix("baseline "),
        baseline_trial=baseline.trial,
        gain=math.exp(difference) - 1,
        low=math.exp(difference - half) - 1 if half is not None else None,
        high=math.exp(difference + half) - 1 if half is not None else None,
        rounds=shared,
    )


def _verdict(
    chosen: Finalist,
    leader: Finalist,
    beats: Gain | None,
    best_baseline: Finalist | None,
    built: Sequence[Finalist],
    now: Standing,
    more: int | None,
) -> str:
    """The study's answer in one sentence."""
    unconfirmed = [f.label for f in built if not f.confirmed]
    tail = f" ({', '.join(unconfirmed)}: no relaunch served, not confirmed)" if unconfirmed else ""
    settle = f"; about {more} launches of each, in all, would settle it" if not now.settled and more else ""
    if settle and beats is not None and beats.significant and chosen.trial == leader.trial:
        # the gain over the baseline is decided: what is open is which finalist is best
        rivals = [f.label for f in built if f.trial in now.decisive and f.trial != leader.trial]
        settle = f"; about {more} launches of each, in all, would tell it from {', '.join(rivals)}" if rivals else ""
    if chosen.baseline and chosen.trial != leader.trial and beats is not None:
        return f"keep {chosen.label}: the best, {leader.label}, is {beats.text()}{settle}{tail}"
    if chosen.baseline and best_baseline is not None and chosen.trial == leader.trial:
        return f"keep {chosen.label}: no configuration beat it{settle}{tail}"
    # Equals the race decided (interval inside the margin): the leader, or the best baseline the leader matched.
    equal = leader if chosen.trial != leader.trial else best_baseline
    if equal is not None and equal.trial != chosen.trial and now.settled and equal.trial in now.equivalent:
        return (
            f"{chosen.label} is as fast as {equal.label} within the margin and nearer the engine's defaults "
            f"({chosen.changed_flags} flags changed){tail}"
        )
    if beats is not None:
        return f"{chosen.label} is the best: {beats.text()}{settle}{tail}"
    return f"{chosen.label} is the best (no baseline to compare with){settle}{tail}"
