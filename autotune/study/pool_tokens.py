"""The KV pool in the engine's own units: how many tokens a plan's pool holds, fitted per study from
the figures the engines printed and logged, and whether it holds one request of the plan's context.

Every launch that sized its pool says how many tokens it held at its fraction (a death printed it, a
served launch logged it; :class:`~autotune.memory_types.MemoryLesson`). The pool grows linearly with
the fraction: by the free memory the fraction is of, over the bytes per token, where the launch also
logged its weights and free memory (the pool is fraction x free - weights), else by the budget over the
KV cell it logged or printed. A point speaks for a plan alike in every flag but the fraction, the
context, the KV cache dtype (the cell scales by the dtype's bytes) and the hybrid state ratio (the
full-attention KV gets ``1 / (1 + r)`` of the pool), and the flags that change neither the pool's bytes
per token nor the request's tokens (:attr:`MemoryRules.per_token_neutral`). Of several points the most
generous answer counts: a context is called unfit only when every launch that speaks says so.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import Field

from autotune.kv_layout import KvLayout
from autotune.memory_types import MemoryLesson, MemoryRules, flag_number
from autotune.models import Frozen
from autotune.records import TrialRecord
from autotune.space import CategoricalParam, FlagValue, FloatParam, IntParam, SearchSpace

# The figures are rounded (a page of tokens, two decimals of GB): a pool is called too small only when
# it misses one request by more than this share.
MARGIN = 0.01


@dataclass(frozen=True)
class PoolPoint:
    """One launch's pool: the tokens it held at its fraction, and how fast they grow with the fraction."""

    trial: int
    flags: Mapping[str, FlagValue]
    fraction: float
    tokens: int
    per_fraction: float | None  # tokens per unit of fraction; None: unknown (the point bounds lower fractions only)
    died: bool


class PoolEstimate(Frozen):
    """The most tokens a plan's pool holds at a fraction, by the launches that speak for it."""

    tokens: float
    fraction: float
    trials: tuple[int, ...] = Field(description="the launches whose pools say it")
    cell_trials: tuple[int, ...] = Field(
        default=(), description="before any alike launch: the launches whose logged KV bytes per token it used"
    )


def pool_point(lesson: MemoryLesson, rules: MemoryRules, *, budget_bytes: float | None, died: bool) -> PoolPoint | None:
    """The pool a launch's lesson states, or None where it stated no tokens or no fraction."""
    fraction = flag_number(lesson.flags.get(rules.fraction_flag))
    fraction = fraction if fraction is not None else lesson.pool_fraction
    fraction = fraction if fraction is not None else rules.default_fraction
    if not lesson.pool_tokens or fraction is None:
        return None
    per_fraction = None
    free, weights = lesson.server_free_bytes, lesson.weights_bytes
    if rules.budget_of == "free" and free and weights is not None and fraction * free > weights:
        per_fraction = free * lesson.pool_tokens / (fraction * free - weights)
    elif budget_bytes and lesson.kv_cell_bytes:
        per_fraction = budget_bytes * kv_share(rules, lesson.flags) / lesson.kv_cell_bytes
    return PoolPoint(
        trial=lesson.trial,
        flags=lesson.flags,
        fraction=fraction,
        tokens=lesson.pool_tokens,
        per_fraction=per_fraction,
        died=died,
    )


def pool_points(
    records: Sequence[TrialRecord], rules: MemoryRules, engine_name: str, *, budget_bytes: float | None
) -> list[PoolPoint]:
    """The pools the study's finished launches of ``engine_name`` stated, oldest first."""
    points = []
    for record in records:
        lesson = record.lessons.memory
        if lesson is None or record.state != "COMPLETE" or (record.engine or engine_name) != engine_name:
            continue
        point = pool_point(lesson, rules, budget_bytes=budget_bytes, died=lesson.side is not None)
        if point is not None:
            points.append(point)
    return points


def kv_share(rules: MemoryRules, flags: Mapping[str, FlagValue]) -> float:
    """The share of the pool the full-attention KV gets: ``1 / (1 + r)`` of a hybrid model's (``r`` the
    state ratio, the engine's default when unset), all of it elsewhere."""
    if rules.kv_share_flag is None:
        return 1.0
    ratio = flag_number(flags.get(rules.kv_share_flag))
    ratio = ratio if ratio is not None else rules.kv_share_default
    return 1.0 / (1.0 + ratio) if ratio is not None and ratio >= 0 else 1.0


def _scale(rules: MemoryRules, flags: Mapping[str, FlagValue]) -> float | None:
    """The KV cell's relative bytes by the scaled flags (KV dtype); None for a value the rules do not know."""
    factor = 1.0
    for name, known in rules.pool_scale.items():
        value = flags.get(name, "auto")
        if not isinstance(value, str) or value not in known:
            return None
        factor *= known[value]
    return factor


