"""Where a study's files are: its default SQLite database and its folder (logs, artifacts, server
records). Plain paths, no Optuna: the commands that only read a study start from here."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StudyPaths:
    """Where a study keeps its files: ``<dir>/<name>.db`` and the folder ``<dir>/<name>/``."""

    studies_dir: Path
    name: str
    artifacts_dir: Path | None = None

    @property
    def folder(self) -> Path:
        return self.studies_dir / self.name

    @property
    def default_storage(self) -> str:
        return f"sqlite:///{self.studies_dir / (self.name + '.db')}"

    @property
    def logs(self) -> Path:
        return self.folder / "logs"

    @property
    def artifacts(self) -> Path:
        return self.artifacts_dir or self.folder / "artifacts"

    @property
    def servers(self) -> Path:
        return self.folder / "servers"


def sqlite_path(url: str) -> Path | None:
    """The database file of an SQLite URL (None for other databases and in-memory SQLite)."""
    if not url.startswith("sqlite:///"):
        return None
    path = url.removeprefix("sqlite:///").split("?", 1)[0]
    return Path(path) if path and path != ":memory:" else None
