"""A night: the search, then the finalists' race, on one split of what the night is given. The one
way a study is run to its answer: ``autotune study`` and the benchmarks of a night's answer call
:func:`run_night`, and the split is made here (:class:`Night`) from :mod:`autotune.study.race`'s
budget rules."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from pydantic import Field

from autotune.models import Frozen
from autotune.stopping import REPEATED_FAILURE, StopRule
from autotune.study.confirm import Confirmation
from autotune.study.race import (
    RACE_LAUNCHES,
    RACE_SHARE,
    FinalistsRace,
    others_running,
    plan_race,
    race_budget,
    race_finalists,
    race_in_time,
    race_top,
    split_launches,
    split_timeout,
)

if TYPE_CHECKING:
    from autotune.study.runner import StudyRunner


class Night(Frozen):
    """What a night is given: when its search stops, and the race of its finalists after it."""

    trials: int | None = Field(default=None, description="the search's launches (--trials)")
    timeout_s: float | None = Field(
        default=None, description="search and race together: the search stops at 1 - share of it"
    )
    patience: int | None = Field(default=None, description="trials without an improvement that end the search")
    total_trials: int | None = Field(default=None, description="trials of the study, every worker's, that end it")
    top: int = Field(default=3, description="distinct configurations raced besides every baseline (0: no race)")
    asked: int | None = Field(
        default=None, description="the finalists asked for, where the race's relaunches cannot hold their floor"
    )
    race_launches: int = Field(default=RACE_LAUNCHES, description="launches of one configuration in the race")
    race_relaunches: int | None = Field(
        default=None, description="relaunches the race may spend (None: its share of the search's launches)"
    )
    share: float = Field(default=RACE_SHARE, description="the race's share of the night")

    @classmethod
    def of_launches(cls, launches: int, *, baselines: int, top: int = 3, share: float = RACE_SHARE) -> Night:
        """A night of ``launches``, search and race together (:func:`~autotune.study.race.split_launches`);
        the race holds as many of the ``top`` finalists as its floor fits (:func:`~autotune.study.race.race_top`)."""
        search, race = split_launches(launches, top + baselines, share=share)
        held = race_top(race, top, baselines)
        return cls(trials=search, race_relaunches=race, top=held, asked=top if held < top else None, share=share)

    @classmethod
    def beyond(cls, trials: int, *, baselines: int, top: int = 3, share: float = RACE_SHARE) -> Night:
        """A search of ``trials`` launches and a race beyond them, given its share of the whole night
        (:func:`~autotune.study.race.race_budget`)."""
        race = race_budget(trials, top + baselines, share=share)
        return cls(trials=trials, race_relaunches=race, top=top, share=share)


class NightResult(Frozen):
    """How a night ended."""

    confirmation: Confirmation | None = Field(description="the race's verdict; None when there was no race")
    interrupted: bool = Field(description="Ctrl-C (or SIGTERM) stopped the search")


def run_night(
    runner: StudyRunner,
    night: Night,
    *,
    rules: Sequence[StopRule] = (),
    say: Callable[[str], None] | None = None,
) -> NightResult:
    """Search until one of the night's stop rules (or ``rules``) fires, then race the finalists on the
    rest of the night; ``say`` is told what the race will spend before it starts. Ctrl-C in the
    search ends it and the race runs on what it found; Ctrl-C in the race propagates. No race after
    a search stopped by repeated failures (the set-up is at fault), nor while another worker is
    still measuring (the last to finish races)."""
    deadline = runner.clock() + night.timeout_s if night.timeout_s is not None else None
    race = FinalistsRace(
        top=night.top,
        asked=night.asked,
        launches=night.race_launches,
        budget=night.race_relaunches,
        deadline=deadline,
        share=night.share,
    )
    search_s = split_timeout(night.timeout_s, share=night.share) if night.timeout_s is not None else None
    interrupted = False
    try:
        runner.run(
            trials=night.trials,
            timeout_s=search_s,
            patience=night.patience,
            total_trials=night.total_trials,
            rules=rules,
        )
    except KeyboardInterrupt:
        interrupted = True
        runner.stop_reason = "interrupted"
        if say is not None:
            plan = plan_race(runner, race_in_time(runner, race))
            say(f"interrupted: {plan.text()} before reporting (Ctrl-C again to skip)")
    repeated = bool(runner.stop_reason and runner.stop_reason.startswith(REPEATED_FAILURE))
    if night.top == 0 or repeated:
        return NightResult(confirmation=None, interrupted=interrupted)
    if others_running(runner.study):
        if say is not None:
            say(
                "other workers are still measuring: the last to finish confirms the finalists "
                f"(or run: autotune confirm {runner.name})"
            )
        return NightResult(confirmation=None, interrupted=interrupted)
    race = race_in_time(runner, race)
    if say is not None and not interrupted:
        say(f"search done ({runner.stop_reason}); confirmation: {plan_race(runner, race).text()}")
    return NightResult(confirmation=race_finalists(runner, race), interrupted=interrupted)
