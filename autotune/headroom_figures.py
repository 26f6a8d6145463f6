"""A headroom death's own figures: how much PyTorch's out-of-memory message says the need exceeded what
was free, and which plans that one death therefore speaks for (docs/rules.md, "Memory").

PyTorch words it "Tried to allocate X MiB. GPU 0 has a total capacity of T GiB of which Y MiB is free."
(older releases: "Tried to allocate X MiB (GPU 0; T GiB total capacity; ...; Y MiB free; ...)").
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from autotune.memory_types import HeadroomUse, MemoryRules
from autotune.space import FlagValue

_UNITS = {"bytes": 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30, "TiB": 2**40}
_SIZE = r"(?P<{name}>[0-9]+(?:\.[0-9]+)?) ?(?P<{name}_unit>bytes|B|KiB|MiB|GiB|TiB)"
_ALLOCATE = re.compile(r"Tried to allocate " + _SIZE.format(name="size"))
_FREE = re.compile(r"of which " + _SIZE.format(name="size") + r" is free|; " + _SIZE.format(name="old") + r" free\b")
_UNUSED = re.compile(_SIZE.format(name="size") + r" is reserved by PyTorch but unallocated")

# PyTorch asks CUDA for whole segments (a request of 1-10 MiB for 20 MiB, larger ones rounded up), and the
# size it names may be such a segment rather than what the tensor needed; a simulated engine may pad it
# likewise. Taken off, so what is left is a lower bound of what was lacking.
OOM_ROUNDING_BYTES = 64 * 2**20


def _bytes(match: re.Match[str], name: str) -> float:
    return float(match[name]) * _UNITS[match[f"{name}_unit"]]


def oom_shortfall_bytes(text: str) -> float | None:
    """The least by which a launch's need exceeded the memory free when it died: the allocation its last
    out-of-memory message names, less the free memory and the memory PyTorch held unallocated (which a
    less fragmented allocation could have used) and :data:`OOM_ROUNDING_BYTES`; None where no message
    names both figures or nothing is left."""
    allocations = list(_ALLOCATE.finditer(text))
    if not allocations:
        return None
    last = allocations[-1]
    rest = text[last.end() : last.end() + 400]  # the figures of that same message
    free = _FREE.search(rest)
    if free is None:
        return None
    unused = _UNUSED.search(rest)
    shortfall = (
        _bytes(last, "size")
        - _bytes(free, "size" if free["size"] is not None else "old")
        - (_bytes(unused, "size") if unused else 0.0)
        - OOM_ROUNDING_BYTES
    )
    return shortfall if shortfall > 0 else None


def death_speaks(
    free: float,
    failed: tuple[float, float],
    candidate: tuple[float, float],
    *,
    per_token_max: float | None,
    shortfall: float | None,
) -> bool:
    """Whether a headroom death (``failed``: its fraction of ``free`` and its graph tokens; short by at least
    ``shortfall``) shows that a plan alike but for its fraction and graph tokens (``candidate``) dies too.

    The death's need exceeded its headroom h_F by s. Graphs never shrink with more tokens, and with fewer
    they free at most ``per_token_max`` (g, an upper bound from the study's own logged graphs) a token, so
    the plan's need exceeds h_F + s - g (T_F - T): a plan with no more headroom than that dies. With fewer
    tokens and no bound on g, nothing is said (what fewer tokens free is unknown)."""
    (failed_fraction, failed_tokens), (fraction, tokens) = failed, candidate
    fewer = max(0.0, failed_tokens - tokens)
    if fewer and per_token_max is None:
        return False
    freed = per_token_max * fewer if per_token_max is not None else 0.0
    return (1 - fraction) * free <= (1 - failed_fraction) * free + (shortfall or 0.0) - freed


def added_on_top(
    rules: MemoryRules, failed: Mapping[str, FlagValue], candidate: Mapping[str, FlagValue]
) -> frozenset[str]:
    """The flags a plan sets that a headroom death left unset and that only add to the need at as many graph
    tokens (:attr:`MemoryRules.headroom_added`: a drafter), so the death speaks across them."""
    return frozenset(name for name in rules.headroom_added if name not in failed and name in candidate)


def headroom_use(
    flags: Mapping[str, FlagValue],
    *,
    server_free_bytes: float,
    avail_after_pools_bytes: float,
    graph_bytes: float,
    free_at_peak_bytes: float,
    trial: int | None = None,
) -> HeadroomUse:
    """What a served launch used of its headroom besides the graphs: the memory available after
    the pools, less the graphs, less what NVML still showed free at the peak."""
    runtime = avail_after_pools_bytes - graph_bytes - max(free_at_peak_bytes, 0.0)
    return HeadroomUse(
        flags=dict(flags), server_free_bytes=server_free_bytes, runtime_bytes=max(runtime, 0.0), trial=trial
    )