def needed_tokens(rules: MemoryRules, flags: Mapping[str, FlagValue]) -> int | None:
    """The tokens one request of the plan's context needs; None where the context is left to the engine."""
    if rules.context_flag is None:
        return None
    value = flag_number(flags.get(rules.context_flag))
    return int(value) if value is not None else None


def _alike(rules: MemoryRules, a: Mapping[str, FlagValue], b: Mapping[str, FlagValue]) -> bool:
    """Whether two launches' pools hold the same tokens at one fraction, up to the KV dtype and state ratio."""
    names = set(a) | set(b)
    neutral = rules.per_token_neutral if not names & rules.per_token_coupled else frozenset()
    skipped = neutral | rules.pool_irrelevant | set(rules.pool_scale) | {rules.fraction_flag}
    skipped |= {name for name in (rules.context_flag, rules.kv_share_flag) if name is not None}
    return all(a.get(name) == b.get(name) for name in names - skipped)


def tokens_at(
    points: Sequence[PoolPoint], rules: MemoryRules, flags: Mapping[str, FlagValue], fraction: float
) -> PoolEstimate | None:
    """The most tokens the pool of a plan with ``flags`` holds at ``fraction`` by the points that speak for
    it; None where none does (none alike, or none whose growth is known and at a fraction above the asked)."""
    scale, share = _scale(rules, flags), kv_share(rules, flags)
    best: tuple[float, list[int]] | None = None
    for point in points:
        point_scale = _scale(rules, point.flags)
        if scale is None or point_scale is None or not _alike(rules, point.flags, flags):
            continue
        if fraction > point.fraction and point.per_fraction is None:
            continue
        grown = point.tokens + (fraction - point.fraction) * (point.per_fraction or 0.0)
        tokens = max(grown, 0.0) * (share / kv_share(rules, point.flags)) * (point_scale / scale)
        if best is None or tokens > best[0] * (1 + MARGIN):
            best = (tokens, [point.trial])
        elif tokens >= best[0] * (1 - MARGIN):
            best = (max(best[0], tokens), [*best[1], point.trial])
    if best is None:
        return None
    return PoolEstimate(tokens=best[0], fraction=fraction, trials=tuple(sorted(best[1])))


def engine_cell(
    records: Sequence[TrialRecord], rules: MemoryRules, engine_name: str, flags: Mapping[str, FlagValue]
) -> tuple[float, tuple[int, ...]] | None:
    """The fewest KV bytes per token the engine itself logged or printed for a launch at the plan's
    tensor-parallel size, scaled to the plan's KV dtype, with the launches that said it; None where none
    did. The engine's cell beats the config.json's count (it knows how it shards and pads the heads);
    the fewest, as a launch with a drafter's KV layers holds more per token than one without."""
    scale, tp = _scale(rules, flags), flag_number(flags.get(rules.tp_flag)) or 1.0
    best: tuple[float, tuple[int, ...]] | None = None
    for record in records:
        lesson = record.lessons.memory
        if lesson is None or not lesson.kv_cell_bytes or (record.engine or engine_name) != engine_name:
            continue
        launched = _scale(rules, lesson.flags)
        if scale is None or launched is None or (flag_number(lesson.flags.get(rules.tp_flag)) or 1.0) != tp:
            continue
        cell = lesson.kv_cell_bytes * scale / launched
        if best is None or cell < best[0] * (1 - MARGIN):
            best = (cell, (lesson.trial,))
        elif cell <= best[0] * (1 + MARGIN):
            best = (min(best[0], cell), (*best[1], lesson.trial))
    return best


def prior_tokens(
    layout: KvLayout,
    rules: MemoryRules,
    flags: Mapping[str, FlagValue],
    fraction: float,
    *,
    budget_bytes: float | None,
    weights_per_gpu: float | None,
    logged_cell: tuple[float, tuple[int, ...]] | None = None,
) -> PoolEstimate | None:
    """Before any alike launch stated its pool: the tokens at ``fraction`` by the model's KV layout, the
    memory the fraction is of and the weights per GPU (a drafter's weights and KV layers, and the engine's
    other reserves, are not counted: the estimate errs towards more tokens). ``logged_cell``
    (:func:`engine_cell`): where an unlike launch logged fewer KV bytes per token than the layout counts,
    the engine's figure."""
    element = _scale(rules, flags)
    if element is None or budget_bytes is None or weights_per_gpu is None:
        return None
    tp = int(flag_number(flags.get(rules.tp_flag)) or 1)
    share = kv_share(rules, flags) if layout.hybrid else 1.0
    pool = max(fraction * budget_bytes - weights_per_gpu, 0.0) * share
    cell, cell_trials = layout.bytes_per_token(element_bytes=element, tp=tp), tuple[int, ...]()
    if logged_cell is not None and logged_cell[0] < cell * (1 - MARGIN):
        cell, cell_trials = logged_cell
    return PoolEstimate(tokens=pool / cell, fraction=fraction, trials=(), cell_trials=cell_trials)


