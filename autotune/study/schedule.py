"""A speculation schedule per load: the per-level winners' draft depths as one schedule the engine
runs (its :class:`~autotune.engines.speculation.ScheduleForm`: SGLang's adaptive config, vLLM's
per-batch-size setting), and the verdict of racing it against each level's static winner.

The arrow it owns: a levels study's records -> :func:`build` (a tier per level, the flags every tier
shares, a depth per batch-size slot) -> fresh launches (:func:`autotune.study.race.race_schedule`) ->
:func:`judge` (per level, the schedule's gain over that level's static winner with the race's
interval from :func:`autotune.study.rounds.fit`) -> a profile (:func:`schedule_profile`).
"""

from __future__ import annotations

import json
import math
import statistics
from collections.abc import Mapping, Sequence
from itertools import pairwise
from pathlib import Path

from pydantic import Field

from autotune.engines import DEFAULT_ENGINE, engine_names, get_engine
from autotune.engines.base import InvalidConfig
from autotune.engines.speculation import ScheduleConfig, ScheduleForm
from autotune.errors import UserError
from autotune.measure.statistics import t95
from autotune.models import Frozen
from autotune.profile import Profile, ProfileLevel, ProfileMetric
from autotune.records import TrialRecord
from autotune.space import FlagValue
from autotune.study.confirm import Gain
from autotune.study.levels import LoadLevels, level_best, measured
from autotune.study.rounds import fit

SCHEDULE = -1
"""The schedule's key among the race's configurations (trial numbers are 0 or more)."""

AdaptiveConfig = ScheduleConfig


def schedule_engines() -> list[str]:
    """The engines that run a speculation schedule per load."""
    return [name for name in engine_names() if get_engine(name).schedule_form is not None]


def schedule_form(engine: str) -> ScheduleForm:
    """How ``engine`` runs a schedule; a user error for an engine that runs none."""
    form = get_engine(engine).schedule_form
    if form is None:
        able = " and ".join(schedule_engines())
        raise UserError(f"{engine} runs no speculation schedule per load; autotune builds one for {able} only")
    return form


class Tier(Frozen):
    """One load level's depth: the configuration measured best there that the schedule can run."""

    concurrency: int = Field(description="the load level (users at once) it was measured at")
    trial: int
    label: str
    steps: int = Field(description="draft steps at this load (0: no drafting)")
    value: float | None = Field(default=None, description="its first measurement at this level")


class Schedule(Frozen):
    """What the engine's schedule runs: a tier per level and the flags the tiers share."""

    study: str
    engine: str = Field(default=DEFAULT_ENGINE, description="the engine whose schedule form writes it")
    primary: int = Field(description="the study's primary level: its tier's steps start the server")
    tiers: list[Tier] = Field(description="one per level, in the space's order")
    flags: dict[str, FlagValue] = Field(description="the shared flags, without the per-tier speculative ones")
    shared_from: int = Field(description="the trial whose shared flags the schedule runs")
    decisions: list[str] = Field(default_factory=list, description="what was decided where the levels disagree")

    @property
    def start_steps(self) -> int:
        return next(t.steps for t in self.tiers if t.concurrency == self.primary)

    def slots(self) -> dict[int, Tier]:
        """Batch-size slot -> tier. A batch runs the largest slot at or below its size, so each level's
        slot starts halfway (geometrically) from the level below: a batch between two measured levels
        runs the nearer one's depth, and a level's own ramp (users arriving, answers ending) stays on
        its depth until it is nearer the level below. Neighbours of one depth share a slot."""
        ordered = sorted(self.tiers, key=lambda t: t.concurrency)
        keys = [1] + [math.ceil(math.sqrt(a.concurrency * b.concurrency)) for a, b in pairwise(ordered)]
        slots: dict[int, Tier] = {}
        for key, tier in zip(keys, ordered, strict=True):
            if not slots or list(slots.values())[-1].steps != tier.steps:  # a slot per change of depth
                slots[key] = tier
        return slots

    def depths(self) -> dict[int, int]:
        """Batch-size slot -> the depth it runs."""
        return {key: tier.steps for key, tier in self.slots().items()}

    def adaptive_config(self) -> AdaptiveConfig | None:
        """The file the engine reads (None where the schedule travels in its flags)."""
        return schedule_form(self.engine).config(self.depths())

    def launch_flags(self, config_path: str) -> dict[str, FlagValue]:
        """The server's flags, naming the file at ``config_path`` where the engine reads one."""
        return schedule_form(self.engine).launch_flags(
            self.flags, self.depths(), start=self.start_steps, config_path=config_path
        )

    def config_text(self) -> str:
        """What the engine reads, as the output shows it."""
        return schedule_form(self.engine).config_text(self.flags, self.depths())

    def config_label(self) -> str:
        return schedule_form(self.engine).config_label

    def text(self) -> str:
        speculation = get_engine(self.engine).speculation
        unit = speculation.unit if speculation is not None else "step"
        return ", ".join(f"{t.steps} {unit}{'' if t.steps == 1 else 's'} at {t.concurrency}" for t in self.tiers)


