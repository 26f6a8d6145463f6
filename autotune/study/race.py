"""The race: configurations launched afresh in interleaved rounds, so that drift cancels and the best
is named on more than one lucky measurement. Two races run here, over the one launch path of
:mod:`autotune.study.launcher`:

- the finalists' race (:func:`race_finalists`): the search's top configurations and every baseline,
  relaunched as trials of the study (so each relaunch is stored as one), dropping each configuration
  once its comparison with the leader is decided, within a budget of relaunches and the night's end;
  the verdict is :func:`autotune.study.confirm.verdict`;
- the schedule's race (:func:`race_schedule`): a speculation schedule against each load level's static
  winner, a fixed number of rounds; the verdict is :func:`autotune.study.schedule.judge`.

The race's budget is its share of the night (:func:`race_budget`, :func:`split_launches`,
:func:`split_timeout`); :mod:`autotune.study.night` runs the search and then the race on that split.
"""

from __future__ import annotations

import json
import math
import os
import socket
import statistics
import warnings
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import optuna
from optuna.trial import TrialState
from pydantic import Field

from autotune.decision import Launch
from autotune.engines.base import InvalidConfig, LaunchPlan
from autotune.errors import StorageError
from autotune.models import Frozen
from autotune.outcomes import OutcomeKind
from autotune.records import TrialRecord
from autotune.study import attrs
from autotune.study.confirm import Confirmation, choose_finalists, verdict
from autotune.study.launcher import Launcher, ReadGpus, launched_plan, wait_for_idle_gpus, with_secrets
from autotune.study.paths import StudyPaths
from autotune.study.preflight_checks import Preflight
from autotune.study.rounds import relaunches_by_round, standing
from autotune.study.runner import TrialFault, keep_importance
from autotune.study.schedule import SCHEDULE, Launches, Schedule, ScheduleVerdict, judge
from autotune.study.storage import exclusive, optimize_riding_out
from autotune.trial import Phase, TrialOutcome

if TYPE_CHECKING:
    from autotune.study.runner import StudyRunner

# The share of a night (launches, or --timeout) kept for the race; chosen on the dev slice
# (benchmarks/results/race-2026-12-04/).
RACE_SHARE = 0.3
# The race's least budget: two rounds of every finalist (a paired noise needs them), then three more
# rounds of a pair, so a leader has five launches against the best baseline.
PAIR_ROUNDS = 3
# The most launches of one configuration in a race (``--confirm-launches``): a pair that is still open
# after this many is not decided by the night.
RACE_LAUNCHES = 8
# Rounds of a pair a settled race must have room for before it admits a challenger: two, as every
# finalist is given (a paired noise needs them).
CHALLENGER_ROUNDS = 2
# Where the schedule's race writes the adaptive config its launches read (in the study's folder).
SCHEDULE_CONFIG_FILE = "schedule-adaptive.json"


# ---------------------------------------------------------------- the budget


def race_floor(finalists: int) -> int:
    """The fewest relaunches a race is given: two rounds of every finalist, then :data:`PAIR_ROUNDS` of a pair."""
    return 2 * finalists + 2 * PAIR_ROUNDS


def race_budget(search_launches: int, finalists: int, *, share: float = RACE_SHARE) -> int:
    """Relaunches the race may spend after a search of ``search_launches`` (``--trials N``): ``share``
    of the whole night, search and race (N x share / (1 - share)), and :func:`race_floor` at least."""
    return max(math.ceil(search_launches * share / (1 - share) - 1e-9), race_floor(finalists))


