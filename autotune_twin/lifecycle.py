"""A simulated server's lifetime, shared by both personalities: SIGTERM and SIGINT stop it
promptly (a server hung by an injected fault ignores them, so the tuner must SIGKILL it), and every
simulated wait ends early when a stop was requested."""

from __future__ import annotations

import signal
import threading
from types import FrameType

from autotune_twin.web import ServerState


class Lifecycle:
    """The stop event of one server process and the waits that honour it."""

    def __init__(self) -> None:
        self.stop_event = threading.Event()
        self.state: ServerState | None = None

    def handle_signals(self) -> None:
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.state is not None and self.state.hung.is_set():
            return  # a hung server does not react to SIGTERM (the tuner must SIGKILL it)
        self.stop_event.set()

    def _wait(self, seconds: float) -> bool:
        """Sleep; False as soon as a stop was requested."""
        return not self.stop_event.wait(max(seconds, 0.0))
