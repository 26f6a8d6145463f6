"""The twin's HTTP core over ``http.server``, shared by both personalities.

A :class:`TwinHTTPServer` serves in a background thread, either listening at once (SGLang: the port
answers 503 while loading) or bound first and listening from :meth:`TwinHTTPServer.activate`
(vLLM: connection refused until the engine is ready). A :class:`Handler` has the plumbing every
route needs: JSON and text bodies, SSE events, access-log lines, the injected faults (die or hang
mid-measurement), handing a request to the scheduler and waiting on its updates. Each handler
thread waits on its request's update queue and streams SSE chunks (``data: {json}``) or returns
the final object; connections close after each response (HTTP/1.0), which streaming clients such
as ``httpx.Client.stream`` read to the end. The routes, the JSON shapes and the authorisation rule
are the personality's (``sglang/server.py``, ``vllm/server.py``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import queue
import sys
import threading
import time
import uuid
from collections.abc import Callable, Collection, Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Generic, TypeVar, cast

from autotune_twin.faults import NO_FAULT, Fault
from autotune_twin.scheduler import ContextTooLong, Request, Scheduler, Update
from passmodel.profile import TwinProfile

# How long a handler waits for the next update before checking whether the server is stopping.
_UPDATE_POLL_S = 0.5
_FAULT_LOCK = threading.Lock()
log = logging.getLogger("autotune_twin")


def block_forever() -> None:
    """A hung server: this handler thread never answers."""
    threading.Event().wait()


class ServerState:
    """What the endpoints of either personality share: the phase (``loading`` until ``ready()``,
    ``stopping`` after ``stopping()``), the injected fault and whether the server hangs."""

    scheduler: Scheduler | None

    def __init__(
        self, *, args: argparse.Namespace, profile: TwinProfile, fault: Fault = NO_FAULT, phase: str = "loading"
    ) -> None:
        self.args = args
        self.profile = profile
        self.fault = fault
        self.generation_requests = 0
        self.hung = threading.Event()
        self.phase = phase
        self.scheduler = None
        self.started = time.time()

    @property
    def is_ready(self) -> bool:
        return self.phase == "ready"

    @property
    def served_model_name(self) -> str:
        raise NotImplementedError

    def ready(self) -> None:
        self.phase = "ready"

    def models(self) -> dict[str, Any]:
        """``GET /v1/models``: the one served model."""
        return {"object": "list", "data": [self.model_card()]}

    def model_card(self) -> dict[str, Any]:
        """The served model's entry in ``/v1/models``; a personality adds its engine's fields."""
        return {"id": self.served_model_name, "object": "model", "created": int(self.started)}

    def stopping(self) -> None:
        self.phase = "stopping"


class TwinHTTPServer(ThreadingHTTPServer):
    """Threads per request; a client that hangs up mid-response is not an error."""

    daemon_threads = True
    allow_reuse_address = True
    # uvicorn listens with a backlog of 2048; socketserver's default of 5 resets some of sixteen
    # clients connecting at once (the client sees a ReadError before any response).
    request_queue_size = 2048

    def __init__(
        self,
        address: tuple[str, int],
        handler: type[Handler[Any]],
        *,
        log_http: bool,
        state: ServerState | None = None,
        listen: bool = True,
    ) -> None:
        # Bound now; listening now, or (listen=False) only from ``activate()``.
        super().__init__(address, handler, bind_and_activate=False)
        self.state = state
        self.log_http = log_http
        try:
            self.server_bind()
            if listen:
                self.server_activate()
        except BaseException:
            self.server_close()
            raise
        if listen:
            self._serve_in_background()

    def activate(self, state: ServerState) -> None:
        """Start listening and serving ``state`` (for a server created with ``listen=False``)."""
        self.state = state
        self.server_activate()
        self._serve_in_background()

    def _serve_in_background(self) -> None:
        kwargs = {"poll_interval": 0.2}
        threading.Thread(target=self.serve_forever, kwargs=kwargs, name="twin-http", daemon=True).start()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-response is normal (benchmarks cancel); no traceback for it.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


StateT = TypeVar("StateT", bound=ServerState)


class Handler(BaseHTTPRequestHandler, Generic[StateT]):
    """The plumbing of every route. A personality names its state type (``Handler[TwinState]``) and
    gives its ``health_paths``, its other routes (``_get``, ``_post``) and ``_authorised``."""

    server: TwinHTTPServer
    # GET paths that answer 200 once the server is ready, 503 (or no connection) before.
    health_paths: tuple[str, ...] = ("/health",)
    protocol_version = "HTTP/1.0"
    server_version = "uvicorn"
    sys_version = ""

    @property
    def state(self) -> StateT:
        state = self.server.state
        assert state is not None  # the server listens only once it has a state
        return cast(StateT, state)

    # -- plumbing -------------------------------------------------------------------------------

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - argparse's signature
        return  # uvicorn-style access lines are written by log_request

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        if not self.server.log_http:
            return
        try:
            phrase = HTTPStatus(int(code)).phrase
        except ValueError:
            phrase = ""
        host, port = self.client_address[:2]
        request = f'"{self.command} {self.path} HTTP/1.1" {code} {phrase}'
        sys.stderr.write(f"{self._access_prefix()}INFO:     {host}:{port} - {request}\n")
        sys.stderr.flush()

    def _access_prefix(self) -> str:
        """What precedes uvicorn's access line on stderr (vLLM tags its process)."""
        return ""

    def _send_json(self, status: int, payload: Any) -> None:
        self._send_body(status, json.dumps(payload).encode(), "application/json")

    def _send_text(self, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> None:
        self._send_body(status, text.encode(), content_type)

    def _send_body(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._send_json(status, {"error": {"message": message, "code": status}, "object": "error"})

    # -- routes ---------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self._route()
        if path is None:
            return
        if path in self.health_paths:
            self._send_text(HTTPStatus.OK if self.state.is_ready else HTTPStatus.SERVICE_UNAVAILABLE, "")
            return
        self._get(path)

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        path = self._route()
        if path is not None:
            self._post(path)

    def _get(self, path: str) -> None:
        """The personality's GET routes (health is answered already)."""
        raise NotImplementedError

    def _post(self, path: str) -> None:
        """The personality's POST routes."""
        raise NotImplementedError

    def _authorised(self, path: str) -> bool:
        """Whether the request may go on (when not, the 401 is already sent)."""
        raise NotImplementedError

    def _bearer_ok(self, keys: Collection[str]) -> bool:
        """The ``Authorization: Bearer`` header names one of ``keys``; else answer 401."""
        if self.headers.get("Authorization", "") in {f"Bearer {k}" for k in keys}:
            return True
        self._send_json(HTTPStatus.UNAUTHORIZED, {"error": "Unauthorized"})
        return False

    def _route(self) -> str | None:
        """The request's path; blocks forever when the server hangs; None when refused (answered)."""
        path = self.path.split("?", 1)[0]
        if self.state.hung.is_set():
            block_forever()
        return path if self._authorised(path) else None

    def _read_json(self) -> dict[str, Any] | None:
        length = int(self.headers.get("Content-Length") or 0)
        try:
            data = json.loads(self.rfile.read(length) or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            self._error(HTTPStatus.BAD_REQUEST, f"invalid JSON body: {exc}")
            return None
        if not isinstance(data, dict):
            self._error(HTTPStatus.BAD_REQUEST, "the JSON body must be an object")
            return None
        return data

    # -- generation -----------------------------------------------------------------------------

    def _inject_fault(self) -> None:
        """Mid-measurement faults strike once enough generation requests were served."""
        state = self.state
        if state.fault.kind not in ("die-mid-measurement", "hang-mid-measurement"):
            return
        with _FAULT_LOCK:
            state.generation_requests += 1
            strikes = state.generation_requests > state.fault.after_requests
        if not strikes:
            return
        if state.fault.kind == "die-mid-measurement":
            log.error("Fatal Python error: Segmentation fault (twin fault: die-mid-measurement)")
            logging.shutdown()
            os._exit(139)
        log.error("twin fault: hang-mid-measurement; the server stops answering")
        state.hung.set()
        block_forever()

    def _start(self, text: str, max_new_tokens: int, ignore_eos: bool) -> Request | None:
        self._inject_fault()
        scheduler = self.state.scheduler
        assert scheduler is not None
        try:
            request = scheduler.make_request(text, max_new_tokens=max_new_tokens, ignore_eos=ignore_eos)
        except ContextTooLong as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
            return None
        scheduler.submit(request)
        return request

    def _updates(self, request: Request) -> Iterator[Update]:
        """Yield the request's updates until it finishes; stop quietly if the server stops."""
        state = self.state
        while True:
            try:
                update = request.updates.get(timeout=_UPDATE_POLL_S)
            except queue.Empty:
                if state.phase == "stopping":
                    request.aborted = True
                    return
                continue
            yield update
            if update.finished:
                return

    def _final(self, request: Request) -> Update | None:
        """The finishing update (None if the server stopped first)."""
        final = None
        for update in self._updates(request):
            final = update
        return final

    def _begin_stream(self) -> None:
        self.send_response(HTTPStatus.OK)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.end_headers()

    def _event(self, payload: Any) -> None:
        data = payload if isinstance(payload, str) else json.dumps(payload)
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()

    def _reply(
        self,
        request: Request,
        reply: OpenAIReply,
        *,
        stream: bool,
        include_usage: bool,
        on_last: Callable[[Update], None] | None = None,
    ) -> None:
        """An OpenAI completion: the whole response, or SSE (the role chunk for chat, a delta per
        update, the usage chunk when asked, ``[DONE]``); ``on_last`` sees the final update first."""
        if not stream:
            last = self._final(request)
            if last is not None:
                if on_last is not None:
                    on_last(last)
                self._send_json(HTTPStatus.OK, reply.complete(last))
            return
        try:
            self._begin_stream()
            if reply.chat:
                self._event(reply.chunk({"role": "assistant", "content": ""}, None, None))
            last = None
            for last in self._updates(request):
                self._event(reply.delta(last))
            if last is not None:
                if on_last is not None:
                    on_last(last)
                if include_usage:
                    self._event(reply.usage_chunk(last))
            self._event("[DONE]")
        except (BrokenPipeError, ConnectionResetError):
            request.aborted = True  # the client went away: stop generating for it


def chat_prompt(messages: list[Any]) -> str:
    """The text the model sees: the messages in Qwen's chat template, ending with the assistant turn."""
    parts = []
    for message in messages:
        if not isinstance(message, dict):
            continue
        content = message.get("content", "")
        if isinstance(content, list):  # OpenAI content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        parts.append(f"<|im_start|>{message.get('role', 'user')}\n{content}<|im_end|>\n")
    return "".join(parts) + "<|im_start|>assistant\n"


class OpenAIReply:
    """What OpenAI-shaped chunks and responses for one request share; the shapes are the personality's."""

    def __init__(self, state: ServerState, request: Request, *, chat: bool, body: dict[str, Any]) -> None:
        self.request = request
        self.chat = chat
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = str(body.get("model") or state.served_model_name)

    def _finish(self, update: Update) -> str | None:
        if not update.finished or update.finish_reason is None:
            return None
        return "length" if update.finish_reason.get("type") == "length" else "stop"

    def chunk(self, delta: dict[str, Any], finish: str | None, update: Update | None) -> dict[str, Any]:
        """One streamed chunk: ``delta`` (chat) or its content (completion); ``update`` is the
        request's state after it (None for chat's first, role-only chunk)."""
        raise NotImplementedError

    def delta(self, update: Update) -> dict[str, Any]:
        """The chunk for what one engine step added."""
        return self.chunk({"content": update.delta} if update.delta else {}, self._finish(update), update)

    def usage_chunk(self, update: Update) -> dict[str, Any]:
        """The last chunk when ``stream_options.include_usage`` asks for it."""
        raise NotImplementedError

    def complete(self, update: Update) -> dict[str, Any]:
        """The whole (non-streamed) response."""
        raise NotImplementedError

    def _base(self, *, final: bool = False) -> dict[str, Any]:
        """The head of a chunk (or, ``final``, of a whole response)."""
        obj = ("chat.completion" if final else "chat.completion.chunk") if self.chat else "text_completion"
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def _chunk_choice(self, delta: dict[str, Any], finish: str | None, **extra: Any) -> dict[str, Any]:
        """A streamed choice: the delta for chat, its text for a completion."""
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish, **extra}
        if self.chat:
            choice["delta"] = delta
        else:
            choice["text"] = delta.get("content", "")
        return choice

    def _choice(self, update: Update, finish: str | None, *, tool_calls: object, **extra: Any) -> dict[str, Any]:
        """A non-streamed choice: the whole text, as a message for chat."""
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish, **extra}
        if self.chat:
            message = {"role": "assistant", "content": update.text, "reasoning_content": None, "tool_calls": tool_calls}
            choice["message"] = message
        else:
            choice["text"] = update.text
        return choice
