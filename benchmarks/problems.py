"""The problem a night is judged on: a twin profile, a search space, the prompts and measurement
it implies, the discrete grid, the landscape per seed and its true optimum (``solve``), and the
engine's defaults' true value (an answer below it is harmful).
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from autotune.engines import get_engine
from autotune.engines.base import Engine, InvalidConfig
from autotune.measure.suites import load_suite
from autotune.space import CategoricalParam, FlagValue, FloatParam, IntParam, SearchSpace, load_space
from benchmarks.axes import GridAxis
from benchmarks.landscape import Landscape, LaunchCost, MeasureShape, Optimum, Prompt
from benchmarks.runs import Run
from benchmarks.unmodelled import Unmodelled
from passmodel.profile import TwinProfile, load_profile

FLOAT_POINTS = 11  # a float without a step is discretised into this many points (log-spaced if log)


@dataclass
class Problem:
    profile: TwinProfile
    space: SearchSpace
    engine: Engine
    prompts: list[Prompt]
    axes: list[GridAxis]
    measure: MeasureShape
    noise_rel: float
    cost: LaunchCost
    gpus: int
    notes: list[str]
    optimum: Optimum | None = None
    launch_sd: float = 0.0  # the relative sd of speed between launches (the twin's timing.launch_sd)
    nights: dict[tuple[str, int, int], Run] = field(default_factory=dict)  # a study's night, for its bounds
    unmodelled: Unmodelled | None = None  # effects no model knows, on the truth (--unmodelled)

    def landscape(self, seed: int) -> Landscape:
        return Landscape(
            self.profile,
            self.prompts,
            model_path=self.space.model,
            noise_rel=self.noise_rel,
            measure=self.measure,
            cost=self.cost,
            seed=seed,
            unmodelled=self.unmodelled,
        )

    def normalise(self, flags: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return self.engine.normalise(flags).flags
        except InvalidConfig:
            return None


def axes_of(space: SearchSpace, notes: list[str]) -> list[GridAxis]:
    """The discrete grid a space defines (floats with a step are discrete; without, 11 points)."""
    axes = []
    for name, param in space.tuned.items():
        values: tuple[Any, ...]
        if isinstance(param, CategoricalParam):
            values = tuple(param.choices)
        elif isinstance(param, IntParam):
            values = tuple(range(param.low, param.high + 1, param.step))
        elif isinstance(param, FloatParam):
            if param.step is not None:
                count = int(math.floor((param.high - param.low) / param.step + 1e-9))
                values = tuple(round(param.low + i * param.step, 10) for i in range(count + 1))
            else:
                values = tuple(_float_points(param.low, param.high, log=param.log))
                notes.append(
                    f"{name} has no step: the optimum is taken over {FLOAT_POINTS} "
                    f"{'log' if param.log else 'evenly'}-spaced points ({values[0]:g} .. {values[-1]:g})"
                )
        else:  # pragma: no cover - the union is closed
            raise TypeError(param)
        when = (param.when.flag, param.when.op, param.when.value) if param.when is not None else None
        axes.append(GridAxis(name=name, values=values, when=when))
    return axes


def _float_points(low: float, high: float, *, log: bool) -> list[float]:
    if low == high:
        return [low]
    if log:
        return [round(math.exp(math.log(low) + (math.log(high) - math.log(low)) * i / (FLOAT_POINTS - 1)), 10)
                for i in range(FLOAT_POINTS)]  # fmt: skip
    return [round(low + (high - low) * i / (FLOAT_POINTS - 1), 10) for i in range(FLOAT_POINTS)]


def load_problem(
    profile_ref: str, space_path: str | Path, *, noise_rel: float | None = None, cost: LaunchCost | None = None
) -> Problem:
    """Read a twin profile and a search space; the landscape's measurement follows the space's."""
    return problem_of(load_profile(profile_ref), load_space(space_path), noise_rel=noise_rel, cost=cost)


def problem_of(
    profile: TwinProfile, space: SearchSpace, *, noise_rel: float | None = None, cost: LaunchCost | None = None
) -> Problem:
    """A profile and a space already in hand (a family member); see :func:`load_problem`."""
    engine = get_engine(space.engine)
    suite = load_suite(space.suite_path())
    m = space.measurement
    prompts = suite.prompts[: m.prompts_per_round] if m.prompts_per_round else suite.prompts
    notes: list[str] = []
    if space.objective.concurrency != 1 or space.objective.metric != "decode_tok_s":
        notes.append(
            f"the space's objective is {space.objective.metric} at concurrency {space.objective.concurrency}; "
            "the landscape measures decode tok/s at concurrency 1"
        )
    axes = axes_of(space, notes)
    measure = MeasureShape(
        warmup_requests=m.warmup_requests,
        min_rounds=m.min_rounds,
        max_rounds=m.max_rounds,
        target_rel_ci=m.target_rel_ci,
        max_seconds=m.max_seconds,
        max_tokens=m.max_tokens,
        ignore_eos=m.ignore_eos,
    )
    devices = space.gpus.devices
    return Problem(
        profile=profile,
        space=space,
        engine=engine,
        prompts=[Prompt(text=p.text, max_new_tokens=p.max_tokens) for p in prompts],
        axes=axes,
        measure=measure,
        # The measurement stops at a 95 % CI of +-target: its mean's relative sd is target / 1.96.
        noise_rel=noise_rel if noise_rel is not None else m.target_rel_ci / 1.96,
        cost=cost or LaunchCost(),
        gpus=len(devices) if devices else profile.gpus.count,
        notes=notes,
    )


def solve(problem: Problem, *, exhaustive: bool | None = None) -> Optimum:
    """The landscape's true feasible optimum over the space's grid (cached on the problem)."""
    if problem.optimum is None or (exhaustive and not problem.optimum.exhaustive):
        problem.optimum = problem.landscape(0).optimum(
            problem.axes, problem.space.fixed, normalise=problem.normalise, exhaustive=exhaustive
        )
    return problem.optimum


def twin_defaults(problem: Problem) -> dict[str, FlagValue]:
    """The engine's defaults on a twin space: its ``defaults`` baseline, else the fixed flags alone."""
    named = next((b for b in problem.space.baselines if b.name == "defaults"), None)
    return {**problem.space.fixed, **(named.flags if named is not None else {})}


def twin_defaults_true(problem: Problem) -> float:
    """The defaults' noise-free value (0 when they do not start)."""
    flags = problem.normalise(twin_defaults(problem))
    return (problem.landscape(0).true_value(flags) or 0.0) if flags is not None else 0.0


def unmodelled_seed(profile: TwinProfile) -> int:
    """The seed of a twin profile's unmodelled effects (a family member's is its own seed)."""
    return zlib.crc32(profile.name.encode())


def add_unmodelled(problem: Problem, seed: int) -> Unmodelled:
    """Item 5's effects of member ``seed`` put on ``problem``'s truth, the ceiling (where drawn) set
    from the engine's defaults' rate under the other effects; before the optimum is solved."""
    effects = Unmodelled.draw(seed)
    problem.unmodelled, problem.optimum = effects, None
    problem.unmodelled = effects.with_ceiling(twin_defaults_true(problem))
    return problem.unmodelled
