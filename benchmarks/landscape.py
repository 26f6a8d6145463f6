"""The twin as a landscape: SGLang's launch rules and the twin's physics, called directly.

For search benchmarks. :meth:`Landscape.evaluate` answers, in microseconds and without a process
or a socket, what launching the twin with a candidate's flags and measuring it at concurrency 1
would give: decode tok/s (mean over the prompts, with relative noise of a set size from a seeded
RNG), accept length, whether it starts (or SGLang's message when it does not: too little memory
for the pools, too much for CUDA graphs, or a configuration SGLang refuses) and how many seconds
the launch and the measurement would take on real GPUs. :meth:`Landscape.optimum` finds the true
feasible optimum of a discrete grid exhaustively.

The flags go through the product's argv spelling (``autotune.engines.base.flag_argv``), then the
twin's own argparse (``autotune_twin.sglang.flags.parse_args``: SGLang's types, defaults and errors) and
launch rules (``autotune_twin.launch.resolve_launch``), then the physics (``passmodel.physics``) and
the twin's memory rules (``autotune_twin.memory``), so the answer is the twin's. The grid and its axes
are ``benchmarks/axes.py``'s.
It lives beside the benchmarks because it joins both: the product and the twin never import each
other.

Two simplifications, both small at concurrency 1: the decode rate is the expected value (mean
accept length per verify pass, a fluid stream), not a draw; and seconds are for real GPUs
(:class:`LaunchCost`), not the profile's ``timing.load_seconds``, which is a demo speed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import io
import itertools
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from autotune.engines.base import flag_argv
from autotune.space import FlagValue
from autotune_twin import memory
from autotune_twin.launch import LaunchError, resolve_launch
from autotune_twin.memory import MemoryFailure
from autotune_twin.sglang.flags import parse_args
from benchmarks.axes import GridAxis, grid, random_candidate
from benchmarks.stream import fluid_stream, perf_key
from benchmarks.unmodelled import Unmodelled
from passmodel import physics
from passmodel.config import LaunchConfig
from passmodel.profile import TwinProfile

Outcome = Literal["ok", "too_low", "too_high", "load_oom", "invalid"]
MEMORY_OUTCOMES: tuple[Outcome, ...] = ("too_low", "too_high", "load_oom")


@dataclass(frozen=True)
class Prompt:
    """One prompt as the server sees it: the text and the request's ``max_new_tokens``."""

    text: str
    max_new_tokens: int = 256


@dataclass(frozen=True)
class MeasureShape:
    """The measurement protocol's settings that decide how long a measurement takes."""

    warmup_requests: int = 2
    min_rounds: int = 3
    max_rounds: int = 10
    target_rel_ci: float = 0.02
    max_seconds: float = 600.0
    max_tokens: int | None = None
    ignore_eos: bool = False


@dataclass(frozen=True)
class LaunchCost:
    """Seconds a launch takes on real GPUs (assumptions, documented in docs/benchmarks.md).

    A launch pays ``startup_s`` (interpreter, NCCL, argument and launch-rule checks), loads the
    weights of one GPU at ``load_bytes_per_s``, then captures CUDA graphs (``capture_s``); a
    configuration SGLang refuses dies after ``invalid_s``; every launch pays ``stop_s`` to stop and
    release memory. A pool failure dies after loading, a graph failure during capture.
    """

    startup_s: float = 30.0
    load_bytes_per_s: float = 1.5e9
    capture_s: float = 20.0
    invalid_s: float = 10.0
    stop_s: float = 10.0


@dataclass(frozen=True, kw_only=True)
class ServerMemory:
    """Memory per GPU as a launch's log reports it, as far as startup got, and what it held.

    Attributes:
        weights_bytes, kv_pool_bytes, kv_tokens, graph_bytes: weights, KV pool (and its tokens),
            CUDA graphs.
        server_free_bytes, avail_after_pools_bytes, graph_batch: the free memory before loading,
            memory left after the pools, and the largest captured batch.
        held_bytes: memory the serving server holds (what NVML adds to the idle use); not logged.
    """

    weights_bytes: float | None = None
    kv_pool_bytes: float | None = None
    kv_tokens: int | None = None
    graph_bytes: float | None = None
    server_free_bytes: float | None = None
    avail_after_pools_bytes: float | None = None
    graph_batch: int | None = None
    held_bytes: float | None = None

    def server_memory(self) -> dict[str, Any]:
        """These fields, to pass on to another record of the same launch."""
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(ServerMemory)}


