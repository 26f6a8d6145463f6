"""What a grid tool launches: uniform random draws from the space (a plain random-search script) and a
tiered grid like SGLang's ``auto_benchmark``; nothing is predicted and nothing is learned.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator, Sequence
from typing import Any

from benchmarks.axes import GridAxis, grid
from benchmarks.landscape import Landscape
from benchmarks.nights import launch_candidate
from benchmarks.problems import Problem
from benchmarks.runs import Run, Step

TIER_LEVELS = 4  # values per key a tiered grid tries (a user lists a few per key)


def random_candidates(problem: Problem, seed: int) -> Iterator[dict[str, Any]]:
    """Uniform draws from the space (conditions honoured), as a plain random-search script does."""
    rng = random.Random(10_000 + seed)
    while True:
        flags: dict[str, Any] = dict(problem.space.fixed)
        for axis in problem.axes:
            if axis.applies(flags):
                flags[axis.name] = rng.choice(axis.values)
        yield {k: v for k, v in flags.items() if v is not False}


def tiered_candidates(
    problem: Problem, landscape: Landscape, rng: random.Random, *, per_tier: int, cartesian_keys: int = 2
) -> list[Step]:
    """A tiered grid like ``sglang.auto_benchmark`` (tier 2, its default), run to the end.

    Stage 1 tunes the server flags with the speculative flags at the baseline's values, stage 2
    the ``speculative-*`` flags on stage 1's best. Each stage: the baseline first, then the
    cartesian product of the first ``cartesian_keys`` keys (in the file's order), then every other
    key one at a time; each key tries up to ``TIER_LEVELS`` of its values; duplicates dropped;
    the first ``per_tier`` candidates kept. Nothing is predicted and nothing is learned.
    """
    space = problem.space
    base = dict(space.fixed)
    if space.baselines:
        base.update(space.baselines[0].flags)
    stages = [
        [a for a in problem.axes if not a.name.startswith("speculative-")],
        [a for a in problem.axes if a.name.startswith("speculative-")],
    ]
    steps: list[Step] = []
    measured_before: set[tuple[tuple[str, Any], ...]] = set()
    for axes in stages:
        if not axes:
            continue
        best: tuple[float, dict[str, Any]] | None = None
        for candidate in tier_stage(base, axes, per_tier=per_tier, cartesian_keys=cartesian_keys):
            key = tuple(sorted(candidate.items()))
            if key in measured_before:
                continue  # stage 2 starts from stage 1's best, already measured
            measured_before.add(key)
            step = launch_candidate(problem, landscape, rng, candidate)
            steps.append(step)
            if step.measured is not None and (best is None or step.measured > best[0]):
                best = (step.measured, candidate)
        if best is not None:
            base = best[1]
    return steps


def _levels(values: Sequence[Any]) -> list[Any]:
    if len(values) <= TIER_LEVELS:
        return list(values)
    picks = sorted({round(i * (len(values) - 1) / (TIER_LEVELS - 1)) for i in range(TIER_LEVELS)})
    return [values[i] for i in picks]


def tier_stage(
    base: dict[str, Any], axes: list[GridAxis], *, per_tier: int, cartesian_keys: int
) -> Iterator[dict[str, Any]]:
    def settle(flags: dict[str, Any]) -> dict[str, Any]:
        # Keys whose condition no longer holds are left out, as the space defines.
        out = {k: v for k, v in flags.items() if k not in {a.name for a in axes}}
        for axis in axes:
            if axis.name in flags and axis.applies(out):
                out[axis.name] = flags[axis.name]
        return {k: v for k, v in out.items() if v is not False}

    def candidates() -> Iterator[dict[str, Any]]:
        yield settle(base)
        head, rest = axes[:cartesian_keys], axes[cartesian_keys:]
        for combo in grid([GridAxis(a.name, tuple(_levels(a.values)), a.when) for a in head], base):
            yield settle(combo)
        for axis in rest:
            for value in _levels(axis.values):
                yield settle({**base, axis.name: value})

    seen: set[tuple[tuple[str, Any], ...]] = set()
    for candidate in candidates():
        key = tuple(sorted(candidate.items()))
        if key in seen:
            continue
        seen.add(key)
        yield candidate
        if len(seen) >= per_tier:
            return


def run_tiered(problem: Problem, seed: int, budget: int, *, per_tier: int) -> Run:
    started = time.monotonic()
    run = Run(method=f"tiered grid ({per_tier}/tier)", seed=seed)
    run.steps = tiered_candidates(problem, problem.landscape(seed), random.Random(seed), per_tier=per_tier)[:budget]
    run.wall_s = time.monotonic() - started
    return run
