"""Where a study lives: its storage (any SQLAlchemy URL, or in memory) and its lock (its files:
:mod:`~autotune.study.paths`).

Foreign errors of SQLAlchemy and the file system become :class:`~autotune.errors.StorageError`
here, one line naming the URL.
"""

from __future__ import annotations

import contextlib
import fcntl
import functools
import hashlib
import os
import sys
import threading
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import optuna

from autotune.errors import StorageError
from autotune.study.paths import StudyPaths, shown_url, sqlite_path

if TYPE_CHECKING:
    import sqlalchemy

CONNECT_TIMEOUT_S = 10  # seconds a PostgreSQL connection attempt may take (libpq's connect_timeout)

# SQLAlchemy (~0.2 s to import) is imported by the functions that open a database: the read-only
# commands read an SQLite study without it (study/snapshot.py).

# Optuna would print a traceback per failed trial; autotune reports every trial itself.
optuna.logging.set_verbosity(optuna.logging.ERROR)


def _first_line(exc: BaseException) -> str:
    """The root cause's first line, without SQLAlchemy's "(Background on this error ...)" tail."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(getattr(exc, "orig", None) or exc).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(exc).__name__}: {line}" if line else type(exc).__name__


def _server_connect_args(url: str) -> dict[str, Any]:
    """A bounded connection attempt: a server that accepts connections but never answers (half down,
    or its port taken by another program) would otherwise hold one forever, outside any outage wait."""
    if url.startswith(("postgresql", "postgres")) and "connect_timeout" not in url:
        return {"connect_timeout": CONNECT_TIMEOUT_S}
    return {}


@contextlib.contextmanager
def _creation_lock(url: str) -> Iterator[None]:
    """Workers starting at once open (and create) the storage one after another.

    PostgreSQL: a session-level advisory lock (hosts share the server); SQLite: ``flock`` on the
    database's folder (one host). Without it, simultaneous workers race to create Optuna's tables
    (``DuplicateTable``, ``alembic_version``, "database is locked").
    """
    path = sqlite_path(url)
    if path is not None:
        folder = path.parent
        try:
            folder.mkdir(parents=True, exist_ok=True)
            fd = os.open(folder, os.O_RDONLY)
        except OSError as exc:
            raise StorageError(
                f"cannot open storage {shown_url(url)!r}: cannot create folder {str(folder)!r}: {exc.strerror}",
                hint="pass --storage sqlite:///PATH or --studies-dir DIR on a folder you can write",
            ) from None
        if not os.access(folder, os.W_OK):
            os.close(fd)
            raise StorageError(
                f"cannot open storage {shown_url(url)!r}: folder {str(folder)!r} is not writable",
                hint="pass --storage sqlite:///PATH or --studies-dir DIR on a folder you can write",
            )
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # closing releases the lock
        return
    if url.startswith(("postgresql", "postgres")):
        import sqlalchemy

        engine = sqlalchemy.create_engine(
            url, poolclass=sqlalchemy.pool.NullPool, connect_args=_server_connect_args(url)
        )
        try:
            with engine.connect() as conn:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": _SCHEMA_LOCK_KEY})
                conn.commit()
                try:
                    yield
                finally:
                    conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": _SCHEMA_LOCK_KEY})
                    conn.commit()
        finally:
            engine.dispose()
        return
    yield


_T = TypeVar("_T")

# A database server that goes away (restart, failover, network) is waited for this long before the
# study stops; the trial in progress keeps its measurement and is recorded once the server is back.
OUTAGE_S = 600.0
OUTAGE_POLL_S = 2.0


def _is_disconnect(exc: BaseException) -> bool:
    """A lost or refused connection (worth waiting for), not a rejected statement."""
    import sqlalchemy

    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, sqlalchemy.exc.DBAPIError) and seen.connection_invalidated:
            return True
        if isinstance(seen, (sqlalchemy.exc.OperationalError, sqlalchemy.exc.InterfaceError)):
            return True
        if type(seen).__name__ in ("OperationalError", "InterfaceError"):  # the driver's own
            return True
        seen = seen.__cause__ or seen.__context__
    return False


class _OutageTolerantStorage(optuna.storages.RDBStorage):
    """Optuna's RDB storage whose every call rides out a database server that went away: retried
    every few seconds for up to :data:`OUTAGE_S` (one line on stderr), then the error propagates.
    For server databases only; SQLite's errors are local and final."""

    outage_s = OUTAGE_S