@dataclass(frozen=True, kw_only=True)
class Evaluation(ServerMemory):
    """What one launch + concurrency-1 measurement of a candidate gives (plain data); its memory
    figures are those of :class:`ServerMemory`.

    Attributes:
        outcome: ``ok``; ``too_low`` (pools do not fit under the fraction), ``too_high`` (no
            headroom for CUDA graphs), ``load_oom`` (the weights alone do not fit: SGLang dies
            with a CUDA OOM), or ``invalid`` (argparse or a launch rule refuses the flags).
        tok_s: measured decode tok/s (true value x relative noise); None unless ok.
        true_tok_s: the noise-free value; None unless ok.
        accept_length: mean tokens per verify pass (1.0 without speculative decoding).
        message: the last line SGLang's log ends with when it fails (``ValueError: ...``).
        launch_s, measure_s, stop_s: simulated seconds on real GPUs.
    """

    outcome: Outcome
    tok_s: float | None = None
    true_tok_s: float | None = None
    accept_length: float | None = None
    message: str | None = None
    launch_s: float = 0.0
    measure_s: float = 0.0
    stop_s: float = 0.0

    @property
    def feasible(self) -> bool:
        return self.outcome == "ok"

    @property
    def memory(self) -> bool:
        return self.outcome in MEMORY_OUTCOMES

    @property
    def seconds(self) -> float:
        return self.launch_s + self.measure_s + self.stop_s


@dataclass(frozen=True)
class Optimum:
    """The true feasible optimum of a grid; how the grid splits when it was searched exhaustively."""

    tok_s: float
    flags: dict[str, FlagValue]
    exhaustive: bool
    classes: int | None = None
    candidates: int = 0
    distinct: int = 0
    feasible: int = 0
    memory: int = 0
    invalid: int = 0
    within_2pct: int = 0
    # The best configurations, best first, one per true value (a memory-only flag does not make another):
    # the finalists an oracle would race. At most ``TOP``.
    top: tuple[tuple[float, dict[str, FlagValue]], ...] = ()


TOP = 3


EXHAUSTIVE_LIMIT = 200_000


class _ArgError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


@dataclass(frozen=True, kw_only=True)
class _Fixed(ServerMemory):
    """The deterministic part of an evaluation (cached per candidate)."""

    outcome: Outcome
    true_tok_s: float | None = None
    accept_length: float | None = None
    decode_s_per_round: float = 0.0
    message: str | None = None
    launch_s: float = 0.0
    extras: dict[str, Any] = field(default_factory=dict)