class NoSchedule(Frozen):
    """Why the study gives no schedule to race, and the static configuration to run instead."""

    reason: str
    run: int | None = Field(default=None, description="the trial to run instead")


def tier_steps(record: TrialRecord, engine: str = DEFAULT_ENGINE) -> int | str:
    """The draft depth the engine's schedule would run ``record`` at, or why it cannot."""
    return schedule_form(engine).tier_depth(record.flags)


def _shared(record: TrialRecord, engine: str) -> dict[str, FlagValue]:
    per_tier = schedule_form(engine).per_tier
    return {name: value for name, value in record.flags.items() if name not in per_tier}


def build(
    records: Sequence[TrialRecord], levels: LoadLevels, *, study: str, engine: str = DEFAULT_ENGINE
) -> Schedule | NoSchedule:
    """The schedule of a levels study: each level's winner as its tier (else that level's best that
    the schedule can run, said so); the shared flags of the deepest tier's trial, whose launch held
    the deepest drafts' buffers (SGLang sizes them for the widest tier). Declined without a launch
    when a level has no tier or every tier drafts the same depth."""
    by_number = {r.number: r for r in records}
    primary = next((w for w in levels.winners if w.concurrency == levels.primary), None)
    run = primary.trial if primary is not None else None
    decisions: list[str] = []
    tiers = _tiers(records, by_number, levels, engine, decisions)
    if isinstance(tiers, str):
        return NoSchedule(reason=tiers, run=run)
    if len({t.steps for t in tiers}) == 1:
        return NoSchedule(
            reason=f"every level's best drafts {tiers[0].steps} steps: one static configuration serves them all",
            run=run,
        )
    deepest = max(tiers, key=lambda t: (t.steps, t.concurrency == levels.primary))
    shared = _shared(by_number[deepest.trial], engine)
    if not schedule_form(engine).drafts(shared):
        return NoSchedule(reason=f"no tier drafts: nothing for {schedule_form(engine).what} to schedule", run=run)
    for tier in tiers:
        theirs = _shared(by_number[tier.trial], engine)
        differ = sorted(k for k in {*shared, *theirs} if shared.get(k) != theirs.get(k))
        if differ:
            ran = ", ".join(f"--{k} {theirs.get(k, 'unset')}" for k in differ)
            decisions.append(
                f"concurrency {tier.concurrency}: its tier ({tier.label}) ran {ran}; the schedule runs"
                f" the deepest tier's ({deepest.label}): its launch held the deepest drafts"
            )
    return Schedule(
        study=study,
        engine=engine,
        primary=levels.primary,
        tiers=tiers,
        flags=shared,
        shared_from=deepest.trial,
        decisions=decisions,
    )


def _tiers(
    records: Sequence[TrialRecord],
    by_number: Mapping[int, TrialRecord],
    levels: LoadLevels,
    engine: str,
    decisions: list[str],
) -> list[Tier] | str:
    """Each level's tier (its winner, else its best that the schedule can run, said in ``decisions``),
    or why a level has none."""
    runnable = [r for r in measured(records) if isinstance(tier_steps(r, engine), int)]
    what = schedule_form(engine).what
    tiers: list[Tier] = []
    for winner in levels.winners:
        record = by_number.get(winner.trial) if winner.trial is not None else None
        if record is None:
            return f"no trial keeps the SLO at concurrency {winner.concurrency}"
        steps = tier_steps(record, engine)
        if isinstance(steps, str):
            substitute = level_best(runnable, winner.concurrency, metric=levels.metric)
            if substitute is None:
                return (
                    f"the winner at concurrency {winner.concurrency} runs {steps}, and no "
                    f"measured configuration {what} can run keeps the SLO there"
                )
            decisions.append(
                f"concurrency {winner.concurrency}: its winner ({_label(record)}) runs {steps}; the tier "
                f"is the best {what} can run there, {_label(substitute)}"
            )
            record, steps = by_number[substitute.number], int(tier_steps(substitute, engine))
        level = record.measurement.levels.get(winner.concurrency)
        value = level.metric_value(levels.metric) if level is not None else None
        tiers.append(
            Tier(concurrency=winner.concurrency, trial=record.number, label=_label(record), steps=steps, value=value)
        )
    return tiers


