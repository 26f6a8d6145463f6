"""The measuring client against a real HTTP server that closes idle keep-alive connections: a request
that gets no response is sent once more on a fresh connection, counted in the measurement; a second
failure, or one after the response began, fails the measurement as before."""

from __future__ import annotations

import asyncio
import json
import socket
import struct
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import optuna
import pytest
from rich.console import Console

from autotune.connection import KEEPALIVE_S
from autotune.engines.sglang import SGLangEngine
from autotune.errors import MeasurementError
from autotune.measure.client import Measurement, run_measurement
from autotune.measure.protocol import MeasureSettings
from autotune.measure.suites import Prompt, Suite
from autotune.outcomes import OutcomeKind
from autotune.report.console import trial_detail
from autotune.study import attrs
from autotune.trial import TrialOutcome

SUITE = Suite(name="t", prompts=[Prompt(id="c1", category="coding", prompt="def f(): pass", max_tokens=8)])
# A request arriving in the last CROSSING_S of a connection's idle wait crosses the server's close on
# the wire: on a loaded host the client reads the end of a response later than the server wrote it,
# so the client's idle clock runs behind the server's.
CROSSING_S = 0.5


class Server:
    """SGLang's /generate (streamed) and /flush_cache over HTTP/1.1 keep-alive. A connection idle for
    :data:`KEEPALIVE_S` (the client's own expiry) is closed; a request that crosses that close is
    dropped unanswered, the connection reset. ``mode`` ``drop`` drops every generation, ``garble``
    answers it with bytes that are not HTTP, ``cut`` resets every stream after its first event."""

    def __init__(self, mode: str = "idle", *, gather: int = 1) -> None:
        self.mode = mode
        self.answered = 0
        self.dropped = 0
        self.gather = gather  # each generation waits (up to a minute) until this many are in flight
        self.in_flight = 0
        self.most_in_flight = 0
        self.arrived = threading.Condition()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            timeout = KEEPALIVE_S  # the server's idle close: waiting longer for the next request ends it
            idle_since: float | None = None

            def log_message(self, format: str, *args: object) -> None:
                return None

            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                idle = time.monotonic() - self.idle_since if self.idle_since is not None else 0.0
                if (outer.mode == "drop" and self.path == "/generate") or idle > KEEPALIVE_S - CROSSING_S:
                    outer.dropped += 1
                    self.reset()
                    return
                if self.path == "/flush_cache":
                    self.answer(b"Cache flushed.\n", "text/plain")
                    return
                with outer.arrived:
                    outer.in_flight += 1
                    outer.most_in_flight = max(outer.most_in_flight, outer.in_flight)
                    outer.arrived.notify_all()
                    outer.arrived.wait_for(lambda: outer.most_in_flight >= outer.gather, timeout=60)
                tokens = json.loads(body)["sampling_params"]["max_new_tokens"]
                events = []
                for n in range(1, tokens + 1):
                    meta: dict[str, object] = {"completion_tokens": n, "prompt_tokens": 4, "finish_reason": None}
                    if n == tokens:
                        meta.update(finish_reason={"type": "length"}, decode_throughput=100.0)
                    events.append(f"data: {json.dumps({'text': 'x' * n, 'meta_info': meta})}\n\n".encode())
                events.append(b"data: [DONE]\n\n")
                if outer.mode == "garble":
                    outer.dropped += 1
                    self.wfile.write(b"NOT HTTP AT ALL\r\n\r\n")
                    self.close_connection = True
                    return
                if outer.mode == "cut":
                    self.answer(b"".join(events), "text/event-stream", cut_after=len(events[0]))
                    return
                outer.answered += 1
                self.answer(b"".join(events), "text/event-stream")
                with outer.arrived:
                    outer.in_flight -= 1

            def answer(self, content: bytes, kind: str, *, cut_after: int | None = None) -> None:
                self.send_response(200)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content[:cut_after])
                self.wfile.flush()
                if cut_after is not None:
                    self.reset()
                self.idle_since = time.monotonic()

            def reset(self) -> None:
                self.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                self.close_connection = True

        class Listening(ThreadingHTTPServer):
            request_queue_size = 256  # every user of a level connects at once

        self.http = Listening(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.http.server_port}"

    def __enter__(self) -> Server:
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.http.shutdown()
        self.http.server_close()


