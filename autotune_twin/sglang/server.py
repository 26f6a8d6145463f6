"""The SGLang personality's HTTP side: SGLang's endpoints and JSON shapes on the twin's HTTP core.

The port opens while the simulated weights load (health endpoints answer 503 until the server is
ready, like SGLang's). Generation requests are handed to the :class:`SglangScheduler`; the plumbing
(JSON, SSE, faults, waiting on updates) is :mod:`autotune_twin.web`'s.
"""

from __future__ import annotations

import argparse
from http import HTTPStatus
from typing import Any

from autotune_twin.faults import NO_FAULT, Fault
from autotune_twin.memory import MemoryPlan
from autotune_twin.metrics import gauge
from autotune_twin.scheduler import Request, Update
from autotune_twin.sglang._flags import SGLANG_VERSION
from autotune_twin.sglang.scheduler import SglangScheduler
from autotune_twin.web import Handler, OpenAIReply, ServerState, TwinHTTPServer, chat_prompt
from passmodel.config import LaunchConfig
from passmodel.physics import GIB
from passmodel.profile import TwinProfile

DEFAULT_MAX_NEW_TOKENS = 128


class TwinState(ServerState):
    """What the endpoints report: loading until ``ready()``; stopping after ``stopping()``."""

    scheduler: SglangScheduler | None

    def __init__(
        self, *, args: argparse.Namespace, profile: TwinProfile, cfg: LaunchConfig, seed: int, fault: Fault = NO_FAULT
    ) -> None:
        super().__init__(args=args, profile=profile, fault=fault)
        self.cfg = cfg
        self.seed = seed
        self.plan: MemoryPlan | None = None

    @property
    def served_model_name(self) -> str:
        return str(self.args.served_model_name or self.args.model_path)

    def attach(self, plan: MemoryPlan, scheduler: SglangScheduler) -> None:
        """Pools sized and scheduler running: info endpoints answer; health waits for ``ready``."""
        self.plan, self.scheduler = plan, scheduler

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

    def model_card(self) -> dict[str, Any]:
        card = super().model_card()
        card.update(owned_by="sglang", root=self.args.model_path, max_model_len=self.cfg.context_length)
        return card

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


class TwinHandler(Handler[TwinState]):
    """SGLang's routes on the twin's HTTP core."""

    health_paths = ("/health", "/health_generate", "/ready")

    def _authorised(self, path: str) -> bool:
        key = self.state.args.api_key
        return not key or path.startswith("/health") or path in ("/ready", "/metrics") or self._bearer_ok([key])

    # -- routes ---------------------------------------------------------------------------------

    def _get(self, path: str) -> None:
        state = self.state
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

    def _post(self, path: str) -> None:
        if path == "/flush_cache":
            self._flush()
            return
        if path not in ("/generate", "/v1/chat/completions", "/v1/completions"):
            self._error(HTTPStatus.NOT_FOUND, "Not Found")
            return
        if not self.state.is_ready:
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
        state = self.state
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
        state = self.state
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
        state = self.state
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
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        self._reply(request, reply, stream=bool(body.get("stream")), include_usage=include_usage)


class _OpenAIReply(OpenAIReply):
    """SGLang's OpenAI-shaped chunks and responses for one request (``sglext`` spec stats)."""

    def __init__(self, state: TwinState, request: Request, *, chat: bool, body: dict[str, Any]) -> None:
        super().__init__(state, request, chat=chat, body=body)
        self.state = state
        self.spec_details = bool(body.get("return_spec_tokens_details")) and state.cfg.spec.enabled

    def _usage(self, update: Update) -> dict[str, Any]:
        prompt = self.request.prompt.prompt_tokens
        return {
            "prompt_tokens": prompt,
            "completion_tokens": update.completion_tokens,
            "total_tokens": prompt + update.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.request.cached_tokens},
        }

    def _stopped(self, choice: dict[str, Any], finish: str | None) -> dict[str, Any]:
        if finish == "stop":
            choice["matched_stop"] = self.state.profile.model.eos_token_id
        return choice

    def chunk(self, delta: dict[str, Any], finish: str | None, update: Update | None) -> dict[str, Any]:
        out = self._base()
        out["choices"] = [self._stopped(self._chunk_choice(delta, finish), finish)]
        out["usage"] = None
        if update is not None and finish is not None and self.spec_details:
            out["sglext"] = self.state.spec_stats(self.request, update)
        return out

    def usage_chunk(self, update: Update) -> dict[str, Any]:
        out = self._base()
        out["choices"] = []
        out["usage"] = self._usage(update)
        if self.spec_details:
            out["sglext"] = self.state.spec_stats(self.request, update)
        return out

    def complete(self, update: Update) -> dict[str, Any]:
        finish = self._finish(update)
        out = self._base(final=True)
        out["choices"] = [self._stopped(self._choice(update, finish, tool_calls=None), finish)]
        out["usage"] = self._usage(update)
        if self.spec_details:
            out["sglext"] = self.state.spec_stats(self.request, update)
        return out


def start_http(state: TwinState, *, host: str, port: int, log_http: bool) -> TwinHTTPServer:
    """Bind the port and serve in a background thread (raises OSError if the port is taken)."""
    return TwinHTTPServer((host, port), TwinHandler, log_http=log_http, state=state)
