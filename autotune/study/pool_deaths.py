"""Launches that ran out of pool memory, and what each says about other configurations.

Pool demand is ordered. A configuration that needs at least what a dead one needed (as deep or wide a
draft, as many draft tokens, as long a context, as many running requests, as large a graph batch, the
same weights and a KV cache dtype no smaller, a tensor-parallel size no larger) at the same or a smaller
fraction dies the same way. Left to the engine, the fraction is the engine's own reserve formula, which
leaves more headroom for larger graph demands, so a configuration that demands no less of the headroom
gets a fraction no larger. Where the death printed its fraction, the tokens its pool held and the tokens
one request needs, and the server logged its free memory and weights, the pool per token is known: the
pool at another fraction, and the smallest fraction that holds one request, follow. Those figures do not
depend on what sizes only the headroom and the request slots (:func:`same_pool_per_token`), so they
speak across the draft's shape, the running requests and the graph batch too.

A plan that leaves the fraction to the engine, and that no death speaks for as it is, gets the engine's
fraction bounded from above (:class:`EngineFractions`): the engine reserves headroom for the decode
graphs the plan captures, so smaller graphs than a death's make its fraction larger by at most what the
graphs shrink, at the most bytes per captured token the served launches logged. The deaths then speak
for the plan at that fraction.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from autotune.engines.base import Engine, LaunchPlan, PoolShortfall
from autotune.feasibility import SCALE_UNSET, FeasibilityModel, MemoryRules
from autotune.memory_types import flag_number
from autotune.outcomes import OutcomeKind
from autotune.records import TrialRecord
from autotune.space import FlagValue


@dataclass(frozen=True)
class PoolDeath:
    """One launch that ran out of pool memory, with what it printed and logged."""

    trial: int
    flags: Mapping[str, FlagValue]
    shortfall: PoolShortfall | None
    weights_bytes: float | None
    server_free_bytes: float | None

    @property
    def per_token_bytes(self) -> float | None:
        """The pool per KV token: the pool at its fraction over the tokens it held."""
        s = self.shortfall
        if s is None or s.fraction is None or not s.pool_tokens or self.weights_bytes is None:
            return None
        if not self.server_free_bytes:
            return None
        pool = s.fraction * self.server_free_bytes - self.weights_bytes
        return pool / s.pool_tokens if pool > 0 else None

    def tokens_at(self, fraction: float) -> float | None:
        """The tokens its pool would hold at ``fraction``."""
        per_token = self.per_token_bytes
        if per_token is None or self.weights_bytes is None or not self.server_free_bytes:
            return None
        return (fraction * self.server_free_bytes - self.weights_bytes) / per_token

    @property
    def fraction_needed(self) -> float | None:
        """The smallest fraction whose pool holds one request of what it needed."""
        s, per_token = self.shortfall, self.per_token_bytes
        if s is None or not s.needed_tokens or per_token is None or self.weights_bytes is None:
            return None
        assert self.server_free_bytes
        return (self.weights_bytes + s.needed_tokens * per_token) / self.server_free_bytes


def pool_deaths(records: Sequence[TrialRecord], engine: Engine, engine_name: str) -> list[PoolDeath]:
    """The launched trials of ``engine_name`` that ran out of pool memory, oldest first."""
    deaths = []
    for record in records:
        if record.outcome != OutcomeKind.MEMORY_TOO_LOW.value or (record.engine or engine_name) != engine_name:
            continue
        lesson = record.lessons.memory
        deaths.append(
            PoolDeath(
                trial=record.number,
                flags=record.flags,
                shortfall=engine.pool_shortfall(record.reason or ""),
                weights_bytes=lesson.weights_bytes if lesson else None,
                server_free_bytes=lesson.server_free_bytes if lesson else None,
            )
        )
    return deaths


def _scale(rules: MemoryRules, name: str, value: FlagValue | None) -> float | None:
    known = rules.pool_scale[name]
    key = SCALE_UNSET if value is None else value
    return known.get(key) if isinstance(key, str) else None


def demands_at_least(death: PoolDeath, plan: LaunchPlan, rules: MemoryRules, *, engine_fraction: bool) -> bool:
    """Whether ``plan`` needs at least the pool ``death`` needed, flag by flag, apart from the fraction:
    ``engine_fraction`` (both leave it to the engine) also asks for headroom demands no smaller, so that
    the engine's fraction is no larger."""
    demand = rules.pool_demand | (rules.headroom_demand if engine_fraction else frozenset())
    if engine_fraction and rules.graph_batch_flag is not None:
        demand = demand | {rules.graph_batch_flag}
    ignored = rules.pool_irrelevant - demand
    for name in (set(death.flags) | set(plan.flags)) - {rules.fraction_flag} - ignored:
        a, b = death.flags.get(name), plan.flags.get(name)
        if name in rules.pool_scale:
            fa, fb = _scale(rules, name, a), _scale(rules, name, b)
            if fa is None or fb is None or fb < fa:
                return False
        elif name == rules.tp_flag:
            if (flag_number(b) or 1.0) > (flag_number(a) or 1.0):
                return False
        elif name in demand and (a is not None or b is not None):
            na, nb = flag_number(a), flag_number(b)
            if na is None or nb is None or nb < na:
                return False  # set on one side only: the engine's choice is not ordered against a value
        elif a != b and name not in demand:
            return False
    return True