def _label(record: TrialRecord) -> str:
    return f"baseline {record.baseline} (#{record.number})" if record.baseline else f"trial {record.number}"


# ---------------------------------------------------------------- the verdict


class Comparison(Frozen):
    """The schedule against one static configuration at one level, paired by interleaved round."""

    trial: int
    label: str
    values: list[float] = Field(description="its figure per round that served")
    mean: float | None = None
    ci95: float | None = Field(default=None, description="from the race's fit: relative sd x mean")
    slots: int | None = Field(default=None, description="requests its server ran at once (fewest over its launches)")
    gain: Gain | None = Field(default=None, description="the schedule over it, 95 % interval")
    same_depth: bool = Field(
        default=False, description="the schedule drafts this static's depth here: no gain of switching to claim"
    )
    better: bool = Field(
        default=False,
        description="the schedule significantly faster (interval widened for the levels) at another depth than this",
    )
    worse: bool = Field(
        default=False, description="the schedule significantly slower at 95 %, by more than the practical margin"
    )


class LevelVerdict(Frozen):
    """One level of the race: the schedule's figure and each static configuration's beside it."""

    concurrency: int
    steps: int = Field(description="the schedule's tier here, the depth of this level's winner")
    winner: int = Field(description="this level's static winner (a trial)")
    schedule_values: list[float] = Field(description="the schedule's figure per round that served")
    schedule_mean: float | None = None
    schedule_ci95: float | None = None
    statics: list[Comparison] = Field(description="every static winner of the study, measured at this level")
    slo_broken: list[str] = Field(default_factory=list, description="the SLO limits the schedule broke here")
    slots: int | None = Field(default=None, description="requests the schedule's server ran at once")

    @property
    def against_winner(self) -> Comparison:
        return next(c for c in self.statics if c.trial == self.winner)

    @property
    def queues(self) -> bool:
        """The schedule runs fewer of this level's users at once than its winner does (its buffers are
        sized for the deepest tier): the rest wait, and a per-user decode rate leaves the wait out."""
        theirs = self.against_winner.slots
        return self.slots is not None and theirs is not None and self.slots < min(self.concurrency, theirs)

    @property
    def worse(self) -> bool:
        """Slower than this level's own winner, queueing more of its users, or breaking the SLO: the
        schedule loses here."""
        return bool(self.slo_broken) or self.queues or self.against_winner.worse


class ScheduleVerdict(Frozen):
    """Recommend the schedule, or say which static configuration to run and why."""

    schedule: Schedule
    config: AdaptiveConfig | None = Field(description="the file the engine reads; None where its flags hold it")
    rounds: int
    levels: list[LevelVerdict]
    failed: list[str] = Field(default_factory=list, description="launches that did not serve, and why")
    recommended: bool
    run_trial: int | None = Field(description="the static trial to run instead (None: run the schedule)")
    note: str = Field(description="the verdict in one sentence")


Launches = dict[int, dict[int, dict[int, float]]]
"""level -> configuration (a trial, or :data:`SCHEDULE`) -> round -> objective value."""


