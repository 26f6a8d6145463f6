"""``autotune study``: open (or resume) a study, search, race the finalists, print the verdict."""

from __future__ import annotations

import signal
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from autotune.cli.common import StorageOpt, StudiesDir, app, console, error_funnel, raise_keyboard_interrupt
from autotune.errors import AutotuneError, UserError

if TYPE_CHECKING:
    from autotune.space import SearchSpace
    from autotune.study import Preflight, StudyPaths, StudyRunner
    from autotune.study.night import Night


ConfirmTop = Annotated[
    int,
    typer.Option(
        "--confirm-top",
        min=0,
        help="Finalists raced on fresh launches before the best is named: the top K distinct configurations "
        "plus every baseline (0: report the best single measurement, unconfirmed).",
    ),
]
ConfirmLaunches = Annotated[
    int,
    typer.Option(
        "--confirm-launches",
        min=1,
        help="At most N fresh launches per finalist, in interleaved rounds (A B C, then A C: a configuration "
        "whose comparison with the leader is decided is dropped); the race stops once settled.",
    ),
]
RaceShare = Annotated[
    float,
    typer.Option(
        "--race-share",
        min=0.05,
        max=0.5,
        help="Share of the night kept for the race: --timeout covers search and race (the search stops at "
        "1 - share of it); after --trials N launches the race may relaunch N x share / (1 - share) times, and "
        "at least two rounds of every finalist plus three of a pair.",
    ),
]


class Sampler(str, Enum):
    tpe = "tpe"
    random = "random"
    model = "model"


SamplerOpt = Annotated[
    Sampler,
    typer.Option(
        "--sampler",
        help="Search strategy: model (the default: the pass model calibrated on the night's launches proposes "
        "the speculative flags; TPE the rest, and all where it cannot), tpe (Optuna's TPE), or random.",
    ),
]
NameOpt = Annotated[
    Optional[str], typer.Option("--name", help="Study name (default: the space's 'study' key, or the file name).")
]
TrialsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--trials",
        min=1,
        help="Server launches to run in this invocation (a proposal answered from a "
        "measurement already made, or skipped as predicted to fail, does not count).",
    ),
]
TimeoutOpt = Annotated[Optional[str], typer.Option("--timeout", help="The night, search and race, e.g. 45m or 8h.")]
PatienceOpt = Annotated[
    Optional[int],
    typer.Option("--patience", min=1, help="Stop after N trials without an improvement beyond the noise."),
]
TotalTrialsOpt = Annotated[
    Optional[int],
    typer.Option("--total-trials", min=1, help="Stop when the study holds N trials, counting every worker's."),
]
HeartbeatOpt = Annotated[
    Optional[int],
    typer.Option(
        "--heartbeat",
        min=1,
        help="Seconds between trial heartbeats; a worker silent for 3 beats has its trial failed and retried "
        "once. Default: 60 for a server database (several hosts), off for SQLite.",
    ),
]
ArtifactsOpt = Annotated[
    Optional[Path],
    typer.Option("--artifacts", help="Artifact folder (logs, measurements); on several hosts, a shared one."),
]
EarlyStopOpt = Annotated[
    bool,
    typer.Option(
        "--early-stop/--no-early-stop",
        help="Stop measuring a trial whose first rounds cannot plausibly reach the best (3 sd of the "
        "study's measured noise below it); never a baseline or a finalist.",
    ),
]


@app.command()
def study(
    space_file: Annotated[Path, typer.Argument(help="Search-space YAML file.", metavar="SPACE")],
    name: NameOpt = None,
    storage: StorageOpt = None,
    studies_dir: StudiesDir = Path("studies"),
    trials: TrialsOpt = None,
    timeout: TimeoutOpt = None,
    sampler: SamplerOpt = Sampler.model,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Sampler seed, for a reproducible search.")] = None,
    patience: PatienceOpt = None,
    total_trials: TotalTrialsOpt = None,
    heartbeat: HeartbeatOpt = None,
    artifacts: ArtifactsOpt = None,
    confirm_top: ConfirmTop = 3,
    confirm_launches: ConfirmLaunches = 8,
    race_share: RaceShare = 0.3,
    early_stop: EarlyStopOpt = True,
) -> None:
    """Run (or resume) a study: launch, measure and compare configurations until the budget is spent.

    Re-running with the same study name resumes it: measured trials are kept, baselines are not
    measured again. --trials counts the search's launches (re-measuring a close challenger and the
    incumbent included); at the end (and on Ctrl-C) the finalists and every
    baseline are raced on fresh launches (the output says how many, and how long), and the verdict
    names the best with its gain over each baseline, or keeps a baseline nothing beat. Ctrl-C stops
    the current server and records the trial as interrupted; a second Ctrl-C skips the confirmation.
    """
    with error_funnel():
        from autotune.space import load_space
        from autotune.study.night import Night
        from autotune.study.paths import shown_url
        from autotune.study.storage import storage_errors

        space = load_space(space_file)
        timeout_s = _stop_budget(trials=trials, timeout=timeout, patience=patience, total_trials=total_trials)
        study_name = name or space.study or space_file.stem
        paths, storage_url = _study_storage(studies_dir, study_name, artifacts, storage)
        console.print(f"[bold]autotune study[/bold] {study_name}  ({shown_url(storage_url)})", highlight=False)
        checked, simulated = _preflight_study(space)
        with storage_errors(storage_url):
            runner = _open_runner(
                checked, paths, storage_url, sampler=sampler, seed=seed, heartbeat=heartbeat, early_stop=early_stop
            )
            night = Night(
                trials=trials,
                timeout_s=timeout_s,
                patience=patience,
                total_trials=total_trials,
                top=confirm_top,
                race_launches=confirm_launches,
                share=race_share,
            )
            interrupted = _run_night(runner, night, simulated=simulated)
            _print_study_result(runner, space, paths, simulated=simulated, storage=storage)
            _exit_after_study(runner, interrupted=interrupted)


