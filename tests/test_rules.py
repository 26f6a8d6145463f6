"""The study's pre-launch rules, each alone on a hand-built history, and the contract every rule keeps."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import optuna
import pytest

from autotune.decision import Launch, Reuse, Skip, Wait
from autotune.engines.base import LaunchPlan
from autotune.engines.sglang import SGLangEngine
from autotune.feasibility import FeasibilityModel, MemoryLesson
from autotune.outcomes import OutcomeKind
from autotune.records import TrialRecord
from autotune.space import SearchSpace, load_space
from autotune.study import attrs
from autotune.study.history import History
from autotune.study.rules import RULE_NAMES, build_rules, decide, one_stream_rate
from autotune.study.rules.duplicate import Duplicate
from autotune.study.rules.fraction_inside import FractionInside
from autotune.study.rules.memory import PredictedMemory
from autotune.study.rules.named_failure import NamedFailure
from autotune.study.rules.same_rate import SameRate
from autotune.study.rules.served_sizing import ServedSizing
from autotune.testing.records import trial_record
from tests.conftest import TWIN_SPACE

GIB = 2**30
ENGINE = SGLangEngine()
ENGINES = {"sglang": ENGINE}
SPECULATIVE = {"tp-size": 2, "speculative-algorithm": "NEXTN", "speculative-num-steps": 3, "speculative-eagle-topk": 1}


def plan(**flags: Any) -> LaunchPlan:
    return ENGINE.normalise({**SPECULATIVE, "mem-fraction-static": 0.85, "cuda-graph-max-bs-decode": 16, **flags})


def served(number: int, launched: LaunchPlan, value: float = 50.0) -> TrialRecord:
    return trial_record(number, value=value, engine="sglang", flags=launched.flags, config_key=launched.config_key,
                        decision=Launch(plan=launched))  # fmt: skip


def models() -> dict[str, FeasibilityModel]:
    return {"sglang": FeasibilityModel(ENGINE.memory_rules, free_bytes=47 * GIB, total_bytes=48 * GIB,
                                       weight_bytes=54e9)}  # fmt: skip


def space() -> SearchSpace:
    return load_space(TWIN_SPACE)


# ---------------------------------------------------------------- each rule alone


def test_duplicate_reuses_a_measured_config_and_waits_for_an_older_one_running() -> None:
    first = served(0, plan())
    assert Duplicate().decide(plan(), History([first], number=1)) == Reuse(rule="duplicate", trial=0, same_config=True)
    running = first.model_copy(update={"state": "RUNNING", "outcome": "running"})
    assert Duplicate().decide(plan(), History([running], number=1)) == Wait(trial=0)
    newer = running.model_copy(update={"number": 5, "decision": None})  # still deciding: it waits for this one
    assert Duplicate().decide(plan(), History([newer], number=1)) is None
    crashed = first.model_copy(update={"outcome": OutcomeKind.CRASHED.value})
    assert Duplicate().decide(plan(), History([crashed], number=1)) is None  # the set-up's fault: launched again
    reused = first.model_copy(update={"decision": Reuse(rule="duplicate", trial=7, same_config=True)})
    assert Duplicate().decide(plan(), History([reused], number=1)) is None  # only a launch is a source


def test_a_newer_trial_already_measuring_the_config_is_waited_for() -> None:
    # Its rules turned another proposal into this configuration after this trial had looked.
    measuring = served(5, plan()).model_copy(update={"state": "RUNNING", "outcome": "running"})
    assert Duplicate().decide(plan(), History([measuring], number=1)) == Wait(trial=5)


class _SizedAs:
    """A rule that launches every plan at one memory fraction, as the sizing rules may."""

    name = "sized-as"
    for_baselines = False

    def __init__(self, fraction: float) -> None:
        self.fraction = fraction

    def decide(self, plan: LaunchPlan, history: History) -> Launch:
        return Launch(plan=ENGINE.normalise({**plan.flags, "mem-fraction-static": self.fraction}))


def test_two_proposals_the_rules_turn_into_one_config_are_one_config() -> None:
    launched = served(0, plan(**{"mem-fraction-static": 0.8}))
    proposal = plan(**{"mem-fraction-static": 0.9})
    rules = [Duplicate(), _SizedAs(0.8)]
    assert decide(rules, proposal, History([launched], number=1), baseline=False) == Reuse(
        rule="duplicate", trial=0, same_config=True
    )
    running = launched.model_copy(update={"state": "RUNNING", "outcome": "running"})
    assert decide(rules, proposal, History([running], number=1), baseline=False) == Wait(trial=0)
    other = served(0, plan(**{"mem-fraction-static": 0.7}))
    decision = decide(rules, proposal, History([other], number=1), baseline=False)
    assert isinstance(decision, Launch) and decision.plan.flags["mem-fraction-static"] == 0.8


def test_same_rate_reuses_a_config_differing_only_in_memory_sizing() -> None:
    first = served(0, plan())
    decision = SameRate(ENGINES).decide(plan(**{"mem-fraction-static": 0.9}), History([first], number=1))
    assert isinstance(decision, Reuse) and decision.trial == 0 and not decision.same_config
    assert "--mem-fraction-static" in (decision.reason or "")
    assert SameRate(ENGINES).decide(plan(**{"speculative-num-steps": 4}), History([first], number=1)) is None
    assert SameRate(ENGINES).decide(plan(**{"mem-fraction-static": 0.9}), History([], number=0)) is None


def test_served_sizing_launches_the_sizing_of_a_served_launch_alike() -> None:
    first = served(0, plan(**{"mem-fraction-static": 0.8}))
    sampled = plan(**{"speculative-num-steps": 4, "mem-fraction-static": 0.93})
    decision = ServedSizing(ENGINES, models()).decide(sampled, History([first], number=1))
    assert isinstance(decision, Launch) and decision.plan.flags["mem-fraction-static"] == 0.8
    (change,) = decision.adjusted
    assert change.rule == "served-sizing" and change.trials == [0]
    assert [(a.flag, a.sampled, a.launched) for a in change.values] == [("mem-fraction-static", 0.93, 0.8)]
    vouched = plan(**{"speculative-num-steps": 2, "mem-fraction-static": 0.8})  # fewer draft tokens, same sizing
    assert ServedSizing(ENGINES, models()).decide(vouched, History([first], number=1)) is None
    assert ServedSizing(ENGINES, models()).decide(sampled, History([], number=0)) is None


def test_fraction_inside_launches_the_middle_of_what_memory_deaths_left_open() -> None:
    learned = models()
    died = plan(**{"mem-fraction-static": 0.9})
    learned["sglang"].learn(MemoryLesson(flags=died.flags, trial=3, side="too-high"))
    decision = FractionInside(space(), ENGINES, learned).decide(plan(**{"mem-fraction-static": 0.94}),
                                                                History([], number=4))  # fmt: skip
    assert isinstance(decision, Launch)
    fraction = decision.plan.flags["mem-fraction-static"]
    assert isinstance(fraction, float) and 0.7 <= fraction < 0.9
    assert decision.adjusted[0].trials == [3] and decision.adjusted[0].values[0].sampled == 0.94
    inside = FractionInside(space(), ENGINES, learned).decide(plan(**{"mem-fraction-static": 0.85}),
                                                              History([], number=4))  # fmt: skip
    assert inside is None  # already inside the window


def test_named_failure_skips_what_shares_the_named_values_until_they_serve() -> None:
    path = "org/drafter-DFlash"
    named = {"speculative-draft-model-path": path}
    failed = trial_record(2, outcome="crashed", reason=f"{path} is no NEXTN drafter", flags=named,
                          failure_names=named)  # fmt: skip
    sampled = plan(**{"speculative-draft-model-path": path})
    decision = NamedFailure().decide(sampled, History([failed], number=3))
    assert isinstance(decision, Skip) and decision.outcome is OutcomeKind.PREDICTED_FAILURE
    assert decision.constraint == "config" and decision.trials == [2] and path in decision.reason
    refuted = History([failed, served(4, sampled)], number=5)
    assert NamedFailure().decide(sampled, refuted) is None


def test_memory_skips_a_config_predicted_not_to_fit() -> None:
    decision = PredictedMemory(models()).decide(plan(**{"mem-fraction-static": 0.5}), History([], number=0))
    assert isinstance(decision, Skip) and decision.outcome is OutcomeKind.PREDICTED_MEMORY_TOO_LOW
    assert decision.constraint == "memory" and decision.reason.startswith("predicted without launching")
    assert PredictedMemory(models()).decide(plan(), History([], number=0)) is None


# ---------------------------------------------------------------- the chain


def test_the_sizing_rules_are_built_only_where_sizing_cannot_buy_the_objective() -> None:
    one_stream = space()
    assert one_stream_rate(one_stream)
    assert [r.name for r in build_rules(one_stream, ENGINES, models())] == list(RULE_NAMES)
    levels = one_stream.model_copy(update={"objective": one_stream.objective.model_copy(update={"levels": [1, 8]})})
    assert [r.name for r in build_rules(levels, ENGINES, models())] == ["duplicate", "make-room", "context-fit",
                                                                        "named-failure", "memory"]  # fmt: skip
    assert "same-rate" not in [r.name for r in build_rules(one_stream, ENGINES, models(), off={"same-rate"})]
    with pytest.raises(ValueError, match="unknown rules"):
        build_rules(one_stream, ENGINES, models(), off={"sizing"})


def test_adjustments_accumulate_and_the_first_skip_ends_the_chain() -> None:
    rules = build_rules(space(), ENGINES, models())
    first = served(0, plan(**{"mem-fraction-static": 0.8}))
    decision = decide(rules, plan(**{"speculative-num-steps": 4, "mem-fraction-static": 0.93}),
                      History([first], number=1), baseline=False)  # fmt: skip
    assert isinstance(decision, Launch) and [a.rule for a in decision.adjusted] == ["served-sizing"]
    # a fraction the weights fill is raised by make-room; where no offered fraction clears them, memory skips
    raised = decide(rules, plan(**{"mem-fraction-static": 0.5}), History([], number=0), baseline=False)
    assert isinstance(raised, Launch) and [a.rule for a in raised.adjusted] == ["make-room"]
    heavy = {"sglang": FeasibilityModel(ENGINE.memory_rules, free_bytes=47 * GIB, total_bytes=48 * GIB,
                                        weight_bytes=2 * 46.9 * GIB)}  # fmt: skip
    skipped = decide(build_rules(space(), ENGINES, heavy), plan(**{"mem-fraction-static": 0.5}),
                     History([], number=0), baseline=False)  # fmt: skip
    assert isinstance(skipped, Skip) and skipped.rule == "memory"


# ---------------------------------------------------------------- the contract every rule keeps


def _histories() -> list[tuple[LaunchPlan, History]]:
    """Plans and histories on which some rule reuses, adjusts, skips or waits."""
    first = served(0, plan(**{"mem-fraction-static": 0.8}))
    running = first.model_copy(update={"state": "RUNNING", "outcome": "running"})
    short = ("Not enough memory. Please try to increase --mem-fraction-static. Current value: mem_fraction_static=0.8 "
             "(twin: the KV pool holds 900 tokens, fewer than one context_length=1000 request)")  # fmt: skip
    lesson = MemoryLesson(flags=plan().flags, trial=0, side="too-low", weights_bytes=27 * GIB,
                          server_free_bytes=40 * GIB)  # fmt: skip
    pool_death = trial_record(0, outcome="infeasible-memory-low", reason=short, engine="sglang",
                              flags=plan(**{"mem-fraction-static": 0.8}).flags, memory=lesson)  # fmt: skip
    return [
        (plan(**{"mem-fraction-static": 0.8, "speculative-num-steps": 5}), History([pool_death], number=1)),
        (plan(**{"mem-fraction-static": 0.81}), History([pool_death], number=1)),
        (plan(**{"mem-fraction-static": 0.8}), History([first], number=1)),
        (plan(**{"mem-fraction-static": 0.9}), History([first], number=1)),
        (plan(**{"speculative-num-steps": 4, "mem-fraction-static": 0.93}), History([first], number=1)),
        (plan(**{"mem-fraction-static": 0.8}), History([running], number=1)),
        (plan(**{"mem-fraction-static": 0.5}), History([first], number=1)),
    ]


@pytest.mark.parametrize("name", RULE_NAMES)
def test_no_rule_reuses_or_changes_a_baseline(name: str) -> None:
    (rule,) = [r for r in build_rules(space(), ENGINES, models()) if r.name == name]
    for sampled, history in _histories():
        decision = decide([rule], sampled, history, baseline=True)
        assert not isinstance(decision, (Reuse, Wait)), (name, decision)
        assert not (isinstance(decision, Launch) and decision.adjusted), (name, decision)


@pytest.mark.parametrize("name", RULE_NAMES)
def test_every_rules_decision_survives_storage(name: str, tmp_path: Path) -> None:
    (rule,) = [r for r in build_rules(space(), ENGINES, models()) if r.name == name]
    decisions = [d for p, h in _histories() if not isinstance(d := decide([rule], p, h, baseline=False), Wait)]
    assert decisions
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'rules.db'}")  # attrs as JSON, as stored
    for decision in decisions:
        trial = study.ask()
        attrs.TrialStory(trial).decided(decision, flags={"mem-fraction-static": 0.8})
        assert attrs.trial_record(study.get_trials()[trial.number]).decision == decision
