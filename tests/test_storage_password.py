"""A study on a PostgreSQL server that asks for a password (Debian's package, started here): the
password in ``--storage`` reaches no output, no table, no artifact, no report and no export, and libpq's
``PGPASSWORD`` / ``PGPASSFILE`` keep it off the command line."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from autotune.server import find_free_port
from tests.conftest import autotune_cmd
from tests.test_dashboard import interruptible
from tests.test_postgres import space_file
from tests.tiers import pg_bin

pytestmark = [pytest.mark.twin, pytest.mark.slow, pytest.mark.tier("postgres")]
STUDY = "guarded"
PASSWORD = "S3cretPw-47"
WRONG = "Wr0ngPw-47"


@dataclass(frozen=True)
class Guarded:
    """A PostgreSQL server whose TCP connections need the password (its socket, for the dump, does not)."""

    host: str
    port: int
    socket_dir: Path
    bindir: Path

    def url(self, password: str | None = PASSWORD, port: int | None = None) -> str:
        user = f"postgres:{password}" if password is not None else "postgres"
        return f"postgresql+psycopg://{user}@{self.host}:{port or self.port}/autotune"


@pytest.fixture(scope="module")
def guarded() -> Iterator[Guarded]:
    bindir = pg_bin()
    assert bindir is not None  # the postgres tier was checked before the run
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    data = Path(tempfile.mkdtemp(prefix="autotune-pg-pw-"))
    secrets = Path(tempfile.mkdtemp(prefix="autotune-pg-pwfile-"))
    (secrets / "pw").write_text(PASSWORD + "\n")
    if as_postgres:
        shutil.chown(data, "postgres")
        shutil.chown(secrets, "postgres")
        shutil.chown(secrets / "pw", "postgres")
    port = find_free_port()
    initdb = [str(bindir / "initdb"), "-D", str(data), "-U", "postgres", f"--pwfile={secrets / 'pw'}"]
    subprocess.run([*as_postgres, *initdb, "--auth-local=trust", "--auth-host=scram-sha-256"], check=True,
                   capture_output=True)  # fmt: skip
    shutil.rmtree(secrets)
    pg_ctl = [*as_postgres, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(data / "log"), "-w"]
    options = f"-p {port} -k {data} -c listen_addresses=127.0.0.1"
    subprocess.run([*pg_ctl, "-o", options, "start"], check=True, capture_output=True)
    try:
        subprocess.run([*as_postgres, str(bindir / "createdb"), "-h", str(data), "-p", str(port), "-U", "postgres",
                        "autotune"], check=True, capture_output=True)  # fmt: skip
        yield Guarded(host="127.0.0.1", port=port, socket_dir=data, bindir=bindir)
    finally:
        subprocess.run([*pg_ctl, "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(data, ignore_errors=True)


class Session:
    """The commands a user runs, from one folder; everything they print is kept."""

    def __init__(self, cwd: Path) -> None:
        self.cwd = cwd
        self.printed: list[str] = []

    def run(self, *args: str, ok: bool = True, env: dict[str, str] | None = None) -> str:
        proc = subprocess.run(autotune_cmd(*args), cwd=self.cwd, capture_output=True, text=True, timeout=600,
                              env={**os.environ, **(env or {})})  # fmt: skip
        printed = proc.stdout + proc.stderr
        self.printed.append(printed)
        assert (proc.returncode == 0) == ok, printed
        return printed

    def dashboard(self, url: str) -> list[str]:
        """``autotune dashboard`` until its API answers; its study list, the study, and its printed lines."""
        port = find_free_port()
        base = f"http://127.0.0.1:{port}"
        proc = subprocess.Popen(autotune_cmd("dashboard", STUDY, "--storage", url, "--port", str(port)), cwd=self.cwd,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                preexec_fn=interruptible)  # fmt: skip
        answers = []
        try:
            deadline = time.monotonic() + 300  # readiness is the API answering; the bound is for a loaded machine
            while True:
                assert proc.poll() is None, "the dashboard exited early"
                try:
                    if httpx.get(f"{base}/api/meta", timeout=2).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                assert time.monotonic() < deadline, "the dashboard never answered"
                time.sleep(0.2)
            answers.append(httpx.get(f"{base}/api/meta", timeout=10).text)
            studies = httpx.get(f"{base}/api/studies", timeout=10)
            answers.append(studies.text)
            for summary in studies.json()["study_summaries"]:
                answers.append(httpx.get(f"{base}/api/studies/{summary['study_id']}", timeout=10).text)
            answers.append(httpx.get(f"{base}/dashboard", timeout=10).text)
        finally:
            proc.send_signal(signal.SIGINT)
            printed, _ = proc.communicate(timeout=120)
        self.printed.append(printed)
        return answers


def files_holding(folder: Path, secret: str) -> list[Path]:
    return [path for path in folder.rglob("*") if path.is_file() and secret.encode() in path.read_bytes()]


def test_the_password_is_printed_stored_and_exported_nowhere(guarded: Guarded, tmp_path: Path) -> None:
    url = guarded.url()
    shown = guarded.url("***")
    user = Session(tmp_path)
    space = space_file(tmp_path, STUDY)
    started = user.run("study", str(space), "--storage", url, "--total-trials", "3", "--confirm-top", "0")
    assert f"autotune study {STUDY}  ({shown})" in started
    assert f"--storage {shown}" in started  # the export command it suggests
    user.run("show", STUDY, "--storage", url)
    user.run("show", STUDY, "--storage", url, "--json")
    user.run("show", STUDY, "--storage", url, "--trial", "0")
    for kind in ("sh", "systemd", "yaml"):
        user.run("export", STUDY, "--storage", url, "--format", kind, "-o", str(tmp_path / f"exported.{kind}"))
    user.run("report", STUDY, "--storage", url, "-o", str(tmp_path / "report"))
    answers = user.dashboard(url)
    assert any(STUDY in answer for answer in answers)

    # Errors name the storage, never its password: a study not there, a server not there, a wrong password.
    missing = user.run("show", "no-such-study", "--storage", url, ok=False)
    assert f"no study named 'no-such-study' in {shown}" in missing
    closed = user.run("show", STUDY, "--storage", guarded.url(port=find_free_port()), ok=False)
    assert "cannot open storage 'postgresql+psycopg://postgres:***@127.0.0.1:" in closed
    refused = user.run("show", STUDY, "--storage", guarded.url(WRONG), ok=False)
    assert "password authentication failed" in refused and WRONG not in refused

    # Off the command line: libpq reads PGPASSWORD, or PGPASSFILE's line for this server.
    bare = guarded.url(None)
    user.run("show", STUDY, "--storage", bare, ok=False, env={"PGPASSFILE": os.devnull})
    user.run("show", STUDY, "--storage", bare, env={"PGPASSWORD": PASSWORD})
    passfile = tmp_path.parent / f"{tmp_path.name}.pgpass"  # beside the session's folder, which is searched below
    passfile.write_text(f"{guarded.host}:{guarded.port}:autotune:postgres:{PASSWORD}\n")
    passfile.chmod(0o600)
    user.run("show", STUDY, "--storage", bare, env={"PGPASSFILE": str(passfile)})
    passfile.unlink()

    leaked = [text for text in [*user.printed, *answers] if PASSWORD in text]
    assert not leaked, leaked
    assert not files_holding(tmp_path, PASSWORD)  # the studies folder (artifacts, logs, records), report, exports
    assert (tmp_path / "report").is_dir() and (tmp_path / "exported.sh").is_file()
    dump = subprocess.run([str(guarded.bindir / "pg_dump"), "--data-only", "-h", str(guarded.socket_dir), "-p",
                           str(guarded.port), "-U", "postgres", "autotune"], check=True, capture_output=True,
                          text=True).stdout  # fmt: skip
    assert f"\t{STUDY}\n" in dump  # the study's own row is in the dump
    assert PASSWORD not in dump
