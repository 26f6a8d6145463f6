"""What a study learns without launching: a server failure that names a flag's value is predicted
for configurations sharing it; a config that differs from a measured one only in memory sizing
decodes one stream alike and is not launched again; a failure after the set-up served is told to
the sampler, and does not stop the study as a set-up fault would after three.

Driven through the study runner's front door (in-memory storage) with the twin's landscape as the
launcher: a family member whose space lists both drafters' paths under either algorithm, so a
path of the other kind dies at launch, as a real engine does when given the wrong checkpoint.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import optuna
import yaml
from rich.console import Console

from autotune.engines.base import LaunchPlan
from autotune.measure.protocol import EarlyStop
from autotune.records import TrialRecord
from autotune.report.console import LiveView
from autotune.study import StudyView, make_sampler
from autotune.study.named_failures import named_values, predicted_failure
from autotune.testing.records import trial_record
from autotune.trial import TrialOutcome
from benchmarks.nights import LandscapeLauncher, make_runner
from benchmarks.problems import load_problem, problem_of
from tests.conftest import TWIN_SPACE, run_queued

HAND_FOUND = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3, "speculative-eagle-topk": 1,
              "speculative-num-draft-tokens": 4, "mem-fraction-static": 0.88, "max-running-requests": 16,
              "mamba-full-memory-ratio": 0.5}  # fmt: skip


class Counting:
    """The landscape launcher, counting the plans it was asked to launch."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.plans = inner, []

    def __call__(
        self, plan: LaunchPlan, log_path: Path, phase: Any, early_stop: EarlyStop | None = None
    ) -> TrialOutcome:
        self.plans.append(plan)
        outcome: TrialOutcome = self.inner(plan, log_path, phase, early_stop)
        return outcome


def test_named_values_are_whole_words_or_paths_of_text_flags() -> None:
    flags = {"draft": "org/drafter-DFlash", "algorithm": "EAGLE3", "backend": "fa3", "dtype": "auto", "steps": 3}
    reason = "OSError: org/drafter-DFlash is not an EAGLE3 draft model (automatic checks failed)"
    assert named_values(flags, reason) == {"draft": "org/drafter-DFlash", "algorithm": "EAGLE3"}
    assert named_values({"draft": "org/drafter"}, reason) == {}  # a prefix of a path is not the path
    assert named_values(flags, None) == {}


def test_a_named_failure_holds_until_a_launch_with_those_values_serves() -> None:
    failed = trial_record(3, outcome="crashed", reason="bad drafter", flags={"algorithm": "EAGLE3", "draft": "d"},
                          failure_names={"algorithm": "EAGLE3", "draft": "d"})  # fmt: skip
    same = {"algorithm": "EAGLE3", "draft": "d", "steps": 5}
    assert predicted_failure(same, [failed]) == failed
    assert predicted_failure({"algorithm": "DFLASH", "draft": "d"}, [failed]) is None  # shares only one value
    served = trial_record(4, flags={**same, "steps": 2})
    assert predicted_failure(same, [failed, served]) is None  # refuted


def _family_runner(tmp_path: Path, seed: int) -> tuple[Any, Counting]:
    from benchmarks import family

    member = family.member(1027)  # 2x H100, EAGLE3 and DFLASH drafters, both paths listed for either
    problem = problem_of(member.profile, member.space)
    launcher = Counting(LandscapeLauncher(problem, problem.landscape(seed), random.Random(seed)))
    runner = make_runner(problem, tmp_path, sampler=make_sampler("tpe", seed), launcher=launcher)
    return runner, launcher


