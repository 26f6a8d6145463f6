"""The race as it runs (:mod:`autotune.study.race`) and the night around it (:mod:`autotune.study.night`):
the race's share of a night, the finalists' race relaunching trials of a real study on the twin's
landscape within its budget and deadline, and the schedule's race launching each configuration
through the one launch path, on an injected launcher."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import optuna
from rich.console import Console

from autotune.engines.base import LaunchPlan
from autotune.outcomes import OutcomeKind
from autotune.report.console import confirmation_table
from autotune.space import load_space
from autotune.study import StudyPaths, make_sampler
from autotune.study.night import Night, run_night
from autotune.study.race import (
    SCHEDULE_CONFIG_FILE,
    FinalistsRace,
    plan_race,
    race_finalists,
    race_in_time,
    race_schedule,
)
from autotune.study.schedule import Schedule
from autotune.testing import checked_space, simulated_outcome
from autotune.trial import Phase, TrialOutcome
from benchmarks.nights import LandscapeLauncher, make_runner
from benchmarks.problems import load_problem
from tests.conftest import ROOT, TWIN_SPACE, twin_gpus
from tests.test_schedule import deep_alone_shallow_loaded, schedule_of


def _runner(problem, tmp_path: Path, seed: int, launcher=None):  # type: ignore[no-untyped-def]
    launcher = launcher or LandscapeLauncher(problem, problem.landscape(seed), random.Random(seed))
    return make_runner(problem, tmp_path, sampler=make_sampler("random", seed), launcher=launcher,
                             storage=optuna.storages.InMemoryStorage())  # fmt: skip


# ---------------------------------------------------------------- the race's share of the night


def test_a_night_of_launches_is_split_between_search_and_race() -> None:
    from autotune.study.race import RACE_SHARE, race_floor, split_launches

    search, race = split_launches(60, 5)
    assert search + race == 60 and race == max(round(60 * RACE_SHARE), race_floor(5))
    assert split_launches(20, 5) == (10, 10)  # the floor (16) is capped at half the night
    assert race_floor(5) == 2 * 5 + 6  # two rounds of every finalist, three more of a pair


def test_after_trials_n_the_race_gets_the_share_of_the_whole_night_and_the_floor_at_least() -> None:
    from autotune.study.race import race_budget, race_floor

    assert race_budget(70, 5, share=0.3) == 30  # 70 + 30: the race is 30 % of the night
    assert race_budget(10, 5, share=0.3) == race_floor(5)


def test_a_timeout_covers_search_and_race() -> None:
    from autotune.study.race import split_timeout

    assert split_timeout(3600, share=0.25) == 2700


def _raced(tmp_path: Path, *, baselines: bool = True, **race: object):  # type: ignore[no-untyped-def]
    problem = load_problem("qwen3.6-27b-2xa6000", TWIN_SPACE)
    runner = _runner(problem, tmp_path, seed=4)
    if baselines:
        runner.enqueue_baselines()
    runner.run(trials=8, timeout_s=None)
    searched = len(runner.records())
    result = race_finalists(runner, FinalistsRace(**{"top": 3, **race}))  # type: ignore[arg-type]
    relaunches = [r for r in runner.records() if r.confirm_of is not None]
    return runner, result, relaunches, searched


class Timed:
    """The landscape's launcher on a fake clock: each launch moves it on by the seconds it took."""

    def __init__(self, inner: LandscapeLauncher) -> None:
        self.inner, self.now = inner, 1000.0

    def __call__(self, *args: object, **kwargs: object):  # type: ignore[no-untyped-def]
        outcome = self.inner(*args, **kwargs)  # type: ignore[arg-type]
        self.now += (outcome.launch_s or 0.0) + (outcome.measure_s or 0.0)
        return outcome


