"""The ``autotune`` command line: parse, call one function, print; errors through one funnel.

User errors print ``Error: ...`` (plus ``hint:``/``log:`` lines) and exit 2; runtime failures exit 1;
a traceback only with ``--debug``. Heavy imports stay inside the commands so ``--help`` is instant.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import signal
import sys
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from autotune.engines import DEFAULT_ENGINE
from autotune.errors import AutotuneError

if TYPE_CHECKING:
    from autotune.bench import Verdict
    from autotune.measure.client import Measurement
    from autotune.measure.protocol import MeasureSettings
    from autotune.profile import Profile
    from autotune.records import TrialRecord
    from autotune.report.summary import TrialCategories
    from autotune.space import SearchSpace
    from autotune.study import Importance, Preflight, StudyPaths, StudyRunner, StudyView
    from autotune.study.levels import LoadLevels
    from autotune.study.schedule import NoSchedule, Schedule

app = typer.Typer(
    help="Find the fastest launch configuration of an LLM inference server by experiment.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
console = Console()
if not console.is_terminal and "COLUMNS" not in os.environ:  # piped or captured: the width tables are made for
    console = Console(width=120)
err_console = Console(stderr=True)
_state = {"debug": False}


@contextlib.contextmanager
def error_funnel() -> Iterator[None]:
    """Turn autotune's errors into one clear line and the right exit code."""
    try:
        yield
    except AutotuneError as exc:
        if _state["debug"]:
            raise
        # Messages are plain text: "[dashboard]" or "[tok/s]" in them is not Rich markup.
        err_console.print(f"[bold red]Error:[/bold red] {escape(exc.message)}", highlight=False, soft_wrap=True)
        if exc.hint:
            err_console.print(f"hint: {exc.hint}", highlight=False, soft_wrap=True, markup=False)
        if exc.log_path:
            err_console.print(f"log: {exc.log_path}", highlight=False, soft_wrap=True, markup=False)
        raise typer.Exit(exc.exit_code) from None


@app.callback()
def main_options(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks for errors.")] = False,
) -> None:
    _state["debug"] = debug
    if debug:
        warnings.showwarning = _SHOW_WARNING


StudiesDir = Annotated[Path, typer.Option("--studies-dir", help="Folder for study databases, logs and artifacts.")]
StorageOpt = Annotated[
    Optional[str],
    typer.Option("--storage", help="Any SQLAlchemy URL. Default: sqlite:///<studies-dir>/<study>.db"),
]


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


class Format(str, Enum):
    yaml = "yaml"
    sh = "sh"
    systemd = "systemd"


# ``autotune bench`` without a profile's settings: a few minutes, not the study protocol's 10 rounds.
BENCH_DEFAULTS: dict[str, Any] = {"max_tokens": 128, "max_seconds": 180.0, "max_rounds": 5}
# bench --profile's verdict categories (autotune.bench.VerdictCategory), as Rich styles
VERDICT_STYLES = {"not-slower": "green", "slower": "red", "cannot-tell": "yellow"}


def _raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