def test_a_wrong_drafter_crash_is_learned_not_repeated_and_does_not_stop_the_study(tmp_path: Path) -> None:
    runner, launcher = _family_runner(tmp_path, 1027)
    runner.enqueue_baselines()
    runner.run(trials=60, timeout_s=None)
    records = StudyView(runner.study).records()
    crashed = [r for r in records if r.outcome == "crashed"]
    assert crashed, "the space holds wrong-drafter configurations: some must have been tried"
    assert runner.stop_reason == "60 launches done", runner.stop_reason
    for record in crashed:
        # told to the sampler as the configuration's fault, not dropped as a failed trial
        assert record.state == "COMPLETE" and "counted against this configuration" in (record.reason or "")
        assert record.lessons.failure_names.get("speculative-draft-model-path") in (record.reason or "")
    # Propose what the sampler might: the first crash's values with another value of a flag its
    # message did not name.
    first = runner.study.trials[crashed[0].number]
    named = crashed[0].lessons.failure_names
    other = next(name for name, d in first.distributions.items()
                 if name not in named and isinstance(d, optuna.distributions.CategoricalDistribution)
                 and len(d.choices) > 1)  # fmt: skip
    choices = first.distributions[other].choices  # type: ignore[attr-defined]
    runner.study.enqueue_trial({**first.params, other: next(c for c in choices if c != first.params[other])})
    run_queued(runner)
    predicted = [r for r in StudyView(runner.study).records() if r.outcome == "predicted-failure"]
    assert predicted, "a configuration sharing a crashed drafter pairing must be predicted, not launched"
    launched = {p.config_key for p in launcher.plans}
    for record in predicted:
        assert record.launch.config_key not in launched
        assert "predicted without launching: trial" in (record.reason or "")
    assert len(crashed) <= 6, f"{len(crashed)} wrong-drafter launches: the lesson was not applied"


def _twin_problem(tmp_path: Path, concurrency: int):  # type: ignore[no-untyped-def]
    data = yaml.safe_load(TWIN_SPACE.read_text())
    data["baselines"] = [{"name": "hand-found", "flags": HAND_FOUND}]
    data["measurement"]["concurrency"] = concurrency
    data["objective"] = {"metric": "decode_tok_s", "concurrency": concurrency}
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    return load_problem("qwen3.6-27b-2xa6000", space)


def _run_with_memory_variant(tmp_path: Path, concurrency: int = 1) -> tuple[Any, Counting]:
    problem = _twin_problem(tmp_path, concurrency)
    launcher = Counting(LandscapeLauncher(problem, problem.landscape(0), random.Random(0)))
    runner = make_runner(problem, tmp_path, sampler=make_sampler("tpe", 0), launcher=launcher,
                               storage=optuna.storages.InMemoryStorage())  # fmt: skip
    runner.enqueue_baselines()
    runner.run(trials=1, timeout_s=None)
    # not a baseline: the hand-found config with other memory sizing, as a sampler would propose it
    runner.study.enqueue_trial({**HAND_FOUND, "speculative-adaptive": False, "mem-fraction-static": 0.84,
                                "max-running-requests": 8, "cuda-graph-max-bs-decode": 32})
    run_queued(runner)
    return runner, launcher


def test_a_config_differing_only_in_memory_sizing_borrows_the_measured_rate(tmp_path: Path) -> None:
    runner, launcher = _run_with_memory_variant(tmp_path)
    first, second = StudyView(runner.study).records()
    assert len(launcher.plans) == 1 and first.outcome == "ok"
    assert second.reused_from == first.number and second.value == first.value
    assert second.flags["mem-fraction-static"] == 0.84 and second.launch.config_key != first.launch.config_key
    assert "same single-stream decode rate as trial 0" in (second.reason or "")
    assert "--max-running-requests" in (second.reason or "") and "--mem-fraction-static" in (second.reason or "")


def test_under_load_memory_sizing_can_change_the_rate_so_it_is_launched(tmp_path: Path) -> None:
    runner, launcher = _run_with_memory_variant(tmp_path, concurrency=4)
    assert len(launcher.plans) == 2
    assert all(r.reused_from is None for r in StudyView(runner.study).records())


def _run_after_hand_found(
    tmp_path: Path, proposed: dict[str, Any], concurrency: int = 1, console: Console | None = None
) -> tuple[Any, Counting]:
    problem = _twin_problem(tmp_path, concurrency)
    launcher = Counting(LandscapeLauncher(problem, problem.landscape(0), random.Random(0)))
    events = LiveView(console, total=2, timeout_s=None, simulated=True) if console is not None else None
    runner = make_runner(problem, tmp_path, sampler=make_sampler("tpe", 0), launcher=launcher,
                               storage=optuna.storages.InMemoryStorage(), events=events)  # fmt: skip
    runner.enqueue_baselines()
    runner.run(trials=1, timeout_s=None)
    runner.study.enqueue_trial({**HAND_FOUND, "speculative-adaptive": False, **proposed})
    run_queued(runner)
    return runner, launcher


