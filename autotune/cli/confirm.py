"""``autotune confirm``: race a study's finalists on fresh launches, or (--schedule) its speculation schedule."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, Optional

import typer

from autotune.cli.common import StorageOpt, StudiesDir, app, console, error_funnel, open_study, raise_keyboard_interrupt
from autotune.cli.recorded import build_schedule, space_to_launch
from autotune.errors import UserError

SpaceFileOpt = Annotated[
    Optional[Path],
    typer.Option("--space", help="The study's space file (needed when its env holds secrets, never stored)."),
]
TopOpt = Annotated[
    int, typer.Option("--top", min=1, help="Finalists: the top K distinct configurations plus every baseline.")
]
LaunchesOpt = Annotated[
    int,
    typer.Option(
        "--launches",
        min=1,
        help="At most N fresh launches per finalist, in interleaved rounds "
        "(A B C, then A C: one whose comparison with the leader is decided is dropped); once settled, "
        "launches the budget has left race the next-ranked configurations against the leader.",
    ),
]
BudgetOpt = Annotated[
    Optional[int],
    typer.Option(
        "--budget",
        min=2,
        help="At most this many relaunches in all (default: the search's launches "
        "x 0.3 / 0.7, and two rounds of every finalist plus three of a pair at least).",
    ),
]
ScheduleOpt = Annotated[
    bool,
    typer.Option(
        "--schedule",
        help="A levels study on an engine with a speculation schedule: race the schedule instead "
        "(each level's best draft depth in the engine's per-batch-size form) against each level's "
        "static winner; recommended only when it is significantly slower than no level's own winner "
        "and each static winner is significantly slower than it at some level, else the output names "
        "the static config to run. Then: export --schedule.",
    ),
]
RoundsOpt = Annotated[
    int,
    typer.Option(
        "--rounds",
        min=2,
        help="With --schedule: interleaved rounds, each launching the schedule and every distinct static winner once.",
    ),
]


@app.command()
def confirm(
    study_name: Annotated[str, typer.Argument(help="Study name.", metavar="STUDY")],
    space_file: SpaceFileOpt = None,
    top: TopOpt = 3,
    launches: LaunchesOpt = 8,
    budget: BudgetOpt = None,
    schedule: ScheduleOpt = False,
    rounds: RoundsOpt = 3,
    storage: StorageOpt = None,
    studies_dir: StudiesDir = Path("studies"),
) -> None:
    """Race the study's finalists and baselines on fresh, interleaved launches and state the verdict.

    With --schedule (a levels study on an engine with a schedule): race a speculation schedule per load against every
    level's static winner instead, print it per level and keep the verdict for export --schedule
    (docs/speculation-schedule.md).
    """
    if schedule:
        _confirm_schedule(study_name, space_file, rounds=rounds, storage=storage, studies_dir=studies_dir)
        return
    with error_funnel():
        from autotune.report.console import LiveView, best_summary, confirmation_table
        from autotune.study import StudyPaths, StudyRunner, StudyView, preflight
        from autotune.study.race import FinalistsRace, race_finalists

        opened = open_study(study_name, storage, studies_dir)
        space = space_to_launch(opened, space_file)
        paths = StudyPaths(studies_dir, study_name)
        checked = preflight(space)
        runner = StudyRunner.open(checked, name=study_name, storage_url=storage or paths.default_storage, paths=paths)
        simulated = checked.inventory is not None and checked.inventory.simulated
        view = LiveView(console, total=None, timeout_s=None, simulated=simulated)
        runner.events = view
        previous = signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
        interrupted = False
        try:
            with view:
                race_finalists(runner, FinalistsRace(top=top, launches=launches, budget=budget))
        except KeyboardInterrupt:
            interrupted = True
        finally:
            signal.signal(signal.SIGTERM, previous)
        reread = StudyView(runner.study, artifacts_dir=paths.artifacts)
        result = reread.info.confirmation
        if result is None:
            raise UserError(f"study {study_name!r} has no feasible measured trial to confirm")
        console.print(confirmation_table(result))
        console.print(best_summary(reread.best(), simulated=reread.info.simulated))
        if interrupted:
            raise typer.Exit(130)


def _confirm_schedule(
    study_name: str, space_file: Path | None, *, rounds: int, storage: str | None, studies_dir: Path
) -> None:
    """``confirm --schedule``: build the schedule from the levels study, race it, print the table."""
    with error_funnel():
        from autotune.gpu import read_inventory
        from autotune.report.console import depths_table, schedule_table
        from autotune.study import StudyPaths, preflight
        from autotune.study.attrs import record_schedule_verdict
        from autotune.study.launcher import trial_launcher
        from autotune.study.race import race_schedule
        from autotune.study.schedule import NoSchedule
        from autotune.study.storage import load_existing_study

        opened = open_study(study_name, storage, studies_dir)
        space = space_to_launch(opened, space_file)
        built = build_schedule(opened)
        if isinstance(built, NoSchedule):
            levels = opened.load_levels()
            if levels is not None:
                console.print(depths_table(opened.records(), levels))
            console.print(
                f"no schedule to race: {built.reason}; run trial {built.run} (autotune export {study_name})",
                highlight=False,
            )
            return
        console.print(
            f"racing the schedule ({built.text()}) against each level's static winner, {rounds} rounds", highlight=False
        )
        for decision in built.decisions:
            console.print(f"  decided: {decision}", highlight=False)
        paths = StudyPaths(studies_dir, study_name)
        checked = preflight(space)
        read_gpus = lambda: read_inventory(space.gpus)  # noqa: E731 - the runner reads them the same way
        launch = trial_launcher(checked, paths, read_gpus, lambda: None)
        say = lambda phase, detail: console.print(f"{phase}: {detail}", highlight=False)  # noqa: E731
        verdict = race_schedule(
            checked, paths, built, opened.records(), launch=launch, rounds=rounds, read_gpus=read_gpus, on_phase=say
        )
        # in the database, not the folder: every host of a shared study exports and reports it
        record_schedule_verdict(load_existing_study(study_name, storage or paths.default_storage), verdict)
        console.print(schedule_table(verdict, metric=opened.info.objective_metric))
