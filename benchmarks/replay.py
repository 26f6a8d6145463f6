"""A recorded real landscape (``benchmarks/recorded.py``) as something a search can launch.

The space is the grid of recorded values (each tuned flag a categorical over them, with the
recorded condition); a launch of a configuration draws one of its recorded launches at random
(seeded), so the real noise, failures and seconds are in the replay. Grid points that the engine's
rules make the same configuration share their launches, as a study measures them once. The true
value of a configuration is the mean over its launches (0 when any of them failed: a launch that
sometimes dies is no deployment); the optimum is the best such mean.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from autotune.engines import get_engine
from autotune.engines.base import Engine, InvalidConfig, LaunchPlan
from autotune.measure.client import Measurement
from autotune.measure.protocol import EarlyStop
from autotune.measure.statistics import Metric
from autotune.outcomes import OutcomeKind
from autotune.space import Condition, FlagValue, SearchSpace
from autotune.trial import TrialOutcome
from benchmarks.axes import GridAxis
from benchmarks.recorded import RecordedLandscape, RecordedLaunch, load_recorded


@dataclass
class RecordedProblem:
    recorded: RecordedLandscape
    space: SearchSpace
    engine: Engine
    axes: list[GridAxis]
    launches: dict[str, list[RecordedLaunch]]  # by the engine's effective config key
    true: dict[str, float]

    @property
    def optimum(self) -> float:
        return max(self.true.values())

    def key(self, flags: Mapping[str, FlagValue]) -> str | None:
        try:
            return self.engine.normalise(dict(flags)).config_key
        except InvalidConfig:
            return None


def load_problem(path: Path) -> RecordedProblem:
    """Read a recorded landscape; its grid becomes the space (no baselines: the search alone)."""
    recorded = load_recorded(path)
    engine = get_engine(recorded.engine)
    space = SearchSpace.model_validate(
        {
            "version": 1,
            "engine": recorded.engine,
            "launcher": ["recorded"],
            "model": recorded.model,
            "gpus": {"inventory": "none"},
            "fixed": recorded.fixed,
            "tuned": {g.name: {"type": "categorical", "choices": g.values, "when": g.when} for g in recorded.grid},
            "measurement": recorded.measurement.model_dump(include={"warmup_requests", "min_rounds", "max_rounds"}),
            "objective": recorded.objective,
        }
    )
    axes = []
    for flag in recorded.grid:
        cond = Condition.parse(flag.when) if flag.when else None
        axes.append(GridAxis(flag.name, tuple(flag.values), (cond.flag, cond.op, cond.value) if cond else None))
    problem = RecordedProblem(recorded=recorded, space=space, engine=engine, axes=axes, launches={}, true={})
    for config in recorded.configs:
        key = problem.key({**recorded.fixed, **config.flags})
        if key is not None:
            problem.launches.setdefault(key, []).extend(config.launches)
    for key, launches in problem.launches.items():
        values = [launch.value for launch in launches if launch.value is not None]
        problem.true[key] = sum(values) / len(values) if values and len(values) == len(launches) else 0.0
    return problem


class RecordedLauncher:
    """``StudyRunner.launch`` on a recorded landscape: one recorded launch of the plan's config.

    By default each launch is drawn with replacement, so one recorded launch can come back in the
    same study. ``cycle`` (opt-in) draws a config's launches without replacement instead, a fresh
    shuffle once all were drawn: relaunches are distinct launches as far as the recording holds them.
    """

    def __init__(self, problem: RecordedProblem, rng: random.Random, *, cycle: bool = False) -> None:
        self.problem = problem
        self.rng = rng
        self.cycle = cycle
        self.drawn: list[tuple[RecordedLaunch, float]] = []  # each launch and its config's true value
        self._left: dict[str, list[RecordedLaunch]] = {}  # with cycle: each config's launches not yet drawn

    def draw(self, plan: LaunchPlan) -> RecordedLaunch:
        if plan.config_key not in self.problem.launches:
            raise KeyError(f"{plan.flags} is not a configuration of the recorded grid")
        return self.draw_config(plan.config_key)

    def draw_config(self, key: str) -> RecordedLaunch:
        """One recorded launch of the configuration whose effective config key is ``key``."""
        launches = self.problem.launches[key]
        if self.cycle:
            left = self._left.get(key)
            if not left:
                left = self._left[key] = self.rng.sample(launches, len(launches))
            launch = left.pop()
        else:
            launch = self.rng.choice(launches)
        self.drawn.append((launch, self.problem.true[key]))
        return launch

    def __call__(
        self, plan: LaunchPlan, log_path: Path, phase: Callable[[str, str], None], early_stop: EarlyStop | None = None
    ) -> TrialOutcome:
        launch = self.draw(plan)
        kind = OutcomeKind(launch.outcome)
        outcome = TrialOutcome(kind=kind, plan=plan, reason=launch.reason, launch_s=launch.launch_s,
                              measure_s=launch.measure_s, stop_s=launch.stop_s)  # fmt: skip
        if kind is not OutcomeKind.OK or launch.value is None:
            return outcome
        objective = self.problem.space.objective
        rounds = launch.rounds or 1
        metrics = [Metric(name=objective.metric, unit="tok/s", value=launch.value, n=rounds,
                          ci95=launch.value * (launch.rel_ci95 or 0.0))]  # fmt: skip
        if launch.accept_length is not None:
            metrics.append(Metric(name="accept_length", unit="tok/step", value=launch.accept_length, n=rounds))
        measurement = Measurement(
            objective=objective.metric, concurrency=objective.concurrency, max_tokens_cap=None, ignore_eos=False,
            warmup_requests=0, rounds=rounds, round_values=[launch.value] * rounds, precision_target=0.02,
            precision_reached=True, stop_reason="recorded launch", steadiness=None, metrics=metrics, categories=[],
            duration_s=launch.measure_s, requests=[], early_stopped=False,
        )  # fmt: skip
        return outcome.model_copy(
            update={"measurements": [measurement], "objective_concurrency": objective.concurrency}
        )
