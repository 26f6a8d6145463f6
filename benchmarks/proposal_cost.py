"""What a proposal costs a night: the sampler's own time per trial, up to 100 trials (issue 53's target:
a proposal <= 2 s at 100 trials on a 2-core machine).

A night is run through the study runner's front door with a twin landscape answering each launch and
SQLite storage (the database a real study writes), so every trial's proposal sees the study as a real
night's would: the model-guided sampler refits on every measured launch and asks the study's rules
(``WouldLaunch``) which of its candidates they would launch. Each trial's cost is the wall and CPU
time of every sampler call made for it (Optuna's ``before_trial``, ``infer_relative_search_space``,
``sample_relative``, ``sample_independent`` and ``after_trial``); the launch's own time is the
landscape's, not counted. A trial that carries the model's prediction was the model's proposal; the
others were its fallback's (TPE).

    .venv/bin/python -m benchmarks.proposal_cost [--family-seed 49000] [--trials 100] [--samplers model,tpe]
"""

from __future__ import annotations

import argparse
import functools
import os
import random
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import optuna
from pydantic import BaseModel

from autotune.records import TrialRecord
from autotune.study import StudyEvents, make_sampler, open_storage
from autotune.study.sampler import SamplerName
from benchmarks import family
from benchmarks.nights import LandscapeLauncher, make_runner
from benchmarks.problems import Problem, load_problem, problem_of

ROOT = Path(__file__).resolve().parent.parent
TARGET_S = 2.0
TIMED_CALLS = ("before_trial", "infer_relative_search_space", "sample_relative", "sample_independent", "after_trial")


class TrialCost(BaseModel):
    number: int
    wall_s: float
    cpu_s: float
    by_model: bool


class Timed(StudyEvents):
    """Each sampler call's wall and CPU seconds, summed per trial; which trials the model proposed."""

    def __init__(self, sampler: optuna.samplers.BaseSampler) -> None:
        self.wall: dict[int, float] = defaultdict(float)
        self.cpu: dict[int, float] = defaultdict(float)
        self.by_model: dict[int, bool] = {}
        for name in TIMED_CALLS:  # instance attributes win over the class's methods, for Optuna's calls too
            setattr(sampler, name, self._timing(getattr(sampler, name)))

    def _timing(self, call: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(call)
        def timed(study: optuna.Study, trial: optuna.trial.FrozenTrial, *args: Any, **kwargs: Any) -> Any:
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return call(study, trial, *args, **kwargs)
            finally:
                self.wall[trial.number] += time.perf_counter() - wall
                self.cpu[trial.number] += time.process_time() - cpu

        return timed

    def trial_finished(self, record: TrialRecord) -> None:
        self.by_model[record.number] = record.proposal.predicted is not None

    def costs(self) -> list[TrialCost]:
        return [
            TrialCost(number=n, wall_s=self.wall[n], cpu_s=self.cpu[n], by_model=self.by_model.get(n, False))
            for n in sorted(self.wall)
        ]


def the_problem(family_seed: int | None, folder: Path) -> tuple[Problem, str]:
    """A family member (its space names its model's config.json), or the README demo's twin space."""
    if family_seed is None:
        space = ROOT / "search_spaces" / "qwen3.6-27b-2xa6000-twin.yaml"
        return load_problem("qwen3.6-27b-2xa6000", space), "the README demo's space (qwen3.6-27b-2xa6000-twin)"
    member = family.members(1, family_seed)[0]
    problem = problem_of(member.profile, family.space_naming_configs(member, folder))
    return problem, f"family member {family_seed}: {member.summary}"


def night_costs(problem: Problem, sampler_name: SamplerName, trials: int, seed: int, folder: Path) -> list[TrialCost]:
    sampler = make_sampler(sampler_name, seed)
    timed = Timed(sampler)
    launcher = LandscapeLauncher(problem, problem.landscape(seed), random.Random(seed))
    storage = open_storage(f"sqlite:///{folder}/{sampler_name}.db")
    runner = make_runner(problem, folder / sampler_name, sampler=sampler, launcher=launcher, storage=storage,
                         events=timed)  # fmt: skip
    runner.prepare()
    runner.enqueue_baselines()
    runner.run(trials=None, timeout_s=None, total_trials=trials)  # ``trials`` trials, launched or not
    return timed.costs()


def rows(costs: Sequence[TrialCost], trials: int) -> list[tuple[str, Sequence[TrialCost]]]:
    quarter = max(1, trials // 4)
    spans = [(start, min(trials, start + quarter)) for start in range(0, trials, quarter)]
    return [(f"trials {a + 1}-{b}", [c for c in costs if a <= c.number < b]) for a, b in spans]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--family-seed", type=int, help="a family member (default: the README demo's twin space)")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--samplers", default="model,tpe", help="comma-separated: model, tpe, random")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    names: list[SamplerName] = [n for n in ("model", "tpe", "random") if n in args.samplers.split(",")]
    with tempfile.TemporaryDirectory(prefix="autotune-proposal-cost-") as tmp:
        problem, described = the_problem(args.family_seed, Path(tmp) / "configs")
        print(f"{described}; {args.trials} trials; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
        print(f"target: a proposal <= {TARGET_S:.0f} s at {args.trials} trials (wall)\n")
        print(f"{'sampler':<8} {'trials':<14} {'by model':>8} {'wall median':>12} {'wall max':>9} {'cpu median':>11}")
        verdicts = []
        for name in names:
            started = time.monotonic()
            costs = night_costs(problem, name, args.trials, args.seed, Path(tmp))
            for label, span in rows(costs, args.trials):
                if not span:
                    continue
                walls = [c.wall_s for c in span]
                print(f"{name:<8} {label:<14} {sum(c.by_model for c in span):>8} {statistics.median(walls):>12.3f} "
                      f"{max(walls):>9.3f} {statistics.median(c.cpu_s for c in span):>11.3f}")  # fmt: skip
            last = [c.wall_s for c in costs[-10:]]
            worst = max(last) if last else 0.0
            verdicts.append(f"{name}: the last 10 proposals' worst {worst:.2f} s "
                            f"({'met' if worst <= TARGET_S else 'MISSED'}); the night took "
                            f"{time.monotonic() - started:.0f} s for {len(costs)} trials")  # fmt: skip
        print()
        print("\n".join(verdicts))
    sys.stdout.flush()


if __name__ == "__main__":
    main()
