"""``autotune show``: a study's trials, the flags that mattered, the best per category, or one trial."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer

from autotune.cli.common import StorageOpt, StudiesDir, app, console, error_funnel, open_study
from autotune.errors import UserError

if TYPE_CHECKING:
    from autotune.records import TrialRecord
    from autotune.report.summary import TrialCategories
    from autotune.study import Importance, StudyView
    from autotune.study.levels import LoadLevels


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
        opened = open_study(study_name, storage, studies_dir)
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
    from autotune.report.console import trial_detail

    record = opened.record(trial)
    if record is None:
        raise UserError(f"study {study_name!r} has no trial {trial}")
    if as_json:
        print(record.model_dump_json(indent=2))
    else:
        confirmation = opened.info.confirmation
        finalist = confirmation.finalist(trial) if confirmation is not None else None
        console.print(trial_detail(record, finalist), highlight=False)


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
    )
    from autotune.report.trials_table import trials_table

    all_records, best, importance = overview.records, overview.best, overview.importance
    per_category, levels = overview.per_category, overview.levels
    tuned = opened.info.tuned
    console.print(
        trials_table(
            all_records,
            flag_names=tuned,
            best=best.number if best else None,
            priority=sorted(tuned, key=lambda n: -importance.values.get(n, 0.0)),
            width=console.width,
        )
    )
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
    _print_model_fit(opened, all_records)
    console.print(best_summary(best, simulated=opened.info.simulated))


def _print_model_fit(opened: StudyView, records: list[TrialRecord]) -> None:
    """The model-guided search's fit, where it ran (a trial carries a prediction made before its launch)."""
    setup, space = opened.pass_setup(), opened.info.space
    if setup is None or space is None or not any(r.proposal.predicted for r in records):
        return
    from autotune.report.console import model_fit_text
    from autotune.study.guided import model_fit

    console.print(model_fit_text(model_fit(space, setup, records)), highlight=False)
