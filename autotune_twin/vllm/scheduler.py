"""The vLLM personality's scheduler: the shared decode loop with vLLM's admission and counters.

Passes are timed by the same physics as the SGLang personality. What differs is what vLLM does
around them: admission while the KV cache (bytes of attention KV plus the mamba-state pages of
each running request) has room and fewer than ``max_num_seqs`` run; prefix-cache hits only in whole
blocks and only with prefix caching on; no per-pass log lines (a stats logger prints vLLM's
periodic lines from :meth:`VllmScheduler.snapshot`); and the speculative-decoding counters that
``/metrics`` and the per-request stats report (drafts, draft tokens, accepted tokens per position).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from autotune_twin.scheduler import Request, Scheduler
from autotune_twin.vllm.config import KvPlan, VllmConfig
from passmodel import physics
from passmodel.config import LaunchConfig
from passmodel.profile import TwinProfile


@dataclass
class SpecCounters:
    drafts: int = 0
    draft_tokens: int = 0
    accepted_tokens: int = 0
    accepted_per_pos: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Snapshot:
    """Cumulative counters and current gauges, read together under the scheduler's lock."""

    at: float
    prompt_tokens: int  # prompt tokens computed (cache hits excluded)
    generation_tokens: int
    running: int
    waiting: int
    kv_usage: float  # 0..1
    prefix_queries: int
    prefix_hits: int
    drafts: int
    draft_tokens: int
    accepted_tokens: int
    accepted_per_pos: tuple[int, ...]
    success: dict[str, int]


class VllmScheduler(Scheduler):
    """The shared scheduler with vLLM's admission, prefix caching and counters."""

    def __init__(
        self,
        *,
        profile: TwinProfile,
        vc: VllmConfig,
        kv: KvPlan,
        seed: int,
        drift: float = 0.0,
        diverges: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(profile=profile, cfg=vc.cfg, seed=seed, drift=drift, diverges=diverges, clock=clock)
        self.vc = vc
        self.kv = kv
        k = vc.num_speculative_tokens
        self.spec = SpecCounters(accepted_per_pos=[0] * k)
        self.prompt_computed = 0
        self.prefix_queries = 0
        self.prefix_hits = 0
        self.success: dict[str, int] = {}
        self._histograms: dict[str, list[int]] = {}
        self._first_token_at: dict[str, float] = {}
        self._extra_pass_s = profile.vllm.extra_pass_ms * 1e-3
        self._pass_k = k  # this decode pass's drafts: the per-batch-size table's k, else the launch's

    # -- requests --------------------------------------------------------------------------------

    def make_request(self, text: str, *, max_new_tokens: int, ignore_eos: bool) -> Request:
        request = super().make_request(text, max_new_tokens=max_new_tokens, ignore_eos=ignore_eos)
        # vLLM hits the prefix cache in whole blocks, and only with prefix caching on.
        block = self.vc.block_size
        request.cached_tokens = (request.cached_tokens // block) * block if self.vc.enable_prefix_caching else 0
        return request

    def spec_metrics(self, request: Request) -> dict[str, object] | None:
        """vLLM's per-request ``metrics.speculative_decoding`` (summary level)."""
        k = self.vc.num_speculative_tokens
        if not k:
            return None
        with self.lock:
            histogram = list(self._histograms.get(request.rid, [0] * (k + 1)))
        steps = sum(histogram)
        accepted = sum(j * n for j, n in enumerate(histogram))
        return {
            "mean_acceptance_length": 1 + accepted / steps if steps else 1.0,
            "draft_acceptance_rate": accepted / (steps * k) if steps else 0.0,
            "acceptance_histogram": histogram,
            "num_spec_steps": steps,
            "num_accepted_draft_tokens": accepted,
            "num_draft_tokens": steps * k,
            "num_spec_tokens": k,
        }

    def forget(self, request: Request) -> None:
        """The handler is done with ``request``: drop its per-request bookkeeping."""
        with self.lock:
            self._histograms.pop(request.rid, None)
            self._first_token_at.pop(request.rid, None)

    def snapshot(self) -> Snapshot:
        with self.lock:
            return Snapshot(
                at=self._clock(),
                prompt_tokens=self.prompt_computed,
                generation_tokens=self.stats.generation_tokens_total,
                running=len(self._running),
                waiting=len(self._waiting),
                kv_usage=self.stats.token_usage,
                prefix_queries=self.prefix_queries,
                prefix_hits=self.prefix_hits,
                drafts=self.spec.drafts,
                draft_tokens=self.spec.draft_tokens,
                accepted_tokens=self.spec.accepted_tokens,
                accepted_per_pos=tuple(self.spec.accepted_per_pos),
                success=dict(self.success),
            )

    # -- hooks of the shared scheduler ---------------------------------------------------------

    def _admit(self) -> list[Request]:
        admitted: list[Request] = []
        kv = self.kv
        used = sum(kv.request_bytes(r.prompt.prompt_tokens + r.target_tokens) for r in self._running)
        while self._waiting and len(self._running) + len(admitted) < self.vc.max_num_seqs:
            head = self._waiting[0]
            need = kv.request_bytes(head.prompt.prompt_tokens + head.target_tokens)
            if used + need > kv.available_bytes and (self._running or admitted):
                break  # wait for blocks to free up
            used += need
            admitted.append(self._waiting.popleft())
        return admitted

    def _usage_locked(self) -> str:
        used = sum(self.kv.request_bytes(r.prompt.prompt_tokens + r.generated) for r in self._running)
        self.stats.token_usage = min(used / self.kv.available_bytes, 1.0)
        return ""

    def _on_prefill(self, batch: list[Request], new_tokens: int, cached: int, usage: str, queued: int) -> None:
        with self.lock:
            self.prompt_computed += new_tokens
            self.prefix_queries += sum(r.prompt.prompt_tokens for r in batch)
            self.prefix_hits += cached

    def _pass_config(self, batch: int) -> LaunchConfig:
        """vLLM's dynamic speculation: the batch's request count looks its k up (dynamic_sd)."""
        table = self.vc.spec_lookup
        if table is None:
            return super()._pass_config(batch)
        self._pass_k = table[min(batch, len(table) - 1)]
        return physics.tier_config(self.cfg, self._pass_k)

    def _pass_seconds(self, contexts: list[int], cfg: LaunchConfig) -> float:
        return super()._pass_seconds(contexts, cfg) + self._extra_pass_s

    def _on_accept(self, request: Request, accepted: int, seconds: float) -> None:
        k, width = self._pass_k, self.vc.num_speculative_tokens
        if not k:
            return
        drafted = max(accepted - 1, 0)
        with self.lock:
            self.spec.drafts += 1
            self.spec.draft_tokens += k
            self.spec.accepted_tokens += drafted
            for position in range(min(drafted, k)):
                self.spec.accepted_per_pos[position] += 1
            self._histograms.setdefault(request.rid, [0] * (width + 1))[min(drafted, k)] += 1

    def _advance(self, request: Request, tokens: int, now: float) -> None:
        first = request.generated == 0 and tokens > 0
        super()._advance(request, tokens, now)
        with self.lock:
            if first:
                self._first_token_at[request.rid] = now
            if request.generated >= request.target_tokens:
                reason = "length" if request.stop_by_length else "stop"
                self.success[reason] = self.success.get(reason, 0) + 1

    def first_token_at(self, request: Request) -> float | None:
        with self.lock:
            return self._first_token_at.get(request.rid)
