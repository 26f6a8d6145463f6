"""Inspecting a study in optuna-dashboard: the study's storage and artifact store behind one local URL.

Arrow: Optuna storage (+ artifacts) -> a web page. optuna-dashboard is an optional extra
(``pip install 'autotune[dashboard]'``) and is imported only here, when the command runs. Its WSGI
app is served by a small threaded server bound before the URL is printed, so a port already in use
is a one-line error rather than a traceback, and the printed URL is one that answers.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass
from pathlib import Path
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from autotune.errors import UserError

INSTALL_HINT = "install the extra: pip install 'autotune[dashboard]'  (or: pip install 'optuna-dashboard>=0.21')"
LOOPBACK = ("127.0.0.1", "localhost", "::1")


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a browser's open connections must not keep Ctrl-C from ending the command


class _Server6(_Server):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass  # one line per request would bury the URL


@dataclass
class Dashboard:
    """A bound optuna-dashboard server; :meth:`serve` blocks until Ctrl-C."""

    server: WSGIServer
    study_url: str
    artifacts: Path | None

    @property
    def port(self) -> int:
        return int(self.server.server_port)

    def trial_url(self, number: int) -> str:
        return f"{self.study_url}/trials?numbers={number}"

    def serve(self) -> None:
        try:
            self.server.serve_forever()
        except KeyboardInterrupt:
            pass
        finally:
            self.server.server_close()


def _url_host(host: str) -> str:
    if host in ("0.0.0.0", ""):
        return socket.gethostname()
    if host == "::":
        return socket.gethostname()
    return f"[{host}]" if ":" in host else host


def open_dashboard(storage_url: str, study_name: str, *, artifacts: Path | None, host: str, port: int) -> Dashboard:
    """Bind optuna-dashboard on ``host:port`` for one study's storage and artifact store.

    Args:
        storage_url: the study's SQLAlchemy URL.
        study_name: the study whose page the returned URL opens (the dashboard lists every study there).
        artifacts: folder of the study's file-system artifact store; None or missing: no artifacts shown.
        host: address to bind (``127.0.0.1`` keeps it to this machine; the dashboard can edit studies).
        port: TCP port; 0 picks a free one.

    Returns:
        The bound server and the study's URL.

    Raises:
        UserError: optuna-dashboard is not installed, or the address cannot be bound.
    """
    try:
        import optuna_dashboard
    except ImportError:
        raise UserError("optuna-dashboard is not installed", hint=INSTALL_HINT) from None
    from optuna.artifacts import FileSystemArtifactStore

    from autotune.study import open_storage

    storage = open_storage(storage_url)
    study_id = storage.get_study_id_from_name(study_name)
    store = FileSystemArtifactStore(str(artifacts)) if artifacts is not None and artifacts.is_dir() else None
    app = optuna_dashboard.wsgi(storage, artifact_store=store)
    server_class = _Server6 if ":" in host else _Server
    try:
        server = make_server(host, port, app, server_class=server_class, handler_class=_QuietHandler)
    except OSError as exc:
        raise UserError(
            f"cannot listen on {host}:{port}: {exc.strerror or exc}",
            hint="pick another port with --port (0 takes any free one)",
        ) from None
    url = f"http://{_url_host(host)}:{server.server_port}/dashboard/studies/{study_id}"
    return Dashboard(server=server, study_url=url, artifacts=artifacts if store is not None else None)
