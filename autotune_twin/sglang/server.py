"""The twin's HTTP side: SGLang's endpoints and JSON shapes over ``http.server``.

The port opens while the simulated weights load (health endpoints answer 503 until the server is
ready, like SGLang's). Generation requests are handed to the :class:`Scheduler`; each handler
thread waits on its request's update queue and streams SSE chunks (``data: {json}``) or returns
the final object. Connections close after each response (HTTP/1.0), which streaming clients such
as ``httpx.Client.stream`` read to the end.
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
from collections.abc import Iterator
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from autotune_twin.faults import NO_FAULT, Fault
from autotune_twin.launch import LaunchConfig
from autotune_twin.metrics import gauge
from autotune_twin.physics import GIB, MemoryPlan
from autotune_twin.profile import TwinProfile
from autotune_twin.scheduler import ContextTooLong, Request, Scheduler, Update
from autotune_twin.sglang._flags import SGLANG_VERSION

DEFAULT_MAX_NEW_TOKENS = 128
# How long a handler waits for the next update before checking whether the server is stopping.
_UPDATE_POLL_S = 0.5
_FAULT_LOCK = threading.Lock()
log = logging.getLogger("autotune_twin")


def _block_forever() -> None:
    """A hung server: this handler thread never answers."""
    threading.Event().wait()


class TwinState:
    """What the endpoints report: loading until ``ready()``; stopping after ``stopping()``."""

    def __init__(
        self, *, args: argparse.Namespace, profile: TwinProfile, cfg: LaunchConfig, seed: int, fault: Fault = NO_FAULT
    ) -> None:
        self.args = args
        self.fault = fault
        self.generation_requests = 0
        self.hung = threading.Event()
        self.profile = profile
        self.cfg = cfg
        self.seed = seed
        self.phase = "loading"
        self.plan: MemoryPlan | None = None
        self.scheduler: Scheduler | None = None
        self.started = time.time()

    @property
    def is_ready(self) -> bool:
        return self.phase == "ready"

    @property
    def served_model_name(self) -> str:
        return str(self.args.served_model_name or self.args.model_path)

    def attach(self, plan: MemoryPlan, scheduler: Scheduler) -> None:
        """Pools sized and scheduler running: info endpoints answer; health waits for ``ready``."""
        self.plan, self.scheduler = plan, scheduler

    def ready(self) -> None:
        self.phase = "ready"

    def stopping(self) -> None:
        self.phase = "stopping"

    # -- JSON payloads ---------------------------------------------------------------------------

    def server_info(self) -> dict[str, Any]:
        """Every resolved server arg (snake_case), with SGLang's effective values filled in."""
        assert self.plan is not None and self.scheduler is not None
        cfg, spec, plan = self.cfg, self.cfg.spec, self.plan
        info: dict[str, Any] = dict(vars(self.args))
        info.update(
            served_model_name=self.served_model_name,
            tokenizer_path=self.args.tokenizer_path or self.args.model_path,
            tp_size=cfg.tp_size,
            context_length=cfg.context_length,
            speculative_algorithm=spec.algorithm,
            speculative_num_steps=spec.num_steps,
            speculative_eagle_topk=spec.eagle_topk,
            speculative_num_draft_tokens=spec.num_draft_tokens,
            speculative_draft_model_path=spec.draft_model_path,
            speculative_dflash_block_size=spec.dflash_block_size,
            mem_fraction_static=plan.mem_fraction_static,
            max_running_requests=plan.max_running_requests,
            max_mamba_cache_size=plan.max_mamba_cache_size if self.profile.model.hybrid else None,
            mamba_full_memory_ratio=cfg.mamba_full_memory_ratio,
            mamba_radix_cache_strategy=cfg.mamba_radix_cache_strategy,
            cuda_graph_max_bs_decode=cfg.cuda_graph_max_bs_decode,
            chunked_prefill_size=cfg.chunked_prefill_size,
            attention_backend=cfg.attention_backend,
            page_size=cfg.page_size,
            kv_cache_dtype=cfg.kv_cache_dtype,
            random_seed=self.args.random_seed if self.args.random_seed is not None else self.seed,
        )
        info.update(
            version=SGLANG_VERSION,
            twin=True,
            twin_profile=self.profile.name,
            simulated=self.profile.simulated,
            max_total_num_tokens=plan.max_total_num_tokens,
            internal_states=[self._internal_state()],
        )
        return info

    def _internal_state(self) -> dict[str, Any]:
        assert self.plan is not None and self.scheduler is not None
        plan = self.plan
        with self.scheduler.lock:
            throughput = self.scheduler.stats.last_gen_throughput
        return {
            "avg_spec_accept_length": self.scheduler.avg_spec_accept_length() if self.cfg.spec.enabled else None,
            "last_gen_throughput": throughput,
            "max_total_num_tokens": plan.max_total_num_tokens,
            "max_running_requests": plan.max_running_requests,
            "memory_usage": {
                "weight": round(plan.weight_bytes / GIB, 2),
                "kvcache": round(plan.kv_pool_bytes / GIB, 2),
                "mamba": round(plan.mamba_pool_bytes / GIB, 2),
                "graph": round(plan.graph_bytes / GIB, 2),
                "token_capacity": plan.max_total_num_tokens,
            },
        }

    def model_info(self) -> dict[str, Any]:
        return {
            "model_path": self.args.model_path,
            "tokenizer_path": self.args.tokenizer_path or self.args.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "architectures": list(self.profile.model.architectures),
        }

    def models(self) -> dict[str, Any]:
        return {
            "object": "list",
            "data": [
                {
                    "id": self.served_model_name,
                    "object": "model",
                    "created": int(self.started),
                    "owned_by": "sglang",
                    "root": self.args.model_path,
                    "max_model_len": self.cfg.context_length,
                }
            ],
        }

    def metrics_text(self) -> str:
        assert self.scheduler is not None
        labels = f'model_name="{self.served_model_name}",engine_type="unified",tp_rank="0",pp_rank="0"'
        lines = ["# autotune SGLang twin: simulated metrics, not real SGLang"]
        with self.scheduler.lock:
            s = self.scheduler.stats
            lines += gauge("sglang:num_running_reqs", labels, s.num_running, "The number of running requests.")
            lines += gauge("sglang:num_queue_reqs", labels, s.num_queue, "The number of requests in the waiting queue.")
            lines += gauge("sglang:token_usage", labels, s.token_usage, "The token usage.")
            lines += gauge("sglang:mamba_usage", labels, s.mamba_usage, "The mamba state cache usage.")
            lines += gauge(
                "sglang:gen_throughput", labels, s.last_gen_throughput, "The generation throughput (token/s)."
            )
            lines += gauge(
                "sglang:spec_accept_length",
                labels,
                s.last_accept_length,
                "The average acceptance length of speculative decoding.",
            )
            lines += gauge(
                "sglang:spec_accept_rate",
                labels,
                s.last_accept_rate,
                "The average acceptance rate of speculative decoding.",
            )
            lines += gauge(
                "sglang:prompt_tokens_total",
                labels,
                s.prompt_tokens_total,
                "Number of prefill tokens processed.",
                "counter",
            )
            lines += gauge(
                "sglang:generation_tokens_total",
                labels,
                s.generation_tokens_total,
                "Number of generation tokens processed.",
                "counter",
            )
            lines += gauge(
                "sglang:num_requests_total", labels, s.requests_total, "Number of requests processed.", "counter"
            )
            lines += s.ttft.render("sglang:time_to_first_token_seconds", labels)
            lines += s.itl.render("sglang:inter_token_latency_seconds", labels)
            lines += s.e2e.render("sglang:e2e_request_latency_seconds", labels)
        return "\n".join(lines) + "\n"

    def meta_info(self, request: Request, update: Update) -> dict[str, Any]:
        assert self.scheduler is not None
        meta: dict[str, Any] = {
            "id": request.rid,
            "finish_reason": update.finish_reason,
            "prompt_tokens": request.prompt.prompt_tokens,
            "weight_version": "default",
            "total_retractions": 0,
            "completion_tokens": update.completion_tokens,
            "cached_tokens": request.cached_tokens,
            "e2e_latency": round(update.e2e_latency, 6),
        }
        if self.cfg.spec.enabled:
            meta.update(self.spec_stats(request, update))
        return meta

    def spec_stats(self, request: Request, update: Update) -> dict[str, Any]:
        assert self.scheduler is not None
        verify = update.verify_ct
        length = update.completion_tokens / verify if verify else 0.0
        rate = max(length - 1, 0.0) / self.scheduler.draft_depth() if verify else 0.0
        return {
            "spec_verify_ct": verify,
            "spec_accept_length": round(length, 4),
            "spec_accept_rate": round(rate, 4),
            "spec_accept_token_num": max(update.completion_tokens - verify, 0),
            "spec_draft_token_num": verify * max((self.cfg.spec.num_draft_tokens or 1) - 1, 0),
        }


class TwinHTTPServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], state: TwinState, log_http: bool) -> None:
        super().__init__(address, TwinHandler)
        self.state = state
        self.log_http = log_http

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that hangs up mid-response is normal (benchmarks cancel); no traceback for it.
        if isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            return
        super().handle_error(request, client_address)


class TwinHandler(BaseHTTPRequestHandler):
    server: TwinHTTPServer
    protocol_version = "HTTP/1.0"
    server_version = "uvicorn"
    sys_version = ""

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
        sys.stderr.write(f'INFO:     {host}:{port} - "{self.command} {self.path} HTTP/1.1" {code} {phrase}\n')
        sys.stderr.flush()

    def _send_json(self, status: int, payload: Any) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _send_text(self, status: int, text: str, content_type: str = "text/plain; charset=utf-8") -> None:
        body = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def _error(self, status: int, message: str) -> None:
        self._send_json(status, {"error": {"message": message, "code": status}, "object": "error"})

    def _authorised(self, path: str) -> bool:
        key = self.server.state.args.api_key
        if not key or path.startswith("/health") or path in ("/ready", "/metrics"):
            return True
        if self.headers.get("Authorization", "") == f"Bearer {key}":
            return True
        self._send_json(HTTPStatus.UNAUTHORIZED, {"error": "Unauthorized"})
        return False

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

    # -- routes ---------------------------------------------------------------------------------

    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        state = self.server.state
        if state.hung.is_set():
            _block_forever()
        if not self._authorised(path):
            return
        if path in ("/health", "/health_generate", "/ready"):
            self._send_text(HTTPStatus.OK if state.is_ready else HTTPStatus.SERVICE_UNAVAILABLE, "")
            return
        if path in ("/server_info", "/get_server_info", "/model_info", "/get_model_info", "/v1/models", "/metrics"):
            if state.scheduler is None or state.phase == "stopping":
                self._error(HTTPStatus.SERVICE_UNAVAILABLE, "the server is starting (simulated weights loading)")
            elif path in ("/server_info", "/get_server_info"):
                self._send_json(HTTPStatus.OK, state.server_info())
            elif path in ("/model_info", "/get_model_info"):
                self._send_json(HTTPStatus.OK, state.model_info())
            elif path == "/v1/models":
                self._send_json(HTTPStatus.OK, state.models())
            elif not state.args.enable_metrics:
                self._error(HTTPStatus.NOT_FOUND, "Not Found")
            else:
                self._send_text(HTTPStatus.OK, state.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
            return
        if path == "/flush_cache":
            self._flush()
            return
        self._error(HTTPStatus.NOT_FOUND, "Not Found")

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        path = self.path.split("?", 1)[0]
        if self.server.state.hung.is_set():
            _block_forever()
        if not self._authorised(path):
            return
        if path == "/flush_cache":
            self._flush()
            return
        if path not in ("/generate", "/v1/chat/completions", "/v1/completions"):
            self._error(HTTPStatus.NOT_FOUND, "Not Found")
            return
        if not self.server.state.is_ready:
            self._error(HTTPStatus.SERVICE_UNAVAILABLE, "the server is starting (simulated weights loading)")
            return
        body = self._read_json()
        if body is None:
            return
        if path == "/generate":
            self._generate(body)
        else:
            self._openai(body, chat=path == "/v1/chat/completions")

    def _flush(self) -> None:
        state = self.server.state
        if state.scheduler is None:
            self._error(HTTPStatus.SERVICE_UNAVAILABLE, "the server is starting")
            return
        state.scheduler.flush_cache()
        self._send_text(
            HTTPStatus.OK,
            "Cache flushed.\nPlease check backend logs for more details. "
            "(When there are running or waiting requests, the operation will not be performed.)\n",
        )

    # -- generation -----------------------------------------------------------------------------

    def _inject_fault(self) -> None:
        """Mid-measurement faults strike once enough generation requests were served."""
        state = self.server.state
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
        _block_forever()

    def _start(self, text: str, max_new_tokens: int, ignore_eos: bool) -> Request | None:
        self._inject_fault()
        scheduler = self.server.state.scheduler
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
        state = self.server.state
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

    def _generate(self, body: dict[str, Any]) -> None:
        text = body.get("text")
        if not isinstance(text, str):
            self._error(HTTPStatus.BAD_REQUEST, "the twin accepts one prompt: 'text' must be a string")
            return
        params = body.get("sampling_params") or {}
        max_new = params.get("max_new_tokens")
        request = self._start(
            text,
            int(max_new) if max_new is not None else DEFAULT_MAX_NEW_TOKENS,
            bool(params.get("ignore_eos", False)),
        )
        if request is None:
            return
        state = self.server.state
        if not body.get("stream"):
            last = self._final(request)
            if last is not None:
                self._send_json(HTTPStatus.OK, {"text": last.text, "meta_info": state.meta_info(request, last)})
            return
        self._begin_stream()
        try:
            for update in self._updates(request):
                self._event({"text": update.text, "meta_info": state.meta_info(request, update)})
            self._event("[DONE]")
        except (BrokenPipeError, ConnectionResetError):
            request.aborted = True  # the client went away: stop generating for it

    def _openai(self, body: dict[str, Any], *, chat: bool) -> None:
        state = self.server.state
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                self._error(HTTPStatus.BAD_REQUEST, "'messages' must be a non-empty list")
                return
            text = chat_prompt(messages)
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                self._error(HTTPStatus.BAD_REQUEST, "the twin accepts one prompt: 'prompt' must be a string")
                return
            text = prompt
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        max_new = int(limit) if limit is not None else (state.cfg.context_length if chat else 16)
        request = self._start(text, max_new, bool(body.get("ignore_eos", False)))
        if request is None:
            return
        reply = _OpenAIReply(state, request, chat=chat, body=body)
        if not body.get("stream"):
            last = self._final(request)
            if last is not None:
                self._send_json(HTTPStatus.OK, reply.complete(last))
            return
        self._begin_stream()
        try:
            if chat:
                self._event(reply.chunk({"role": "assistant", "content": ""}, None))
            last = None
            for last in self._updates(request):
                self._event(reply.delta(last))
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            if include_usage and last is not None:
                self._event(reply.usage_chunk(last))
            self._event("[DONE]")
        except (BrokenPipeError, ConnectionResetError):
            request.aborted = True


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


class _OpenAIReply:
    """OpenAI-shaped chunks and responses for one request."""

    def __init__(self, state: TwinState, request: Request, *, chat: bool, body: dict[str, Any]) -> None:
        self.state = state
        self.request = request
        self.chat = chat
        self.id = f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}"
        self.created = int(time.time())
        self.model = str(body.get("model") or state.served_model_name)
        self.spec_details = bool(body.get("return_spec_tokens_details")) and state.cfg.spec.enabled

    def _finish(self, update: Update) -> str | None:
        if not update.finished or update.finish_reason is None:
            return None
        return "length" if update.finish_reason.get("type") == "length" else "stop"

    def _usage(self, update: Update) -> dict[str, Any]:
        prompt = self.request.prompt.prompt_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": update.completion_tokens,
            "total_tokens": prompt + update.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.request.cached_tokens},
        }

    def _base(self, obj: str) -> dict[str, Any]:
        return {"id": self.id, "object": obj, "created": self.created, "model": self.model}

    def chunk(self, delta: dict[str, Any], finish: str | None, update: Update | None = None) -> dict[str, Any]:
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
        if self.chat:
            choice["delta"] = delta
        else:
            choice["text"] = delta.get("content", "")
        if finish == "stop":
            choice["matched_stop"] = self.state.profile.model.eos_token_id
        out = self._base("chat.completion.chunk" if self.chat else "text_completion")
        out["choices"] = [choice]
        out["usage"] = None
        if update is not None and finish is not None and self.spec_details:
            out["sglext"] = self.state.spec_stats(self.request, update)
        return out

    def delta(self, update: Update) -> dict[str, Any]:
        return self.chunk({"content": update.delta} if update.delta else {}, self._finish(update), update)

    def usage_chunk(self, update: Update) -> dict[str, Any]:
        out = self._base("chat.completion.chunk" if self.chat else "text_completion")
        out["choices"] = []
        out["usage"] = self._usage(update)
        if self.spec_details:
            out["sglext"] = self.state.spec_stats(self.request, update)
        return out

    def complete(self, update: Update) -> dict[str, Any]:
        finish = self._finish(update)
        choice: dict[str, Any] = {"index": 0, "logprobs": None, "finish_reason": finish}
        if self.chat:
            choice["message"] = {
                "role": "assistant",
                "content": update.text,
                "reasoning_content": None,
                "tool_calls": None,
            }
        else:
            choice["text"] = update.text
        if finish == "stop":
            choice["matched_stop"] = self.state.profile.model.eos_token_id
        out = self._base("chat.completion" if self.chat else "text_completion")
        out["choices"] = [choice]
        out["usage"] = self._usage(update)
        if self.spec_details:
            out["sglext"] = self.state.spec_stats(self.request, update)
        return out


def start_http(state: TwinState, *, host: str, port: int, log_http: bool) -> TwinHTTPServer:
    """Bind the port and serve in a background thread (raises OSError if the port is taken)."""
    httpd = TwinHTTPServer((host, port), state, log_http)
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.2}, name="twin-http", daemon=True).start()
    return httpd
