"""The twin's scheduler: one thread runs prefill and verify passes for every request, in real time.

Requests up to the effective max-running-requests run together (one batch per pass); the rest
queue. Each pass takes the time the physics says (slept on a monotonic deadline, never spun), then
every running request gets its accepted tokens as one :class:`Update` on its own queue, which the
HTTP handler thread turns into a streamed chunk. The scheduler also keeps the counters behind the
``Decode batch`` log lines, ``/metrics`` and ``internal_states``.
"""

from __future__ import annotations

import logging
import queue
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from autotune_twin import physics
from autotune_twin.faults import drift_factor
from autotune_twin.launch import LaunchConfig
from autotune_twin.metrics import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS, Histogram
from autotune_twin.physics import MemoryPlan, PromptClass
from autotune_twin.profile import TwinProfile

log = logging.getLogger("autotune_twin")

# Prompts remembered for prefix-cache hits (cached_tokens); oldest forgotten first.
_PROMPT_CACHE_SIZE = 1024

# Output words per prompt category; each is about 4 characters, matching prompt_tokens().
_WORDS = {
    "code": tuple(" def| self| node| key| if| not| None|:\n|    | return| =| left| right| value|()| for".split("|")),
    "math": tuple(" Let| x| =| 2|^n| +| the| sum| so| we| have| (|)| then| proof| by| 3| /| 4.| hence".split("|")),
    "chat": tuple(" the| and| you| can| day| a| little| walk| to| with| some| time| it| is| good| for".split("|")),
    "repetitive": tuple(" 1,| 2,| 3,| 4,| 5,| 6,| 7,| 8,| 9,| 10,| A| B| C| D| E| F".split("|")),
}


class ContextTooLong(ValueError):
    """The prompt does not fit the context length (SGLang answers 400)."""


@dataclass(frozen=True)
class Update:
    """What one pass gave a request, as the handler needs it (a snapshot; never mutated)."""

    text: str
    delta: str
    completion_tokens: int
    verify_ct: int
    finished: bool
    finish_reason: dict[str, object] | None
    e2e_latency: float


@dataclass
class Request:
    """One generation request; mutated only by the scheduler thread (``aborted`` by the handler)."""

    rid: str
    text: str
    prompt: PromptClass
    target_tokens: int
    stop_by_length: bool
    probs: tuple[float, ...]
    cached_tokens: int
    created: float
    words: tuple[str, ...]
    rng: random.Random
    updates: queue.Queue[Update] = field(default_factory=queue.Queue)
    aborted: bool = False
    generated: int = 0
    verify_ct: int = 0
    pieces: list[str] = field(default_factory=list)


@dataclass
class Stats:
    """Counters shared with the HTTP side; read and written under ``Scheduler.lock``."""

    generation_tokens_total: int = 0
    prompt_tokens_total: int = 0
    requests_total: int = 0
    lifetime_tokens: int = 0
    lifetime_verify_ct: int = 0
    last_accept_length: float = 0.0
    last_accept_rate: float = 0.0
    last_gen_throughput: float = 0.0
    num_running: int = 0
    num_queue: int = 0
    token_usage: float = 0.0
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


