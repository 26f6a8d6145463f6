"""Issue 46 on a hand-built history: a pool-memory death speaks for every configuration that needs no less
at no larger a fraction (:mod:`autotune.study.pool_deaths`), and a proposal it speaks for gets the
room it lacks where the space offers it (rule ``make-room``)."""

from __future__ import annotations

from typing import Any

from autotune.decision import Launch
from autotune.engines.base import LaunchPlan
from autotune.engines.sglang import SGLangEngine
from autotune.feasibility import FeasibilityModel, MemoryLesson
from autotune.outcomes import OutcomeKind
from autotune.records import TrialRecord
from autotune.space import SearchSpace, load_space
from autotune.study.history import History
from autotune.study.pool_deaths import PoolDeath, dies_like, pool_deaths
from autotune.study.rules.make_room import MakeRoom
from tests.conftest import TWIN_SPACE

GIB = 2**30
ENGINE = SGLangEngine()
ENGINES = {"sglang": ENGINE}
DRAFT = {"tp-size": 2, "context-length": 8192, "speculative-algorithm": "EAGLE3",
         "speculative-draft-model-path": "org/eagle3", "speculative-eagle-topk": 1}  # fmt: skip
WEIGHTS, FREE = 28.8 * GIB, 31.0 * GIB
# what the twin prints for a pool that cannot hold one request, at the engine's own fraction
SHORT = ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
         "mem_fraction_static=0.941 (twin: the KV pool holds 6453 tokens, fewer than one "
         "context_length=8192 request)")  # fmt: skip


def plan(**flags: Any) -> LaunchPlan:
    return ENGINE.normalise({**DRAFT, **flags})


def died(number: int, launched: LaunchPlan, *, side: str = "too-low", reason: str = SHORT) -> TrialRecord:
    kind = OutcomeKind.MEMORY_TOO_LOW if side == "too-low" else OutcomeKind.MEMORY_TOO_HIGH
    lesson = MemoryLesson(flags=launched.flags, trial=number, side=side, weights_bytes=WEIGHTS,  # type: ignore[arg-type]
                          server_free_bytes=FREE)  # fmt: skip
    return TrialRecord(number=number, state="COMPLETE", outcome=kind.value, reason=reason, engine="sglang",
                       flags=launched.flags, config_key=launched.config_key, memory=lesson)  # fmt: skip


def deep(**flags: Any) -> LaunchPlan:
    return plan(**{"speculative-num-steps": 4, "speculative-num-draft-tokens": 5, **flags})


def test_the_printed_figures_size_the_lesson() -> None:
    (death,) = pool_deaths([died(0, deep())], ENGINE, "sglang")
    assert death.shortfall is not None and death.shortfall.fraction == 0.941
    assert (death.shortfall.pool_tokens, death.shortfall.needed_tokens) == (6453, 8192)
    per_token = (0.941 * FREE - WEIGHTS) / 6453
    assert death.fraction_needed is not None
    assert abs(death.fraction_needed - (WEIGHTS + 8192 * per_token) / FREE) < 1e-12  # 0.9442
    assert ENGINE.pool_shortfall("torch.OutOfMemoryError: CUDA out of memory") is None


def test_a_pool_death_speaks_for_every_config_needing_no_less_at_no_larger_a_fraction() -> None:
    (death,) = pool_deaths([died(0, deep())], ENGINE, "sglang")
    rules = ENGINE.memory_rules
    assert rules is not None

    def dies(sampled: LaunchPlan, of: PoolDeath = death) -> str | None:
        return dies_like(of, sampled, rules)

    # at the engine's own fraction: deeper, wider drafts reserve more headroom, so their fraction is no larger
    wider = dies(deep(**{"speculative-num-steps": 6, "speculative-eagle-topk": 2, "speculative-num-draft-tokens": 10}))
    assert wider is not None and "engine's own" in wider
    assert dies(plan(**{"speculative-num-steps": 2, "speculative-num-draft-tokens": 3})) is None  # needs less
    assert dies(deep(**{"tp-size": 4})) is None  # half the weights per GPU
    assert dies(deep(**{"speculative-draft-model-path": "org/other"})) is None  # other weights
    # given fractions: no larger than the printed 0.941, or larger but with a pool of fewer than 8192 tokens
    assert dies(deep(**{"mem-fraction-static": 0.94})) is not None
    short = dies(deep(**{"mem-fraction-static": 0.943}))
    assert short is not None and "fewer than the 8192 one request needs" in short
    assert dies(deep(**{"mem-fraction-static": 0.945})) is None
    assert dies(deep(**{"mem-fraction-static": 0.943, "context-length": 4096})) is None


def tight_space() -> SearchSpace:
    space = load_space(TWIN_SPACE)
    tuned = dict(space.tuned)
    tuned["mem-fraction-static"] = space.tuned["speculative-eagle-topk"].model_validate(
        {"type": "categorical", "choices": [False, 0.90, 0.92, 0.94, 0.95, 0.96, 0.98]}
    )
    tuned["cuda-graph-max-bs-decode"] = tuned["mem-fraction-static"].model_validate(
        {"type": "categorical", "choices": [False, 1, 4, 16]}
    )
    return space.model_copy(update={"tuned": tuned})


def models() -> dict[str, FeasibilityModel]:
    return {"sglang": FeasibilityModel(ENGINE.memory_rules, free_bytes=FREE, total_bytes=32 * GIB,
                                       weight_bytes=WEIGHTS * 2)}  # fmt: skip


def test_a_proposal_a_death_speaks_for_gets_the_room_it_lacks() -> None:
    rule = MakeRoom(tight_space(), ENGINES, models())
    history = History([died(0, deep())], number=1)
    sampled = deep(**{"speculative-num-steps": 6, "speculative-num-draft-tokens": 7})
    decision = rule.decide(sampled, history)
    # the smallest offered fraction above the 0.9442 the printed figures call for
    assert isinstance(decision, Launch) and decision.plan.flags["mem-fraction-static"] == 0.95
    (change,) = decision.adjusted
    assert change.rule == "make-room" and change.trials == [0]
    assert [(v.flag, v.sampled, v.launched) for v in change.values] == [("mem-fraction-static", None, 0.95)]
    assert ENGINE.memory_rules is not None
    assert dies_like(pool_deaths(history.finished, ENGINE, "sglang")[0], decision.plan, ENGINE.memory_rules) is None
    assert rule.decide(plan(**{"speculative-num-steps": 2, "speculative-num-draft-tokens": 3}), history) is None


def test_no_room_is_made_past_where_launches_like_it_ran_out_of_headroom() -> None:
    learned = models()
    headroom = died(1, deep(**{"mem-fraction-static": 0.95}), side="too-high", reason="torch.OutOfMemoryError")
    assert headroom.memory is not None
    learned["sglang"].learn(headroom.memory)
    rule = MakeRoom(tight_space(), ENGINES, learned)
    history = History([died(0, deep()), headroom], number=2)
    # 0.95 and above ran out of headroom with graphs at the engine's batch; no offered fraction is left
    assert rule.decide(deep(**{"speculative-num-steps": 6, "speculative-num-draft-tokens": 7}), history) is None
