"""The twin's scheduler core: one thread runs prefill and verify passes for every request, in real time.

Requests the personality admits run together (one batch per pass); the rest queue. Each pass takes
the time the physics says (slept on a monotonic deadline, never spun), then every running request
gets its accepted tokens as one :class:`Update` on its own queue, which the HTTP handler thread
turns into a streamed chunk. What an engine does around the passes is its personality's
(``sglang/scheduler.py``, ``vllm/scheduler.py``): admission, the memory usage it reports, its log
lines and counters, through the hooks at the end of :class:`Scheduler`.
"""

from __future__ import annotations

import queue
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field

from autotune_twin import memory
from autotune_twin.faults import DIVERGE_AFTER_TOKENS, drift_factor
from passmodel import physics
from passmodel.adaptive import StepController
from passmodel.config import LaunchConfig
from passmodel.physics import PromptClass
from passmodel.profile import TwinProfile

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
    # Greedy text is a function of the prompt and the token count: the words come from this stream
    # alone (seeded by the prompt), never from the acceptance draws or the timing noise.
    diverged_rng: random.Random | None = None
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
    num_running: int = 0
    num_queue: int = 0
    token_usage: float = 0.0


class Scheduler(threading.Thread):
    """Runs the passes. ``submit`` from any thread; ``stop`` ends the thread within one wait."""

    stats: Stats

    def __init__(
        self,
        *,
        profile: TwinProfile,
        cfg: LaunchConfig,
        seed: int,
        drift: float = 0.0,
        diverges: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(name="twin-scheduler", daemon=True)
        self._diverges = diverges
        self.profile = profile
        self.cfg = cfg
        self.lock = threading.Lock()
        self.stats = Stats()
        self._wake = threading.Condition(self.lock)
        self._stop_event = threading.Event()
        self._rng = random.Random(seed)
        # This launch's speed: one draw for every pass (what differs between two launches of one config).
        self._launch_factor = max(0.5, random.Random(seed + 1).gauss(1.0, profile.timing.launch_sd))
        self._clock = clock
        self._waiting: deque[Request] = deque()
        self._running: list[Request] = []
        self._seen_prompts: dict[int, int] = {}
        self._drift = drift
        self._ready_at: float | None = None
        # When the last pass ended on the twin's schedule; None while idle (the next pass starts on arrival).
        self._pass_end: float | None = None
        tiers = cfg.spec.adaptive
        graphs = None if cfg.disable_cuda_graph else memory.capture_sizes(cfg.cuda_graph_max_bs_decode)
        self._steps = StepController(tiers, cfg.spec.num_steps or 0, graphs) if tiers is not None else None

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
            probs=physics.acceptance_probs(self.profile, physics.deepest_tier(self.cfg), prompt),
            cached_tokens=cached,
            created=self._clock(),
            words=_WORDS.get(prompt.category, _WORDS["chat"]),
            rng=random.Random(seed),
            diverged_rng=random.Random(physics.stable_hash("diverged:" + text)) if self._diverges else None,
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

    def stop(self) -> None:
        self._stop_event.set()
        with self._wake:
            self._wake.notify_all()

    # -- the scheduler thread ------------------------------------------------------------------

    def run(self) -> None:
        while not self._stop_event.is_set():
            with self._wake:
                while not self._waiting and not self._running and not self._stop_event.is_set():
                    self._pass_end = None
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
        """Wait out a pass on a deadline, ``seconds`` after the previous pass ended, so the twin's own
        work between passes (streaming the last pass's tokens, the adaptive controller's bookkeeping) is
        inside the pass, as a GPU overlaps the host's work, not added to it: on a loaded CPU that work
        grew with the batch and the configuration, and slowed one configuration more than another. A
        pass that began late still ends on its deadline when the host is late by up to one pass, as a
        GPU keeps running the pass the host queued ahead (SGLang's overlap scheduler, CUDA's launch
        queue): a loaded test machine's scheduling delays then cost the twin nothing; lateness beyond
        that is lost, as a real GPU idles. False when stopping (so a SIGTERM ends the thread promptly)."""
        now = self._clock()
        seconds = max(seconds, 0.0)
        start = now if self._pass_end is None else self._pass_end
        self._pass_end = max(start + seconds, now - seconds)
        return not self._stop_event.wait(max(self._pass_end - now, 0.0))

    def _drop_aborted(self) -> None:
        self._waiting = deque(r for r in self._waiting if not r.aborted)
        self._running = [r for r in self._running if not r.aborted]

    def _tokens_in_use(self) -> int:
        return sum(r.prompt.prompt_tokens + r.generated for r in self._running)

    def _prefill(self, batch: list[Request]) -> None:
        new_tokens = sum(r.prompt.prompt_tokens - r.cached_tokens for r in batch)
        cached = sum(r.cached_tokens for r in batch)
        seconds = physics.noisy(physics.prefill_seconds(self.profile, self.cfg, new_tokens), self.profile, self._rng)
        seconds *= self._launch_factor
        if not self._sleep(seconds):
            return
        now = self._clock()
        with self.lock:
            self._running.extend(batch)
            usage = self._usage_locked()
            queued = len(self._waiting)
        self._on_prefill(batch, new_tokens, cached, usage, queued)
        for request in batch:
            self._advance(request, 1, now)
            self._on_first_token(request, now)

    def _pass_config(self, batch: int) -> LaunchConfig:
        """This pass's configuration: the launch's, or the adaptive tier chosen for this batch size."""
        if self._steps is None:
            return self.cfg
        return physics.tier_config(self.cfg, self._steps.steps_for(batch))

    def _decode(self) -> None:
        batch = list(self._running)
        self._on_decode_pass()
        contexts = [r.prompt.prompt_tokens + r.generated for r in batch]
        cfg = self._pass_config(len(batch))
        depth = cfg.spec.num_draft_tokens - 1 if cfg.spec.enabled and cfg.spec.num_draft_tokens else 0
        seconds = physics.noisy(self._pass_seconds(contexts, cfg), self.profile, self._rng) * self._launch_factor
        if self._drift and self._ready_at is not None:
            seconds *= drift_factor(self._drift, self._clock() - self._ready_at)
        if not self._sleep(seconds):
            return
        now = self._clock()
        produced = 0
        drafts: list[int] = []
        for request in batch:
            if request.aborted:
                continue
            accepted = physics.draw_accept_length(request.probs[:depth], self._rng) if cfg.spec.enabled else 1
            drafts.append(accepted - 1)
            accepted = min(accepted, request.target_tokens - request.generated)
            request.verify_ct += 1
            self._on_accept(request, accepted, seconds)
            produced += accepted
            self._advance(request, accepted, now)
        if self._steps is not None:
            self._steps.observe(len(batch), drafts)
        self._account_pass(len(batch), produced)

    # -- hooks of a personality -------------------------------------------------------------------

    def _admit(self) -> list[Request]:
        """Move the waiting requests that may start now (under the lock) off the queue."""
        raise NotImplementedError

    def _usage_locked(self) -> str:
        """Update the memory gauges (under the lock); the usage text for a log line."""
        raise NotImplementedError

    def _on_prefill(self, batch: list[Request], new_tokens: int, cached: int, usage: str, queued: int) -> None:
        """A prefill pass ran ``batch`` (``new_tokens`` computed, ``cached`` hit); ``queued`` still wait."""

    def _on_first_token(self, request: Request, now: float) -> None:
        """``request`` got its first token from prefill."""

    def _on_decode_pass(self) -> None:
        """A decode pass is about to start."""

    def _pass_seconds(self, contexts: list[int], cfg: LaunchConfig) -> float:
        """One decode pass of ``cfg`` over requests of these lengths, before noise and drift."""
        return physics.decode_pass_seconds(self.profile, cfg, contexts)

    def _on_accept(self, request: Request, accepted: int, seconds: float) -> None:
        """A decode pass of ``seconds`` gave ``request`` ``accepted`` tokens (1 + accepted draft tokens)."""

    def _on_finished_locked(self, request: Request, now: float) -> None:
        """``request`` finished (under the lock)."""

    def _advance(self, request: Request, tokens: int, now: float) -> None:
        """Give ``request`` ``tokens`` more tokens and publish the update; retire it when done."""
        for _ in range(tokens):
            word = request.rng.choice(request.words)
            if request.diverged_rng is not None and len(request.pieces) >= DIVERGE_AFTER_TOKENS:
                word = request.diverged_rng.choice(request.words)
            request.pieces.append(word)
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
                self._on_finished_locked(request, now)

    def _account_pass(self, batch: int, produced: int) -> None:
        """A decode pass over ``batch`` requests produced ``produced`` tokens: update the gauges."""
        with self.lock:
            self.stats.num_running = len(self._running)
            self.stats.num_queue = len(self._waiting)
            self._usage_locked()