def same_pool_per_token(death: PoolDeath, plan: LaunchPlan, rules: MemoryRules) -> bool:
    """Whether ``plan``'s pool holds as many tokens as ``death``'s at any one fraction, for a request as
    long: every flag apart from the fraction equal but those that change neither
    (``MemoryRules.per_token_neutral``, unless a ``per_token_coupled`` flag is set)."""
    names = set(death.flags) | set(plan.flags)
    neutral = rules.per_token_neutral if not names & rules.per_token_coupled else frozenset()
    skipped = neutral | rules.pool_irrelevant | {rules.fraction_flag}
    return bool(neutral) and all(death.flags.get(name) == plan.flags.get(name) for name in names - skipped)


def dies_like(death: PoolDeath, plan: LaunchPlan, rules: MemoryRules) -> str | None:
    """Why ``plan`` runs out of pool memory as ``death`` did (None: it may not): at the same or a smaller
    fraction with demands no smaller, or at a larger fraction whose pool still holds fewer tokens than
    the request ``death`` needed."""
    fraction = flag_number(plan.flags.get(rules.fraction_flag))
    died_at = flag_number(death.flags.get(rules.fraction_flag))
    if fraction is None and died_at is None:
        if demands_at_least(death, plan, rules, engine_fraction=True):
            return f"the engine's own {rules.fraction_flag}, no larger for demands no smaller"
        return None
    if fraction is None:
        return None  # the engine's fraction for this plan is not known against a given one
    printed = death.shortfall.fraction if death.shortfall is not None else None
    died_at = died_at if died_at is not None else printed
    if died_at is None or not (
        demands_at_least(death, plan, rules, engine_fraction=False) or same_pool_per_token(death, plan, rules)
    ):
        return None
    if fraction <= died_at:
        return f"{rules.fraction_flag} {fraction:g}, no larger than its {died_at:g}"
    if plan.flags.get(rules.tp_flag) != death.flags.get(rules.tp_flag):
        return None  # the weights per GPU differ: its pool per token does not carry over
    tokens, needed = death.tokens_at(fraction), death.shortfall.needed_tokens if death.shortfall else None
    if tokens is not None and needed is not None and tokens < needed:
        return (
            f"{rules.fraction_flag} {fraction:g}: a pool of about {tokens:.0f} tokens, fewer than the "
            f"{needed} one request needs"
        )
    return None


# The engine rounds its fraction to three decimals, and the death printed its own rounded.
ROUNDING = 0.001


@dataclass(frozen=True)
class EngineFractions:
    """The fraction an engine picks for a plan that leaves it unset, bounded from above by the ones it
    picked for deaths (each printed it): the engine's reserve holds the decode graphs, so graphs of fewer
    captured tokens make the fraction larger by at most the graphs' bytes per token (:meth:`_per_token`)
    times the tokens fewer, over the free memory. Only deaths alike in what else the
    reserve reads (the tensor-parallel size, the weights, the activation demands) count."""

    engine: Engine
    model: FeasibilityModel

    def at_most(self, plan: LaunchPlan, deaths: Sequence[PoolDeath]) -> float | None:
        rules = self.model.rules
        if rules is None or rules.fraction_flag in plan.flags:
            return None
        total = self.model.total_bytes
        tokens = self.engine.graph_tokens_captured(plan.flags, gpu_total_bytes=total)
        per_token = self._per_token()
        alike = {rules.tp_flag} | rules.weights_flags | rules.activation_demand
        bounds = []
        for death in deaths:
            printed = death.shortfall.fraction if death.shortfall is not None else None
            if rules.fraction_flag in death.flags or printed is None or not death.server_free_bytes:
                continue
            if any(death.flags.get(name) != plan.flags.get(name) for name in alike):
                continue
            died_tokens = self.engine.graph_tokens_captured(death.flags, gpu_total_bytes=total)
            if tokens is None or died_tokens is None or (died_tokens > tokens and per_token is None):
                continue
            gained = (per_token or 0.0) * max(died_tokens - tokens, 0.0)
            bounds.append(printed + ROUNDING + gained / death.server_free_bytes)
        return min(bounds, default=None)

    def _per_token(self) -> float | None:
        """The most the graphs can cost per captured token: the logged bytes over tokens of any launch,
        or a tenth above the slope of the line the logged graphs lie on, where they do."""
        bound, slope = self.model.graph_bytes_per_token_max, self.model.graph_slope()
        return min(bound, 1.1 * slope) if bound is not None and slope is not None else bound


@dataclass(frozen=True)
class DiesLike:
    """A death that speaks for a plan: how, and whether through the engine's fraction bounded for it."""

    death: PoolDeath
    why: str
    at_bounded_fraction: bool = False


def first_death(
    deaths: Sequence[PoolDeath], plan: LaunchPlan, rules: MemoryRules, fractions: EngineFractions | None = None
) -> DiesLike | None:
    """The earliest death that speaks for ``plan``, and how; with ``fractions``, a plan that leaves the
    fraction to the engine is also asked at the most the engine's fraction for it can be."""
    for death in deaths:
        why = dies_like(death, plan, rules)
        if why is not None:
            return DiesLike(death, why)
    at_most = fractions.at_most(plan, deaths) if fractions is not None else None
    if at_most is None:
        return None
    bounded = plan.model_copy(update={"flags": {**plan.flags, rules.fraction_flag: at_most}})
    for death in deaths:
        why = dies_like(death, bounded, rules)
        if why is not None:
            return DiesLike(death, f"the engine's own {rules.fraction_flag} for it, at most {at_most:.3f}: {why}", True)
    return None
