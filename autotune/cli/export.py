"""``autotune export``: the best (or a chosen) configuration as a profile, a launch script or a systemd unit;
every measured trial as calibration points for the twin."""

from __future__ import annotations

import sys
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer

from autotune.cli.common import StorageOpt, StudiesDir, app, console, error_funnel, open_study
from autotune.cli.recorded import build_schedule
from autotune.errors import UserError

if TYPE_CHECKING:
    from autotune.profile import Profile
    from autotune.records import TrialRecord
    from autotune.study import StudyView


class Format(str, Enum):
    yaml = "yaml"
    sh = "sh"
    systemd = "systemd"
    points = "points"


FormatOpt = Annotated[
    Format,
    typer.Option(
        "--format",
        "-f",
        help="yaml (profile), sh (launch script), systemd (unit) or points (every measured trial as "
        "calibration points for `python -m autotune_twin calibrate`, one JSON object a line).",
    ),
]
ConcurrencyOpt = Annotated[
    Optional[int], typer.Option("--concurrency", help="A levels study: export this level's winner.")
]
ScheduleOpt = Annotated[
    bool,
    typer.Option(
        "--schedule",
        help="Export the speculation schedule that `confirm --schedule` recommended: "
        "its config file where the engine takes one, and the launch command (refused when it was declined).",
    ),
]
ScheduleConfigOpt = Annotated[
    Optional[Path],
    typer.Option(
        "--schedule-config",
        help="With --schedule: where to write the adaptive config the command "
        "reads (default: STUDY-adaptive.json beside --output, else in the current folder).",
    ),
]


@app.command()
def export(
    study_name: Annotated[str, typer.Argument(help="Study name.", metavar="STUDY")],
    fmt: FormatOpt = Format.yaml,
    trial: Annotated[Optional[int], typer.Option("--trial", help="Export this trial instead of the best.")] = None,
    concurrency: ConcurrencyOpt = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="Write to a file instead of stdout.")] = None,
    host: Annotated[
        Optional[str], typer.Option("--host", help="sh and systemd: the address the server listens on (127.0.0.1).")
    ] = None,
    port: Annotated[
        Optional[int], typer.Option("--port", help="sh and systemd: the port the server listens on (30000).")
    ] = None,
    schedule: ScheduleOpt = False,
    schedule_config: ScheduleConfigOpt = None,
    storage: StorageOpt = None,
    studies_dir: StudiesDir = Path("studies"),
) -> None:
    """Export the best feasible configuration (or --trial N) as a profile, a script or a systemd unit,
    or every measured trial as calibration points."""
    with error_funnel():
        from autotune.profile import EXPORT_HOST, EXPORT_PORT, render

        _refuse_unused(
            fmt,
            trial=trial,
            concurrency=concurrency,
            schedule=schedule,
            schedule_config=schedule_config,
            listens=host is not None or port is not None,
        )
        if fmt is Format.points:
            _export_points(open_study(study_name, storage, studies_dir), output)
            return
        listen_host = host if host is not None else EXPORT_HOST
        listen_port = port if port is not None else EXPORT_PORT
        opened = open_study(study_name, storage, studies_dir)
        chosen: TrialRecord | None
        if schedule:
            config_file = schedule_config or (output.parent if output else Path.cwd()) / f"{study_name}-adaptive.json"
            profile = _schedule_profile(opened, config_file)
            _write_export(render(profile, fmt.value, host=listen_host, port=listen_port), output, fmt)
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
            chosen = opened.raced_record(trial)
            if chosen is None or chosen.outcome != "ok":
                raise UserError(f"trial {trial} of study {study_name!r} was not measured successfully")
        _write_export(
            render(opened.profile(chosen, concurrency=concurrency), fmt.value, host=listen_host, port=listen_port),
            output,
            fmt,
        )


def _refuse_unused(
    fmt: Format,
    *,
    trial: int | None,
    concurrency: int | None,
    schedule: bool,
    schedule_config: Path | None,
    listens: bool,
) -> None:
    """An option the export would not use is refused, not silently dropped."""
    if fmt is Format.points:
        options = {
            "--trial": trial is not None,
            "--concurrency": concurrency is not None,
            "--schedule": schedule,
            "--schedule-config": schedule_config is not None,
            "--host/--port": listens,
        }
        given = [name for name, on in options.items() if on]
        if given:
            raise UserError(
                f"--format points exports every measured trial at every level: leave out {', '.join(given)}"
            )
    if schedule and (trial is not None or concurrency is not None):
        raise UserError("--schedule exports the schedule: leave out --trial and --concurrency")
    if schedule_config is not None and not schedule:
        raise UserError("--schedule-config names where --schedule writes its config: add --schedule or leave it out")
    if listens and fmt is Format.yaml:
        raise UserError("--host and --port go into a launch command: use --format sh or systemd")


def _export_points(opened: StudyView, output: Path | None) -> None:
    """Every measured trial as calibration points (:mod:`autotune.calibration_points`), one JSON line each."""
    from autotune.calibration_points import calibration_points

    found = calibration_points(opened.records(), concurrency=opened.info.objective_concurrency)
    if not found.points:
        raise UserError(f"study {opened.name!r} has no measured trial with an output rate to export as points")
    if found.without_prompt_tokens:
        print(
            f"note: {found.without_prompt_tokens} of {len(found.points)} points have input_len 0: "
            "measured before autotune recorded prompt_tokens",
            file=sys.stderr,
        )
    if found.other_engines:
        left_out = ", ".join(map(str, found.other_engines))
        print(f"note: trials {left_out} left out: the twin does not simulate their engine", file=sys.stderr)
    text = "".join(point.model_dump_json(exclude_none=True) + "\n" for point in found.points)
    _write_export(text, output, Format.points)


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
    from autotune.study.schedule import NoSchedule, schedule_profile

    name = opened.name
    verdict = opened.schedule_verdict()
    if verdict is None:
        built = build_schedule(opened)
        if isinstance(built, NoSchedule):
            raise UserError(
                f"study {name!r} has no schedule: {built.reason}",
                hint=f"export the static winner: autotune export {name}",
            )
        raise UserError(f"study {name!r}: the schedule was never raced", hint=f"autotune confirm {name} --schedule")
    if not verdict.recommended:
        hint = f"export the static winner: autotune export {name} (or --concurrency N per level)"
        raise UserError(f"study {name!r}: {verdict.note}", hint=hint)
    base = opened.record(verdict.schedule.shared_from)
    if base is None:
        raise UserError(f"study {name!r} has no trial {verdict.schedule.shared_from} (the schedule's shared flags)")
    metric = opened.info.objective_metric
    unit = base.measurement.metrics[metric].unit if metric in base.measurement.metrics else "tok/s"
    return schedule_profile(opened.profile(base), verdict, config_file=config_file, metric=metric, unit=unit)


def _level_winner(opened: StudyView, concurrency: int, trial: int | None) -> TrialRecord:
    """The record ``export --concurrency N`` writes: that level's winner, with that level's metrics."""

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
