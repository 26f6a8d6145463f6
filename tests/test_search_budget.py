"""What the search spends its launches on: ``--trials N`` is N launches (a proposal answered from a
measurement already made is not one), a space with nothing new to launch says so, and a tight space
whose one served region is measured already keeps launching.

Driven through :mod:`autotune.testing` (the product's loop, a launcher function in place of servers).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import yaml

from autotune.decision import Launch, Reuse
from autotune.engines.base import LaunchPlan
from autotune.measure.protocol import EarlyStop
from autotune.space import SearchSpace, parse_space
from autotune.study import StudyRunner, make_sampler
from autotune.testing import simulated_outcome, study_runner
from autotune.trial import TrialOutcome
from tests.conftest import TWIN_SPACE, idle_gpus

GIB = 1 << 30
NEXTN = {"speculative-algorithm": "NEXTN", "speculative-eagle-topk": 1, "speculative-adaptive": False,
         "mem-fraction-static": 0.88, "max-running-requests": 16, "mamba-full-memory-ratio": 0.5}  # fmt: skip
# decode tok/s by draft depth
RATE = {1: 35.2, 2: 38.8, 3: 40.8, 4: 41.2}


class Servers:
    """Serves each plan at :data:`RATE` for its depth, and keeps the plans it was asked for."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.plans: list[LaunchPlan] = []

    def __call__(
        self, plan: LaunchPlan, log_path: Path, phase: object, early_stop: EarlyStop | None = None
    ) -> TrialOutcome:
        self.plans.append(plan)
        steps = int(plan.flags["speculative-num-steps"])
        return simulated_outcome(self.space, plan, tok_s=RATE[steps], rounds=2, ci95=0.2, launch_s=30.0, measure_s=20.0)


def depth_space(tmp_path: Path) -> SearchSpace:
    """The twin space with only the draft depth tuned (1-4 steps, one more draft token) and no baselines."""
    data: dict[str, Any] = yaml.safe_load(TWIN_SPACE.read_text())
    data["baselines"] = []
    data["fixed"].update(NEXTN)
    data["tuned"] = {"speculative-num-steps": {"type": "int", "low": 1, "high": 4}}
    return parse_space(data, path=tmp_path / "depth.yaml")


def runner_for(space: SearchSpace, tmp_path: Path, servers: Servers) -> StudyRunner:
    return study_runner(space, tmp_path, inventory=idle_gpus(2), launcher=servers, sampler=make_sampler("random", 3))


def queue(runner: StudyRunner, *depths: int) -> None:
    for steps in depths:
        runner.study.enqueue_trial({"speculative-num-steps": steps})


def test_trials_count_launches_and_a_reused_proposal_is_not_one(tmp_path: Path) -> None:
    space = depth_space(tmp_path)
    servers = Servers(space)
    runner = runner_for(space, tmp_path, servers)
    queue(runner, 2, 2, 1)  # the second 2 is the same configuration: answered from the first
    runner.run(trials=3, timeout_s=None)
    records = runner.records()
    assert len(servers.plans) == 3 and runner.stop_reason == "3 launches done"
    assert isinstance(records[1].decision, Reuse) and records[1].reused_from == records[0].number
    assert sum(isinstance(r.decision, Launch) for r in records) == 3 and len(records) >= 4


def test_a_space_with_nothing_left_to_launch_says_so_instead_of_running_forever(tmp_path: Path) -> None:
    space = depth_space(tmp_path)
    servers = Servers(space)
    runner = runner_for(space, tmp_path, servers)
    runner.run(trials=6, timeout_s=None)
    # four depths: four launches, then every proposal is one of them
    assert sorted(int(p.flags["speculative-num-steps"]) for p in servers.plans) == [1, 2, 3, 4]
    assert runner.stop_reason is not None
    assert "only 4 launched" in runner.stop_reason and "the space looks exhausted" in runner.stop_reason


def test_a_tight_space_keeps_launching_distinct_configurations_until_its_budget(tmp_path: Path) -> None:
    from benchmarks import family_tight
    from benchmarks.nights import LandscapeLauncher, make_runner
    from benchmarks.problems import problem_of

    # Weights fill 93 % of each GPU: every draft at the engine's automatic fraction dies of memory, and
    # the first launch that serves has no draft. TPE alone then proposes that served region again and
    # again (answered without a launch): it took 468 proposals to make 20 launches.
    member = family_tight.tight_member(2)
    problem = problem_of(member.profile, member.space)
    launcher = LandscapeLauncher(problem, problem.landscape(2), random.Random(2))
    runner = make_runner(problem, tmp_path, sampler=make_sampler("tpe", 2), launcher=launcher)
    runner.enqueue_baselines()
    runner.run(trials=20, timeout_s=None)
    launched = [r for r in runner.records() if isinstance(r.decision, Launch)]
    assert runner.stop_reason == "20 launches done" and len(launched) == 20
    assert len(runner.records()) <= 20 * 5  # TPE alone: 468
    assert len({tuple(sorted(r.decision.plan.flags.items())) for r in launched}) == 20
    assert sum(r.served for r in launched) >= 5  # alone, TPE served one configuration in its 8 launches