def adjusted_by(record: TrialRecord, rule: str) -> list[int] | None:
    """The trials a rule's adjustment of this trial's launch came from; None where it did not adjust."""
    return next((change.trials for change in record.adjusted if change.rule == rule), None)


RISKY_SIZING = {"mem-fraction-static": 0.95, "max-running-requests": 48, "cuda-graph-max-bs-decode": 48}


def test_a_new_config_launches_with_the_sizing_of_a_served_launch_that_vouches_for_it(tmp_path: Path) -> None:
    fewer_draft_tokens = {"speculative-num-steps": 2, "speculative-num-draft-tokens": 3, **RISKY_SIZING}
    console = Console(record=True, width=200)
    runner, launcher = _run_after_hand_found(tmp_path, fewer_draft_tokens, console=console)
    first, second = StudyView(runner.study).records()
    assert f"the memory sizing of served trial {first.number}" in console.export_text()
    assert len(launcher.plans) == 2 and second.outcome == "ok"
    assert adjusted_by(second, "served-sizing") == [first.number]
    launched = launcher.plans[1].flags
    assert launched["speculative-num-draft-tokens"] == 3  # the sampled speculation is kept...
    for name in ("mem-fraction-static", "max-running-requests", "mamba-full-memory-ratio"):  # ...its sizing is not
        assert launched.get(name) == first.flags.get(name)
    assert "cuda-graph-max-bs-decode" not in launched  # unset where the served launch left it unset
    assert second.flags == launched


def test_a_config_demanding_more_takes_the_sizing_of_the_served_launch_it_exceeds_least(tmp_path: Path) -> None:
    more_draft_tokens = {"speculative-num-steps": 5, "speculative-num-draft-tokens": 6, **RISKY_SIZING}
    runner, launcher = _run_after_hand_found(tmp_path, more_draft_tokens)
    first, second = StudyView(runner.study).records()
    assert adjusted_by(second, "served-sizing") == [first.number]
    assert launcher.plans[1].flags["mem-fraction-static"] == first.flags["mem-fraction-static"]
    assert launcher.plans[1].flags["speculative-num-steps"] == 5


def test_a_config_unlike_every_served_launch_keeps_its_sampled_sizing(tmp_path: Path) -> None:
    other_drafter = {"speculative-algorithm": "DFLASH", "speculative-draft-model-path": "z-lab/Qwen3.6-27B-DFlash",
                     "speculative-dflash-block-size": 8, **RISKY_SIZING}  # fmt: skip
    runner, launcher = _run_after_hand_found(tmp_path, other_drafter)
    assert StudyView(runner.study).records()[1].adjusted == []
    assert launcher.plans[1].flags["mem-fraction-static"] == 0.95


def test_under_load_the_sampled_sizing_is_launched(tmp_path: Path) -> None:
    fewer_draft_tokens = {"speculative-num-steps": 2, "speculative-num-draft-tokens": 3, **RISKY_SIZING}
    runner, launcher = _run_after_hand_found(tmp_path, fewer_draft_tokens, concurrency=4)
    assert StudyView(runner.study).records()[1].adjusted == []
    assert launcher.plans[1].flags["mem-fraction-static"] == 0.95


DFLASH = {"speculative-algorithm": "DFLASH", "speculative-draft-model-path": "z-lab/Qwen3.6-27B-DFlash",
          "max-running-requests": 8, "cuda-graph-max-bs-decode": 8}  # fmt: skip


def _run_two_new_drafters(
    tmp_path: Path, first_fraction: float, second_fraction: float, concurrency: int = 1
) -> tuple[Any, Counting, Console]:
    """The hand-found NEXTN launch serves; then two DFLASH configs no served launch is alike to
    (other weights), the first with the larger block (more pool), each at its own fraction."""
    console = Console(record=True, width=250)
    runner, launcher = _run_after_hand_found(
        tmp_path, {**DFLASH, "speculative-dflash-block-size": 10, "mem-fraction-static": first_fraction},
        concurrency=concurrency, console=console,
    )  # fmt: skip
    second = {**DFLASH, "speculative-dflash-block-size": 8, "mem-fraction-static": second_fraction}
    runner.study.enqueue_trial({**HAND_FOUND, "speculative-adaptive": False, **second})
    run_queued(runner)
    return runner, launcher, console