def judge(
    schedule: Schedule,
    launches: Launches,
    *,
    rounds: int,
    failed: Sequence[str] = (),
    slo_broken: dict[int, list[str]] | None = None,
    slots: dict[int, int] | None = None,
    margin: float = 0.02,
) -> ScheduleVerdict:
    """The verdict. The schedule runs each level's winning depth, so at each level it must not be
    significantly slower than that level's winner by more than ``margin`` (else the engine's
    switching costs what the depth gains; at the winner's own depth a bare 95 % test would decline
    it on launch noise one race in forty); and a deployment runs one configuration for every load,
    so each static winner must be significantly slower than the schedule at some level where the
    schedule drafts another depth than it (that interval widened for picking the level), else that
    static configuration serves as well and is the one to run. At the static's own depth the two
    run one configuration, so a gain there is launch noise: a two-round CI race found +4.6 %
    (+4.5 to +4.6 %) at one user and recommended a schedule that static beat at sixteen."""
    broken = slo_broken or {}
    statics = list(dict.fromkeys(t.trial for t in schedule.tiers))
    labels = {t.trial: t.label for t in schedule.tiers}
    depths = {t.trial: t.steps for t in schedule.tiers}
    verdicts = [
        _level(
            tier,
            launches.get(tier.concurrency, {}),
            statics,
            labels,
            depths,
            comparisons=len(schedule.tiers),
            slo_broken=broken.get(tier.concurrency, []),
            slots=slots or {},
            margin=margin,
        )
        for tier in schedule.tiers
    ]
    primary = next(t for t in schedule.tiers if t.concurrency == schedule.primary)
    unbeaten = [s for s in statics if not any(c.better for v in verdicts for c in v.statics if c.trial == s)]
    worse = [v for v in verdicts if v.worse]
    open_ = [v for v in verdicts if any(c.gain is None or c.gain.low is None for c in v.statics)]
    recommended = not worse and not unbeaten and not open_
    run = None
    if not recommended:  # the primary level's winner (the study's best) unless another static serves as well
        run = primary.trial if primary.trial in unbeaten or not unbeaten else unbeaten[0]
    note = _note(schedule, verdicts, worse=worse, unbeaten=unbeaten, open_=open_, run=run, labels=labels, failed=failed)
    return ScheduleVerdict(
        schedule=schedule,
        config=schedule.adaptive_config(),
        rounds=rounds,
        levels=verdicts,
        failed=list(failed),
        recommended=recommended,
        run_trial=run,
        note=note,
    )


def _level(
    tier: Tier,
    launches: dict[int, dict[int, float]],
    statics: Sequence[int],
    labels: dict[int, str],
    depths: dict[int, int],
    *,
    comparisons: int,
    slo_broken: list[str],
    slots: dict[int, int],
    margin: float,
) -> LevelVerdict:
    mine = launches.get(SCHEDULE, {})
    served = {c: v for c, v in launches.items() if v}
    model = fit(served) if SCHEDULE in served and len(served) > 1 else None

    def ci(values: Sequence[float]) -> float | None:
        if model is None or model.sd is None or not model.dof or not values:
            return None
        return statistics.fmean(values) * t95(model.dof) * model.sd / math.sqrt(len(values))

    compared = []
    for trial in statics:
        theirs = launches.get(trial, {})
        values = [theirs[r] for r in sorted(theirs)]
        comparison = Comparison(
            trial=trial,
            label=labels[trial],
            values=values,
            slots=slots.get(trial),
            mean=statistics.fmean(values) if values else None,
            ci95=ci(values),
            same_depth=depths[trial] == tier.steps,
        )
        if model is not None and trial in served:
            comparison = _paired(
                comparison, mine, theirs, comparisons=comparisons, slo_broken=slo_broken, margin=margin
            )
        compared.append(comparison)
    values = [mine[r] for r in sorted(mine)]
    return LevelVerdict(
        concurrency=tier.concurrency,
        steps=tier.steps,
        winner=tier.trial,
        schedule_values=values,
        schedule_mean=statistics.fmean(values) if values else None,
        schedule_ci95=ci(values),
        statics=compared,
        slo_broken=slo_broken,
        slots=slots.get(SCHEDULE),
    )


def _paired(
    comparison: Comparison,
    mine: dict[int, float],
    theirs: dict[int, float],
    *,
    comparisons: int,
    slo_broken: list[str],
    margin: float,
) -> Comparison:
    """``comparison`` with the schedule's gain over that static, from the pair's own fit: not the
    level's pooled one, since a shallow draft's launches scatter far less than a deep one's (1.5 %
    against 8 % sd at one user), and a pooled sd declined the schedule against its deep winner on noise."""
    trial = comparison.trial
    pair = fit({SCHEDULE: mine, trial: theirs})
    difference, half = pair.interval(SCHEDULE, trial)
    _, widened = pair.interval(SCHEDULE, trial, comparisons=comparisons)
    gain = Gain(
        trial=SCHEDULE,
        baseline=comparison.label,
        baseline_trial=trial,
        gain=math.exp(difference) - 1,
        low=math.exp(difference - half) - 1 if half is not None else None,
        high=math.exp(difference + half) - 1 if half is not None else None,
        rounds=len(set(mine) & set(theirs)),
    )
    return comparison.model_copy(
        update={
            "gain": gain,
            "better": widened is not None and difference - widened > 0 and not slo_broken and not comparison.same_depth,
            "worse": half is not None and difference + half < math.log(1 - margin),
        }
    )


