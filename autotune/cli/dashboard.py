"""``autotune dashboard``: serve a study in optuna-dashboard."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from autotune.cli.common import StorageOpt, StudiesDir, app, console, error_funnel, open_study


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

        open_study(study_name, storage, studies_dir)
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