def _searched_on_a_clock(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A study searched 8 launches on the fake clock: the runner, the clock, each served launch's seconds."""
    problem = load_problem("qwen3.6-27b-2xa6000", TWIN_SPACE)
    timed = Timed(LandscapeLauncher(problem, problem.landscape(4), random.Random(4)))
    runner = make_runner(problem, tmp_path, sampler=make_sampler("random", 4), launcher=timed,
                         storage=optuna.storages.InMemoryStorage())  # fmt: skip
    runner.clock = lambda: timed.now
    runner.enqueue_baselines()
    runner.run(trials=8, timeout_s=None)
    served = [(r.launch.launch_s or 0.0) + (r.measurement.measure_s or 0.0) for r in runner.records() if r.served]
    return runner, timed, served


def test_the_race_stops_before_a_round_that_would_pass_its_deadline(tmp_path: Path) -> None:
    runner, result, relaunches, _ = _raced(tmp_path / "none", deadline=-1.0)
    assert result is not None and not relaunches  # the night was over: nothing relaunched
    runner, timed, served = _searched_on_a_clock(tmp_path / "some")
    deadline = timed.now + 6.5 * statistics.median(served)  # room for about six launches
    race_finalists(runner, FinalistsRace(top=3, deadline=deadline, budget=40))
    relaunched = [r for r in runner.records() if r.confirm_of is not None]
    assert 2 <= len(relaunched) <= 7
    assert timed.now <= deadline + max(served)  # a round is started only when its launches fit


def test_a_timeout_night_whose_end_cannot_hold_the_floor_races_fewer_finalists_and_says_why(tmp_path: Path) -> None:
    runner, timed, served = _searched_on_a_clock(tmp_path)
    seconds = statistics.median(served)
    roomy = FinalistsRace(top=3, deadline=timed.now + 16.5 * seconds)  # the floor of 3 and 2 baselines: 16
    assert race_in_time(runner, roomy) == roomy
    race = race_in_time(runner, FinalistsRace(top=3, deadline=timed.now + 12.5 * seconds))
    assert (race.top, race.asked, race.room) == (1, 3, 12)  # the floor of 1 is 12: it fits
    assert plan_race(runner, race).text().endswith(
        "; 1 finalist besides 2 baselines, not 3: a race of 12 launches cannot hold the floor of 3 (16 launches)"
    )
    result = race_finalists(runner, race)
    assert result is not None  # the race began with one finalist (challengers may join it once it settles)
    assert sum(1 for f in result.finalists if not f.baseline and f.joined_after is None) <= 1


def test_the_race_never_spends_past_its_budget_and_relaunches_only_what_is_open(tmp_path: Path) -> None:
    runner, result, relaunches, _ = _raced(tmp_path, budget=9, launches=8)
    assert result is not None and 0 < len(relaunches) <= 9
    by_round: dict[int, list[int]] = {}
    for r in relaunches:
        assert r.proposal.launch_round is not None and r.confirm_of is not None
        by_round.setdefault(r.proposal.launch_round, []).append(r.confirm_of)
    rounds = [by_round[k] for k in sorted(by_round)]
    challengers = {f.trial for f in result.finalists if f.joined_after is not None}
    assert all(len(r) >= 2 for r in rounds)  # a round needs two configurations
    assert all(set(later) <= set(rounds[0]) | challengers for later in rounds[1:])  # only finalists, each once a round
    assert all(len(set(r)) == len(r) for r in rounds)


def _rounds_of(relaunches):  # type: ignore[no-untyped-def]
    by_round: dict[int, set[int]] = {}
    for r in relaunches:
        by_round.setdefault(r.proposal.launch_round, set()).add(r.confirm_of)
    return [by_round[k] for k in sorted(by_round)]


def test_a_race_settled_with_launches_to_spare_races_the_next_ranked_configurations_against_its_leader(
    tmp_path: Path,
) -> None:
    runner, result, relaunches, _ = _raced(tmp_path, top=1, budget=16)
    assert result is not None and result.settled and len(relaunches) <= 16
    first = [f for f in result.finalists if f.joined_after is None]
    assert sum(1 for f in first if not f.baseline) == 1  # the race began with its one finalist and the baselines
    challengers = sorted((f for f in result.finalists if f.joined_after is not None), key=lambda f: f.joined_after)
    assert len(challengers) >= 2
    # admitted in the search's ranking, each after the rounds before it, and raced beside the leader
    assert [c.first for c in challengers] == sorted((c.first for c in challengers), reverse=True)
    assert all(c.first <= f.first for c in challengers for f in first if not f.baseline)
    console = Console(width=240, record=True)
    console.print(confirmation_table(result))
    shown = console.export_text()
    assert all(f"{c.label} (#{c.trial}) (challenger from round {c.joined_after + 1})" in shown for c in challengers)
    rounds = _rounds_of(relaunches)
    for c in challengers:
        assert c.joined_after >= 2  # two rounds of every finalist came first
        assert all(
            result.leader in rounds[i] and c.trial in rounds[i]
            for i in range(c.joined_after, c.joined_after + len(c.values))
        )


def test_a_lone_finalist_is_raced_against_the_next_ranked_configuration_not_left_unconfirmed(tmp_path: Path) -> None:
    runner, result, relaunches, _ = _raced(tmp_path, baselines=False, top=1, budget=8)
    assert result is not None and 0 < len(relaunches) <= 8
    assert all(f.confirmed for f in result.finalists)
    ranked = sorted((r for r in runner.records() if r.confirm_of is None and r.value), key=lambda r: -(r.value or 0.0))
    assert _rounds_of(relaunches)[0] == {ranked[0].number, ranked[1].number}  # the best, and the next by ranking


def test_a_race_without_room_for_two_rounds_of_a_pair_admits_no_challenger(tmp_path: Path) -> None:
    runner, result, relaunches, _ = _raced(tmp_path, top=1, budget=7)  # two rounds of three: one launch left
    assert result is not None and len(relaunches) == 6
    assert all(f.joined_after is None for f in result.finalists)


def test_a_short_night_races_as_many_finalists_as_its_budget_holds_the_floor_for() -> None:
    from autotune.study.race import race_floor, race_top

    night = Night.of_launches(20, baselines=2, top=3)
    assert night.race_relaunches == 10 < race_floor(3 + 2)  # half the night, below the floor of 3 (16)
    assert (night.top, night.asked) == (1, 3)  # the floor of 1 finalist and 2 baselines is 12: still over, 1 at least
    assert Night.of_launches(20, baselines=3, top=3).top == 1
    assert Night.of_launches(30, baselines=2, top=3).top == 2  # a race of 15 holds the floor of 2 (14), not of 3
    assert race_top(10, 0, 2) == 0  # no race asked, none raced


def test_a_night_of_60_still_races_3_finalists() -> None:
    for baselines in (2, 3):
        night = Night.of_launches(60, baselines=baselines, top=3)
        assert (night.top, night.asked) == (3, None)
        assert night.trials is not None and night.race_relaunches is not None
        assert night.trials + night.race_relaunches == 60


def test_a_short_night_says_it_races_fewer_finalists_and_why(tmp_path: Path) -> None:
    problem = load_problem("qwen3.6-27b-2xa6000", TWIN_SPACE)
    assert len(problem.space.baselines) == 2
    runner = _runner(problem, tmp_path, seed=6)
    runner.enqueue_baselines()
    said: list[str] = []
    ended = run_night(runner, Night.of_launches(20, baselines=2, top=3), say=said.append)
    assert ended.confirmation is not None
    assert said[0].endswith(
        "; 1 finalist besides 2 baselines, not 3: a race of 10 launches cannot hold the floor of 3 (16 launches)"
    )
    raced = {f.trial for f in ended.confirmation.finalists if not f.baseline and f.joined_after is None}
    assert len(raced) <= 1  # the best configuration, when it is not a baseline; then challengers, if it settles


# ---------------------------------------------------------------- the finalists' race, and the night


def test_the_plan_says_what_the_race_will_race_and_the_most_it_spends(tmp_path: Path) -> None:
    problem = load_problem("qwen3.6-27b-2xa6000", TWIN_SPACE)
    runner = _runner(problem, tmp_path, seed=5)
    runner.enqueue_baselines()
    runner.run(trials=8, timeout_s=None)
    race = FinalistsRace(top=3, budget=9)
    plan = plan_race(runner, race)
    result = race_finalists(runner, race)
    assert result is not None
    assert plan.configurations == len(result.finalists) >= 3
    assert plan.baselines == sum(f.baseline for f in result.finalists) == len(problem.space.baselines)
    assert plan.launches == 9 and plan.seconds is not None and plan.deadline_s is None
    assert sum(1 for r in runner.records() if r.confirm_of is not None) <= plan.launches
    assert "at most 9 fresh launches" in plan.text()
    assert "launches left once it is settled race the next-ranked configurations against the leader" in plan.text()


def test_a_night_of_launches_searches_on_its_share_and_races_on_the_rest(tmp_path: Path) -> None:
    problem = load_problem("qwen3.6-27b-2xa6000", TWIN_SPACE)
    runner = _runner(problem, tmp_path, seed=6)
    runner.enqueue_baselines()
    night = Night.of_launches(30, baselines=len(problem.space.baselines), top=3)
    assert night.trials is not None and night.race_relaunches is not None
    assert night.trials + night.race_relaunches == 30
    said: list[str] = []
    ended = run_night(runner, night, say=said.append)
    relaunches = [r for r in runner.records() if r.confirm_of is not None]
    assert not ended.interrupted and ended.confirmation is not None
    assert runner.launched == night.trials + len(relaunches)  # every launch of the night is the search's or the race's
    assert 2 <= len(relaunches) <= night.race_relaunches
    assert runner.study.user_attrs, "the verdict is kept in the study"
    assert len(said) == 1 and said[0].startswith(f"search done ({night.trials} launches done); confirmation: racing ")


def test_a_night_with_no_finalists_to_race_ends_with_its_search(tmp_path: Path) -> None:
    problem = load_problem("qwen3.6-27b-2xa6000", TWIN_SPACE)
    runner = _runner(problem, tmp_path, seed=7)
    ended = run_night(runner, Night(trials=3, top=0))
    assert ended.confirmation is None and not ended.interrupted
    assert runner.launched == 3 and all(r.confirm_of is None for r in runner.records())


class Interrupting:
    """The landscape's launcher, with Ctrl-C pressed once during its ``at``-th launch."""

    def __init__(self, inner: LandscapeLauncher, at: int) -> None:
        self.inner, self.at, self.launches = inner, at, 0

    def __call__(self, *args: object, **kwargs: object) -> TrialOutcome:
        self.launches += 1
        if self.launches == self.at:
            raise KeyboardInterrupt
        return self.inner(*args, **kwargs)  # type: ignore[arg-type]


def test_ctrl_c_in_the_search_ends_it_and_the_race_runs_on_what_it_found(tmp_path: Path) -> None:
    problem = load_problem("qwen3.6-27b-2xa6000", TWIN_SPACE)
    launcher = Interrupting(LandscapeLauncher(problem, problem.landscape(8), random.Random(8)), at=7)
    runner = _runner(problem, tmp_path, seed=8, launcher=launcher)
    runner.enqueue_baselines()
    said: list[str] = []
    ended = run_night(runner, Night(trials=20, top=2), say=said.append)
    assert ended.interrupted and runner.stop_reason == "interrupted"
    assert said[0].startswith("interrupted: racing ") and said[0].endswith("(Ctrl-C again to skip)")
    interrupted = [r for r in runner.records() if r.outcome == OutcomeKind.INTERRUPTED.value]
    assert len(interrupted) == 1 and interrupted[0].confirm_of is None
    assert ended.confirmation is not None and any(r.confirm_of is not None for r in runner.records())


# ---------------------------------------------------------------- the schedule's race

SCHEDULE_SPACE = ROOT / "search_spaces" / "qwen3.6-27b-2xa6000-schedule-twin.yaml"


class Levels:
    """A launcher that measures every plan at each of ``levels``: the schedule faster than every static
    winner by ``lead``, or (``schedule_fails``) a schedule that never serves."""

    def __init__(self, space_file: Path, levels: list[int], *, lead: float = 1.2, schedule_fails: bool = False) -> None:
        self.space = load_space(space_file)
        self.levels, self.lead, self.schedule_fails = levels, lead, schedule_fails
        self.launched: list[tuple[LaunchPlan, str]] = []

    def __call__(self, plan: LaunchPlan, log_path: Path, phase: Phase, early_stop: object = None) -> TrialOutcome:
        self.launched.append((plan, log_path.name))
        adaptive = bool(plan.flags.get("speculative-adaptive"))
        if adaptive and self.schedule_fails:
            return simulated_outcome(self.space, plan, kind=OutcomeKind.CRASHED, reason="died")
        served = simulated_outcome(self.space, plan, tok_s=1.0)
        base = served.measurements[0]
        speed = 50.0 * (self.lead if adaptive else 1.0) * (1 + 0.001 * len(self.launched))
        measurements = [
            base.model_copy(update={"concurrency": level, "metrics": [m.model_copy(update={"value": speed / level})
                                                                      for m in base.metrics]})
            for level in self.levels
        ]  # fmt: skip
        return served.model_copy(update={"measurements": measurements})


def _schedule() -> tuple[Schedule, list]:  # type: ignore[type-arg]
    records = deep_alone_shallow_loaded()
    schedule = schedule_of(records)
    assert isinstance(schedule, Schedule)
    return schedule, records


def test_the_schedule_race_launches_each_winner_as_it_ran_and_the_schedule_by_the_engine_s_rules(
    tmp_path: Path,
) -> None:
    schedule, records = _schedule()
    checked = checked_space(load_space(SCHEDULE_SPACE), twin_gpus())
    paths = StudyPaths(tmp_path, "s")
    launcher = Levels(SCHEDULE_SPACE, [1, 4, 16])
    verdict = race_schedule(checked, paths, schedule, records, launch=launcher, rounds=2)
    statics = list(dict.fromkeys(t.trial for t in schedule.tiers))
    names = [f"trial-{t:04d}" for t in statics] + ["schedule"]
    assert [name for _, name in launcher.launched] == [f"schedule-race-r{r}-{n}.log" for r in (1, 2) for n in names]
    by_number = {r.number: r for r in records}
    for plan, name in launcher.launched:
        if name.endswith("-schedule.log"):
            config = paths.folder / SCHEDULE_CONFIG_FILE
            assert plan.flags["speculative-adaptive-config"] == str(config.resolve())
            assert json.loads(config.read_text()) == schedule.adaptive_config()
        else:
            assert plan.flags == by_number[int(name.split("-")[-1].removesuffix(".log"))].flags
    assert verdict.rounds == 2 and not verdict.failed
    assert all(len(level.schedule_values) == 2 for level in verdict.levels)


def test_a_schedule_that_does_not_serve_in_the_first_round_ends_the_race(tmp_path: Path) -> None:
    schedule, records = _schedule()
    checked = checked_space(load_space(SCHEDULE_SPACE), twin_gpus())
    launcher = Levels(SCHEDULE_SPACE, [1, 4, 16], schedule_fails=True)
    verdict = race_schedule(checked, StudyPaths(tmp_path, "s"), schedule, records, launch=launcher, rounds=3)
    assert len(launcher.launched) == len({t.trial for t in schedule.tiers}) + 1  # one round, then no more
    assert verdict.failed == ["schedule, round 1: crashed: died"] and not verdict.recommended


def test_busy_gpus_skip_a_launch_of_the_schedule_race_and_say_so(tmp_path: Path) -> None:
    schedule, records = _schedule()
    space = load_space(SCHEDULE_SPACE)
    space = space.model_copy(update={"gpus": space.gpus.model_copy(update={"busy_wait_s": 0.0})})
    checked = checked_space(space, twin_gpus())
    assert checked.inventory is not None
    busy = checked.inventory.model_copy(
        update={"gpus": [g.model_copy(update={"memory_used_bytes": g.memory_used_bytes + 8e9})
                         for g in checked.inventory.gpus]}
    )  # fmt: skip
    launcher = Levels(SCHEDULE_SPACE, [1, 4, 16])
    verdict = race_schedule(checked, StudyPaths(tmp_path, "s"), schedule, records, launch=launcher, rounds=2,
                            read_gpus=lambda: busy)  # fmt: skip
    assert not launcher.launched
    assert verdict.failed and all("skipped, GPUs busy" in f for f in verdict.failed)
