"""The vLLM personality's HTTP side: vLLM's endpoints, JSON shapes and ``/metrics`` names.

The port is bound at start but only listens once the engine is ready (vLLM binds its socket
before building the engine and starts uvicorn after), so a client sees connection refused until
then, and ``/health`` 200 after. OpenAI completions and chat completions stream one chunk per
engine step (``stream_options.continuous_usage_stats`` puts the cumulative usage on each), then a
usage chunk with ``metrics.speculative_decoding`` when ``--per-request-spec-decode-metrics`` is on.
The plumbing (JSON, SSE, faults) is the twin's HTTP core's (:mod:`autotune_twin.web`).
"""

from __future__ import annotations

import argparse
import os
import threading
import uuid
from http import HTTPStatus
from typing import Any

from autotune_twin.faults import NO_FAULT, Fault
from autotune_twin.metrics import E2E_BUCKETS, Histogram
from autotune_twin.scheduler import Request, Update
from autotune_twin.vllm._flags import VLLM_VERSION
from autotune_twin.vllm.config import KvPlan, VllmConfig
from autotune_twin.vllm.scheduler import VllmScheduler
from autotune_twin.web import Handler, OpenAIReply, ServerState, TwinHTTPServer, chat_prompt
from passmodel import physics
from passmodel.profile import TwinProfile

DEFAULT_COMPLETION_TOKENS = 16  # vLLM's default max_tokens for /v1/completions
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0)


def _label(value: object) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


