"""A discrete grid over a space's tuned flags: each axis a flag's values and the condition under
which it is set (the space's own :class:`~autotune.space.Condition`), every candidate of the grid in
order, and one random candidate. The twin's landscapes, the recorded ones and the grid tools share it.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property

from autotune.space import Condition, FlagValue


@dataclass(frozen=True)
class GridAxis:
    """One tuned flag of a discrete grid: its values, and the condition under which it is set.

    ``when`` is ``(flag, op, value)`` as in a search space's ``when: "flag op value"``: the axis is
    set only when the flag is already set (fixed or an earlier axis) and the comparison holds.
    """

    name: str
    values: tuple[FlagValue, ...]
    when: tuple[str, str, FlagValue] | None = None

    @cached_property
    def condition(self) -> Condition | None:
        """``when`` as the search space's own condition."""
        if self.when is None:
            return None
        flag, op, value = self.when
        return Condition(flag=flag, op=op, value=value)

    def applies(self, flags: Mapping[str, FlagValue]) -> bool:
        return self.condition is None or self.condition.holds(flags)


def grid(axes: Sequence[GridAxis], fixed: Mapping[str, FlagValue] | None = None) -> Iterator[dict[str, FlagValue]]:
    """Every candidate of the grid, in order (the last axis varies fastest); False flags left out."""
    base = dict(fixed or {})

    def walk(index: int, flags: dict[str, FlagValue]) -> Iterator[dict[str, FlagValue]]:
        if index == len(axes):
            yield {k: v for k, v in flags.items() if v is not False}
            return
        axis = axes[index]
        if not axis.applies(flags):
            yield from walk(index + 1, flags)
            return
        for value in axis.values:
            flags[axis.name] = value
            yield from walk(index + 1, flags)
        del flags[axis.name]

    yield from walk(0, base)


def random_candidate(
    axes: Sequence[GridAxis],
    fixed: Mapping[str, FlagValue],
    rng: random.Random,
    *,
    keep: Mapping[str, FlagValue] | None = None,
) -> dict[str, FlagValue]:
    """One random candidate of the grid; values in ``keep`` are used where their axis applies."""
    flags = dict(fixed)
    for axis in axes:
        if axis.applies(flags):
            flags[axis.name] = keep[axis.name] if keep is not None and axis.name in keep else rng.choice(axis.values)
    return flags


def grid_size(axes: Sequence[GridAxis], fixed: Mapping[str, FlagValue] | None = None) -> int:
    return sum(1 for _ in grid(axes, fixed))