def ride_out(action: Callable[[], _T], *, outage_s: float = OUTAGE_S) -> _T:
    """``action()``, called again every few seconds while the database server is unreachable, for up
    to ``outage_s`` (one line on stderr), then its error propagates."""
    import sqlalchemy

    deadline: float | None = None
    while True:
        try:
            return action()
        except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError) as exc:
            if not _is_disconnect(exc):
                raise
            now = time.monotonic()
            if deadline is None:
                deadline = now + outage_s
                sys.stderr.write(f"storage unreachable ({_first_line(exc)}); retrying for up to {outage_s:.0f} s\n")
                sys.stderr.flush()
            elif now >= deadline:
                raise
            time.sleep(OUTAGE_POLL_S)


def _riding_out(name: str) -> Any:
    method = getattr(optuna.storages.RDBStorage, name)

    @functools.wraps(method)
    def call(self: _OutageTolerantStorage, *args: Any, **kwargs: Any) -> Any:
        return ride_out(lambda: method(self, *args, **kwargs), outage_s=self.outage_s)

    return call


for _name in (
    "create_new_study",
    "delete_study",
    "set_study_user_attr",
    "set_study_system_attr",
    "get_study_id_from_name",
    "get_study_name_from_id",
    "get_study_directions",
    "get_study_user_attrs",
    "get_study_system_attrs",
    "get_trial_user_attrs",
    "get_trial_system_attrs",
    "get_all_studies",
    "create_new_trial",
    "set_trial_param",
    "get_trial_param",
    "set_trial_state_values",
    "set_trial_intermediate_value",
    "set_trial_user_attr",
    "set_trial_system_attr",
    "get_trial_id_from_study_id_trial_number",
    "get_trial",
    "get_all_trials",
    "get_best_trial",
    "record_heartbeat",
):
    if hasattr(optuna.storages.RDBStorage, _name):
        setattr(_OutageTolerantStorage, _name, _riding_out(_name))


def optimize_riding_out(
    study: optuna.Study,
    storage: optuna.storages.BaseStorage,
    objective: Callable[[optuna.Trial], float | list[float]],
    *,
    n_trials: int | None = None,
    timeout: float | None = None,
    catch: tuple[type[Exception], ...] = (),
    callbacks: Sequence[Callable[[optuna.Study, optuna.trial.FrozenTrial], None]] = (),
) -> None:
    """``study.optimize``, riding out a database server that goes away between two trials.

    With heartbeats on, Optuna asks the storage for stale trials before each trial, outside the
    storage calls that ride out an outage themselves: an outage met there ends ``optimize`` before a
    trial began. It is waited out through Optuna's public stale check, then the trials left run. An
    error once a trial has begun propagates: that trial's storage calls rode out the outage already.
    """
    outage_s: float | None = getattr(storage, "outage_s", None)  # server databases only
    begun = 0
    ended = 0

    def counted(trial: optuna.Trial) -> float | list[float]:
        nonlocal begun
        begun += 1
        return objective(trial)

    def count_end(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        nonlocal ended
        ended += 1

    import sqlalchemy

    started = time.monotonic()
    while True:
        try:
            study.optimize(
                counted,
                n_trials=None if n_trials is None else n_trials - ended,
                timeout=None if timeout is None else max(0.0, timeout - (time.monotonic() - started)),
                catch=catch,
                callbacks=[count_end, *callbacks],
            )
            return
        except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError) as exc:
            if outage_s is None or begun != ended or not _is_disconnect(exc):
                raise
            with warnings.catch_warnings():  # heartbeats are experimental in Optuna 5
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                ride_out(lambda: optuna.storages.fail_stale_trials(study), outage_s=outage_s)


_SCHEMA_LOCK_KEY = int(hashlib.sha256(b"autotune: create optuna tables").hexdigest()[:15], 16)


