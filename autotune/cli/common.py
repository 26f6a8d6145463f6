"""What every command shares: the app, its consoles, the error funnel, the storage options, opening a study."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.markup import escape

from autotune.errors import AutotuneError, StorageError

if TYPE_CHECKING:
    from autotune.study import StudyView

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


def raise_keyboard_interrupt(signum: int, frame: FrameType | None) -> None:
    """A SIGTERM handler: a study or a race stops as it does on Ctrl-C."""
    raise KeyboardInterrupt


def open_study(name: str, storage: str | None, studies_dir: Path, artifacts: Path | None = None) -> StudyView:
    """An existing study (a user error naming the file when its SQLite database is not there)."""
    from autotune.study import StudyPaths, StudyView

    paths = StudyPaths(studies_dir, name, artifacts_dir=artifacts)
    url = storage or paths.default_storage
    if storage is None and not (studies_dir / f"{name}.db").exists():
        raise StorageError(
            f"no study named {name!r}: {studies_dir / (name + '.db')} does not exist",
            hint="pass --storage URL or --studies-dir DIR if it lives elsewhere",
        )
    return StudyView.open(name, url, artifacts_dir=paths.artifacts)


_SHOW_WARNING = warnings.showwarning


def own_warnings_only(
    message: Warning | str, category: type[Warning], filename: str, lineno: int, file: Any = None, line: Any = None
) -> None:
    """The user's terminal shows no third-party warnings (optuna-dashboard's FutureWarning, Optuna's
    ExperimentalWarning, ...): only Python's own warning classes raised in autotune's code."""
    if category.__module__ == "builtins" and filename.startswith(_PACKAGE):
        _SHOW_WARNING(message, category, filename, lineno, file, line)


_PACKAGE = str(Path(__file__).resolve().parent.parent)  # autotune/, not autotune/cli/