class Landscape:
    """A twin profile + a prompt set as a function from flags to a measurement.

    Args:
        profile: the twin profile.
        prompts: the suite's prompts (texts, or :class:`Prompt` with their ``max_new_tokens``).
        model_path: the ``--model-path`` the space launches (drafters default to it, as in SGLang).
        noise_rel: relative standard deviation of one measurement's mean (0 for none).
        measure: the measurement protocol (its rounds, caps and warm-up set the measuring time).
        cost: seconds of launching on real GPUs.
        seed: seed of the noise.
        unmodelled: effects no model knows (:mod:`benchmarks.unmodelled`), applied to each performance
            class's rate after the physics; None: the twin's answer as it is.
    """

    def __init__(
        self,
        profile: TwinProfile,
        prompts: Sequence[Prompt | str],
        *,
        model_path: str = "model",
        noise_rel: float = 0.02,
        measure: MeasureShape = MeasureShape(),
        cost: LaunchCost = LaunchCost(),
        seed: int = 0,
        unmodelled: Unmodelled | None = None,
    ) -> None:
        if not prompts:
            raise ValueError("a landscape needs at least one prompt")
        self.profile = profile
        self.prompts = [p if isinstance(p, Prompt) else Prompt(text=p) for p in prompts]
        self.model_path = model_path
        self.noise_rel = noise_rel
        self.measure = measure
        self.cost = cost
        self.rng = random.Random(seed)
        self.unmodelled = unmodelled
        base, _ = parse_args(["--model-path", model_path])
        self._base = vars(base)
        self._flag_cache: dict[tuple[str, FlagValue], dict[str, Any] | _ArgError] = {}
        self._perf_cache: dict[str, tuple[float, float, float]] = {}
        self._cache: dict[tuple[tuple[str, FlagValue], ...], _Fixed] = {}
        self._classes = [physics.classify_prompt(profile, p.text) for p in self.prompts]

    # ------------------------------------------------------------------ public

    def evaluate(self, flags: Mapping[str, FlagValue], *, rng: random.Random | None = None) -> Evaluation:
        """Launch and measure ``flags`` (SGLang flag names without dashes, as ``LaunchPlan.flags``)."""
        fixed = self._fixed(flags)
        if fixed.outcome != "ok":
            return Evaluation(
                outcome=fixed.outcome,
                message=fixed.message,
                launch_s=fixed.launch_s,
                stop_s=self.cost.stop_s if fixed.outcome != "invalid" else 0.0,
                **fixed.server_memory(),
            )
        assert fixed.true_tok_s is not None and fixed.accept_length is not None
        draw = rng or self.rng
        factor = max(0.5, draw.gauss(1.0, self.noise_rel)) if self.noise_rel > 0 else 1.0
        accept_factor = max(0.5, draw.gauss(1.0, self.noise_rel / 2)) if self.noise_rel > 0 else 1.0
        return Evaluation(
            outcome="ok",
            tok_s=fixed.true_tok_s * factor,
            true_tok_s=fixed.true_tok_s,
            accept_length=fixed.accept_length * accept_factor,
            launch_s=fixed.launch_s,
            measure_s=self._measure_seconds(fixed.decode_s_per_round),
            stop_s=self.cost.stop_s,
            **fixed.server_memory(),
        )

    def true_value(self, flags: Mapping[str, FlagValue]) -> float | None:
        """The noise-free tok/s of a feasible candidate; None when it does not start."""
        return self._fixed(flags).true_tok_s

    def optimum(
        self,
        axes: Sequence[GridAxis],
        fixed: Mapping[str, FlagValue] | None = None,
        *,
        normalise: Callable[[dict[str, FlagValue]], dict[str, FlagValue] | None] | None = None,
        exhaustive: bool | None = None,
    ) -> Optimum:
        """The best feasible candidate of the grid (noise-free), exactly.

        Args:
            axes, fixed: the grid (see :func:`grid`).
            normalise: the engine's rules applied before launching (flags in, effective flags out,
                None when the engine refuses them without launching); candidates with equal
                effective flags are evaluated once.
            exhaustive: evaluate every candidate (and count how the grid splits). By default
                only grids up to ``EXHAUSTIVE_LIMIT`` candidates are; larger ones are searched by
                performance class (see :meth:`_optimum_by_class`), which evaluates every class and,
                best class first, only as many candidates as it takes to find one that starts.
        """
        fixed = dict(fixed or {})
        if exhaustive is None:
            # Counting stops past the limit: a family member's grid has millions of candidates.
            exhaustive = sum(1 for _ in itertools.islice(grid(axes, fixed), EXHAUSTIVE_LIMIT + 1)) <= EXHAUSTIVE_LIMIT
        if not exhaustive:
            found = self._optimum_by_class(axes, fixed, normalise)
            if found is not None:
                return found
        return self._optimum_exhaustive(axes, fixed, normalise)

    def _optimum_exhaustive(
        self,
        axes: Sequence[GridAxis],
        fixed: dict[str, FlagValue],
        normalise: Callable[[dict[str, FlagValue]], dict[str, FlagValue] | None] | None,
    ) -> Optimum:
        seen: set[tuple[tuple[str, FlagValue], ...]] = set()
        candidates = feasible = memory = invalid = 0
        values: list[float] = []
        best: tuple[float, dict[str, FlagValue]] | None = None
        ranked: dict[float, dict[str, FlagValue]] = {}
        for candidate in grid(axes, fixed):
            candidates += 1
            flags = normalise(candidate) if normalise is not None else candidate
            if flags is None:
                invalid += 1
                continue
            key = tuple(sorted(flags.items()))
            if key in seen:
                continue
            seen.add(key)
            result = self._compute(flags)
            if result.outcome == "invalid":
                invalid += 1
            elif result.outcome != "ok":
                memory += 1
            else:
                feasible += 1
                assert result.true_tok_s is not None
                values.append(result.true_tok_s)
                ranked.setdefault(round(result.true_tok_s, 9), dict(flags))
                if best is None or result.true_tok_s > best[0]:
                    best = (result.true_tok_s, dict(flags))
        if best is None:
            raise ValueError(f"no candidate of the grid ({candidates} candidates) starts on this landscape")
        return Optimum(
            tok_s=best[0],
            flags=best[1],
            exhaustive=True,
            candidates=candidates,
            distinct=len(seen),
            feasible=feasible,
            memory=memory,
            invalid=invalid,
            within_2pct=sum(1 for v in values if v >= 0.98 * best[0]),
            top=tuple(sorted(ranked.items(), key=lambda item: -item[0])[:TOP]),
        )

    def _optimum_by_class(
        self,
        axes: Sequence[GridAxis],
        fixed: dict[str, FlagValue],
        normalise: Callable[[dict[str, FlagValue]], dict[str, FlagValue] | None] | None,
        *,
        probes: int = 24,
    ) -> Optimum | None:
        """Split the axes into those that change the decode rate and those that only size memory.

        Each combination of the performance axes is a class whose members share one decode rate;
        the classes are ranked by it, and the first class with a member that starts holds the
        optimum. An axis counts as memory-only when varying it alone never changed the
        performance key of random candidates (at least ``probes`` of which launch) and it was varied
        from one that launches; every member evaluated is checked against its class's key: any
        doubt falls back to exhaustive evaluation (None).
        """
        rng = random.Random(20260501)

        def effective(candidate: dict[str, FlagValue]) -> dict[str, FlagValue] | None:
            return normalise(candidate) if normalise is not None else candidate

        def key_of(candidate: dict[str, FlagValue]) -> tuple[str | None, LaunchConfig | None]:
            flags = effective(candidate)
            if flags is None:
                return None, None
            try:
                cfg = resolve_launch(self._namespace(flags), self.profile)
            except (_ArgError, LaunchError):
                return None, None
            return repr(perf_key(cfg)), cfg

        def set_flags_key(candidate: dict[str, FlagValue]) -> str | None:
            return key_of({k: v for k, v in candidate.items() if v is not False})[0]

        # Memory-only needs evidence: varied from a sample that launches, with no second key. A sample that
        # does not (a two-drafter member's algorithm with the other drafter's path) shows nothing, so draws
        # go on past ``probes`` until as many launch; an axis never so varied changes the rate as far as known.
        relevant: set[str] = set()
        shown: set[str] = set()
        draws = launched = 0
        while draws < probes or (launched < probes and draws < 20 * probes):
            draws += 1
            sample = random_candidate(axes, fixed, rng)
            launches = set_flags_key(sample) is not None
            if draws > probes and not launches:
                continue
            launched += launches
            for axis in axes:
                if axis.name in relevant or axis.name not in sample:
                    continue
                if launches:
                    shown.add(axis.name)
                keys = set()
                for value in axis.values:
                    variant = {**sample, axis.name: value}
                    if set(random_candidate(axes, fixed, rng, keep=variant)) != set(sample):
                        relevant.add(axis.name)  # changes which other flags are set
                        break
                    key = set_flags_key(variant)
                    if key is not None:
                        keys.add(key)
                if len(keys) > 1:
                    relevant.add(axis.name)
        perf_axes = [a for a in axes if a.name in relevant or a.name not in shown]
        memory_axes = [a for a in axes if a.name in shown - relevant]
        if any(a.when is not None and a.when[0] in {m.name for m in memory_axes} for a in perf_axes):
            return None
        classes: list[tuple[float, str, dict[str, FlagValue]]] = []
        for combo in grid(perf_axes, fixed):
            for member in grid(memory_axes, combo):
                key, cfg = key_of(member)
                if key is not None and cfg is not None:
                    classes.append((self._performance(cfg)[0], key, combo))
                    break
        classes.sort(key=lambda c: -c[0])
        top: list[tuple[float, dict[str, FlagValue]]] = []
        for tok_s, key, combo in classes:
            for member in grid(memory_axes, combo):
                flags = effective(member)
                if flags is None:
                    continue
                result = self._compute(flags)
                if result.outcome != "ok":
                    continue
                if key_of(member)[0] != key:
                    return None  # a memory-only axis changed the decode rate after all
                if not top or tok_s < top[-1][0]:
                    top.append((tok_s, flags))
                break
            if len(top) == TOP:
                break
        if not top:
            raise ValueError("no candidate of the grid starts on this landscape")
        return Optimum(tok_s=top[0][0], flags=top[0][1], exhaustive=False, classes=len(classes), top=tuple(top))

    # ------------------------------------------------------------------ internals

    def _namespace(self, flags: Mapping[str, FlagValue]) -> argparse.Namespace:
        """SGLang's argparse result for these flags, built from one cached parse per flag value."""
        changes: dict[str, Any] = {}
        for name, value in flags.items():
            if value is False:
                continue
            key = (name, value)
            change = self._flag_cache.get(key)
            if change is None:
                change = self._parse_one(name, value)
                self._flag_cache[key] = change
            if isinstance(change, _ArgError):
                raise change
            changes.update(change)
        return _Args(self._base, changes)

    def _parse_one(self, name: str, value: FlagValue) -> dict[str, Any] | _ArgError:
        argv = ["--model-path", self.model_path, *flag_argv({name: value})]
        stderr = io.StringIO()
        try:
            with contextlib.redirect_stderr(stderr):
                parsed, _ = parse_args(argv)
        except SystemExit:
            lines = [line for line in stderr.getvalue().splitlines() if line.strip()]
            return _ArgError(lines[-1] if lines else f"error: cannot parse --{name} {value}")
        return {k: v for k, v in vars(parsed).items() if self._base.get(k, _MISSING) != v}

    def _fixed(self, flags: Mapping[str, FlagValue]) -> _Fixed:
        key = tuple(sorted(flags.items()))
        cached = self._cache.get(key)
        if cached is None:
            cached = self._cache[key] = self._compute(flags)
        return cached

    def _compute(self, flags: Mapping[str, FlagValue]) -> _Fixed:
        profile, cost = self.profile, self.cost
        try:
            cfg = resolve_launch(self._namespace(flags), profile)
        except _ArgError as err:
            return _Fixed(outcome="invalid", message=err.message, launch_s=cost.invalid_s)
        except LaunchError as err:
            message = f"{err.exc_type}: {err.message}" if err.message else err.exc_type
            return _Fixed(outcome="invalid", message=message, launch_s=cost.invalid_s)
        weights = physics.weight_bytes_per_gpu(profile, cfg)
        load_s = cost.startup_s + weights / cost.load_bytes_per_s
        try:
            plan = memory.plan_memory(profile, cfg)
        except MemoryFailure as failure:
            logged = float(weights) if failure.stage != "load" else None
            return _Fixed(
                outcome="load_oom" if failure.kind == "load_oom" else "too_low",
                message=f"{failure.exc_type}: {failure.message}",
                launch_s=load_s,
                weights_bytes=logged,
                server_free_bytes=float(memory.free_bytes_at_start(profile)),
            )
        sizes = {
            "weights_bytes": float(weights),
            "kv_pool_bytes": plan.kv_pool_bytes,
            "kv_tokens": plan.max_total_num_tokens,
            "server_free_bytes": float(plan.free_bytes),
            "avail_after_pools_bytes": plan.free_bytes - plan.weight_bytes - plan.pool_bytes,
        }
        try:
            memory.check_headroom(profile, plan)
        except MemoryFailure as failure:
            return _Fixed(
                outcome="too_high",
                message=f"{failure.exc_type}: {failure.message}",
                launch_s=load_s + cost.capture_s / 2,
                **sizes,  # type: ignore[arg-type]
            )
        tok_s, accept, decode_s = self._performance(cfg)
        return _Fixed(
            outcome="ok",
            true_tok_s=tok_s,
            accept_length=accept,
            decode_s_per_round=decode_s,
            launch_s=load_s + (0.0 if cfg.disable_cuda_graph else cost.capture_s),
            graph_bytes=plan.graph_bytes,
            graph_batch=plan.cuda_graph_bs or None,
            held_bytes=memory.held_bytes(profile, plan, ready=True),
            **sizes,  # type: ignore[arg-type]
        )

    def _performance(self, cfg: LaunchConfig) -> tuple[float, float, float]:
        """(mean decode tok/s, mean accept length, seconds of one round) at concurrency 1."""
        key = repr(perf_key(cfg))
        cached = self._perf_cache.get(key)
        if cached is None:
            cached = self._streams(cfg)
            if self.unmodelled is not None:
                tok_s, accept, round_s = cached
                changed, accept = self.unmodelled.apply(perf_key(cfg), tok_s, accept)
                cached = (changed, accept, round_s * tok_s / changed)  # a slower decode takes longer rounds
            self._perf_cache[key] = cached
        return cached

    def _streams(self, cfg: LaunchConfig) -> tuple[float, float, float]:
        rates, accepts, round_s = [], [], 0.0
        for prompt, klass in zip(self.prompts, self._classes, strict=True):
            tokens = self._completion_tokens(prompt, klass, cfg)
            rate, accept, decode_s = fluid_stream(self.profile, cfg, klass, tokens)
            rates.append(rate)
            accepts.append(accept)
            round_s += physics.prefill_seconds(self.profile, cfg, klass.prompt_tokens) + decode_s
        return sum(rates) / len(rates), sum(accepts) / len(accepts), round_s

    def _completion_tokens(self, prompt: Prompt, klass: physics.PromptClass, cfg: LaunchConfig) -> int:
        limit = prompt.max_new_tokens
        if self.measure.max_tokens is not None:
            limit = min(limit, self.measure.max_tokens)
        limit = max(1, min(limit, cfg.context_length - klass.prompt_tokens))
        if self.measure.ignore_eos:
            return limit
        return min(limit, physics.natural_completion_tokens(self.profile, prompt.text))

    def _measure_seconds(self, round_s: float) -> float:
        """Warm-up, then rounds until the CI target (by the noise), within the round and time caps."""
        shape = self.measure
        warmup = round_s * min(shape.warmup_requests, len(self.prompts)) / len(self.prompts)
        needed = math.ceil((2.0 * self.noise_rel / shape.target_rel_ci) ** 2) if self.noise_rel > 0 else 0
        rounds = max(shape.min_rounds, min(shape.max_rounds, needed))
        rounds = min(rounds, max(1, math.floor(shape.max_seconds / round_s))) if round_s > 0 else rounds
        return warmup + rounds * round_s


_MISSING = object()


class _Args(argparse.Namespace):
    """A parsed namespace: the values that differ from the defaults, the defaults behind them.

    Copying SGLang's ~530 defaults per candidate would dominate an exhaustive search.
    """

    def __init__(self, base: dict[str, Any], changes: dict[str, Any]) -> None:
        self.__dict__.update(changes)
        self._defaults = base

    def __getattr__(self, name: str) -> Any:
        try:
            return self.__dict__["_defaults"][name]
        except KeyError:
            raise AttributeError(name) from None