def _note(
    schedule: Schedule,
    verdicts: Sequence[LevelVerdict],
    *,
    worse: Sequence[LevelVerdict],
    unbeaten: Sequence[int],
    open_: Sequence[LevelVerdict],
    run: int | None,
    labels: dict[int, str],
    failed: Sequence[str],
) -> str:
    shown = f"schedule ({schedule.text()})"
    instead = f"run {labels[run]}" if run is not None else ""
    if worse:
        where = "; ".join(f"at {v.concurrency}: {_against(v.against_winner, v)}" for v in worse)
        return f"{shown} declined: it loses to the level's own winner {where}; {instead}"
    if open_:
        lost = f" ({'; '.join(failed)})" if failed else ""
        levels = ", ".join(str(v.concurrency) for v in open_)
        return f"{shown} declined: the race has no interval at concurrency {levels}{lost}; {instead}"
    if unbeaten:
        names = " and ".join(labels[s] for s in unbeaten)
        verb = "is" if len(unbeaten) == 1 else "are each"
        return (
            f"{shown} declined: {names} {verb} significantly slower than it at no level (one static "
            f"configuration serves every load as well); {instead}"
        )
    beats = []
    for static in dict.fromkeys(c.trial for v in verdicts for c in v.statics):
        wins = [
            (c.gain.gain, v.concurrency, c)
            for v in verdicts
            for c in v.statics
            if c.trial == static and c.better and c.gain is not None
        ]
        _, level, best = max(wins, key=lambda win: win[0])
        beats.append(f"{_against(best, None)} at {level}")
    return f"run the {shown}: no level slower than its own winner; {'; '.join(beats)}"


def _against(comparison: Comparison, level: LevelVerdict | None) -> str:
    if level is not None and level.slo_broken:
        return f"breaks the SLO ({', '.join(level.slo_broken)})"
    if level is not None and level.queues:
        return (
            f"runs {level.slots} of its {level.concurrency} users at once where {comparison.label} runs "
            f"{comparison.slots} (the rest wait)"
        )
    return comparison.gain.text() if comparison.gain is not None else f"not measured against {comparison.label}"


def schedule_profile(base: Profile, verdict: ScheduleVerdict, *, config_file: Path, metric: str, unit: str) -> Profile:
    """The schedule as a profile: ``base`` (the trial whose shared flags it runs) with the schedule's
    flags reading ``config_file`` (SGLang; vLLM's flags hold the ranges themselves), the race's
    figures per level, and its verdict. The config is written to ``config_file`` first (the engine's
    rules read it).

    Raises:
        UserError: the file cannot be written, or the engine's rules refuse the schedule.
    """
    try:
        if verdict.config is not None:  # vLLM's schedule has no file: its flags hold the ranges
            config_file.parent.mkdir(parents=True, exist_ok=True)
            config_file.write_text(json.dumps(verdict.config, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise UserError(f"cannot write the adaptive config {config_file}: {exc.strerror}") from None
    schedule = verdict.schedule
    try:
        plan = get_engine(base.engine).normalise(schedule.launch_flags(str(config_file.resolve())))
    except InvalidConfig as exc:
        raise UserError(f"the schedule breaks an engine rule: {exc}") from None

    def figure(values: Sequence[float], ci95: float | None) -> dict[str, ProfileMetric]:
        mean = statistics.fmean(values)
        return {metric: ProfileMetric(value=mean, unit=unit, ci95=ci95, n=len(values))}

    levels = [
        ProfileLevel(concurrency=v.concurrency, metrics=figure(v.schedule_values, v.schedule_ci95))
        for v in verdict.levels
        if v.schedule_values
    ]
    primary = next((level for level in levels if level.concurrency == schedule.primary), None)
    return base.model_copy(
        update={
            "trial": schedule.shared_from,
            "flags": plan.flags,
            "metrics": primary.metrics if primary is not None else {},
            "confirmed_launches": len(verdict.levels[0].schedule_values) if verdict.levels else None,
            "verdict": verdict.note,
            "levels": levels,
            "adaptive_config": verdict.config,
        }
    )