def _stop_budget(
    *, trials: int | None, timeout: str | None, patience: int | None, total_trials: int | None
) -> float | None:
    """Check the study was told when to stop; the --timeout in seconds (None without one)."""
    from autotune.stopping import parse_duration

    if trials is None and timeout is None and patience is None and total_trials is None:
        raise UserError(
            "give --trials N, --total-trials N, --timeout DURATION and/or --patience N so the study knows when to stop"
        )
    return parse_duration(timeout) if timeout else None


def _study_storage(
    studies_dir: Path, study_name: str, artifacts: Path | None, storage: str | None
) -> tuple[StudyPaths, str]:
    """The study's paths and its storage URL (--storage, else the SQLite file in the studies folder)."""
    from autotune.study import StudyPaths

    paths = StudyPaths(studies_dir, study_name, artifacts_dir=artifacts)
    return paths, storage or paths.default_storage


def _preflight_study(space: SearchSpace) -> tuple[Preflight, bool]:
    """Check the space against its engines and GPUs; whether the GPUs are simulated (said when they are)."""
    from autotune.study import preflight

    checked = preflight(space)
    simulated = checked.inventory is not None and checked.inventory.simulated
    if simulated:
        console.print("[yellow]GPUs are simulated: this study runs on the autotune twin.[/yellow]")
    return checked, simulated


def _open_runner(
    checked: Preflight,
    paths: StudyPaths,
    storage_url: str,
    *,
    sampler: Sampler,
    seed: int | None,
    heartbeat: int | None,
    early_stop: bool,
) -> StudyRunner:
    """Open the runner (heartbeat: 60 s on a server database unless given), recover, queue retries and baselines."""
    from autotune.study import StudyRunner
    from autotune.study.guided import describe_search

    if heartbeat is None and not storage_url.startswith("sqlite"):
        heartbeat = 60
    runner = StudyRunner.open(
        checked,
        name=paths.name,
        storage_url=storage_url,
        paths=paths,
        sampler=sampler.value,
        seed=seed,
        heartbeat_s=heartbeat,
        early_stop=early_stop,
    )
    killed, failed = runner.recover()
    if killed or failed:
        console.print(f"recovered: killed {killed} orphaned server(s), marked {failed} stale trial(s) failed")
    console.print(describe_search(runner.sampler, runner.pass_setup), highlight=False)
    retried, queued = runner.prepare()
    if retried:
        console.print(f"interrupted trials queued again: {', '.join(map(str, retried))}", highlight=False)
    if queued:
        console.print(f"baselines queued: {', '.join(queued)}", highlight=False)
    return runner


def _run_night(runner: StudyRunner, night: Night, *, simulated: bool) -> bool:
    """The night (search, then the finalists' race) under the live view; whether Ctrl-C (or SIGTERM) stopped it."""
    from autotune.report.console import LiveView
    from autotune.study.night import run_night

    view = LiveView(console, total=night.trials, timeout_s=night.timeout_s, simulated=simulated)
    runner.events = view
    previous = signal.signal(signal.SIGTERM, raise_keyboard_interrupt)
    interrupted = False
    try:
        with view:
            interrupted = run_night(runner, night, say=lambda text: console.print(text, highlight=False)).interrupted
    except KeyboardInterrupt:
        interrupted = True
        runner.stop_reason = "interrupted"
    finally:
        signal.signal(signal.SIGTERM, previous)
    return interrupted


def _print_study_result(
    runner: StudyRunner, space: SearchSpace, paths: StudyPaths, *, simulated: bool, storage: str | None
) -> None:
    """Print the trials, per-engine and confirmation tables, the best, and why the study stopped."""
    from autotune.report.console import best_summary, confirmation_table, engines_table
    from autotune.report.trials_table import trials_table
    from autotune.study import StudyView
    from autotune.study.paths import shown_url

    opened = StudyView(runner.study, artifacts_dir=paths.artifacts)
    all_records = opened.records()
    best = opened.best()
    console.print(
        trials_table(all_records, flag_names=list(space.tuned), best=best.number if best else None, width=console.width)
    )
    per_engine = engines_table(all_records)
    if per_engine is not None:
        console.print(per_engine)
    if opened.info.confirmation is not None:
        console.print(confirmation_table(opened.info.confirmation))
    console.print(best_summary(best, simulated=simulated))
    console.print(
        f"stopped: {runner.stop_reason}.  Export the best: autotune export {paths.name} --format sh"
        + (f" --storage {shown_url(storage)}" if storage else ""),
        highlight=False,
    )


def _exit_after_study(runner: StudyRunner, *, interrupted: bool) -> None:
    """Exit 130 after Ctrl-C; fail when repeated failures stopped the study."""
    from autotune.stopping import REPEATED_FAILURE

    if interrupted:
        raise typer.Exit(130)
    if runner.stop_reason and runner.stop_reason.startswith(REPEATED_FAILURE):
        raise AutotuneError(f"study stopped: {runner.stop_reason}")
