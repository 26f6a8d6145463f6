"""``autotune report``: write a study's report folder (HTML page, figures, summary, profile)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from autotune.cli.common import StorageOpt, StudiesDir, app, console, error_funnel, open_study


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

        opened = open_study(study_name, storage, studies_dir, artifacts)
        paths = StudyPaths(studies_dir, study_name, artifacts_dir=artifacts)
        files = build_report(opened, folder=output or paths.folder / "report", schedule=opened.schedule_verdict())
        console.print(f"wrote {files.page}  ({len(files.images)} figures)", highlight=False)
        for skipped in files.skipped:
            console.print(f"  not drawn: {skipped}", highlight=False)
