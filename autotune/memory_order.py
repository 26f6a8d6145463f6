"""How two launches' flags compare for memory: whether a memory death speaks for another launch
because every demand of the other is at least its own (dominance), and the presumptions a launch that
served can refute (docs/how-it-works.md, "Memory: predicted and learned"). Used by
:class:`~autotune.feasibility.FeasibilityModel`.
"""

from __future__ import annotations

from collections.abc import Mapping

from autotune.space import FlagValue

# SGLang and vLLM read an unset --kv-cache-dtype as "auto" (the model's dtype), and their rules drop
# an explicit "auto": an unset scaled flag is compared as this value.
SCALE_UNSET = "auto"


def number(value: FlagValue | None) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except ValueError:
        return None


def dominates(
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
        factors = scale_factors(scale, name, a, b)
        if factors is not None:
            if factors[1] < factors[0]:
                return False
        elif name in demand and a is not None and b is not None:
            fa, fb = number(a), number(b)
            if fa is None or fb is None or fb < fa:
                return False
        elif a != b:
            return False
    return True


def scale_factors(
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


def loosely_dominates(
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
    """:func:`dominates` with presumptions a served launch can refute (``relevant``): a flag set on
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
        and scale_factors(scale, n, failed.get(n), candidate.get(n)) is None
    }
    tp_failed, tp_candidate = number(failed.get(tp_flag)), number(candidate.get(tp_flag))
    if tp_failed is not None and tp_candidate is not None:
        if tp_candidate > tp_failed:
            return False
        presumed.add(tp_flag)
    return dominates(failed, candidate, demand=demand, ignore=ignore | presumed, scale=scale)