def split_launches(total: int, finalists: int, *, share: float = RACE_SHARE) -> tuple[int, int]:
    """A night of ``total`` launches, search and race together: (the search's, the race's). The race
    gets ``share`` of it and :func:`race_floor` at least, never more than half."""
    race = min(max(round(total * share), race_floor(finalists)), total // 2)
    return total - race, race


def race_top(budget: int, top: int, baselines: int) -> int:
    """The finalists a race of ``budget`` relaunches races besides the baselines: ``top``, or where
    the budget cannot hold :func:`race_floor` for them, the most it can (one at least, none when
    ``top`` is none)."""
    held = [k for k in range(1, top + 1) if race_floor(k + baselines) <= budget]
    return max(held, default=min(top, 1))


def fewer_finalists_text(top: int, asked: int, baselines: int, budget: int) -> str:
    """Why a race holds ``top`` finalists and not the ``asked`` (:func:`race_top`), in one clause."""
    return (
        f"{top} finalist{'s' if top != 1 else ''} besides {baselines} baselines, not {asked}: a race of "
        f"{budget} launches cannot hold the floor of {asked} ({race_floor(asked + baselines)} launches)"
    )


def split_timeout(timeout_s: float, *, share: float = RACE_SHARE) -> float:
    """The search's part of a ``--timeout`` that covers search and race: the race runs to the end."""
    return timeout_s * (1 - share)


# ---------------------------------------------------------------- the finalists' race


@dataclass(frozen=True)
class RacePlan:
    """What the finalists' race will race, and the most it will spend."""

    configurations: int
    baselines: int
    launches: int
    seconds: float | None
    deadline_s: float | None = None
    fewer: str | None = None  # why fewer finalists than asked (fewer_finalists_text)

    def text(self) -> str:
        took = f", about {self.seconds / 60:.0f} min" if self.seconds else ""
        until = f", until the night's end in {self.deadline_s / 60:.0f} min" if self.deadline_s is not None else ""
        fewer = f"; {self.fewer}" if self.fewer else ""
        return (
            f"racing {self.configurations} configurations ({self.baselines} of them baselines) on at most "
            f"{self.launches} fresh launches{took}{until}, dropping each as soon as it is decided (launches "
            f"left once it is settled race the next-ranked configurations against the leader){fewer}"
        )


class FinalistsRace(Frozen):
    """How the finalists' race is run."""

    top: int = Field(default=3, description="distinct configurations raced, besides every baseline")
    asked: int | None = Field(
        default=None, description="the finalists asked for, where the budget cannot hold their floor (race_top)"
    )
    launches: int = Field(default=RACE_LAUNCHES, description="the most launches of one configuration")
    budget: int | None = Field(
        default=None, description="the most relaunches in all (None: race_budget of the search's launches, at share)"
    )
    deadline: float | None = Field(default=None, description="no round that would end past it (the runner's clock)")
    room: int | None = Field(
        default=None, description="the relaunches that end before the deadline, where they held fewer finalists"
    )
    share: float = RACE_SHARE


def _search_launches(records: Sequence[TrialRecord]) -> int:
    return sum(1 for r in records if isinstance(r.decision, Launch) and r.confirm_of is None)


def _launch_seconds(records: Sequence[TrialRecord]) -> float | None:
    """The median seconds of one served launch (start and measurement), None before any."""
    spent = [
        (r.launch.launch_s or 0.0) + (r.measurement.measure_s or 0.0)
        for r in records
        if r.served and r.launch.launch_s is not None
    ]
    return statistics.median(spent) if spent else None


def _budget(race: FinalistsRace, records: Sequence[TrialRecord], finalists: int) -> int:
    return (
        race.budget if race.budget is not None else race_budget(_search_launches(records), finalists, share=race.share)
    )


def race_in_time(runner: StudyRunner, race: FinalistsRace) -> FinalistsRace:
    """The race the night's end leaves room for: where the relaunches that end before the deadline, at
    the night's median launch, cannot hold the floor of ``race.top`` finalists, as many as they can
    (:func:`race_top`), as a night counted in launches does; else ``race`` itself."""
    seconds = _launch_seconds(runner.records())
    if race.deadline is None or not seconds:
        return race
    room = max(int((race.deadline - runner.clock()) // seconds), 0)
    held = race_top(room, race.top, len(runner.space.baselines))
    if held >= race.top:
        return race
    return race.model_copy(update={"top": held, "asked": race.asked or race.top, "room": room})


def plan_race(runner: StudyRunner, race: FinalistsRace) -> RacePlan:
    """What :func:`race_finalists` will race and spend at most, before it starts (to say so)."""
    records = runner.records()
    finalists = choose_finalists(records, top=race.top)
    budget = _budget(race, records, len(finalists))
    most = min(race.launches * (len(finalists) + len(_challengers(records, finalists))), budget)
    seconds = _launch_seconds(records)
    fewer = None
    if race.asked is not None:
        held_by = budget if race.room is None else min(race.room, budget)
        fewer = fewer_finalists_text(race.top, race.asked, len(runner.space.baselines), held_by)
    return RacePlan(
        configurations=len(finalists),
        baselines=sum(1 for f in finalists if f.baseline),
        launches=most,
        seconds=most * seconds if seconds else None,
        deadline_s=max(race.deadline - runner.clock(), 0.0) if race.deadline is not None else None,
        fewer=fewer,
    )


def others_running(study: optuna.Study) -> bool:
    """Whether another worker is still measuring a trial of this study (then it races at its end)."""
    host, pid = socket.gethostname(), os.getpid()
    running = study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
    return any((r.launch.host, r.launch.worker_pid) != (host, pid) for r in map(attrs.trial_record, running))


def race_finalists(runner: StudyRunner, race: FinalistsRace) -> Confirmation | None:
    """Race the finalists and baselines on fresh launches in interleaved rounds (A B C, then A C):
    after each round a configuration whose comparison with the leader is decided (significantly
    behind, or equivalent within the margin) is no longer relaunched, and the race ends when the
    verdict is settled, when fewer than two configurations are left to relaunch (the fit removes a
    round's effect; a round the budget or the deadline leaves room for only in part launches its first
    configurations), or at ``race.launches`` launches of a configuration. A race settled, or left with
    one configuration to relaunch, with launches to spare races the next-ranked configurations against
    its leader, one at a time (:func:`_eliminate`).
    The verdict is stored; None when nothing feasible was measured.
    Ctrl-C stops it with what it has."""
    records = runner.records()
    finalists = choose_finalists(records, top=race.top)
    if not finalists:
        return None
    margin = runner.space.measurement.target_rel_ci
    try:
        _eliminate(runner, race, finalists, budget=_budget(race, records, len(finalists)), margin=margin)
    finally:
        result = verdict(
            runner.records(),
            finalists,
            objective=runner.space.objective.metric,
            fixed=list(runner.space.fixed),
            margin=margin,
        )
        attrs.record_confirmation(runner.study, result)
        if result is not None:
            _publish_note(runner.study, result)
        keep_importance(runner.study, runner.space)  # the finalists' launches are completed trials too
    return result


def _eliminate(
    runner: StudyRunner, race: FinalistsRace, finalists: list[TrialRecord], *, budget: int, margin: float
) -> None:
    """Successive elimination: rounds of the configurations still open, until the standing is settled
    or the launches, the budget or the deadline leave fewer than two to relaunch. A race that is settled,
    or has fewer than two configurations to relaunch, with room left for :data:`CHALLENGER_ROUNDS`
    rounds of a pair, admits the next configuration by the search's ranking (appended to ``finalists``)
    and races it against the leader: the launches are the night's, and the search's best by one
    measurement is often not the truly best of near-equals."""
    baselines = {f.number for f in finalists if f.baseline is not None}
    records = runner.records()
    round_s = _launch_seconds(records)
    waiting = _challengers(records, finalists)
    racing, spent = [f.number for f in finalists], 0
    leader: int | None = finalists[0].number
    while True:
        tried = Counter(r.confirm_of for r in runner.records() if r.confirm_of is not None)
        racing = [n for n in racing if tried[n] < race.launches][: budget - spent]
        if race.deadline is not None and round_s is not None:  # only as many as finish before the end
            racing = racing[: max(int((race.deadline - runner.clock()) // round_s), 0)]
        if len(racing) < 2:
            if not _admit(runner, race, finalists, waiting, leader, tried, budget=budget - spent, round_s=round_s):
                return
            racing = [n for n in (leader, finalists[-1].number) if n is not None]
            continue
        _relaunch(runner, [f for f in finalists if f.number in racing])
        spent += len(racing)
        now = standing(relaunches_by_round(runner.records(), finalists), margin=margin, baselines=baselines)
        leader, racing = now.leader, now.racing
        if now.settled:
            racing = [n for n in racing if n == leader]  # nothing open: a challenger, or the end


def _challengers(records: Sequence[TrialRecord], finalists: Sequence[TrialRecord]) -> list[TrialRecord]:
    """The configurations a race may admit after its finalists, in the search's ranking (:func:`choose_finalists`)."""
    raced = {f.number for f in finalists}
    return [r for r in choose_finalists(records, top=len(records)) if r.number not in raced]


def _admit(
    runner: StudyRunner,
    race: FinalistsRace,
    finalists: list[TrialRecord],
    waiting: list[TrialRecord],
    leader: int | None,
    tried: Counter[int],
    *,
    budget: int,
    round_s: float | None,
) -> bool:
    """Append the next-ranked configuration to ``finalists`` where the budget, the leader's launches left
    (``tried``: each configuration's relaunches so far) and the deadline hold :data:`CHALLENGER_ROUNDS`
    rounds of it beside the leader."""
    if not waiting or leader is None:
        return False
    rounds = min(budget // 2, race.launches - tried[leader])
    if race.deadline is not None and round_s is not None:
        rounds = min(rounds, int((race.deadline - runner.clock()) // round_s) // 2)
    if rounds < CHALLENGER_ROUNDS:
        return False
    finalists.append(waiting.pop(0))
    return True


def _relaunch(runner: StudyRunner, finalists: Sequence[TrialRecord]) -> None:
    """One round: each finalist launched again as a trial of the study, exactly as it first ran (the
    round is named by the next trial's number)."""
    trials = runner.study.get_trials(deepcopy=False)
    params = {t.number: t.params for t in trials}
    with exclusive(runner.storage, runner.paths):
        for finalist in finalists:
            attrs.enqueue_confirmation(runner.study, params[finalist.number], finalist, round_=len(trials))
    optimize_riding_out(
        runner.study,
        runner.storage,
        runner.objective,
        n_trials=len(finalists),
        catch=(TrialFault,),
        callbacks=[runner.after_trial],
    )


def _publish_note(study: optuna.Study, result: Confirmation) -> None:
    """The confirmed best as the study's note in optuna-dashboard (an optional extra)."""
    try:
        import optuna_dashboard
    except ImportError:
        return
    rows = [
        f"| {f.label} (#{f.trial}) | {len(f.values)} | {f.mean:.2f}"
        + (f" ± {f.ci95:.2f}" if f.ci95 else "")
        + f" | {f.changed_flags} |"
        for f in result.finalists
    ]
    gains = [
        f"- {result.recommended.label if g.trial == result.best else f'trial {g.trial}'}: {g.text()}"
        for g in result.gains
    ]
    header = ["| configuration | launches | mean ± 95% CI | flags changed |", "|---|---|---|---|"]
    note = "\n".join(["## Verdict", "", result.note, "", *gains, "", *header, *rows])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna_dashboard.save_note(study, note)


# ---------------------------------------------------------------- the schedule's race


@dataclass
class _ScheduleLaunches:
    """What the schedule's race has gathered so far, for :func:`~autotune.study.schedule.judge`."""

    launches: Launches
    failed: list[str] = field(default_factory=list)
    slo_broken: dict[int, list[str]] = field(default_factory=dict)
    slots: dict[int, int] = field(default_factory=dict)


def race_schedule(
    checked: Preflight,
    paths: StudyPaths,
    schedule: Schedule,
    records: Sequence[TrialRecord],
    *,
    launch: Launcher,
    rounds: int,
    read_gpus: ReadGpus | None = None,
    on_phase: Phase | None = None,
) -> ScheduleVerdict:
    """Launch the schedule and the distinct static winners ``rounds`` times each, interleaved, every
    launch measuring every level, and judge. A schedule the engine's rules refuse is judged on no
    launch of its own."""
    plans = _schedule_plans(checked, paths, schedule, records)
    if isinstance(plans, InvalidConfig):  # nothing to race: judged on no launch at all
        return judge(schedule, {}, rounds=0, failed=[f"the schedule: engine rule: {plans}"])
    levels = [t.concurrency for t in schedule.tiers]
    gathered = _ScheduleLaunches(launches={level: {config: {} for config in plans} for level in levels})
    phase: Phase = on_phase or (lambda _phase, _detail: None)
    paths.logs.mkdir(parents=True, exist_ok=True)
    for round_index in range(rounds):
        if round_index == 1 and not any(gathered.launches[level][SCHEDULE] for level in levels):
            break  # the schedule did not serve in the first round: the statics alone decide nothing
        for config, plan in plans.items():
            name = "schedule" if config == SCHEDULE else f"trial-{config:04d}"
            where = f"{name}, round {round_index + 1}"
            phase("schedule race", f"round {round_index + 1}/{rounds}: {name}")
            busy, _ = wait_for_idle_gpus(checked, read_gpus)
            if busy is not None:
                gathered.failed.append(f"{where}: skipped, GPUs busy: {busy}")
                continue
            outcome = launch(plan, paths.logs / f"schedule-race-r{round_index + 1}-{name}.log", phase, None)
            _gather(checked, gathered, config, round_index, outcome, where=where)
    return judge(
        schedule,
        gathered.launches,
        rounds=rounds,
        failed=gathered.failed,
        slo_broken=gathered.slo_broken,
        slots=gathered.slots,
        margin=checked.space.measurement.target_rel_ci,
    )


def _schedule_plans(
    checked: Preflight, paths: StudyPaths, schedule: Schedule, records: Sequence[TrialRecord]
) -> dict[int, LaunchPlan] | InvalidConfig:
    """Each static winner as its trial launched it, then the schedule (its adaptive config written
    where its flags name it), by the engine's rules; the refusal when those rules refuse it."""
    space = checked.space
    path = paths.folder / SCHEDULE_CONFIG_FILE
    adaptive = schedule.adaptive_config()  # None where the schedule travels in the engine's flags
    try:
        paths.folder.mkdir(parents=True, exist_ok=True)
        if adaptive is not None:
            path.write_text(json.dumps(adaptive, indent=2) + "\n", encoding="utf-8")
    except OSError as exc:
        raise StorageError(f"cannot write the adaptive config {path}: {exc.strerror}") from None
    by_number = {r.number: r for r in records}
    plans: dict[int, LaunchPlan] = {}
    for tier in schedule.tiers:
        plans.setdefault(tier.trial, launched_plan(by_number[tier.trial], space))
    engine = checked.engines[space.engine].engine
    try:
        plans[SCHEDULE] = engine.normalise(with_secrets(schedule.launch_flags(str(path.resolve())), space.fixed))
    except InvalidConfig as exc:
        return exc
    return plans


def _gather(
    checked: Preflight, gathered: _ScheduleLaunches, config: int, round_index: int, outcome: TrialOutcome, *, where: str
) -> None:
    """One launch's figures per level (an SLO it breaks keeps the figure out), its running-request cap."""
    if outcome.kind is not OutcomeKind.OK:
        gathered.failed.append(f"{where}: {outcome.kind.value}: {outcome.reason}")
        return
    form = checked.engines[checked.space.engine].engine.schedule_form
    running_flag = form.running_flag if form is not None else None
    resolved = outcome.effective.values if outcome.effective is not None else {}
    running = resolved.get(running_flag) if running_flag is not None else None
    if isinstance(running, int) and not isinstance(running, bool):
        gathered.slots[config] = min(running, gathered.slots.get(config, running))
    for measurement in outcome.measurements:
        if measurement.concurrency not in gathered.launches:
            continue
        broken = checked.space.slo.broken({m.name: m.value for m in measurement.metrics})
        if broken and config == SCHEDULE:
            gathered.slo_broken.setdefault(measurement.concurrency, []).extend(broken)
        if not broken and measurement.value > 0:
            gathered.launches[measurement.concurrency][config][round_index] = measurement.value
