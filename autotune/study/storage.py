"""Where a study lives: its storage (any SQLAlchemy URL, or in memory), its folder, its lock.

Foreign errors of SQLAlchemy and the file system become :class:`~autotune.errors.StorageError`
here, one line naming the URL.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import threading
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import sqlalchemy

from autotune.errors import StorageError

# Optuna would print a traceback per failed trial; autotune reports every trial itself.
optuna.logging.set_verbosity(optuna.logging.ERROR)


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


def open_storage(url: str, *, heartbeat_s: int | None = None) -> optuna.storages.RDBStorage:
    """An RDB storage for any SQLAlchemy URL; SQLite waits for locks instead of failing.

    With ``heartbeat_s``, each running trial beats; a trial whose worker stopped beating for three
    intervals is failed by the next worker that asks for a trial, and its config retried once.
    """
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {"connect_args": {"timeout": 30}}
    else:
        kwargs = {"pool_pre_ping": True}
    for attempt in range(3):
        try:
            with warnings.catch_warnings():  # heartbeats are experimental in Optuna 5
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                heartbeat: dict[str, Any] = {}
                if heartbeat_s:
                    heartbeat = {
                        "heartbeat_interval": heartbeat_s,
                        "grace_period": 3 * heartbeat_s,
                        "heartbeat_stale_trial_callback": optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1),
                    }
                return optuna.storages.RDBStorage(url, engine_kwargs=kwargs, **heartbeat)
        except sqlalchemy.exc.IntegrityError:
            # Two workers creating a new database's tables at once: the loser finds them made.
            time.sleep(1.0 + attempt)
        except Exception as exc:  # SQLAlchemy raises many types; all mean "cannot open"
            message = str(exc).splitlines()[0] if str(exc) else ""
            raise StorageError(f"cannot open storage {url!r}: {type(exc).__name__}: {message}") from None
    raise StorageError(f"cannot open storage {url!r}: its tables could not be created")


def heartbeat_enabled(storage: optuna.storages.BaseStorage) -> bool:
    """Whether Optuna fails this storage's stale trials itself."""
    return isinstance(storage, optuna.storages.RDBStorage) and storage.get_heartbeat_interval() is not None


def load_existing_study(name: str, storage_url: str) -> optuna.Study:
    storage = open_storage(storage_url)
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        known = f"; studies there: {', '.join(names)}" if names else "; it holds no studies"
        raise StorageError(f"no study named {name!r} in {storage_url}{known}") from None


def _sql_engine(storage: optuna.storages.BaseStorage) -> sqlalchemy.engine.Engine | None:
    engine = getattr(getattr(storage, "_backend", storage), "engine", None)
    return engine if isinstance(engine, sqlalchemy.engine.Engine) else None


_IN_PROCESS = threading.Lock()


@contextlib.contextmanager
def exclusive(storage: optuna.storages.BaseStorage, paths: StudyPaths) -> Iterator[None]:
    """One worker at a time: a PostgreSQL advisory lock for several hosts, a file lock on one host,
    a process lock for an in-memory study."""
    engine = _sql_engine(storage)
    if engine is not None and engine.dialect.name == "postgresql":
        key = int(hashlib.sha256(paths.name.encode()).hexdigest()[:15], 16)
        with engine.connect() as conn:
            conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": key})
            try:
                yield
            finally:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": key})
        return
    if engine is None:
        with _IN_PROCESS:
            yield
        return
    paths.folder.mkdir(parents=True, exist_ok=True)
    with (paths.folder / "study.lock").open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