def open_storage(url: str, *, heartbeat_s: int | None = None) -> optuna.storages.RDBStorage:
    """An RDB storage for any SQLAlchemy URL; SQLite waits for locks instead of failing.

    Workers started at the same moment open it one after another (see :func:`_creation_lock`).
    With ``heartbeat_s``, each running trial beats; a trial whose worker stopped beating for three
    intervals is failed by the next worker that asks for a trial, and its config retried once.

    Raises:
        StorageError: one line naming the URL and the cause (folder, permissions, server, driver).
    """
    import sqlalchemy

    storage_class = optuna.storages.RDBStorage
    if sqlite_path(url) is not None:
        kwargs: dict[str, Any] = {"connect_args": {"timeout": 30}}
    else:
        kwargs = {"pool_pre_ping": True, "connect_args": _server_connect_args(url)}
        storage_class = _OutageTolerantStorage
    heartbeat: dict[str, Any] = {}
    for attempt in range(5):
        try:
            with _creation_lock(url), warnings.catch_warnings():  # heartbeats are experimental in Optuna 5
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                if heartbeat_s:
                    heartbeat = {
                        "heartbeat_interval": heartbeat_s,
                        "grace_period": 3 * heartbeat_s,
                        "heartbeat_stale_trial_callback": optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1),
                    }
                return storage_class(url, engine_kwargs=kwargs, **heartbeat)
        except StorageError:
            raise
        except (sqlalchemy.exc.IntegrityError, sqlalchemy.exc.ProgrammingError) as exc:
            # Another database (MySQL) without a creation lock: the loser of the race finds the tables made.
            if attempt == 4 or "already exists" not in str(exc) and "duplicate" not in str(exc).lower():
                raise StorageError(f"cannot open storage {shown_url(url)!r}: {_first_line(exc)}") from None
            time.sleep(0.5 + attempt)
        except Exception as exc:  # SQLAlchemy and its drivers raise many types; all mean "cannot open"
            raise StorageError(f"cannot open storage {shown_url(url)!r}: {_first_line(exc)}") from None
    raise StorageError(f"cannot open storage {shown_url(url)!r}: its tables could not be created")


@contextlib.contextmanager
def storage_errors(url: str) -> Iterator[None]:
    """The seam for storage failures after opening: one line naming the URL and the cause.

    A read-only database file, a full disk, a server gone: SQLAlchemy's errors (which Optuna wraps
    in ``StorageInternalError``) and the file system's become :class:`StorageError`.
    """
    import sqlalchemy

    try:
        yield
    except (optuna.exceptions.StorageInternalError, sqlalchemy.exc.SQLAlchemyError) as exc:
        cause = _first_line(exc)
        hint = None
        if "readonly" in cause or "read-only" in cause:
            hint = "the database file is read-only: check its permissions (or pass --storage to another file)"
        elif "disk is full" in cause or "No space" in cause:
            hint = "free some space on the disk that holds the study, then run the same command to resume"
        else:
            hint = "the measured trials are kept; run the same command again to resume"
        raise StorageError(f"cannot write to storage {shown_url(url)!r}: {cause}", hint=hint) from None


def heartbeat_enabled(storage: optuna.storages.BaseStorage) -> bool:
    """Whether Optuna fails this storage's stale trials itself (the storage a study was opened on)."""
    return isinstance(storage, optuna.storages.RDBStorage) and storage.get_heartbeat_interval() is not None


def load_existing_study(name: str, storage_url: str) -> optuna.Study:
    storage = open_storage(storage_url)
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        known = f"; studies there: {', '.join(names)}" if names else "; it holds no studies"
        raise StorageError(f"no study named {name!r} in {shown_url(storage_url)}{known}") from None


def _sql_engine(storage: optuna.storages.BaseStorage) -> sqlalchemy.engine.Engine | None:
    import sqlalchemy

    engine = storage.engine if isinstance(storage, optuna.storages.RDBStorage) else None
    return engine if isinstance(engine, sqlalchemy.engine.Engine) else None


_IN_PROCESS = threading.Lock()


def _advisory_locked(engine: sqlalchemy.engine.Engine, key: int) -> sqlalchemy.engine.Connection:
    """A connection holding the session-level advisory lock ``key`` (waiting for it)."""
    import sqlalchemy

    conn = engine.connect()
    try:
        conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": key})
    except BaseException:
        conn.invalidate()
        conn.close()
        raise
    return conn


@contextlib.contextmanager
def exclusive(storage: optuna.storages.BaseStorage, paths: StudyPaths) -> Iterator[None]:
    """One worker at a time: a PostgreSQL advisory lock for several hosts, a file lock on one host,
    a process lock for an in-memory study."""
    import sqlalchemy

    engine = _sql_engine(storage)
    if engine is not None and engine.dialect.name == "postgresql":
        key = int(hashlib.sha256(paths.name.encode()).hexdigest()[:15], 16)
        outage_s = getattr(storage, "outage_s", OUTAGE_S)  # the storage the study was opened on
        conn = ride_out(lambda: _advisory_locked(engine, key), outage_s=outage_s)
        try:
            yield
        finally:
            try:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": key})
            except sqlalchemy.exc.SQLAlchemyError:
                conn.invalidate()  # its session ends, and the lock with it (a lost one released it already)
            conn.close()
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
