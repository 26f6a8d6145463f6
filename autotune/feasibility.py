"""Memory feasibility: predict, before launching, whether a candidate fits; learn from launches.

From what a user's machine can know: the engine's memory rule with the free memory NVML reports and
the model's weight bytes, the launches that died of memory (feasibility is monotone in the fraction
and the demands), and the launches that served (the headroom they used). How each speaks for a
candidate: docs/how-it-works.md, "Memory: predicted and learned".
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from pathlib import Path

from autotune.headroom_figures import added_on_top, death_speaks
from autotune.memory_types import (
    FractionWindow,
    GraphPoint,
    HeadroomUse,
    MemoryLesson,
    MemoryRules,
    Observation,
    Prediction,
)
from autotune.outcomes import MemorySide as Side
from autotune.space import FlagValue

# The interface: the model, and the data it reads and answers with (defined in memory_types).
__all__ = [
    "HEADROOM_MARGIN_BYTES",
    "SCALE_UNSET",
    "FeasibilityModel",
    "FractionWindow",
    "HeadroomUse",
    "MemoryLesson",
    "MemoryRules",
    "Prediction",
    "model_weight_bytes",
]

# SGLang and vLLM read an unset --kv-cache-dtype as "auto" (the model's dtype), and their rules drop
# an explicit "auto": an unset scaled flag is compared as this value.
SCALE_UNSET = "auto"

# Logged figures have two decimals of GB and NVML is sampled: a prediction from a served run needs
# the candidate to miss by more than this to call it infeasible.
HEADROOM_MARGIN_BYTES = 128 * 2**20


def _number(value: FlagValue | None) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except ValueError:
        return None


def _dominates(
    failed: Mapping[str, FlagValue],
    candidate: Mapping[str, FlagValue],
    *,
    demand: frozenset[str],
    ignore: frozenset[str],
    scale: Mapping[str, Mapping[str, float]] | None = None,
) -> bool:
    """Every demand flag of the candidate is at least the failed one's (``scale``: by the factor
    of its value); every other flag equal."""
    for name in set(failed) | set(candidate):
        if name in ignore:
            continue
        a, b = failed.get(name), candidate.get(name)
        factors = _factors(scale, name, a, b)
        if factors is not None:
            if factors[1] < factors[0]:
                return False
        elif name in demand and a is not None and b is not None:
            fa, fb = _number(a), _number(b)
            if fa is None or fb is None or fb < fa:
                return False
        elif a != b:
            return False
    return True


def _factors(
    scale: Mapping[str, Mapping[str, float]] | None, name: str, a: FlagValue | None, b: FlagValue | None
) -> tuple[float, float] | None:
    """The scale factors of two values of ``name``, when the rules know both (unset: the engine's default)."""
    known = scale.get(name) if scale else None
    if known is None:
        return None
    a, b = (SCALE_UNSET if value is None else value for value in (a, b))
    if not isinstance(a, str) or not isinstance(b, str) or a not in known or b not in known:
        return None
    return known[a], known[b]


def _loosely_dominates(
    failed: Mapping[str, FlagValue],
    candidate: Mapping[str, FlagValue],
    *,
    demand: frozenset[str],
    ignore: frozenset[str],
    relevant: set[str],
    tp_flag: str,
    only_here: frozenset[str],
    ordered: bool,
    scale: Mapping[str, Mapping[str, float]] | None = None,
) -> bool:
    """:func:`_dominates` with presumptions a served launch can refute (``relevant``): a flag set on
    both sides may differ (a backend, a dtype, a drafter, a demand: they move a boundary little next
    to the fraction), unless the rules name it as mattering to this boundary only without ordering
    it (``only_here``: a split ratio is not monotone); a tensor-parallel size no larger is no less
    demanding. ``ordered``: demands keep their order (graphs grow with them much as with the fraction).
    ``scale``: flags compared by a known factor of their values, never presumed."""
    kept = only_here | (demand if ordered else frozenset())
    presumed = {
        n
        for n in set(failed) & set(candidate)
        if n not in relevant
        and n != tp_flag
        and n not in kept
        and _factors(scale, n, failed.get(n), candidate.get(n)) is None
    }
    tp_failed, tp_candidate = _number(failed.get(tp_flag)), _number(candidate.get(tp_flag))
    if tp_failed is not None and tp_candidate is not None:
        if tp_candidate > tp_failed:
            return False
        presumed.add(tp_flag)
    return _dominates(failed, candidate, demand=demand, ignore=ignore | presumed, scale=scale)


class FeasibilityModel:
    """What is known about memory in one study; ``predict`` before each launch, ``observe`` after.

    Args:
        rules: the engine's memory rules (None: never predict anything).
        free_bytes: free memory per GPU at study start (the smallest over the GPUs used).
        total_bytes: memory per GPU (the smallest); needed by rules whose budget is of the total.
        weight_bytes: the model's weight bytes, all shards together (None if unknown).
        unset_graph_tokens: the tokens the engine's own graph batch captures for flags that leave it
            unset (:meth:`~autotune.engines.base.Engine.graph_tokens_captured`); None: unknown.
    """

    def __init__(
        self,
        rules: MemoryRules | None,
        *,
        free_bytes: float | None,
        weight_bytes: float | None,
        total_bytes: float | None = None,
        unset_graph_tokens: Callable[[Mapping[str, FlagValue]], float | None] | None = None,
    ) -> None:
        self.rules = rules
        self.unset_graph_tokens = unset_graph_tokens
        self.free_bytes = free_bytes
        self.server_free_logged: float | None = None
        self.total_bytes = total_bytes
        self.weight_bytes = weight_bytes
        self.weights_total_logged: float | None = None
        self.graph_points: list[GraphPoint] = []
        self.failures: list[Observation] = []
        self.headroom_uses: list[HeadroomUse] = []
        # Unordered flags a served launch showed to move each boundary (docs/how-it-works.md, "Memory", 4).
        self.relevant: dict[Side, set[str]] = {"too-low": set(), "too-high": set()}
        self.state_relevant: set[str] = set()  # the same for state-cache deaths, compared on their own flags
        self.served: list[dict[str, FlagValue]] = []

    def learn(self, lesson: MemoryLesson) -> None:
        """Everything one trial taught: its failure side, logged weights and graphs, free memory, headroom use."""
        if lesson.side is not None:
            self.observe(
                lesson.flags,
                lesson.side,
                trial=lesson.trial,
                state_short=lesson.state_short,
                shortfall=lesson.headroom_shortfall_bytes,
            )
        if lesson.served:
            self.observe_served(lesson.flags)
        if lesson.weights_bytes:
            self.observe_weights(lesson.weights_bytes, flags=lesson.flags)
        if lesson.graph_bytes:
            self.observe_graph(lesson.graph_bytes, flags=lesson.flags, logged_batch=lesson.graph_batch)
        if lesson.server_free_bytes is not None:
            self.observe_server_free(lesson.server_free_bytes)
            if lesson.runtime_bytes is not None:
                self.observe_headroom(
                    HeadroomUse(
                        flags=lesson.flags,
                        server_free_bytes=lesson.server_free_bytes,
                        runtime_bytes=lesson.runtime_bytes,
                        trial=lesson.trial,
                    )
                )

    def observe(
        self,
        flags: Mapping[str, FlagValue],
        side: Side,
        *,
        trial: int | None = None,
        state_short: bool = False,
        shortfall: float | None = None,
    ) -> None:
        failure = Observation(
            flags=dict(flags), side=side, trial=trial, state_short=state_short, shortfall_bytes=shortfall
        )
        self.failures.append(failure)
        for served in self.served:  # a launch that served earlier may already contradict it
            self._contradict(failure, served)

    def observe_served(self, flags: Mapping[str, FlagValue]) -> None:
        """A launch that served: every failure that presumed it would fail loses that presumption
        for the unordered flags the two differ in."""
        self.served.append(dict(flags))
        for failure in self.failures:
            self._contradict(failure, flags)

    def _contradict(self, failure: Observation, served: Mapping[str, FlagValue]) -> None:
        if self.rules is not None and self._presumed(failure, served):
            failed, served = self._filled(failure.flags), self._filled(served)
            refuted = self.state_relevant if failure.state_short else self.relevant[failure.side]
            refuted |= {
                name
                for name in set(failed) & set(served)
                if failed[name] != served[name] and name != self.rules.fraction_flag
            }

    def _filled(self, flags: Mapping[str, FlagValue]) -> dict[str, FlagValue]:
        """``flags`` with each scaled flag left unset at the value the engine takes for it (``auto``), so
        an unset KV dtype is compared and presumed like a given one."""
        assert self.rules is not None
        return {**{name: SCALE_UNSET for name in self.rules.pool_scale}, **flags}

    def _presumed(self, failure: Observation, flags: Mapping[str, FlagValue]) -> bool:
        """Whether ``failure`` speaks for ``flags`` only by presuming unordered flags irrelevant."""
        assert self.rules is not None
        rules = self.rules
        fraction, failed_fraction = self._fraction(flags), self._fraction(failure.flags)
        if fraction is None or failed_fraction is None:
            if not self._same_default_fraction(failure.flags, flags):
                return False
            fraction = failed_fraction = 0.0  # the engine's own choice, the same for both
        if failure.side == "too-low" and failure.state_short:
            failed, candidate, refuted = self._filled(failure.flags), self._filled(flags), self.state_relevant
            return fraction <= failed_fraction and rules.state_no_roomier(failed, candidate, relevant=refuted)
        if failure.side == "too-low":
            beyond, demand, ignore = fraction <= failed_fraction, rules.pool_demand, rules.pool_irrelevant
            only_here, scale = rules.headroom_irrelevant - demand, rules.pool_scale
        else:
            beyond, demand, ignore = fraction >= failed_fraction, rules.headroom_demand, rules.headroom_irrelevant
            only_here, scale = rules.pool_irrelevant - demand, {}
        ignore = ignore | {rules.fraction_flag}
        return beyond and _loosely_dominates(
            self._filled(failure.flags),
            self._filled(flags),
            demand=demand,
            ignore=ignore,
            relevant=self.relevant[failure.side],
            tp_flag=rules.tp_flag,
            only_here=only_here - ignore,
            ordered=failure.side == "too-high",
            scale=scale,
        )

    def covers(self, served: Mapping[str, FlagValue], candidate: Mapping[str, FlagValue]) -> bool:
        """Whether a launch that served with ``served`` shows that ``candidate`` fits too (it vouches
        for it): the same fraction, a tensor-parallel size no smaller, demands no larger (a KV
        dtype by its factor), other values equal, except unordered ones (a backend) that no launch has
        shown to matter and that do not choose weights."""
        return self.excess(served, candidate) == 0

    def excess(self, served: Mapping[str, FlagValue], candidate: Mapping[str, FlagValue]) -> int | None:
        """How many demands (a smaller tensor-parallel size counts as one) ``candidate`` has beyond a
        launch that served with ``served``, where it is otherwise alike as :meth:`covers` asks;
        None where it is not alike (another fraction, other weights, a demand or a switch set on one side
        only, a larger KV dtype: every token's pool doubles, which no count of demands weighs)."""
        if self.rules is None or self._fraction(served) != self._fraction(candidate):
            return None
        rules = self.rules
        demand = rules.pool_demand | rules.headroom_demand | rules.activation_demand
        ignore = (rules.pool_irrelevant & rules.headroom_irrelevant) | {rules.fraction_flag}
        strict = rules.weights_flags | self.relevant["too-low"] | self.relevant["too-high"]
        larger = 0
        for name in (set(served) | set(candidate)) - ignore:
            a, b = served.get(name), candidate.get(name)
            if a == b:
                continue
            factors = _factors(rules.pool_scale, name, a, b)
            if factors is not None:
                if factors[1] > factors[0]:
                    return None  # a larger KV dtype scales the whole pool, not one demand among several
            elif name == rules.tp_flag or name in demand:
                fa, fb = _number(a), _number(b)
                if fa is None or fb is None:
                    return None
                larger += fb < fa if name == rules.tp_flag else fb > fa
            elif name in strict or not all(isinstance(v, str) for v in (a, b) if v is not None):
                return None  # unordered: presumed alike only for a choice (a string) no launch showed to matter;
                # unset is the engine's own choice, one more such value
        return larger

    def fraction_window(self, flags: Mapping[str, FlagValue]) -> FractionWindow:
        """Where deaths of launches with the same weights and tensor-parallel size leave ``flags``'s
        fraction open: above the highest "too low" one whose KV dtype is no
        larger, below the lowest "too high" one. Other demands are not compared: a hint where to
        launch, never a prediction."""
        if self.rules is None:
            return FractionWindow()
        rules = self.rules
        same = rules.weights_flags | {rules.tp_flag}
        low: tuple[float, int | None] | None = None
        high: tuple[float, int | None] | None = None
        for failure in self.failures:
            fraction = _number(failure.flags.get(rules.fraction_flag))
            if fraction is None or any(failure.flags.get(n) != flags.get(n) for n in same):
                continue
            if failure.side == "too-low":
                factors = [_factors(rules.pool_scale, n, failure.flags.get(n), flags.get(n)) for n in rules.pool_scale]
                if all(f is not None and f[1] >= f[0] for f in factors) and (low is None or fraction > low[0]):
                    low = (fraction, failure.trial)
            elif high is None or fraction < high[0]:
                high = (fraction, failure.trial)
        return FractionWindow(
            low=low[0] if low else None,
            low_trial=low[1] if low else None,
            high=high[0] if high else None,
            high_trial=high[1] if high else None,
        )

    def _differing(self, failure: Observation, flags: Mapping[str, FlagValue]) -> str:
        """The unordered values a prediction presumed not to matter, for its reason."""
        assert self.rules is not None
        failed, flags = self._filled(failure.flags), self._filled(flags)
        ordered = self.rules.pool_scale if failure.side == "too-low" else {}  # compared by factor, not presumed
        names = sorted(
            n
            for n in set(failed) & set(flags)
            if failed[n] != flags[n]
            and n != self.rules.fraction_flag
            and _number(flags[n]) is None
            and _factors(ordered, n, failed[n], flags[n]) is None
        )
        return f" (presuming {', '.join(names)} do not matter)" if names else ""

    def observe_weights(self, bytes_per_gpu: float, *, flags: Mapping[str, FlagValue]) -> None:
        """The weights per GPU a server logged under ``flags``: better than the estimate from the
        model's files. Kept as the whole model's size, so another tensor-parallel size divides it."""
        self.weights_total_logged = bytes_per_gpu * self._tp(flags)

    def observe_server_free(self, free_bytes: float) -> None:
        """The free memory a server measured before loading (after its own CUDA context): the
        memory its fraction is of. Of several readings the largest, so nothing is called
        infeasible on a reading that happened to be low."""
        current = self.server_free_logged
        self.server_free_logged = free_bytes if current is None else max(current, free_bytes)

    @property
    def start_free_bytes(self) -> float | None:
        """Free memory at a server's start: as servers logged it, else NVML's reading."""
        return self.server_free_logged if self.server_free_logged is not None else self.free_bytes

    def _fraction(self, flags: Mapping[str, FlagValue]) -> float | None:
        assert self.rules is not None
        value = _number(flags.get(self.rules.fraction_flag))
        return value if value is not None else self.rules.default_fraction

    def _same_default_fraction(self, a: Mapping[str, FlagValue], b: Mapping[str, FlagValue]) -> bool:
        """Whether two launches that leave the fraction to the engine get the same one: an engine that
        computes its default (SGLang's reserve formula) reads the GPU, the tensor-parallel size, the
        drafter and the headroom demands (graph batch, prefill chunk, draft tokens), so those must agree."""
        assert self.rules is not None
        rules = self.rules
        if any(rules.fraction_flag in flags for flags in (a, b)) or rules.default_fraction is not None:
            return False
        return all(a.get(name) == b.get(name) for name in {rules.tp_flag} | rules.headroom_demand | rules.weights_flags)

    def graph_tokens(self, flags: Mapping[str, FlagValue], *, logged_batch: int | None = None) -> float | None:
        """Tokens captured by the largest decode graph (batch x tokens per sequence), if known;
        ``logged_batch``: the largest batch the server said it captured (when the flag is unset)."""
        if self.rules is None or self.rules.graph_batch_flag is None:
            return None
        batch = _number(flags.get(self.rules.graph_batch_flag))
        if batch is None and not logged_batch and self.unset_graph_tokens is not None:
            return self.unset_graph_tokens(flags)
        batch = batch if batch is not None else (float(logged_batch) if logged_batch else None)
        cap = _number(flags.get(self.rules.graph_batch_cap_flag)) if self.rules.graph_batch_cap_flag else None
        if batch is not None and cap is not None:
            batch = min(batch, cap)
        width = _number(flags.get(self.rules.graph_width_flag)) if self.rules.graph_width_flag else None
        return batch * (width or 1.0) if batch is not None else None

    def observe_graph(
        self, graph_bytes: float, *, flags: Mapping[str, FlagValue], logged_batch: int | None = None
    ) -> None:
        """Graph memory a server logged, at the tokens its graphs captured."""
        tokens = self.graph_tokens(flags, logged_batch=logged_batch)
        if tokens:
            self.graph_points.append(GraphPoint(tokens=tokens, bytes=graph_bytes))

    @property
    def graph_bytes_per_token_max(self) -> float | None:
        """Graphs cost a fixed part plus a part per captured token, so bytes / tokens of any
        launch bounds the per-token part from above: the tightest bound."""
        return min((p.bytes / p.tokens for p in self.graph_points), default=None)

    def graph_bytes_at_least(self, tokens: float | None) -> float:
        """A lower bound of the graph memory at ``tokens`` (unknown: the fewest tokens, 0): graphs
        never shrink with more tokens, and grow per token by at most the per-token bound. Beyond
        the most tokens seen, they keep growing by the observed slope when the observations lie on
        a line (:meth:`graph_slope`), less a tenth for safety."""
        per_token = self.graph_bytes_per_token_max
        at = tokens or 0.0
        bounds = [0.0]
        for point in self.graph_points:
            if point.tokens <= at:
                bounds.append(point.bytes)
            elif per_token is not None:
                bounds.append(point.bytes - per_token * (point.tokens - at))
        slope = self.graph_slope()
        if slope is not None:
            top = max(self.graph_points, key=lambda p: p.tokens)
            if at > top.tokens:
                bounds.append(top.bytes + 0.9 * slope * (at - top.tokens))
        return max(bounds)

    def graph_slope(self) -> float | None:
        """Graph bytes per captured token, when at least three token counts were logged and all lie
        within 5 % (or 32 MiB) of one rising line; else None (no extrapolation)."""
        by_tokens: dict[float, list[float]] = {}
        for point in self.graph_points:
            by_tokens.setdefault(point.tokens, []).append(point.bytes)
        if len(by_tokens) < 3:
            return None
        xs = list(by_tokens)
        ys = [sum(values) / len(values) for values in by_tokens.values()]
        mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
        spread = sum((x - mean_x) ** 2 for x in xs)
        slope = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / spread
        intercept = mean_y - slope * mean_x
        tolerance = [max(0.05 * y, 32 * 2**20) for y in ys]
        if slope <= 0 or any(abs(intercept + slope * x - y) > t for x, y, t in zip(xs, ys, tolerance, strict=True)):
            return None
        return slope

    def observe_headroom(self, use: HeadroomUse) -> None:
        """What a launch that served used of its headroom besides the graphs."""
        if self.rules is not None and self.rules.graph_batch_flag is not None:
            self.headroom_uses.append(use)

    def _served_bound(self, flags: Mapping[str, FlagValue], fraction: float) -> HeadroomUse | None:
        """A served run whose run-time memory, plus this candidate's graphs, exceeds its headroom."""
        assert self.rules is not None
        rules = self.rules
        graphs = self.graph_bytes_at_least(self.graph_tokens(flags))
        for use in self.headroom_uses:
            ignore = rules.graph_ignored | {rules.fraction_flag}
            if not _dominates(use.flags, flags, demand=rules.activation_demand, ignore=ignore):
                continue
            if use.runtime_bytes + graphs > (1 - fraction) * use.server_free_bytes + HEADROOM_MARGIN_BYTES:
                return use
        return None

    def _headroom_bound(self, failure: Observation, flags: Mapping[str, FlagValue], fraction: float) -> bool:
        """A too-high failure at headroom h_F and graph tokens T_F means the need at T_F exceeds h_F (by
        what its message showed): :func:`~autotune.headroom_figures.death_speaks`."""
        free = self.start_free_bytes
        assert self.rules is not None and free is not None
        t_failed, t_candidate = self.graph_tokens(failure.flags), self.graph_tokens(flags)
        failed_fraction = self._fraction(failure.flags)
        if t_failed is None or t_candidate is None or failed_fraction is None:
            return False
        ignore = self.rules.graph_ignored | {self.rules.fraction_flag} | added_on_top(self.rules, failure.flags, flags)
        g, short = self.graph_bytes_per_token_max, failure.shortfall_bytes
        return _dominates(failure.flags, flags, demand=frozenset(), ignore=ignore) and death_speaks(
            free, (failed_fraction, t_failed), (fraction, t_candidate), per_token_max=g, shortfall=short
        )

    def _tp(self, flags: Mapping[str, FlagValue]) -> float:
        return (_number(flags.get(self.rules.tp_flag)) if self.rules else None) or 1.0

    def weights_per_gpu(self, flags: Mapping[str, FlagValue]) -> float | None:
        total = self.weights_total_logged if self.weights_total_logged is not None else self.weight_bytes
        return total / self._tp(flags) if total is not None else None

    def predict(self, flags: Mapping[str, FlagValue]) -> Prediction:
        if self.rules is None:
            return Prediction(feasible=True)
        rules = self.rules
        fraction = self._fraction(flags)
        weights = self.weights_per_gpu(flags)
        free = self.start_free_bytes
        base = self.total_bytes if rules.budget_of == "total" else free
        pool = fraction * base - weights if None not in (fraction, weights, base) else None  # type: ignore[operator]
        if rules.budget_of == "total" and None not in (fraction, base, self.free_bytes):
            budget = fraction * base  # type: ignore[operator]
            if budget > self.free_bytes:  # type: ignore[operator]
                return Prediction(
                    feasible=False,
                    side="too-high",
                    pool_bytes=pool,
                    reason=f"{rules.fraction_flag} {fraction:g} asks for {budget / 2**30:.1f} GiB of the GPU's "
                    f"{base / 2**30:.1f} GiB, but only {self.free_bytes / 2**30:.1f} GiB are free",  # type: ignore[operator]
                )
        if weights is not None and free is not None and weights >= free:
            return Prediction(
                feasible=False,
                side="too-high",
                pool_bytes=pool,
                reason=f"the weights ({weights / 2**30:.1f} GiB per GPU) exceed the free memory "
                f"({free / 2**30:.1f} GiB)",
            )
        if pool is not None and pool <= 0:
            return Prediction(
                feasible=False,
                side="too-low",
                pool_bytes=pool,
                reason=f"{rules.fraction_flag} {fraction:g} of {base / 2**30:.1f} GiB {rules.budget_of} leaves nothing "  # type: ignore[operator]
                f"after {weights / 2**30:.1f} GiB of weights per GPU",  # type: ignore[operator]
            )
        failed_alike = self._failed_alike(rules, flags, fraction, pool)
        if failed_alike is not None:
            return failed_alike
        served = self._served_bound(flags, fraction) if fraction is not None else None
        if served is not None:
            headroom = (1 - fraction) * served.server_free_bytes  # type: ignore[operator]
            return Prediction(
                feasible=False,
                side="too-high",
                pool_bytes=pool,
                reason=f"{rules.fraction_flag} {fraction:g} leaves {headroom / 2**30:.2f} GiB of headroom; trial "
                f"{served.trial} used {served.runtime_bytes / 2**30:.2f} GiB besides its graphs, and these graphs "
                f"need at least {self.graph_bytes_at_least(self.graph_tokens(flags)) / 2**30:.2f} GiB",
            )
        return Prediction(feasible=True, pool_bytes=pool)

    def _failed_alike(
        self, rules: MemoryRules, flags: Mapping[str, FlagValue], fraction: float | None, pool: float | None
    ) -> Prediction | None:
        """The death that speaks for ``flags``: a pool death with demands no larger, or a headroom
        death with graphs no smaller by more than the headroom gained; None if none does."""
        for failure in self.failures:
            failed_fraction = self._fraction(failure.flags)
            at = (
                f"{rules.fraction_flag} {failed_fraction:g}"
                if failed_fraction is not None
                else (f"the engine's own {rules.fraction_flag} (the same for both)")
            )
            if failure.side == "too-low" and self._presumed(failure, flags):
                said = f"trial {failure.trial} ran out of pool memory at {at} with demands no larger"
                if failure.state_short:
                    said = f"trial {failure.trial}'s hybrid state cache ran short at {at}; this one's is no larger"
                    said += " per request (a state ratio no larger, state demands such as draft tokens no smaller)"
                return Prediction(
                    feasible=False,
                    side="too-low",
                    pool_bytes=pool,
                    reason=said if failure.state_short else f"{said}{self._differing(failure, flags)}",
                )
            if failure.side == "too-high" and (
                self._presumed(failure, flags)
                or (fraction is not None and self._headroom_bound(failure, flags, fraction))
            ):
                return Prediction(
                    feasible=False,
                    side="too-high",
                    pool_bytes=pool,
                    reason=f"trial {failure.trial} ran out of headroom at {at}; graphs no smaller by more than "
                    f"the headroom gained{self._differing(failure, flags)}",
                )
        return None


def model_weight_bytes(model: str) -> float | None:
    """Weight bytes of a local model: a single-file model (a GGUF holds its weights, a few KiB of
    metadata aside) or a folder (safetensors index, else the files' sizes); None if remote."""
    folder = Path(model)
    if folder.is_file():
        return float(folder.stat().st_size)
    if not folder.is_dir():
        return None
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            total = json.loads(index.read_text())["metadata"]["total_size"]
            return float(total)
        except (KeyError, TypeError, ValueError):
            pass
    sizes = [p.stat().st_size for p in folder.glob("*.safetensors")]
    return float(sum(sizes)) if sizes else None