@app.command()
def study(
    space_file: Annotated[Path, typer.Argument(help="Search-space YAML file.", metavar="SPACE")],
    name: Annotated[
        Optional[str], typer.Option("--name", help="Study name (default: the space's 'study' key, or the file name).")
    ] = None,
    storage: StorageOpt = None,
    studies_dir: StudiesDir = Path("studies"),
    trials: Annotated[
        Optional[int],
        typer.Option("--trials", min=1, help="Server launches to run in this invocation (a proposal answered from a "
                     "measurement already made, or skipped as predicted to fail, does not count)."),
    ] = None,
    timeout: Annotated[
        Optional[str], typer.Option("--timeout", help="The night, search and race, e.g. 45m or 8h.")
    ] = None,
    sampler: Annotated[Sampler, typer.Option("--sampler", help="Search strategy.")] = Sampler.tpe,
    seed: Annotated[Optional[int], typer.Option("--seed", help="Sampler seed, for a reproducible search.")] = None,
    patience: Annotated[
        Optional[int],
        typer.Option("--patience", min=1, help="Stop after N trials without an improvement beyond the noise."),
    ] = None,
    total_trials: Annotated[
        Optional[int],
        typer.Option("--total-trials", min=1, help="Stop when the study holds N trials, counting every worker's."),
    ] = None,
    heartbeat: Annotated[
        Optional[int],
        typer.Option(
            "--heartbeat",
            min=1,
            help="Seconds between trial heartbeats; a worker silent for 3 beats has its trial failed and retried "
            "once. Default: 60 for a server database (several hosts), off for SQLite.",
        ),
    ] = None,
    artifacts: Annotated[
        Optional[Path],
        typer.Option("--artifacts", help="Artifact folder (logs, measurements); on several hosts, a shared one."),
    ] = None,
    confirm_top: ConfirmTop = 3,
    confirm_launches: ConfirmLaunches = 8,
    race_share: RaceShare = 0.3,
    early_stop: Annotated[
        bool,
        typer.Option(
            "--early-stop/--no-early-stop",
            help="Stop measuring a trial whose first rounds cannot plausibly reach the best (3 sd of the "
            "study's measured noise below it); never a baseline or a finalist.",
        ),
    ] = True,
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
        from autotune.study.paths import shown_url
        from autotune.study.storage import storage_errors

        space = load_space(space_file)
        timeout_s = _stop_budget(trials=trials, timeout=timeout, patience=patience, total_trials=total_trials)
        study_name = name or space.study or space_file.stem
        paths, storage_url = _study_storage(studies_dir, study_name, artifacts, storage)
        console.print(f"[bold]autotune study[/bold] {study_name}  ({shown_url(storage_url)})", highlight=False)
        checked, simulated = _preflight_study(space)
        with storage_errors(storage_url):
            runner = _open_runner(checked, paths, storage_url, sampler=sampler, seed=seed, heartbeat=heartbeat,
                                  early_stop=early_stop)  # fmt: skip
            interrupted = _run_and_confirm(runner, simulated=simulated, trials=trials, timeout_s=timeout_s,
                                           patience=patience, total_trials=total_trials, confirm_top=confirm_top,
                                           confirm_launches=confirm_launches, race_share=race_share,
                                           study_name=study_name)  # fmt: skip
            _print_study_result(runner, space, paths, simulated=simulated, storage=storage)
            _exit_after_study(runner, interrupted=interrupted)


def _stop_budget(
    *, trials: int | None, timeout: str | None, patience: int | None, total_trials: int | None
) -> float | None:
    """Check the study was told when to stop; the --timeout in seconds (None without one)."""
    from autotune.errors import UserError
    from autotune.stopping import parse_duration

    if trials is None and timeout is None and patience is None and total_trials is None:
        raise UserError(
            "give --trials N, --total-trials N, --timeout DURATION and/or --patience N "
            "so the study knows when to stop"
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
    retried, queued = runner.prepare()
    if retried:
        console.print(f"interrupted trials queued again: {', '.join(map(str, retried))}", highlight=False)
    if queued:
        console.print(f"baselines queued: {', '.join(queued)}", highlight=False)
    return runner


def _run_and_confirm(
    runner: StudyRunner,
    *,
    simulated: bool,
    trials: int | None,
    timeout_s: float | None,
    patience: int | None,
    total_trials: int | None,
    confirm_top: int,
    confirm_launches: int,
    race_share: float,
    study_name: str,
) -> bool:
    """Run the trials under the live view, then confirm the finalists; whether Ctrl-C (or SIGTERM) stopped it.
    A --timeout covers both: the search stops at its share, the race runs to the end."""
    from autotune.report.console import LiveView
    from autotune.stopping import REPEATED_FAILURE
    from autotune.study.runner import split_timeout

    deadline = runner.clock() + timeout_s if timeout_s is not None else None
    search_s = split_timeout(timeout_s, share=race_share) if timeout_s is not None else None
    race = functools.partial(runner.confirm, top=confirm_top, launches=confirm_launches, deadline=deadline,
                             share=race_share)  # fmt: skip
    plan_race = functools.partial(runner.confirmation_plan, top=confirm_top, launches=confirm_launches,
                                  deadline=deadline, share=race_share)  # fmt: skip

    view = LiveView(console, total=trials, timeout_s=timeout_s, simulated=simulated)
    runner.events = view
    previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
    interrupted = False
    try:
        with view:
            try:
                runner.run(trials=trials, timeout_s=search_s, patience=patience, total_trials=total_trials)
            except KeyboardInterrupt:
                interrupted = True
                runner.stop_reason = "interrupted"
                plan = plan_race()
                console.print(f"interrupted: {plan.text()} before reporting (Ctrl-C again to skip)", highlight=False)
            repeated = bool(runner.stop_reason and runner.stop_reason.startswith(REPEATED_FAILURE))
            if confirm_top > 0 and not repeated and runner.others_running():
                console.print(
                    "other workers are still measuring: the last to finish confirms the finalists "
                    f"(or run: autotune confirm {study_name})",
                    highlight=False,
                )
            elif confirm_top > 0 and not repeated:
                if not interrupted:
                    plan = plan_race()
                    console.print(f"search done ({runner.stop_reason}); confirmation: {plan.text()}", highlight=False)
                race()
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
    from autotune.report.console import best_summary, confirmation_table, engines_table, trials_table
    from autotune.study import StudyView
    from autotune.study.paths import shown_url

    opened = StudyView(runner.study, artifacts_dir=paths.artifacts)
    all_records = opened.records()
    best = opened.best()
    console.print(trials_table(all_records, flag_names=list(space.tuned), best=best.number if best else None,
                               width=console.width))  # fmt: skip
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


def _open(name: str, storage: str | None, studies_dir: Path, artifacts: Path | None = None) -> StudyView:
    from autotune.study import StudyPaths, StudyView

    paths = StudyPaths(studies_dir, name, artifacts_dir=artifacts)
    url = storage or paths.default_storage
    if storage is None and not (studies_dir / f"{name}.db").exists():
        from autotune.errors import StorageError

        raise StorageError(
            f"no study named {name!r}: {studies_dir / (name + '.db')} does not exist",
            hint="pass --storage URL or --studies-dir DIR if it lives elsewhere",
        )
    return StudyView.open(name, url, artifacts_dir=paths.artifacts)


@app.command()
def show(
    study_name: Annotated[str, typer.Argument(help="Study name.", metavar="STUDY")],
    storage: StorageOpt = None,
    studies_dir: StudiesDir = Path("studies"),
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
    trial: Annotated[
        Optional[int], typer.Option("--trial", help="Show one trial in full: reason, flags, argv, metrics.")
    ] = None,
) -> None:
    """Show every trial (outcome, key flags, tok/s, accept length), which flags mattered, the best per category."""
    with error_funnel():
        opened = _open(study_name, storage, studies_dir)
        if trial is not None:
            _show_trial(opened, study_name, trial, as_json=as_json)
            return
        overview = _read_overview(opened)
        if as_json:
            print(json.dumps(_overview_json(opened, study_name, overview), indent=2))
            return
        _print_overview(opened, overview)
        _print_schedule(opened)


def _print_schedule(opened: StudyView) -> None:
    """The speculation schedule's race, when ``confirm --schedule`` ran it."""
    verdict = opened.schedule_verdict()
    if verdict is None:  # most studies: the schedule's modules (engines, HTTP) stay unloaded
        return
    from autotune.report.console import schedule_table

    console.print(schedule_table(verdict, metric=opened.info.objective_metric))


@dataclass(frozen=True)
class _Overview:
    """What ``autotune show`` reports about a whole study."""

    records: list[TrialRecord]
    best: TrialRecord | None
    importance: Importance
    per_category: TrialCategories | None
    levels: LoadLevels | None


def _show_trial(opened: StudyView, study_name: str, trial: int, *, as_json: bool) -> None:
    """Print one trial in full (or as JSON)."""
    from autotune.errors import UserError
    from autotune.report.console import trial_detail

    record = opened.record(trial)
    if record is None:
        raise UserError(f"study {study_name!r} has no trial {trial}")
    if as_json:
        print(record.model_dump_json(indent=2))
    else:
        console.print(trial_detail(record), highlight=False)


def _read_overview(opened: StudyView) -> _Overview:
    """Read the trials, the best, the flags' importance, the best's categories and the load levels."""
    from autotune.report.summary import trial_categories
    from autotune.study import best_of

    all_records = opened.records()
    best = best_of(all_records, opened.info.confirmation, objective=opened.info.objective_metric)
    importance = opened.importance()
    per_category = trial_categories(opened, best.number, "best") if best else None
    levels = opened.load_levels()
    return _Overview(all_records, best, importance, per_category, levels)


def _overview_json(opened: StudyView, study_name: str, overview: _Overview) -> dict[str, Any]:
    """The study's overview as ``show --json`` prints it."""
    best, per_category, levels = overview.best, overview.per_category, overview.levels
    return {
        "study": study_name,
        "simulated": opened.info.simulated,
        "best_trial": best.number if best else None,
        "confirmation": opened.info.confirmation.model_dump(mode="json") if opened.info.confirmation else None,
        "schedule": schedule.model_dump(mode="json") if (schedule := opened.schedule_verdict()) else None,
        "trials": [r.model_dump(mode="json") for r in overview.records],
        "importance": overview.importance.model_dump(mode="json"),
        "best_categories": [c.model_dump(mode="json") for c in per_category.categories] if per_category else [],
        "load_levels": levels.model_dump(mode="json") if levels else None,
        "break_even": opened.break_even().model_dump(mode="json", exclude={"points"}),
    }


def _print_overview(opened: StudyView, overview: _Overview) -> None:
    """Print the study's tables: trials, engines, importance, categories, confirmation, levels, break-even, best."""
    from autotune.report.console import (
        best_summary,
        break_even_text,
        category_table,
        confirmation_table,
        engines_table,
        importance_table,
        levels_table,
        trials_table,
    )

    all_records, best, importance = overview.records, overview.best, overview.importance
    per_category, levels = overview.per_category, overview.levels
    tuned = opened.info.tuned
    console.print(trials_table(all_records, flag_names=tuned, best=best.number if best else None,
                               priority=sorted(tuned, key=lambda n: -importance.values.get(n, 0.0)),
                               width=console.width))  # fmt: skip
    per_engine = engines_table(all_records)
    if per_engine is not None:
        console.print(per_engine)
    console.print(
        importance_table(
            importance.values, method=importance.method, trials_used=importance.trials_used, note=importance.note
        )
    )
    if best is not None and per_category is not None:
        title = f"best trial {best.number} per prompt category"
        console.print(category_table(per_category.categories, title=title))
    if opened.info.confirmation is not None:
        console.print(confirmation_table(opened.info.confirmation))
    if levels is not None:
        console.print(levels_table(levels))
    console.print(break_even_text(opened.break_even()))
    console.print(best_summary(best, simulated=opened.info.simulated))


@app.command()
def export(
    study_name: Annotated[str, typer.Argument(help="Study name.", metavar="STUDY")],
    fmt: Annotated[
        Format, typer.Option("--format", "-f", help="yaml (profile), sh (launch script) or systemd (unit).")
    ] = Format.yaml,
    trial: Annotated[Optional[int], typer.Option("--trial", help="Export this trial instead of the best.")] = None,
    concurrency: Annotated[
        Optional[int],
        typer.Option("--concurrency", help="A levels study: export the winner at this load level (objective.levels)."),
    ] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to a file instead of stdout.")] = None,
    host: Annotated[str, typer.Option("--host", help="Address the exported server listens on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", help="Port the exported server listens on.")] = 30000,
    schedule: Annotated[
        bool,
        typer.Option("--schedule", help="Export the speculation schedule that `confirm --schedule` recommended: "
                     "its adaptive config file (SGLang) and the launch command (refused when it was declined)."),
    ] = False,
    schedule_config: Annotated[
        Optional[Path],
        typer.Option("--schedule-config", help="With --schedule: where to write the adaptive config the command "
                     "reads (default: STUDY-adaptive.json beside --output, else in the current folder)."),
    ] = None,
    storage: StorageOpt = None,
    studies_dir: StudiesDir = Path("studies"),
) -> None:
    """Export the best feasible configuration (or --trial N) as a profile, a script or a systemd unit."""
    with error_funnel():
        from autotune.errors import UserError
        from autotune.profile import render
        opened = _open(study_name, storage, studies_dir)
        chosen: TrialRecord | None
        if schedule:
            if trial is not None or concurrency is not None:
                raise UserError("--schedule exports the schedule: leave out --trial and --concurrency")
            config_file = schedule_config or (output.parent if output else Path.cwd()) / f"{study_name}-adaptive.json"
            profile = _schedule_profile(opened, config_file)
            _write_export(render(profile, fmt.value, host=host, port=port), output, fmt)
            if profile.adaptive_config is not None:  # else the schedule travels in the engine's flags
                console.print(f"wrote {config_file} (the adaptive config the command reads)", highlight=False)
            return
        if concurrency is not None:
            chosen = _level_winner(opened, concurrency, trial)
        elif trial is None:
            chosen = opened.best()
            if chosen is None:
                raise UserError(f"study {study_name!r} has no feasible measured trial yet")
        else:
            chosen = opened.record(trial)
            if chosen is None or chosen.outcome != "ok":
                raise UserError(f"trial {trial} of study {study_name!r} was not measured successfully")
        _write_export(render(opened.profile(chosen, concurrency=concurrency), fmt.value, host=host, port=port),
                      output, fmt)  # fmt: skip


def _write_export(text: str, output: Path | None, fmt: Format) -> None:
    if output is None:
        sys.stdout.write(text)
        return
    output.write_text(text)
    if fmt is Format.sh:
        output.chmod(0o755)
    console.print(f"wrote {output}")


def _schedule_profile(opened: StudyView, config_file: Path) -> Profile:
    """The recommended schedule's profile (its config written to ``config_file``); a user error when
    the study has none, it was never raced, or the race declined it."""
    from autotune.errors import UserError
    from autotune.study.schedule import NoSchedule
    from autotune.study.schedule_race import schedule_profile

    name = opened.name
    verdict = opened.schedule_verdict()
    if verdict is None:
        built = _build_schedule(opened)
        if isinstance(built, NoSchedule):
            raise UserError(f"study {name!r} has no schedule: {built.reason}",
                            hint=f"export the static winner: autotune export {name}")  # fmt: skip
        raise UserError(f"study {name!r}: the schedule was never raced", hint=f"autotune confirm {name} --schedule")
    if not verdict.recommended:
        hint = f"export the static winner: autotune export {name} (or --concurrency N per level)"
        raise UserError(f"study {name!r}: {verdict.note}", hint=hint)
    base = opened.record(verdict.schedule.shared_from)
    if base is None:
        raise UserError(f"study {name!r} has no trial {verdict.schedule.shared_from} (the schedule's shared flags)")
    metric = opened.info.objective_metric
    unit = base.metrics[metric].unit if metric in base.metrics else "tok/s"
    return schedule_profile(opened.profile(base), verdict, config_file=config_file, metric=metric, unit=unit)


def _level_winner(opened: StudyView, concurrency: int, trial: int | None) -> TrialRecord:
    """The record ``export --concurrency N`` writes: that level's winner, with that level's metrics."""
    from autotune.errors import UserError

    levels = opened.info.levels
    if concurrency not in levels:
        known = f"its levels are {levels}" if levels else "it has no objective.levels in its space"
        raise UserError(f"--concurrency {concurrency}: study {opened.name!r} has no winner at that level ({known})")
    if trial is not None:
        raise UserError("--concurrency and --trial: pass one of them")
    chosen = opened.best_at(concurrency)
    if chosen is None:
        raise UserError(f"study {opened.name!r} has no feasible measured trial at concurrency {concurrency} yet")
    return chosen


@app.command()
def confirm(
    study_name: Annotated[str, typer.Argument(help="Study name.", metavar="STUDY")],
    space_file: Annotated[
        Optional[Path],
        typer.Option("--space", help="The study's space file (needed when its env holds secrets, never stored)."),
    ] = None,
    top: Annotated[
        int, typer.Option("--top", min=1, help="Finalists: the top K distinct configurations plus every baseline.")
    ] = 3,
    launches: Annotated[
        int,
        typer.Option("--launches", min=1, help="At most N fresh launches per finalist, in interleaved rounds "
                     "(A B C, then A C: one whose comparison with the leader is decided is dropped); the race stops "
                     "once settled."),
    ] = 8,
    budget: Annotated[
        Optional[int],
        typer.Option("--budget", min=2, help="At most this many relaunches in all (default: the search's launches "
                     "x 0.3 / 0.7, and two rounds of every finalist plus three of a pair at least)."),
    ] = None,
    schedule: Annotated[
        bool,
        typer.Option("--schedule", help="A levels study on SGLang or vLLM: race a speculation schedule instead "
                     "(each level's best draft depth as a batch-size slot of SGLang's adaptive config, or a range "
                     "of vLLM's per-batch-size draft tokens) against each level's "
                     "static winner; recommended only when it is significantly slower than no level's own winner "
                     "and each static winner is significantly slower than it at some level, else the output names "
                     "the static config to run. Then: export --schedule."),
    ] = False,
    rounds: Annotated[
        int, typer.Option("--rounds", min=2, help="With --schedule: interleaved rounds, each launching the schedule "
                          "and every distinct static winner once.")
    ] = 3,
    storage: StorageOpt = None,
    studies_dir: StudiesDir = Path("studies"),
) -> None:
    """Race the study's finalists and baselines on fresh, interleaved launches and state the verdict.

    With --schedule (a levels study on SGLang or vLLM): race a speculation schedule per load against every
    level's static winner instead, print it per level and keep the verdict for export --schedule
    (docs/speculation-schedule.md).
    """
    if schedule:
        _confirm_schedule(study_name, space_file, rounds=rounds, storage=storage, studies_dir=studies_dir)
        return
    with error_funnel():
        from autotune.errors import UserError
        from autotune.report.console import LiveView, best_summary, confirmation_table
        from autotune.study import StudyPaths, StudyRunner, StudyView, preflight

        opened = _open(study_name, storage, studies_dir)
        space = _space_to_launch(opened, space_file)
        paths = StudyPaths(studies_dir, study_name)
        checked = preflight(space)
        runner = StudyRunner.open(checked, name=study_name, storage_url=storage or paths.default_storage, paths=paths)
        simulated = checked.inventory is not None and checked.inventory.simulated
        view = LiveView(console, total=None, timeout_s=None, simulated=simulated)
        runner.events = view
        previous = signal.signal(signal.SIGTERM, _raise_keyboard_interrupt)
        interrupted = False
        try:
            with view:
                runner.confirm(top=top, launches=launches, budget=budget)
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


def _space_to_launch(opened: StudyView, space_file: Path | None) -> SearchSpace:
    """The space a study's relaunches use: ``--space FILE``, else the one the study recorded (which
    cannot hold secret environment values: they are never stored)."""
    from autotune.errors import UserError
    from autotune.space import load_space

    if space_file is not None:
        return load_space(space_file)
    space = opened.info.space
    if space is None:
        raise UserError(f"study {opened.name!r} does not record its search space", hint="pass --space FILE")
    env = {name: value for name, value in opened.info.env.items() if value is not None}
    if len(env) < len(opened.info.env):
        raise UserError(f"study {opened.name!r} launches with secret environment values, which are never stored",
                        hint="pass --space FILE (the space the study ran with)")  # fmt: skip
    # the record keeps the env apart from the space (secrets redacted): without it put back, a race
    # relaunched another server than the study measured (a vLLM twin its default profile)
    return space.model_copy(update={"env": env})


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
        from autotune.study.schedule import NoSchedule
        from autotune.study.schedule_race import race
        from autotune.study.storage import load_existing_study

        opened = _open(study_name, storage, studies_dir)
        space = _space_to_launch(opened, space_file)
        built = _build_schedule(opened)
        if isinstance(built, NoSchedule):
            levels = opened.load_levels()
            if levels is not None:
                console.print(depths_table(opened.records(), levels))
            console.print(f"no schedule to race: {built.reason}; run trial {built.run} "
                          f"(autotune export {study_name})", highlight=False)  # fmt: skip
            return
        console.print(f"racing the schedule ({built.text()}) against each level's static winner, {rounds} rounds",
                      highlight=False)  # fmt: skip
        for decision in built.decisions:
            console.print(f"  decided: {decision}", highlight=False)
        paths = StudyPaths(studies_dir, study_name)
        checked = preflight(space)
        read_gpus = lambda: read_inventory(space.gpus)  # noqa: E731 - the runner reads them the same way
        launch = trial_launcher(checked, paths, read_gpus, lambda: None)
        verdict = race(checked, paths, built, opened.records(), launch=launch, rounds=rounds, read_gpus=read_gpus,
                       on_phase=lambda phase, detail: console.print(f"{phase}: {detail}", highlight=False))  # fmt: skip
        # in the database, not the folder: every host of a shared study exports and reports it
        record_schedule_verdict(load_existing_study(study_name, storage or paths.default_storage), verdict)
        console.print(schedule_table(verdict, metric=opened.info.objective_metric))


def _build_schedule(opened: StudyView) -> Schedule | NoSchedule:
    """The study's speculation schedule (or why it has none); a user error for a study that cannot have one."""
    from autotune.errors import UserError
    from autotune.study.schedule import build, schedule_engines

    levels = opened.load_levels()
    if levels is None:
        raise UserError(f"--schedule: study {opened.name!r} has no objective.levels: a schedule needs a winner per "
                        "load level")  # fmt: skip
    engine = opened.info.space.engine if opened.info.space else None
    if engine not in schedule_engines():
        able = " and ".join(schedule_engines())
        raise UserError(
            f"--schedule: study {opened.name!r} runs {engine}; autotune builds a schedule per load for {able} only"
        )
    return build(opened.records(), levels, study=opened.name, engine=engine)


@app.command()
def check(
    space_file: Annotated[Path, typer.Argument(help="Search-space YAML file.", metavar="SPACE")],
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Validate a search space, check its flags against the launcher's --help, print the baselines' commands."""
    with error_funnel():
        import shlex

        from autotune.space import load_space
        from autotune.study import preflight

        space = load_space(space_file)
        checked = preflight(space, read_gpus=False)
        baselines = []
        for baseline in checked.baselines:
            plan = baseline.plan
            prepared = checked.engines[plan.engine]
            argv = prepared.engine.build_argv(
                prepared.launcher, model=space.model, plan=plan, host="127.0.0.1", port=30000
            )
            baselines.append(
                {"name": baseline.name, "engine": plan.engine, "argv": argv, "engine_rules_applied": plan.notes}
            )
        engines: dict[str, dict[str, Any]] = {
            name: {"flags_checked": space.flags_for(name), "launcher_flags": len(prepared.flag_set.flags)}
            for name, prepared in checked.engines.items()
        }
        if as_json:
            payload = {
                "space": str(space_file),
                "engine": space.engine_names()[0] if len(engines) == 1 else "choice",
                "engines": engines,
                "valid": True,
                "flags_checked": space.all_flag_names(),
                "tuned": list(space.tuned),
                "baselines": baselines,
            }
            print(json.dumps(payload, indent=2))
            return
        for name, info in engines.items():
            console.print(
                f"[green]ok[/green] {space_file}: engine {name}, {len(info['flags_checked'])} flags checked against "
                f"the launcher's --help ({info['launcher_flags']} known), {len(space.tuned)} tuned",
                highlight=False,
            )
        for b in baselines:
            console.print(f"\n[bold]baseline {b['name']}[/bold]", highlight=False)
            for note in b["engine_rules_applied"]:
                console.print(f"  engine rule: {note}", highlight=False)
            console.print(shlex.join(b["argv"]), highlight=False, soft_wrap=True)


@app.command()
def bench(
    url: Annotated[
        Optional[str], typer.Option("--url", help="Measure this running server (nothing is launched).")
    ] = None,
    profile_file: Annotated[
        Optional[Path], typer.Option("--profile", help="Launch this exported profile (YAML), measure it, compare.")
    ] = None,
    engine: Annotated[str, typer.Option("--engine", help="Protocol of the server behind --url.")] = DEFAULT_ENGINE,
    suite: Annotated[Optional[str], typer.Option("--suite", help="builtin:NAME or a JSONL file.")] = None,
    concurrency: Annotated[Optional[int], typer.Option("--concurrency", min=1, help="Parallel requests.")] = None,
    max_tokens: Annotated[Optional[int], typer.Option("--max-tokens", min=1, help="Cap per request.")] = None,
    warmup: Annotated[Optional[int], typer.Option("--warmup", min=0, help="Warm-up requests, discarded.")] = None,
    target_ci: Annotated[
        Optional[float], typer.Option("--target-ci", help="Stop at this relative 95% CI half width (0.02 = ±2%).")
    ] = None,
    max_rounds: Annotated[Optional[int], typer.Option("--max-rounds", min=2, help="Cap on rounds.")] = None,
    ignore_eos: Annotated[bool, typer.Option("--ignore-eos", help="Fixed-length generation.")] = False,
    workdir: Annotated[Path, typer.Option("--workdir", help="Where a launched profile's log goes.")] = Path(
        "studies/bench"
    ),
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
    margin: Annotated[
        float,
        typer.Option("--margin", min=0.0, max=0.5, help="With --profile: a drop of at most this much (relative, "
                     "0.03 = 3%) from the recorded figure is not slower; exit 1 when it is significantly beyond it."),
    ] = 0.03,
    api_key: Annotated[
        Optional[str],
        typer.Option("--api-key", envvar="AUTOTUNE_API_KEY", show_default=False,
                     help="Key of a server started with --api-key (sent as a Bearer header). Env: AUTOTUNE_API_KEY."),
    ] = None,
) -> None:
    """Measure a running server (--url), or re-launch an exported profile (--profile) and check its numbers.

    With --profile it asks whether the server got slower than the profile recorded, on the 95 %
    interval of the change: "not slower" (exit 0; "faster" when the whole interval is above 0) when
    its low end is at or above -margin; "slower by Y % (significant)" (exit 1: a cron job or a
    systemd timer can run it after every engine upgrade) when the whole interval is below -margin;
    otherwise "cannot tell yet" (exit 3) and what would settle it. A speculation schedule's profile
    is checked at every level, the worst deciding the exit (1, then 3). --json gives each verdict's
    category: not-slower, slower or cannot-tell.

    Without a profile's own settings, bench caps each answer at 128 tokens and the measurement at
    3 minutes (a few minutes in all); progress goes to stderr, also with --json.
    """
    with error_funnel():
        from autotune.bench import bench_url
        from autotune.errors import UserError
        from autotune.profile import load_profile

        if (url is None) == (profile_file is None):
            raise UserError("give exactly one of --url URL or --profile PROFILE.yaml")
        profile = load_profile(profile_file) if profile_file else None
        settings = _bench_settings(
            profile,
            concurrency=concurrency,
            max_tokens=max_tokens,
            warmup_requests=warmup,
            target_rel_ci=target_ci,
            max_rounds=max_rounds,
            ignore_eos=ignore_eos or None,
        )
        suite_ref = suite or (profile.suite if profile and profile.suite else "builtin:mixed")
        if profile is None:
            assert url is not None
            measurement = bench_url(engine, url, suite_ref, settings, api_key=api_key, on_progress=_bench_progress)
            verdict = None
        elif profile.levels:  # a speculation schedule: every level it recorded, on one launch
            if api_key:
                os.environ.setdefault("AUTOTUNE_API_KEY", api_key)
            _bench_levels(profile, settings, suite_ref, workdir, margin=margin, as_json=as_json)
            return
        else:
            measurement, verdict = _bench_profile(profile, profile_file, settings, suite_ref, workdir, api_key,
                                                  margin=margin)  # fmt: skip
        _print_bench(measurement, verdict, suite_ref=suite_ref, as_json=as_json)
        if verdict is not None and verdict.category.exit_code:
            raise typer.Exit(verdict.category.exit_code)


def _bench_levels(
    profile: Profile, settings: MeasureSettings, suite_ref: str, workdir: Path, *, margin: float, as_json: bool
) -> None:
    """Launch a profile that recorded several load levels, check each; exit with the worst: 1 when any level
    is slower or was not measured, else 3 when any cannot tell yet."""
    from autotune.bench import bench_profile_levels, compare_levels, levels_exit_code
    from autotune.report.console import measurement_table

    levels = [level.concurrency for level in profile.levels]
    err_console.print(f"launching the profile at concurrency {levels}: {profile.summary()}", highlight=False)
    measurements = bench_profile_levels(profile, settings=settings, suite_ref=suite_ref, workdir=workdir,
                                        levels=levels, on_progress=_bench_progress)  # fmt: skip
    verdicts = compare_levels(profile, measurements, margin=margin)
    if as_json:
        payload = {
            "measurements": [m.model_dump(mode="json") for m in measurements],
            "verdicts": {str(c): v.model_dump(mode="json") if v else None for c, v in verdicts.items()},
        }
        print(json.dumps(payload, indent=2))
    else:
        for measurement in measurements:
            console.print(measurement_table(measurement, title=f"bench ({suite_ref}), concurrency "
                                            f"{measurement.concurrency}"))  # fmt: skip
        for concurrency, verdict in verdicts.items():
            if verdict is None:
                console.print(f"[yellow]concurrency {concurrency}: not measured[/yellow]")
                continue
            style = VERDICT_STYLES[verdict.category.value]
            console.print(f"concurrency {concurrency}: [{style}]{verdict.text()}[/{style}] (measured "
                          f"{verdict.measured:.1f}, recorded {verdict.recorded:.1f})", highlight=False)  # fmt: skip
    code = levels_exit_code(verdicts.values())
    if code:
        raise typer.Exit(code)


def _bench_settings(profile: Profile | None, **overrides: float | None) -> MeasureSettings:
    """The profile's measurement settings (else bench's short defaults), with the options given overriding them."""
    from autotune.measure.protocol import MeasureSettings

    base = (profile.measure if profile and profile.measure else None) or MeasureSettings(**BENCH_DEFAULTS)
    return base.model_copy(update={k: v for k, v in overrides.items() if v is not None})


def _bench_progress(text: str, detail: str = "") -> None:
    """Print bench's progress to stderr: stdout stays clean for --json."""
    err_console.print(f"bench: {text}" + (f" {detail}" if detail else ""), highlight=False, markup=False)


def _bench_profile(
    profile: Profile,
    profile_file: Path | None,
    settings: MeasureSettings,
    suite_ref: str,
    workdir: Path,
    api_key: str | None,
    *,
    margin: float,
) -> tuple[Measurement, Verdict | None]:
    """Launch the profile, measure it and compare the numbers with the ones it recorded."""
    from autotune.bench import bench_profile, compare

    err_console.print(f"launching profile {profile_file}: {profile.summary()}", highlight=False)
    if api_key:
        os.environ.setdefault("AUTOTUNE_API_KEY", api_key)
    measurement = bench_profile(
        profile, settings=settings, suite_ref=suite_ref, workdir=workdir, on_progress=_bench_progress
    )
    return measurement, compare(profile, measurement, margin=margin)


def _print_bench(measurement: Measurement, verdict: Verdict | None, *, suite_ref: str, as_json: bool) -> None:
    """Print the measurement and whether the profile still meets its numbers, as a table or as JSON."""
    from autotune.report.console import measurement_table

    if as_json:
        payload = {
            "measurement": measurement.model_dump(mode="json"),
            "verdict": verdict.model_dump(mode="json") if verdict else None,
        }
        print(json.dumps(payload, indent=2))
    else:
        console.print(measurement_table(measurement, title=f"bench ({suite_ref})"))
        if verdict is not None:
            style = VERDICT_STYLES[verdict.category.value]
            console.print(
                f"[{style}]{verdict.text()}[/{style}] — the profile's {verdict.metric}: measured "
                f"{verdict.measured:.1f} ± {verdict.measured_ci95 or 0:.1f}, recorded {verdict.recorded:.1f} "
                f"± {verdict.recorded_ci95 or 0:.1f}",
                highlight=False,
            )

@app.command()
def gpus(
    space_file: Annotated[
        Optional[Path], typer.Option("--space", help="Read the GPUs a search space names (e.g. the twin's).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """List the GPUs (through NVML): memory, the processes holding it, bandwidth, driver."""
    with error_funnel():
        from autotune.gpu import read_inventory, read_nvml
        from autotune.report.console import inventory_table
        from autotune.space import load_space

        inventory = read_inventory(load_space(space_file).gpus) if space_file else read_nvml()
        if as_json:
            print(inventory.model_dump_json(indent=2))
            return
        console.print(inventory_table(inventory))


@app.command()
def dashboard(
    study_name: Annotated[str, typer.Argument(help="Study name.", metavar="STUDY")],
    host: Annotated[
        str, typer.Option("--host", help="Address to listen on. Other machines can reach it only if you widen this.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port to listen on (0: any free one).")] = 8080,
    storage: StorageOpt = None,
    studies_dir: StudiesDir = Path("studies"),
    artifacts: Annotated[
        Optional[Path], typer.Option("--artifacts", help="The study's artifact folder, if not the default.")
    ] = None,
) -> None:
    """Open the study in optuna-dashboard: every trial with its flags, numbers, server log and measurement JSON.

    Needs the optional extra: pip install 'autotune[dashboard]'. Runs until Ctrl-C.
    """
    with error_funnel():
        from autotune.report.dashboard import LOOPBACK, open_dashboard
        from autotune.study import StudyPaths

        _open(study_name, storage, studies_dir)
        paths = StudyPaths(studies_dir, study_name, artifacts_dir=artifacts)
        board = open_dashboard(
            storage or paths.default_storage, study_name, artifacts=paths.artifacts, host=host, port=port
        )
        console.print(f"optuna-dashboard for study {study_name}: [bold]{board.study_url}[/bold]", highlight=False)
        console.print(f"  a trial's page (logs, measurement JSON): {board.trial_url(0)}", highlight=False)
        if board.artifacts is None:
            console.print(
                f"[yellow]no artifact store at {paths.artifacts}: trial logs are not shown "
                "(--artifacts DIR names another folder)[/yellow]"
            )
        if host not in LOOPBACK:
            console.print(f"[yellow]listening on {host}: anyone who reaches it can edit and delete studies[/yellow]")
        console.print("Ctrl-C stops it.", highlight=False)
        board.serve()


@app.command()
def report(
    study_name: Annotated[str, typer.Argument(help="Study name.", metavar="STUDY")],
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Report folder (default: <studies-dir>/<study>/report).")
    ] = None,
    storage: StorageOpt = None,
    studies_dir: StudiesDir = Path("studies"),
    artifacts: Annotated[
        Optional[Path], typer.Option("--artifacts", help="The study's artifact folder, if not the default.")
    ] = None,
) -> None:
    """Write a report folder: an HTML page, PNG figures, summary.json and the winner's profile."""
    with error_funnel():
        from autotune.report.html import build_report
        from autotune.study import StudyPaths

        opened = _open(study_name, storage, studies_dir, artifacts)
        paths = StudyPaths(studies_dir, study_name, artifacts_dir=artifacts)
        files = build_report(opened, folder=output or paths.folder / "report", schedule=opened.schedule_verdict())
        console.print(f"wrote {files.page}  ({len(files.images)} figures)", highlight=False)
        for skipped in files.skipped:
            console.print(f"  not drawn: {skipped}", highlight=False)


_SHOW_WARNING = warnings.showwarning


def _own_warnings_only(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    """The user's terminal shows no third-party warnings (optuna-dashboard's FutureWarning, Optuna's
    ExperimentalWarning, ...): only Python's own warning classes raised in autotune's code."""
    if category.__module__ == "builtins" and filename.startswith(_PACKAGE):
        _SHOW_WARNING(message, category, filename, lineno, file, line)


_PACKAGE = str(Path(__file__).resolve().parent)


def main() -> None:
    if not sys.warnoptions:  # -W / PYTHONWARNINGS and --debug show everything
        warnings.showwarning = _own_warnings_only
    app()