class VllmState(ServerState):
    """What the endpoints report for one ready engine."""

    scheduler: VllmScheduler

    def __init__(
        self,
        *,
        args: argparse.Namespace,
        profile: TwinProfile,
        vc: VllmConfig,
        kv: KvPlan,
        scheduler: VllmScheduler,
        fault: Fault = NO_FAULT,
    ) -> None:
        super().__init__(args=args, profile=profile, fault=fault, phase="ready")
        self.vc = vc
        self.cfg = vc.cfg
        self.kv = kv
        self.scheduler = scheduler
        self.ttft = Histogram(TTFT_BUCKETS)
        self.tpot = Histogram(TPOT_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.histogram_lock = threading.Lock()

    @property
    def served_model_name(self) -> str:
        return self.vc.served_model_name

    def observe(self, request: Request, last: Update) -> None:
        """A request ended: feed the latency histograms."""
        first = self.scheduler.first_token_at(request)
        with self.histogram_lock:
            self.e2e.observe(last.e2e_latency)
            if first is not None:
                self.ttft.observe(first - request.created)
                if last.completion_tokens > 1:
                    end = request.created + last.e2e_latency
                    self.tpot.observe((end - first) / (last.completion_tokens - 1))

    # -- JSON payloads ---------------------------------------------------------------------------

    def model_card(self) -> dict[str, Any]:
        card = super().model_card()
        card.update(owned_by="vllm", root=self.vc.model, parent=None, max_model_len=self.kv.max_model_len)
        card["permission"] = [
            {
                "id": f"modelperm-{uuid.uuid4().hex}",
                "object": "model_permission",
                "created": int(self.started),
                "allow_create_engine": False,
                "allow_sampling": True,
                "allow_logprobs": True,
                "allow_search_indices": False,
                "allow_view": True,
                "allow_fine_tuning": False,
                "organization": "*",
                "group": None,
                "is_blocking": False,
            }
        ]
        return card

    def cache_config_labels(self) -> dict[str, object]:
        """``vllm:cache_config_info``: every CacheConfig field as a label (strings), as vLLM does."""
        vc, kv, hybrid = self.vc, self.kv, self.profile.model.hybrid
        return {
            "block_size": vc.block_size,
            "cache_dtype": vc.kv_cache_dtype,
            "cache_hit_alignment_tokens": None,
            "effective_attention_block_size": vc.block_size,
            "enable_mamba_shared_prefix_checkpoint": False,
            "enable_prefix_caching": vc.enable_prefix_caching,
            "gpu_memory_utilization": vc.gpu_memory_utilization,
            "hash_block_size": vc.block_size,
            "is_attention_free": False,
            "kv_cache_max_concurrency": round(kv.max_concurrency, 2),
            "kv_cache_size_tokens": kv.kv_tokens,
            "kv_sharing_fast_prefill": False,
            "mamba_cache_dtype": "auto",
            "mamba_cache_mode": ("align" if vc.enable_prefix_caching else "none") if hybrid else "none",
            "mamba_ssm_cache_dtype": "auto",
            "num_cpu_blocks": None,
            "num_gpu_blocks": kv.kv_tokens // vc.block_size,
            "num_gpu_blocks_override": None,
            "prefix_caching_hash_algo": "sha256",
            "sliding_window": None,
            "user_specified_block_size": False,
        }

    def metrics_text(self) -> str:
        engine = f'model_name="{_label(self.served_model_name)}",engine="0"'
        lines = ["# autotune vLLM twin: simulated metrics, not real vLLM"]
        if not self.vc.log_stats:  # --disable-log-stats: no vllm:* metrics at all
            return "\n".join(lines) + "\n"
        snap = self.scheduler.snapshot()

        def gauge(name: str, value: float, doc: str) -> None:
            lines.extend([f"# HELP {name} {doc}", f"# TYPE {name} gauge", f"{name}{{{engine}}} {float(value)}"])

        def counter(name: str, samples: list[tuple[str, float]], doc: str) -> None:
            lines.extend([f"# HELP {name}_total {doc}", f"# TYPE {name}_total counter"])
            lines.extend(f"{name}_total{{{engine}{extra}}} {float(v)}" for extra, v in samples)

        gauge("vllm:num_requests_running", snap.running, "Number of requests in model execution batches.")
        gauge("vllm:num_requests_waiting", snap.waiting, "Number of requests waiting to be processed.")
        gauge("vllm:kv_cache_usage_perc", snap.kv_usage, "KV-cache usage. 1 means 100 percent usage.")
        counter("vllm:prefix_cache_queries", [("", snap.prefix_queries)], "Prefix cache queries, in terms of tokens.")
        counter("vllm:prefix_cache_hits", [("", snap.prefix_hits)], "Prefix cache hits, in terms of tokens.")
        counter("vllm:prompt_tokens", [("", snap.prompt_tokens)], "Number of prefill tokens processed.")
        counter("vllm:generation_tokens", [("", snap.generation_tokens)], "Number of generation tokens processed.")
        reasons = [(f',finished_reason="{r}"', float(snap.success.get(r, 0))) for r in ("abort", "length", "stop")]
        counter("vllm:request_success", reasons, "Count of successfully processed requests.")
        if self.vc.speculative:
            counter("vllm:spec_decode_num_drafts", [("", snap.drafts)], "Number of spec decoding drafts.")
            counter("vllm:spec_decode_num_draft_tokens", [("", snap.draft_tokens)], "Number of draft tokens.")
            counter("vllm:spec_decode_num_accepted_tokens", [("", snap.accepted_tokens)], "Number of accepted tokens.")
            per_pos = [(f',position="{i}"', float(n)) for i, n in enumerate(snap.accepted_per_pos)]
            counter("vllm:spec_decode_num_accepted_tokens_per_pos", per_pos, "Accepted tokens per draft position.")
        info = ",".join(f'{k}="{_label(v)}"' for k, v in sorted(self.cache_config_labels().items()))
        lines += [
            "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig",
            "# TYPE vllm:cache_config_info gauge",
            f'vllm:cache_config_info{{{info},engine="0"}} 1.0',
        ]
        with self.histogram_lock:
            lines += self.ttft.render("vllm:time_to_first_token_seconds", engine)
            lines += self.tpot.render("vllm:request_time_per_output_token_seconds", engine)
            lines += self.e2e.render("vllm:e2e_request_latency_seconds", engine)
        return "\n".join(lines) + "\n"


class VllmHandler(Handler[VllmState]):
    """vLLM's routes on the twin's HTTP core."""

    health_paths = ("/health", "/ping")

    def _access_prefix(self) -> str:
        return f"(APIServer pid={os.getpid()}) "

    def _openai_error(self, status: int, message: str, kind: str, param: str | None = None) -> None:
        self._send_json(status, {"error": {"message": message, "type": kind, "param": param, "code": status}})

    def _authorised(self, path: str) -> bool:
        keys = self.state.args.api_key
        return not keys or not path.startswith("/v1") or self._bearer_ok(keys)

    def _get(self, path: str) -> None:
        state = self.state
        if path == "/v1/models":
            self._send_json(HTTPStatus.OK, state.models())
        elif path == "/version":
            self._send_json(HTTPStatus.OK, {"version": VLLM_VERSION})
        elif path == "/metrics":
            self._send_text(HTTPStatus.OK, state.metrics_text(), "text/plain; version=0.0.4; charset=utf-8")
        else:
            self._send_json(HTTPStatus.NOT_FOUND, {"detail": "Not Found"})

    def _post(self, path: str) -> None:
        if path not in ("/v1/completions", "/v1/chat/completions"):
            self._send_json(HTTPStatus.NOT_FOUND, {"detail": "Not Found"})
            return
        body = self._read_json()
        if body is not None:
            self._complete(body, chat=path == "/v1/chat/completions")

    def _complete(self, body: dict[str, Any], *, chat: bool) -> None:
        state = self.state
        model = body.get("model")
        if model is not None and model != state.served_model_name:
            self._openai_error(HTTPStatus.NOT_FOUND, f"The model `{model}` does not exist.", "NotFoundError", "model")
            return
        if chat:
            messages = body.get("messages")
            if not isinstance(messages, list) or not messages:
                self._openai_error(HTTPStatus.BAD_REQUEST, "'messages' must be a non-empty list", "BadRequestError")
                return
            text = chat_prompt(messages)
        else:
            prompt = body.get("prompt")
            if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
                prompt = prompt[0]
            if not isinstance(prompt, str):
                self._openai_error(HTTPStatus.BAD_REQUEST, "the twin accepts one prompt string", "BadRequestError")
                return
            text = prompt
        length = state.kv.max_model_len
        prompt_tokens = physics.prompt_tokens(state.profile, text)
        limit = body.get("max_completion_tokens") or body.get("max_tokens")
        if prompt_tokens >= length:
            self._openai_error(
                HTTPStatus.BAD_REQUEST,
                f"This model's maximum context length is {length} tokens. However, your request has "
                f"{prompt_tokens} input tokens. Please reduce the length of the input messages.",
                "BadRequestError",
            )
            return
        if limit is None:
            max_new = length - prompt_tokens if chat else DEFAULT_COMPLETION_TOKENS
        else:
            max_new = int(limit)
            if max_new > length - prompt_tokens:
                self._openai_error(
                    HTTPStatus.BAD_REQUEST,
                    f"'max_tokens' or 'max_completion_tokens' is too large: {max_new}. This model's maximum "
                    f"context length is {length} tokens and your request has {prompt_tokens} input tokens "
                    f"({max_new} > {length} - {prompt_tokens}).",
                    "BadRequestError",
                    "max_tokens",
                )
                return
        request = self._start(text, max_new, bool(body.get("ignore_eos", False)))
        if request is None:
            return
        reply = _Reply(state, request, chat=chat, body=body)
        options = body.get("stream_options") or {}
        try:
            self._reply(
                request,
                reply,
                stream=bool(body.get("stream")),
                include_usage=bool(options.get("include_usage")),
                on_last=lambda last: state.observe(request, last),
            )
        finally:
            state.scheduler.forget(request)


class _Reply(OpenAIReply):
    """vLLM-shaped chunks and responses for one request (``metrics.speculative_decoding``)."""

    def __init__(self, state: VllmState, request: Request, *, chat: bool, body: dict[str, Any]) -> None:
        super().__init__(state, request, chat=chat, body=body)
        self.state = state
        self.metrics = state.vc.per_request_spec_metrics != "none" and state.vc.speculative is not None
        options = body.get("stream_options") or {}
        # stream_options.continuous_usage_stats: the cumulative usage on every chunk
        self.continuous = bool(options.get("include_usage") and options.get("continuous_usage_stats"))

    def _usage(self, update: Update) -> dict[str, Any]:
        prompt = self.request.prompt.prompt_tokens
        usage: dict[str, Any] = {
            "prompt_tokens": prompt,
            "total_tokens": prompt + update.completion_tokens,
            "completion_tokens": update.completion_tokens,
        }
        if self.request.cached_tokens:
            usage["prompt_tokens_details"] = {"cached_tokens": self.request.cached_tokens}
        return usage

    def chunk(self, delta: dict[str, Any], finish: str | None, update: Update | None) -> dict[str, Any]:
        out = self._base()
        out["choices"] = [self._chunk_choice(delta, finish, stop_reason=None)]
        if self.continuous and update is not None:
            out["usage"] = self._usage(update)
        return out

    def _with_metrics(self, out: dict[str, Any]) -> dict[str, Any]:
        spec = self.state.scheduler.spec_metrics(self.request) if self.metrics else None
        if spec is not None:
            out["metrics"] = {"speculative_decoding": spec}
        return out

    def usage_chunk(self, update: Update) -> dict[str, Any]:
        out = self._base()
        out["choices"] = []
        out["usage"] = self._usage(update)
        return self._with_metrics(out)

    def complete(self, update: Update) -> dict[str, Any]:
        out = self._base(final=True)
        out["choices"] = [self._choice(update, self._finish(update), tool_calls=[], stop_reason=None)]
        out["usage"] = self._usage(update)
        return self._with_metrics(out)


def start_http(host: str, port: int, *, log_http: bool) -> TwinHTTPServer:
    """Bind the port (raises OSError if it is taken); it listens after ``activate``."""
    return TwinHTTPServer((host, port), VllmHandler, log_http=log_http, listen=False)


__all__ = ["VllmState", "start_http"]
