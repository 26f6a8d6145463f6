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


def shown_url(url: str) -> str:
    """A storage URL as it may be printed, logged or stored: its password masked (``alice:***@db``).
    A URL without one is kept as written (an SQLite path is not re-encoded)."""
    if "@" not in url:  # no user, so no password (SQLite): SQLAlchemy is not imported for it
        return url
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        parsed = make_url(url)
    except ArgumentError:  # not a URL SQLAlchemy reads: whatever sits between "user:" and "@" goes
        scheme, sep, rest = url.rpartition("://")
        userinfo, at, host = rest.rpartition("@")
        user, colon, _ = userinfo.partition(":")
        return f"{scheme}{sep}{user}:***@{host}" if at and colon else url
    return parsed.render_as_string(hide_password=True) if parsed.password is not None else url
