"""A hybrid model's state cache, fitted per study from the engine's own figures: how many request slots
the cache of a proposal can hold at most, and whether that is fewer than one request needs
(docs/rules.md, "Memory").

An engine that sizes the state cache itself (SGLang's mamba cache, unless its size is given) splits the
pool ``fraction x free - weights`` by the state ratio r, gives the state ``r / (1 + r)`` of it, and
divides that by what one slot costs: a fixed state plus an intermediate state per draft token,
``a + b x draft tokens`` (a, b >= 0). Each launch that logged its slots, and each death that printed
them, bounds that cost at its draft tokens from both sides (slots S means a cost in
``(budget / (S + 1), budget / S]``); the costs a line a + b d can take under every bound form a polygon,
and its least cost at a proposal's draft tokens gives the most slots the proposal's cache can hold.
Where no two launches alike bound it, or the bounds contradict the line, it says nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from autotune.memory_types import MemoryLesson, MemoryRules, Prediction, flag_number
from autotune.space import FlagValue

# Logged free memory and weights carry two decimals of GB: each may be off by half of 0.01 GiB.
LOGGED_BYTES = 0.005 * 2**30
_LARGE = 1e18  # bytes: the corner of the cost plane no bound has yet cut


@dataclass(frozen=True)
class StateFigure:
    """One launch's state cache: its slots at a draft width, from a pool bounded by its logged figures."""

    trial: int
    width: float
    slots: int
    budget_low: float
    budget_high: float
    per_request: int | None  # slots one request needs, where a death printed it


@dataclass
class _Group:
    """Launches alike in everything that sizes a state slot but the fraction, the ratio and the draft width."""

    figures: list[StateFigure] = field(default_factory=list)
    weights: list[float] = field(default_factory=list)
    free: list[float] = field(default_factory=list)
    polygon: list[tuple[float, float]] = field(
        default_factory=lambda: [(0.0, 0.0), (_LARGE, 0.0), (_LARGE, _LARGE), (0.0, _LARGE)]
    )

    def add(self, figure: StateFigure) -> None:
        """One more figure: the (a, b) a slot's cost ``a + b x width`` can take, cut by its bounds."""
        self.figures.append(figure)
        self.polygon = _clip(self.polygon, figure.width, figure.budget_low / (figure.slots + 1), above=True)
        if figure.slots > 0:
            self.polygon = _clip(self.polygon, figure.width, figure.budget_high / figure.slots, above=False)


def _clip(polygon: list[tuple[float, float]], width: float, bound: float, *, above: bool) -> list[tuple[float, float]]:
    """The part of a convex polygon where ``a + b x width`` is at least (``above``) or at most ``bound``."""

    def side(point: tuple[float, float]) -> float:
        value = point[0] + point[1] * width - bound
        return value if above else -value

    kept: list[tuple[float, float]] = []
    for i, point in enumerate(polygon):
        following = polygon[(i + 1) % len(polygon)]
        here, there = side(point), side(following)
        if here >= 0:
            kept.append(point)
        if (here >= 0) != (there >= 0):
            t = here / (here - there)
            kept.append((point[0] + t * (following[0] - point[0]), point[1] + t * (following[1] - point[1])))
    return kept


@dataclass(frozen=True)
class StateBound:
    """What the fit says of a proposal's state cache: at most ``slots`` slots, one request needing ``needed``."""

    slots: int
    needed: int
    trials: tuple[int, ...]


class StateCacheFit:
    """Per study: the state cache's slot cost, fitted from launches' logged or printed slots (an engine
    without memory rules, or without a state ratio, has none: nothing is fitted and nothing said)."""

    def __init__(self, rules: MemoryRules | None) -> None:
        self.rules = rules if rules is not None and rules.kv_share_flag is not None else None
        self.groups: dict[tuple[tuple[str, str], ...], _Group] = {}

    def _place(self, flags: Mapping[str, FlagValue]) -> tuple[tuple[tuple[str, str], ...], float, float, float] | None:
        """The group key, the fraction, the ratio's share and the draft width of ``flags``; None where the
        engine does not size the state cache from the pool and the ratio (a flag gives its size) or the
        fraction is the engine's own."""
        rules = self.rules
        if rules is None or any(flags.get(name) not in (None, False) for name in rules.state_size_flags):
            return None
        fraction = flag_number(flags.get(rules.fraction_flag))
        ratio = flag_number(flags.get(rules.kv_share_flag or "", rules.kv_share_default))
        if fraction is None or ratio is None or ratio < 0:
            return None
        width = (flag_number(flags.get(rules.state_width_flag)) if rules.state_width_flag else None) or 0.0
        varying = {rules.fraction_flag, rules.kv_share_flag, rules.state_width_flag} | rules.state_demand
        skip = varying | rules.state_irrelevant
        key = tuple(sorted((name, repr(value)) for name, value in flags.items() if name not in skip))
        return key, fraction, ratio / (1 + ratio), width

    def learn(self, lesson: MemoryLesson) -> None:
        """A launch's state slots (logged by one that served, printed by a death), with its pool's figures."""
        place = self._place(lesson.flags)
        if place is None or lesson.state_slots is None:
            return
        if lesson.weights_bytes is None or lesson.server_free_bytes is None:
            return
        key, fraction, share, width = place
        group = self.groups.setdefault(key, _Group())
        group.weights.append(lesson.weights_bytes)
        group.free.append(lesson.server_free_bytes)
        low_pool = fraction * (lesson.server_free_bytes - LOGGED_BYTES) - lesson.weights_bytes - LOGGED_BYTES
        high_pool = fraction * (lesson.server_free_bytes + LOGGED_BYTES) - lesson.weights_bytes + LOGGED_BYTES
        group.add(
            StateFigure(
                trial=lesson.trial,
                width=width,
                slots=max(lesson.state_slots, 0),
                budget_low=max(low_pool, 0.0) * share,
                budget_high=max(high_pool, 0.0) * share,
                per_request=lesson.state_per_request,
            )
        )

    def bound(self, flags: Mapping[str, FlagValue]) -> StateBound | None:
        """The most slots ``flags``' state cache can hold and the slots one request needs (the fewest any
        alike death printed, else one); None where the figures do not bound it."""
        place = self._place(flags)
        group = self.groups.get(place[0]) if place is not None else None
        if place is None or group is None:
            return None
        _, fraction, share, width = place
        polygon = group.polygon
        if len(polygon) < 3:
            return None  # the figures contradict a cost linear in the draft width: say nothing
        cost = min(a + b * width for a, b in polygon)
        if cost <= 0:
            return None
        pool = fraction * (max(group.free) + LOGGED_BYTES) - min(group.weights) + LOGGED_BYTES
        needed = min((f.per_request for f in group.figures if f.per_request), default=1)
        return StateBound(
            slots=int(max(pool, 0.0) * share // cost), needed=needed, trials=tuple(f.trial for f in group.figures)
        )

    def predict(self, flags: Mapping[str, FlagValue], pool_bytes: float | None) -> Prediction | None:
        """A pool death where the fitted state cache holds fewer slots than one request needs; else None."""
        bound = self.bound(flags)
        if bound is None or bound.slots >= bound.needed:
            return None
        trials = ", ".join(str(t) for t in bound.trials)
        return Prediction(
            feasible=False,
            side="too-low",
            pool_bytes=pool_bytes,
            reason=f"the hybrid state cache would hold at most {bound.slots} slots, fewer than the {bound.needed} "
            f"one request needs (its slot cost fitted from the slots trials {trials} logged or printed)",
        )