def test_a_new_drafter_sampled_below_a_death_of_its_kind_launches_inside_what_deaths_left_open(
    tmp_path: Path,
) -> None:
    runner, launcher, console = _run_two_new_drafters(tmp_path, 0.75, 0.72)
    _, died, moved = StudyView(runner.study).records()
    assert died.outcome == "infeasible-memory-low"  # the KV pool cannot hold one context at 0.75
    # 0.72 is below that death (it would be predicted to die alike): it launches at the middle of 0.75
    # and the top of the tuned range (0.95) instead, and serves
    assert [p.flags["mem-fraction-static"] for p in launcher.plans] == [0.88, 0.75, 0.85]
    assert moved.outcome == "ok" and adjusted_by(moved, "fraction-inside") == [died.number]
    assert moved.flags["mem-fraction-static"] == 0.85
    assert f"inside what the memory deaths of trial {died.number} left open" in console.export_text()


def test_a_fraction_inside_what_deaths_left_open_is_launched_as_sampled(tmp_path: Path) -> None:
    runner, launcher, _ = _run_two_new_drafters(tmp_path, 0.75, 0.8)
    assert [p.flags["mem-fraction-static"] for p in launcher.plans] == [0.88, 0.75, 0.8]
    assert StudyView(runner.study).records()[2].adjusted == []


def test_under_load_a_fraction_below_a_pool_death_gets_the_room_that_death_lacked(tmp_path: Path) -> None:
    runner, launcher, _ = _run_two_new_drafters(tmp_path, 0.75, 0.72, concurrency=4)
    _, died, moved = StudyView(runner.study).records()
    # The smaller block leaves the pool per token as it was: 0.72 would die as 0.75 did, so make-room
    # launches it just above the death, where the printed pool holds one request, and it serves.
    assert died.outcome == "infeasible-memory-low" and adjusted_by(moved, "make-room") == [died.number]
    launched = [p.flags["mem-fraction-static"] for p in launcher.plans]
    assert launched[:2] == [0.88, 0.75] and 0.75 < launched[2] < 0.85 and moved.outcome == "ok"


def test_a_borrowed_sizing_that_killed_a_launch_demanding_more_is_not_borrowed_again(tmp_path: Path) -> None:
    from benchmarks import family

    member = family.member(1259)  # 8x H100, a 354B MoE in int4 at TP 4: little headroom left at a high fraction
    problem = problem_of(member.profile, member.space)
    launcher = Counting(LandscapeLauncher(problem, problem.landscape(0), random.Random(0)))
    runner = make_runner(problem, tmp_path, sampler=make_sampler("tpe", 0), launcher=launcher,
                               storage=optuna.storages.InMemoryStorage())  # fmt: skip
    nextn = {"tp-size": 4, "speculative-algorithm": "NEXTN", "speculative-eagle-topk": 2, "attention-backend": "fa3"}
    sampled = {"mem-fraction-static": 0.87, "max-running-requests": 4, "cuda-graph-max-bs-decode": 4}
    served = {"mem-fraction-static": 0.97, "max-running-requests": 32, "cuda-graph-max-bs-decode": 32}
    for params in ({**nextn, "speculative-num-steps": 6, "speculative-num-draft-tokens": 8, **served},
                   {**nextn, "speculative-num-steps": 5, "speculative-num-draft-tokens": 15, **sampled},
                   {**nextn, "speculative-num-steps": 6, "speculative-num-draft-tokens": 12, **sampled}):  # fmt: skip
        runner.study.enqueue_trial(params)
        run_queued(runner)
    first, died, third = StudyView(runner.study).records()
    # 15 draft tokens exceed the served launch's 8: its sizing is borrowed, and runs out of headroom
    assert adjusted_by(died, "served-sizing") == [first.number] and died.outcome == "infeasible-memory-high"
    # 12 exceed 8 as well, but that sizing has killed a launch like it: the sampled one launches, and fits
    assert third.adjusted == [] and third.outcome == "ok"
    assert [p.flags["mem-fraction-static"] for p in launcher.plans] == [0.97, 0.97, 0.87]
