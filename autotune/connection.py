"""HTTP connections to a server: kept alive for less time than the engines' servers keep them, and a
request that got no response resent once on a fresh connection.

An engine's server closes a connection that has been idle for 5 s: SGLang's uvicorn, by
``SGLANG_TIMEOUT_KEEP_ALIVE`` (5 by default in ``sglang/srt/environ.py``, 0.5.23); vLLM's, by
``VLLM_HTTP_TIMEOUT_KEEP_ALIVE`` (5 by default in ``vllm/envs.py``, 0.33.0); llama-server keeps cpp-httplib's
``CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND``, 5 in llama.cpp's ``vendor/cpp-httplib/httplib.h``. httpx keeps
one for 5 s too: a request sent after a pause of about 5 s (a loaded host, a pause between requests)
could go out on a connection the server was closing, and fail with nothing received. The client here
drops idle connections well before the servers do, and a request that still fails before any of its
response arrived (reset, closed, refused) is sent once more on a connection opened for it. A failure
after the response began is not resent: the server saw it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar

import httpx

# Shorter than the servers' 5 s by more than a loaded host's delay in reading the end of a response
# (the server's idle clock starts when it wrote it, the client's when it read it).
KEEPALIVE_S = 2.0
# Every concurrent user on a connection of its own: httpx's default limits (100 connections) would
# queue the users of a higher level behind the others, measuring fewer at once than asked.
POOLED = httpx.Limits(max_connections=None, max_keepalive_connections=None, keepalive_expiry=KEEPALIVE_S)
FRESH = httpx.Limits(max_connections=None, max_keepalive_connections=0)

# What a request that got no response fails with: the pooled connection was closed or reset under it,
# or the server refused the connection. A protocol error is one only when nothing came (httpcore's
# words for it); an answer that came garbled is not sent again.
NO_RESPONSE = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError, httpx.ConnectError)
_NOTHING_CAME = "Server disconnected without sending a response"


def _got_no_response(exc: Exception) -> bool:
    return not isinstance(exc, httpx.RemoteProtocolError) or str(exc).startswith(_NOTHING_CAME)


_resent: ContextVar[list[str] | None] = ContextVar("autotune_resent", default=None)


@contextlib.contextmanager
def counting_resends() -> Iterator[list[str]]:
    """Collect why a request made inside the block (by this task) was resent."""
    resent: list[str] = []
    token = _resent.set(resent)
    try:
        yield resent
    finally:
        _resent.reset(token)


def _note_resend(request: httpx.Request, exc: Exception) -> None:
    resent = _resent.get()
    if resent is not None:
        said = str(exc).strip()
        resent.append(f"{request.method} {request.url.path}: {type(exc).__name__}{': ' + said if said else ''}")


class ResendOnce(httpx.AsyncBaseTransport):
    """Pooled connections (kept :data:`KEEPALIVE_S`); a request that got no response goes once more
    through a pool that keeps no connection, so on a connection of its own."""

    def __init__(self) -> None:
        self.pooled = httpx.AsyncHTTPTransport(limits=POOLED)
        self.fresh = httpx.AsyncHTTPTransport(limits=FRESH)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return await self.pooled.handle_async_request(request)
        except NO_RESPONSE as exc:
            if not _got_no_response(exc):
                raise
            _note_resend(request, exc)
            return await self.fresh.handle_async_request(request)

    async def aclose(self) -> None:
        await self.pooled.aclose()
        await self.fresh.aclose()


class SyncResendOnce(httpx.BaseTransport):
    """:class:`ResendOnce` for the blocking client (readiness, effective config)."""

    def __init__(self) -> None:
        self.pooled = httpx.HTTPTransport(limits=POOLED)
        self.fresh = httpx.HTTPTransport(limits=FRESH)

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        try:
            return self.pooled.handle_request(request)
        except NO_RESPONSE as exc:
            if not _got_no_response(exc):
                raise
            _note_resend(request, exc)
            return self.fresh.handle_request(request)

    def close(self) -> None:
        self.pooled.close()
        self.fresh.close()


def server_client(*, timeout_s: float, headers: Mapping[str, str] | None = None) -> httpx.AsyncClient:
    """The client that measures a server (``timeout_s`` per request; 10 s to connect)."""
    timeout = httpx.Timeout(timeout_s, connect=10.0)
    return httpx.AsyncClient(timeout=timeout, headers=headers, transport=ResendOnce())


def sync_server_client(*, headers: Mapping[str, str] | None = None) -> httpx.Client:
    """The blocking client that waits for a server and reads its effective config."""
    return httpx.Client(headers=headers, transport=SyncResendOnce())