def measure(server: Server, *, pause: float = 0.0, users: int = 1) -> Measurement:
    """A measurement of one round (one request per user), sent ``pause`` after the server's counters
    were reset (the client is idle meanwhile: the pause blocks its event loop). A streamed request ends
    its connection (the client stops reading at ``[DONE]``), so the reset's kept-alive connection is
    the one reused."""
    settings = MeasureSettings(warmup_requests=0, min_rounds=1, max_rounds=1, request_timeout_s=120,
                               concurrency=users)  # fmt: skip

    def paused(text: str) -> None:
        if text.startswith("round 1"):
            time.sleep(pause)

    return asyncio.run(run_measurement(SGLangEngine(), server.url, SUITE, settings, on_progress=paused))


@pytest.mark.slow
def test_pauses_around_the_keep_alive_expiry_lose_no_request_and_each_resend_is_counted() -> None:
    # Just under the expiry the client reuses a connection the server is closing; just over it, it
    # opens a new one.
    pauses = [KEEPALIVE_S - 0.1, KEEPALIVE_S + 0.1, KEEPALIVE_S - 0.1]
    with Server() as server:
        measurements = [measure(server, pause=pause) for pause in pauses]
    assert server.answered == len(pauses)  # every request was served, once
    assert server.dropped >= 1, "no request crossed the server's close: the test exercised nothing"
    resent = [r for m in measurements for r in m.requests if r.resent]
    assert sum(len(m.resent) for m in measurements) == len(resent) == server.dropped
    assert all(r.resent.startswith("POST /generate: ") for r in resent if r.resent)
    first = next(m for m in measurements if m.resent)
    assert first.resent[0].startswith("prompt 'c1' (round 1): POST /generate: ")
    # The trial's record keeps them, and ``show --trial`` says them.
    study = optuna.create_study()
    trial = study.ask()
    plan = SGLangEngine().normalise({})
    attrs.TrialStory(trial).measured(TrialOutcome(kind=OutcomeKind.OK, plan=plan, measurements=[first]))
    study.tell(trial, first.value)
    record = attrs.trial_record(study.trials[0])
    assert record.measurement.resent_requests == first.resent
    console = Console(width=200, record=True)
    console.print(trial_detail(record))
    shown = [line.split() for line in console.export_text().splitlines()]
    assert ["resent", *first.resent[0].split()] in shown


def test_a_request_that_fails_on_its_fresh_connection_too_fails_the_measurement_in_one_line() -> None:
    with Server(mode="drop") as server, pytest.raises(MeasurementError) as failed:
        measure(server)
    assert server.dropped == 2  # sent, then once more
    message = failed.value.message
    assert message.startswith("prompt 'c1': ")
    assert "(sent twice: the first got no response: POST /generate: " in message
    assert "\n" not in message


def test_an_answer_that_came_garbled_is_not_resent() -> None:
    with Server(mode="garble") as server, pytest.raises(MeasurementError) as failed:
        measure(server)
    assert server.dropped == 1
    assert failed.value.message.startswith("prompt 'c1': RemoteProtocolError: ")
    assert "sent twice" not in failed.value.message


def test_a_stream_cut_after_its_first_event_is_not_resent() -> None:
    with Server(mode="cut") as server, pytest.raises(MeasurementError) as failed:
        measure(server)
    assert server.dropped == 0  # /flush_cache answered, /generate sent once
    assert failed.value.message.startswith("prompt 'c1': ")
    assert "sent twice" not in failed.value.message


def test_every_user_of_a_level_has_a_connection_of_its_own() -> None:
    users = 120  # beyond httpx's default of 100 connections, which would queue the rest
    with Server(gather=users) as server:
        measurement = measure(server, users=users)
    assert server.most_in_flight == users
    assert len(measurement.requests) == server.answered == users