class RequestKv(Frozen):
    """The KV one request of a context needs per GPU, by the model's config.json."""

    flag: str
    context: int
    bytes_per_gpu: float


def request_kv(space: SearchSpace, rules: MemoryRules, layout: KvLayout) -> list[RequestKv]:
    """For each context the space fixes or tunes: one request's KV per GPU at the smallest tensor-parallel
    size and the fewest KV bytes the space offers (a hybrid's state per request aside)."""
    if rules.context_flag is None:
        return []
    tp_param = space.tuned.get(rules.tp_flag)
    tps = [v for v in map(flag_number, tp_param.choices) if v] if isinstance(tp_param, CategoricalParam) else []
    tp = int(min(tps) if tps else flag_number(space.fixed.get(rules.tp_flag)) or 1)
    room = most_room(space, rules, dict(space.fixed))
    element = _scale(rules, room) or max((max(k.values()) for k in rules.pool_scale.values()), default=2.0)
    cell = layout.bytes_per_token(element_bytes=element, tp=tp)
    param = space.tuned.get(rules.context_flag)
    values = param.choices if isinstance(param, CategoricalParam) else [space.fixed.get(rules.context_flag)]
    contexts = sorted({int(c) for c in map(flag_number, values) if c is not None})
    return [RequestKv(flag=rules.context_flag, context=c, bytes_per_gpu=c * cell) for c in contexts]


def too_small(estimate: PoolEstimate, needed: int) -> bool:
    """Whether the pool misses one request of ``needed`` tokens by more than the figures' rounding."""
    return estimate.tokens < needed * (1 - MARGIN)


def largest_fraction(space: SearchSpace, rules: MemoryRules, flags: Mapping[str, FlagValue]) -> float | None:
    """The largest fraction the space lets a plan run at: the tuned range's top, else the plan's own
    (a fixed one, or the engine's stated default); None where the engine picks it."""
    param = space.tuned.get(rules.fraction_flag)
    if isinstance(param, (FloatParam, IntParam)):
        return float(param.high)
    if isinstance(param, CategoricalParam):
        offered = [v for v in map(flag_number, param.choices) if v is not None]
        return max(offered, default=None)
    value = flag_number(flags.get(rules.fraction_flag))
    return value if value is not None else rules.default_fraction


def most_room(space: SearchSpace, rules: MemoryRules, flags: Mapping[str, FlagValue]) -> dict[str, FlagValue]:
    """``flags`` at the largest fraction the space allows and, where tuned, the state ratio that gives the
    KV the most of the pool and the KV dtype of the fewest bytes: the most tokens any of its variants holds."""
    out = dict(flags)
    top = largest_fraction(space, rules, flags)
    if top is not None:
        out[rules.fraction_flag] = top
    ratio = space.tuned.get(rules.kv_share_flag) if rules.kv_share_flag else None
    if rules.kv_share_flag is not None and isinstance(ratio, (FloatParam, IntParam)):
        out[rules.kv_share_flag] = ratio.low
    elif rules.kv_share_flag is not None and isinstance(ratio, CategoricalParam):
        numbers = [v for v in map(flag_number, ratio.choices) if v is not None]
        if numbers:
            out[rules.kv_share_flag] = min(numbers)
    for name, known in rules.pool_scale.items():
        param = space.tuned.get(name)
        if isinstance(param, CategoricalParam):
            offered = [v for v in param.choices if isinstance(v, str) and v in known]
            if offered:
                out[name] = min(offered, key=lambda v: known[v])
    return out


class ContextFit(Frozen):
    """Whether one offered context can hold one request at the most room the space allows."""

    flag: str
    context: int
    fits: bool | None = Field(description="None: no launch speaks for it yet")
    estimate: PoolEstimate | None = None


def offered_contexts(space: SearchSpace, rules: MemoryRules, points: Sequence[PoolPoint]) -> list[ContextFit]:
    """Each context the space tunes, at the most room the space allows any launched configuration: the
    most tokens a pool like one of ``points`` holds there."""
    param = space.tuned.get(rules.context_flag) if rules.context_flag else None
    if rules.context_flag is None or not isinstance(param, CategoricalParam):
        return []
    fits = []
    for context in sorted({int(v) for v in map(flag_number, param.choices) if v is not None}):
        best: PoolEstimate | None = None
        for point in points:
            room = most_room(space, rules, {**point.flags, rules.context_flag: context})
            fraction = flag_number(room.get(rules.fraction_flag))
            estimate = tokens_at(points, rules, room, fraction) if fraction is not None else None
            if estimate is not None and (best is None or estimate.tokens > best.tokens):
                best = estimate
        fits.append(
            ContextFit(
                flag=rules.context_flag,
                context=context,
                fits=None if best is None else not too_small(best, context),
                estimate=best,
            )
        )
    return fits
