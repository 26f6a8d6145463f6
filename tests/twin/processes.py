"""Twin processes for the twin's own tests, either personality: run one to completion, or start a
server, wait until it is ready (or for any condition, polling rather than sleeping) and stop it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from autotune_twin.gpu_state import HOST_ENV

REPO = Path(__file__).resolve().parents[2]


def twin_env(host: str | None = None) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    if host is not None:  # a simulated host of its own: no other test's twins on its GPUs
        env[HOST_ENV] = host
    return env


def twin(*argv: str, timeout: float = 30, host: str | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m autotune_twin ARGV`` to completion, output captured."""
    return subprocess.run(
        [sys.executable, "-m", "autotune_twin", *argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=twin_env(host),
        check=False,
    )


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class Server:
    process: subprocess.Popen[bytes]
    url: str
    log: Path

    def log_text(self) -> str:
        return self.log.read_text()

    def stop(self, timeout: float = 5.0) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        return self.process.wait(timeout=timeout)

    def close(self) -> None:
        """Stop it whatever state it is in (SIGKILL when SIGTERM was not enough)."""
        try:
            self.stop()
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=5)

    def wait_health(self, wanted: int = 200, deadline_s: float = 20.0) -> int:
        """Poll /health until it answers ``wanted``; returns how many connections were refused first."""
        refused = 0
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            assert self.process.poll() is None, self.log_text()
            try:
                if httpx.get(f"{self.url}/health", timeout=1.0).status_code == wanted:
                    return refused
            except httpx.ConnectError:
                refused += 1
            except httpx.TransportError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"/health never answered {wanted}:\n{self.log_text()}")


def start_twin(tmp_path: Path, *argv: str, name: str = "twin", host: str | None = None) -> Server:
    """``python -m autotune_twin ARGV --port P`` in the background, its output in ``tmp_path``."""
    port = free_port()
    log = tmp_path / f"{name}-{port}.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, "-m", "autotune_twin", *argv, "--port", str(port)],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=twin_env(host),
        )
    return Server(process=process, url=f"http://127.0.0.1:{port}", log=log)


@contextmanager
def serving(tmp_path: Path, *argv: str, name: str = "twin", host: str | None = None) -> Iterator[Server]:
    """A started twin, ready (/health 200) for the body, closed after it."""
    server = start_twin(tmp_path, *argv, name=name, host=host)
    try:
        server.wait_health(200)
        yield server
    finally:
        server.close()


def wait_for(predicate: Callable[[], bool], deadline_s: float = 10.0) -> None:
    """Poll ``predicate`` until it holds."""
    deadline = time.monotonic() + deadline_s
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.05)
    raise AssertionError("condition not met in time")
