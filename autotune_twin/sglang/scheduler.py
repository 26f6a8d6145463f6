"""The SGLang personality's scheduler: the shared decode loop with SGLang's admission and counters.

Requests up to the effective max-running-requests run together while the KV pool has room for
their prompt and completion; the rest queue. Around the passes it writes SGLang's ``Prefill batch``
and (every ``--decode-log-interval`` passes) ``Decode batch`` lines, and keeps the counters behind
``/metrics`` and ``internal_states``: latency histograms, the last interval's throughput and
acceptance, and the lifetime accept length that ``POST /flush_cache`` restarts.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from autotune_twin.memory import MemoryPlan
from autotune_twin.metrics import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS, Histogram
from autotune_twin.scheduler import Request, Scheduler, Stats
from passmodel.config import LaunchConfig
from passmodel.profile import TwinProfile

log = logging.getLogger("autotune_twin")


@dataclass
class SglangStats(Stats):
    """The shared counters plus SGLang's; read and written under ``Scheduler.lock``."""

    lifetime_tokens: int = 0
    lifetime_verify_ct: int = 0
    last_accept_length: float = 0.0
    last_accept_rate: float = 0.0
    last_gen_throughput: float = 0.0
    mamba_usage: float = 0.0
    ttft: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS))
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    e2e: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS))


@dataclass
class _Interval:
    """Decode passes since the last ``Decode batch`` line (``started``: its first pass began)."""

    passes: int = 0
    tokens: int = 0
    request_passes: int = 0
    started: float | None = None


class SglangScheduler(Scheduler):
    """The shared scheduler with SGLang's admission, log lines and counters."""

    stats: SglangStats

    def __init__(
        self,
        *,
        profile: TwinProfile,
        cfg: LaunchConfig,
        plan: MemoryPlan,
        seed: int,
        decode_log_interval: int,
        drift: float = 0.0,
        diverges: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(profile=profile, cfg=cfg, seed=seed, drift=drift, diverges=diverges, clock=clock)
        self.plan = plan
        self.stats = SglangStats()
        self._interval = _Interval()
        self._log_every = max(decode_log_interval, 1)

    # -- called by handler threads -------------------------------------------------------------

    def flush_cache(self) -> None:
        """POST /flush_cache: forget cached prompts and restart the lifetime accept statistics."""
        with self.lock:
            self._seen_prompts.clear()
            self.stats.lifetime_tokens = 0
            self.stats.lifetime_verify_ct = 0

    def avg_spec_accept_length(self) -> float:
        with self.lock:
            s = self.stats
            return s.lifetime_tokens / s.lifetime_verify_ct if s.lifetime_verify_ct else 0.0

    def draft_depth(self) -> int:
        """Draft positions verified per pass: the denominator of SGLang's accept rate."""
        spec = self.cfg.spec
        if spec.kind == "dflash" or spec.num_steps is None:
            return max((spec.num_draft_tokens or 2) - 1, 1)
        return max(min(spec.num_steps, (spec.num_draft_tokens or 2) - 1), 1)

    # -- hooks of the shared scheduler ---------------------------------------------------------

    def _admit(self) -> list[Request]:
        admitted: list[Request] = []
        budget = self.plan.max_total_num_tokens - self._tokens_in_use()
        while self._waiting and len(self._running) + len(admitted) < self.plan.max_running_requests:
            head = self._waiting[0]
            need = head.prompt.prompt_tokens + head.target_tokens
            if need > budget and (self._running or admitted):
                break  # wait for memory to free up, as SGLang's scheduler does
            budget -= need
            admitted.append(self._waiting.popleft())
        return admitted

    def _on_prefill(self, batch: list[Request], new_tokens: int, cached: int, usage: str, queued: int) -> None:
        log.info(
            "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, %s, #running-req: %d, #queue-req: %d",
            len(batch),
            new_tokens,
            cached,
            usage,
            len(self._running) - len(batch),
            queued,
        )

    def _on_first_token(self, request: Request, now: float) -> None:
        with self.lock:
            self.stats.ttft.observe(now - request.created)

    def _on_decode_pass(self) -> None:
        if self._interval.started is None:
            self._interval.started = self._clock()  # idle time is not generation time

    def _on_accept(self, request: Request, accepted: int, seconds: float) -> None:
        if accepted:
            with self.lock:
                self.stats.itl.observe(seconds / accepted, accepted)

    def _on_finished_locked(self, request: Request, now: float) -> None:
        self.stats.e2e.observe(now - request.created)
        if request.verify_ct:
            self.stats.lifetime_tokens += request.generated
            self.stats.lifetime_verify_ct += request.verify_ct

    def _usage_locked(self) -> str:
        tokens = self._tokens_in_use()
        token_usage = tokens / self.plan.max_total_num_tokens
        self.stats.token_usage = token_usage
        if not self.profile.model.hybrid:
            return f"#token: {tokens}, token usage: {token_usage:.2f}"
        mamba_num = len(self._running) + min(len(self._seen_prompts), self.plan.max_mamba_cache_size)
        mamba_num = min(mamba_num, self.plan.max_mamba_cache_size)
        self.stats.mamba_usage = mamba_num / self.plan.max_mamba_cache_size
        return (
            f"#full token: {tokens}, full token usage: {token_usage:.2f}, "
            f"mamba num: {mamba_num}, mamba usage: {self.stats.mamba_usage:.2f}"
        )

    def _account_pass(self, batch: int, produced: int) -> None:
        interval = self._interval
        interval.passes += 1
        interval.tokens += produced
        interval.request_passes += batch
        with self.lock:
            self.stats.num_running = len(self._running)
            self.stats.num_queue = len(self._waiting)
            usage = self._usage_locked()
        if interval.passes < self._log_every:
            return
        elapsed = max(self._clock() - (interval.started or 0.0), 1e-9)
        throughput = interval.tokens / elapsed
        parts = [f"Decode batch, #running-req: {batch}", usage]
        accept = interval.tokens / max(interval.request_passes, 1)
        rate = (accept - 1) / self.draft_depth() if self.cfg.spec.enabled else 0.0
        if self.cfg.spec.enabled:
            parts.append(f"accept len: {accept:.2f}, accept rate: {rate:.2f}")
        graph = not self.cfg.disable_cuda_graph and batch <= self.plan.cuda_graph_bs
        parts.append(
            f"cuda graph: {graph}, gen throughput (token/s): {throughput:.2f}, #queue-req: {len(self._waiting)}"
        )
        log.info(", ".join(parts))
        with self.lock:
            self.stats.last_gen_throughput = throughput
            self.stats.last_accept_length = accept if self.cfg.spec.enabled else 0.0
            self.stats.last_accept_rate = rate
        self._interval = _Interval()
