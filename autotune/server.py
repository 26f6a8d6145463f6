"""One server process: spawn, log, wait until ready, stop; and finding orphans after a crash.

Each launch runs in its own process group, logs to a file, and leaves a record (pid, process
start time, argv with secret values redacted) in a records folder before ``start`` returns.
Stopping signals the whole group (TERM, a grace period, then KILL). A later run reads leftover
records and kills the groups whose leader is still the same process (same pid *and* start time),
never by name or command line. A server given secrets (an ``--api-key``) logs through a relay that
replaces them, since servers print their own arguments (SGLang its ``server_args``).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path
from types import TracebackType
from typing import IO, AnyStr

from pydantic import BaseModel, ConfigDict

from autotune.errors import LauncherError, ServerError, StorageError
from autotune.secrets import REDACTED, is_secret_flag


class ServerState(str, Enum):
    NEW = "new"
    STARTING = "starting"
    READY = "ready"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


class ServerRecord(BaseModel):
    """What is written beside the study so an orphaned server can be found again."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    pid: int
    start_ticks: int | None
    owner_pid: int
    owner_start_ticks: int | None
    argv: list[str]
    log_path: str
    started_at: datetime


class ReadyResult(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ready: bool
    exit_code: int | None = None
    timed_out: bool = False
    waited_s: float


def find_free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def _stat_fields(path: Path) -> list[str] | None:
    """A /proc ``stat`` file's fields after the command name (field 3 on), None if it is gone."""
    try:
        text = path.read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces and parentheses: split after its last ')'.
    return text[text.rindex(")") + 2 :].split()


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (Linux), to tell a reused pid apart."""
    fields = _stat_fields(Path(f"/proc/{pid}/stat"))
    return int(fields[19]) if fields else None


def _signal_group(pgid: int, sig: signal.Signals) -> bool:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def _descendants(pid: int) -> list[int]:
    """Every process under ``pid``, read from /proc (empty where there is none): a child that left
    the process group (its own session) is still the server's."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat_fields(stat)
        if fields:
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _group_alive(pgid: int) -> bool:
    return _signal_reaches(os.killpg, pgid)


def pid_alive(pid: int) -> bool:
    """Whether a process of this pid exists (one of another user's counts)."""
    return _signal_reaches(os.kill, pid)


def _signal_reaches(send: Callable[[int, int], None], target: int) -> bool:
    try:
        send(target, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class ServerProcess:
    """A server owned by autotune; use as a context manager so every exit path stops it.

    Args:
        argv: the full command line (no shell).
        env: environment for the server (merged over autotune's own).
        log_path: file receiving the server's stdout and stderr.
        records_dir: folder for the orphan records.
        secrets: values that must not reach the log (each as written, in a Python repr and in JSON).
        clock: monotonic clock, injectable for tests.
    """

    def __init__(
        self,
        argv: list[str],
        *,
        env: Mapping[str, str],
        log_path: Path,
        records_dir: Path,
        secrets: Sequence[str] = (),
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.argv = argv
        self.env = dict(env)
        self.log_path = log_path
        self.records_dir = records_dir
        self.secrets = spellings(secrets)
        self.clock = clock
        self.state = ServerState.NEW
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._relay: threading.Thread | None = None
        self._record_path: Path | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def start(self) -> None:
        if self.state is not ServerState.NEW:
            raise ServerError(f"server already {self.state.value}")
        try:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self.records_dir.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("wb")
        except OSError as exc:
            raise StorageError(f"cannot write the server's log {self.log_path}: {exc.strerror or exc}") from None
        try:
            self._proc = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if self.secrets else self._log,
                stderr=subprocess.STDOUT,
                env={**os.environ, **self.env},
                start_new_session=True,  # own process group: stop() reaches every child
            )
        except FileNotFoundError:
            self._log.close()
            raise LauncherError(f"launcher not found: {self.argv[0]}") from None
        except PermissionError:
            self._log.close()
            raise LauncherError(f"launcher is not executable: {self.argv[0]}") from None
        self.state = ServerState.STARTING
        try:
            self._relay_and_record(self._proc, self._log)
        except BaseException:  # a full disk, or Ctrl-C before `with` owns it: nobody else would stop this server
            self.stop(grace_s=0)
            raise

    def _relay_and_record(self, proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
        if self.secrets:
            assert proc.stdout is not None
            secrets = [secret.encode() for secret in self.secrets]
            self._relay = threading.Thread(target=relay_redacted, args=(proc.stdout, log, secrets), daemon=True)
            self._relay.start()
        record = ServerRecord(
            pid=proc.pid,
            start_ticks=process_start_ticks(proc.pid),
            owner_pid=os.getpid(),
            owner_start_ticks=process_start_ticks(os.getpid()),
            argv=[_replace_all(arg, self.secrets) for arg in redact_argv(self.argv)],
            log_path=str(self.log_path),
            started_at=datetime.now(timezone.utc),
        )
        self._record_path = self.records_dir / f"server-{proc.pid}.json"  # stop() removes a half-written one
        try:
            self._record_path.write_text(record.model_dump_json(indent=2))
        except OSError as exc:  # a server nobody could find again after a crash is not left running
            raise StorageError(f"cannot write the server's record {self._record_path}: {exc.strerror or exc}") from None

    def poll(self) -> int | None:
        """The exit code if the server has exited, else None."""
        return self._proc.poll() if self._proc else None

    def wait_exit(self, timeout_s: float) -> int | None:
        """The exit code once the process has exited, or None if it is still running after ``timeout_s``."""
        if self._proc is None:
            return None
        try:
            return self._proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def wait_ready(
        self,
        probe: Callable[[], bool],
        *,
        timeout_s: float,
        poll_s: float = 0.2,
        failed: Callable[[], bool] | None = None,
    ) -> ReadyResult:
        """Probe until ready, until the process exits or ``failed()`` says it cannot serve (a server
        that lost its port may stay up without one), or until the deadline."""
        started = self.clock()
        deadline = started + timeout_s
        while True:
            exit_code = self.poll()
            if exit_code is not None or (failed is not None and failed()):
                self.state = ServerState.FAILED
                return ReadyResult(ready=False, exit_code=exit_code, waited_s=self.clock() - started)
            if probe():
                self.state = ServerState.READY
                return ReadyResult(ready=True, waited_s=self.clock() - started)
            if self.clock() >= deadline:
                self.state = ServerState.FAILED
                return ReadyResult(ready=False, timed_out=True, waited_s=self.clock() - started)
            time.sleep(poll_s)

    def stop(self, *, grace_s: float = 30.0) -> int | None:
        """TERM the process group, wait up to ``grace_s``, then KILL. Safe to call twice."""
        proc = self._proc
        if proc is None or self.state is ServerState.STOPPED:
            return proc.returncode if proc else None
        self.state = ServerState.STOPPING
        pgid = proc.pid
        family = {pid: process_start_ticks(pid) for pid in _descendants(pgid)}
        if proc.poll() is None or _group_alive(pgid):
            _signal_group(pgid, signal.SIGTERM)
            try:
                proc.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                pass
            # Children may outlive the leader: the whole group goes.
            if _signal_group(pgid, signal.SIGKILL):
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=10)
        for pid, started in family.items():  # those that left the group (the same process: not a reused pid)
            if started is not None and process_start_ticks(pid) == started:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        if self._relay is not None:
            self._relay.join(timeout=10)  # the group is gone: its output ends, the relay writes the rest
        if self._log is not None:
            self._log.close()
        if self._record_path is not None:
            with contextlib.suppress(OSError):  # a folder that refused the record may refuse this too
                self._record_path.unlink(missing_ok=True)
        self.state = ServerState.STOPPED
        return proc.returncode

    def __enter__(self) -> ServerProcess:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def redact_argv(argv: list[str]) -> list[str]:
    """The argv with every secret flag's value (``--api-key KEY``, ``--api-key=KEY``) replaced by ``***``:
    the record lies on disk while the server runs, readable by anyone who can read the study folder."""
    redacted = []
    for i, arg in enumerate(argv):
        name, eq, _ = arg.partition("=")
        if eq and name.startswith("--") and is_secret_flag(name):
            arg = f"{name}={REDACTED}"
        elif i > 0 and argv[i - 1].startswith("--") and "=" not in argv[i - 1] and is_secret_flag(argv[i - 1]):
            arg = REDACTED
        redacted.append(arg)
    return redacted


def spellings(secrets: Sequence[str]) -> list[str]:
    """Each secret as a server may print it: as written, inside a Python repr (SGLang's
    ``api_key='...'``) and inside a JSON string; longest first, so no shorter one cuts a longer."""
    forms = {form for secret in secrets if secret for form in (secret, repr(secret)[1:-1], json.dumps(secret)[1:-1])}
    return sorted(forms, key=len, reverse=True)


def relay_redacted(source: IO[bytes], sink: IO[bytes], secrets: Sequence[bytes]) -> None:
    """Copy a server's output to its log as it comes, every secret replaced by ``***``. Bytes that
    may begin a secret wait for the next read, so a secret split across two reads is caught too.
    It reads until the server's output ends, even once the log cannot be written (a full disk): a
    server whose pipe is not drained would block on its next line."""
    held = b""
    with source:
        while chunk := os.read(source.fileno(), 65536):  # whatever the server has written so far
            held = _replace_all(held + chunk, secrets)
            cut = _undecided_from(held, secrets)
            _write(sink, held[:cut])
            held = held[cut:]
    _write(sink, held)


def _replace_all(data: AnyStr, secrets: Sequence[AnyStr]) -> AnyStr:
    for secret in secrets:
        data = data.replace(secret, REDACTED.encode() if isinstance(data, bytes) else REDACTED)
    return data


def _undecided_from(data: bytes, secrets: Sequence[bytes]) -> int:
    """Where the tail of ``data`` that is the start of a secret begins (its length if none)."""
    longest = max(len(secret) for secret in secrets)
    for start in range(max(len(data) - longest + 1, 0), len(data)):
        if any(secret.startswith(data[start:]) for secret in secrets):
            return start
    return len(data)


def _write(sink: IO[bytes], data: bytes) -> None:
    """Write and flush (the log is read while the server runs); nothing once the log is closed or full."""
    with contextlib.suppress(ValueError, OSError):
        sink.write(data)
        sink.flush()


def reap_orphans(records_dir: Path) -> list[ServerRecord]:
    """Kill servers left behind by a tuner that died; return the ones found alive and killed.

    A record counts only if its pid is still the same process (start time matches) and the tuner
    that owned it is gone; records of dead processes are removed.
    """
    killed: list[ServerRecord] = []
    if not records_dir.is_dir():
        return killed
    for path in sorted(records_dir.glob("server-*.json")):
        try:
            record = ServerRecord.model_validate_json(path.read_text())
        except (OSError, ValueError):
            path.unlink(missing_ok=True)
            continue
        owner_alive = record.owner_start_ticks is not None and (
            process_start_ticks(record.owner_pid) == record.owner_start_ticks
        )
        if owner_alive:
            continue  # its tuner is still running (this one, or another worker on this host)
        if record.start_ticks is not None and process_start_ticks(record.pid) == record.start_ticks:
            _signal_group(record.pid, signal.SIGKILL)
            killed.append(record)
        path.unlink(missing_ok=True)
    return killed