class Scheduler(threading.Thread):
    """Runs the passes. ``submit`` from any thread; ``stop`` ends the thread within one wait."""

    def __init__(
        self,
        *,
        profile: TwinProfile,
        cfg: LaunchConfig,
        plan: MemoryPlan,
        seed: int,
        decode_log_interval: int,
        drift: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name="twin-scheduler", daemon=True)
        self.profile = profile
        self.cfg = cfg
        self.plan = plan
        self.lock = threading.Lock()
        self.stats = Stats()
        self._wake = threading.Condition(self.lock)
        self._stop_event = threading.Event()
        self._rng = random.Random(seed)
        self._clock = clock
        self._waiting: deque[Request] = deque()
        self._running: list[Request] = []
        self._seen_prompts: dict[int, int] = {}
        self._interval = _Interval()
        self._log_every = max(decode_log_interval, 1)
        self._drift = drift
        self._ready_at: float | None = None

    # -- called by handler threads -------------------------------------------------------------

    def make_request(self, text: str, *, max_new_tokens: int, ignore_eos: bool) -> Request:
        """Classify and size a request (raises :class:`ContextTooLong`); ``submit`` queues it."""
        prompt = physics.classify_prompt(self.profile, text)
        context = self.cfg.context_length
        if prompt.prompt_tokens >= context:
            raise ContextTooLong(
                f"The input ({prompt.prompt_tokens} tokens) is longer than the model's context length "
                f"({context} tokens)."
            )
        limit = min(max(max_new_tokens, 1), context - prompt.prompt_tokens)
        natural = physics.natural_completion_tokens(self.profile, text)
        target = limit if ignore_eos else min(natural, limit)
        seed = physics.stable_hash(text)
        with self.lock:
            key = physics.stable_hash("prompt:" + text)
            cached = max(prompt.prompt_tokens - 1, 0) if key in self._seen_prompts else 0
            self._seen_prompts.pop(key, None)
            self._seen_prompts[key] = prompt.prompt_tokens
            if len(self._seen_prompts) > _PROMPT_CACHE_SIZE:
                del self._seen_prompts[next(iter(self._seen_prompts))]
        return Request(
            rid=uuid.uuid4().hex,
            text=text,
            prompt=prompt,
            target_tokens=target,
            stop_by_length=target == limit,
            probs=physics.acceptance_probs(self.profile, self.cfg, prompt),
            cached_tokens=cached,
            created=self._clock(),
            words=_WORDS.get(prompt.category, _WORDS["chat"]),
            rng=random.Random(seed),
        )

    def submit(self, request: Request) -> None:
        with self._wake:
            self._waiting.append(request)
            self.stats.requests_total += 1
            self.stats.prompt_tokens_total += request.prompt.prompt_tokens
            self._wake.notify()

    def mark_ready(self) -> None:
        """Drift (``--twin-drift``) counts from here, so warm-up passes are not slowed."""
        self._ready_at = self._clock()

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

    def stop(self) -> None:
        self._stop_event.set()
        with self._wake:
            self._wake.notify_all()

    # -- the scheduler thread ------------------------------------------------------------------

    def run(self) -> None:
        while not self._stop_event.is_set():
            with self._wake:
                while not self._waiting and not self._running and not self._stop_event.is_set():
                    self._wake.wait(timeout=0.5)
                self._drop_aborted()
                admitted = self._admit()
            if self._stop_event.is_set():
                return
            if admitted:
                self._prefill(admitted)
            elif self._running:
                self._decode()

    def _sleep(self, seconds: float) -> bool:
        """Wait out a pass; False when stopping (so a SIGTERM ends the thread promptly)."""
        return not self._stop_event.wait(max(seconds, 0.0))

    def _drop_aborted(self) -> None:
        self._waiting = deque(r for r in self._waiting if not r.aborted)
        self._running = [r for r in self._running if not r.aborted]

    def _tokens_in_use(self) -> int:
        return sum(r.prompt.prompt_tokens + r.generated for r in self._running)

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

    def _prefill(self, batch: list[Request]) -> None:
        new_tokens = sum(r.prompt.prompt_tokens - r.cached_tokens for r in batch)
        cached = sum(r.cached_tokens for r in batch)
        seconds = physics.noisy(physics.prefill_seconds(self.profile, self.cfg, new_tokens), self.profile, self._rng)
        if not self._sleep(seconds):
            return
        now = self._clock()
        with self.lock:
            self._running.extend(batch)
            usage = self._usage_locked()
            queued = len(self._waiting)
        self._log_prefill(batch, new_tokens, cached, usage, queued)
        for request in batch:
            self._advance(request, 1, now)
            with self.lock:
                self.stats.ttft.observe(now - request.created)

    def _decode(self) -> None:
        batch = list(self._running)
        if self._interval.started is None:
            self._interval.started = self._clock()  # idle time is not generation time
        contexts = [r.prompt.prompt_tokens + r.generated for r in batch]
        seconds = physics.noisy(self._pass_seconds(contexts), self.profile, self._rng)
        if self._drift and self._ready_at is not None:
            seconds *= drift_factor(self._drift, self._clock() - self._ready_at)
        if not self._sleep(seconds):
            return
        now = self._clock()
        produced = 0
        for request in batch:
            if request.aborted:
                continue
            accepted = physics.draw_accept_length(request.probs, self._rng) if self.cfg.spec.enabled else 1
            accepted = min(accepted, request.target_tokens - request.generated)
            request.verify_ct += 1
            self._on_accept(request, accepted)
            produced += accepted
            self._advance(request, accepted, now)
            with self.lock:
                if accepted:
                    self.stats.itl.observe(seconds / accepted, accepted)
        self._account_pass(len(batch), produced)

    # -- hooks a personality overrides (the defaults are SGLang's) -------------------------------

    def _log_prefill(self, batch: list[Request], new_tokens: int, cached: int, usage: str, queued: int) -> None:
        log.info(
            "Prefill batch, #new-seq: %d, #new-token: %d, #cached-token: %d, %s, #running-req: %d, #queue-req: %d",
            len(batch),
            new_tokens,
            cached,
            usage,
            len(self._running) - len(batch),
            queued,
        )

    def _pass_seconds(self, contexts: list[int]) -> float:
        """One decode pass over requests of these lengths, before noise and drift."""
        return physics.decode_pass_seconds(self.profile, self.cfg, contexts)

    def _on_accept(self, request: Request, accepted: int) -> None:
        """A decode pass gave ``request`` ``accepted`` tokens (1 + accepted draft tokens)."""

    def _advance(self, request: Request, tokens: int, now: float) -> None:
        """Give ``request`` ``tokens`` more tokens and publish the update; retire it when done."""
        for _ in range(tokens):
            request.pieces.append(request.rng.choice(request.words))
        request.generated += tokens
        finished = request.generated >= request.target_tokens
        reason: dict[str, object] | None = None
        if finished:
            reason = (
                {"type": "length", "length": request.target_tokens}
                if request.stop_by_length
                else {"type": "stop", "matched": self.profile.model.eos_token_id}
            )
        text = "".join(request.pieces)
        request.updates.put(
            Update(
                text=text,
                delta="".join(request.pieces[-tokens:]) if tokens else "",
                completion_tokens=request.generated,
                verify_ct=request.verify_ct,
                finished=finished,
                finish_reason=reason,
                e2e_latency=now - request.created,
            )
        )
        with self.lock:
            self.stats.generation_tokens_total += tokens
            if finished:
                if request in self._running:
                    self._running.remove(request)
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

    def draft_depth(self) -> int:
        """Draft positions verified per pass: the denominator of SGLang's accept rate."""
        spec = self.cfg.spec
        if spec.kind == "dflash" or spec.num_steps is None:
            return max((spec.num_draft_tokens or 2) - 1, 1)
        return max(min(spec.num_steps, (spec.num_draft_tokens or 2) - 1), 1)
