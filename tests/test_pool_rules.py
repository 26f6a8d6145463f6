"""Issue 46 on a hand-built history: a pool-memory death speaks for every configuration that needs no less
at no larger a fraction (:mod:`autotune.study.pool_deaths`), also at the most the engine's own fraction
can be for smaller graphs (``EngineFractions``), and a proposal it speaks for gets the room it lacks
where the space offers it (rule ``make-room``)."""

from __future__ import annotations

from functools import partial
from typing import Any

import pytest

from autotune.decision import Launch, Skip
from autotune.engines.base import LaunchPlan
from autotune.engines.sglang import SGLangEngine
from autotune.feasibility import FeasibilityModel, MemoryLesson
from autotune.outcomes import OutcomeKind
from autotune.records import TrialRecord
from autotune.space import SearchSpace, load_space
from autotune.study.history import History
from autotune.study.pool_deaths import EngineFractions, PoolDeath, dies_like, first_death, pool_deaths
from autotune.study.rules.make_room import MakeRoom, fraction_needed
from autotune.testing.records import trial_record
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
    return trial_record(number, outcome=kind.value, reason=reason, engine="sglang", flags=launched.flags,
                        config_key=launched.config_key, memory=lesson)  # fmt: skip


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


def tight_space(fractions: tuple[float, ...] = (0.90, 0.92, 0.94, 0.95, 0.96, 0.98)) -> SearchSpace:
    space = load_space(TWIN_SPACE)
    tuned = dict(space.tuned)
    tuned["mem-fraction-static"] = space.tuned["speculative-eagle-topk"].model_validate(
        {"type": "categorical", "choices": [False, *fractions]}
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


def test_room_past_a_headroom_death_is_made_only_for_smaller_graphs() -> None:
    learned = models()
    headroom = died(1, deep(**{"mem-fraction-static": 0.95}), side="too-high", reason="torch.OutOfMemoryError")
    assert headroom.lessons.memory is not None
    learned["sglang"].learn(headroom.lessons.memory)
    rule = MakeRoom(tight_space(), ENGINES, learned)
    history = History([died(0, deep()), headroom], number=2)
    # 0.95 ran out of headroom with graphs at the engine's batch: a deeper draft gets 0.95 (the smallest
    # fraction the printed figures call for) only with the smallest graph batch offered
    room = rule.decide(deep(**{"speculative-num-steps": 6, "speculative-num-draft-tokens": 7}), history)
    assert isinstance(room, Launch)
    assert (room.plan.flags["mem-fraction-static"], room.plan.flags["cuda-graph-max-bs-decode"]) == (0.95, 1)
    # without the printed figures, room past where launches like it ran out of headroom is left to the
    # memory model: knowing SGLang's own graph batch, it gives 0.95 only with the smallest graph batch
    total = 32 * GIB
    engine_batch = partial(ENGINE.graph_tokens_captured, gpu_total_bytes=total)
    knowing = FeasibilityModel(ENGINE.memory_rules, free_bytes=FREE, total_bytes=total, weight_bytes=WEIGHTS * 2,
                               unset_graph_tokens=engine_batch)  # fmt: skip
    knowing.observe_graph(20 * 0.01 * GIB, flags=deep(**{"cuda-graph-max-bs-decode": 4}).flags)
    knowing.learn(headroom.lessons.memory)
    bare = History([died(0, deep(), reason=SHORT.split(" (twin")[0]), headroom], number=2)
    past = MakeRoom(tight_space(), ENGINES, {"sglang": knowing}).decide(
        deep(**{"speculative-num-steps": 6, "speculative-num-draft-tokens": 7}), bare
    )
    assert isinstance(past, Launch)
    assert (past.plan.flags["mem-fraction-static"], past.plan.flags["cuda-graph-max-bs-decode"]) == (0.95, 1)


def test_a_pool_deaths_figures_speak_across_what_does_not_size_the_pool() -> None:
    rules = ENGINE.memory_rules
    assert rules is not None
    (death,) = pool_deaths([died(0, deep(**{"speculative-num-steps": 6, "speculative-num-draft-tokens": 7}))],
                           ENGINE, "sglang")  # fmt: skip
    # a shallower draft, a graph batch and running requests the death did not set: the same pool per token
    shallow = {"speculative-num-steps": 2, "speculative-num-draft-tokens": 3, "cuda-graph-max-bs-decode": 4,
               "max-running-requests": 1}  # fmt: skip
    short = dies_like(death, plan(**shallow, **{"mem-fraction-static": 0.943}), rules)
    assert short is not None and "fewer than the 8192 one request needs" in short
    assert dies_like(death, plan(**shallow, **{"mem-fraction-static": 0.93}), rules) is not None
    assert dies_like(death, plan(**shallow, **{"mem-fraction-static": 0.945}), rules) is None  # holds one
    # what sizes the pool or the request must be equal: a drafter, a context, an explicit mamba cache
    for other in ({"speculative-draft-model-path": "org/other"}, {"context-length": 4096},
                  {"max-mamba-cache-size": 64}):  # fmt: skip
        assert dies_like(death, plan(**shallow, **other, **{"mem-fraction-static": 0.943}), rules) is None


def graphs_logged(per_token: float) -> dict[str, FeasibilityModel]:
    """The models after one served launch logged its graphs: ``per_token`` bytes per captured token
    (a graph batch of 4 at 5 draft tokens)."""
    learned = models()
    learned["sglang"].observe_graph(20 * per_token, flags=deep(**{"cuda-graph-max-bs-decode": 4}).flags)
    return learned


# A deeper draft whose decode graphs capture 1 x 7 tokens, where the death's captured SGLang's default
# batch on a 32 GB GPU at TP 2 (24) x 5: a fraction left to the engine is larger for it.
SMALL_GRAPHS = {"speculative-num-steps": 6, "speculative-num-draft-tokens": 7, "cuda-graph-max-bs-decode": 1}


def test_the_engines_own_fraction_is_bounded_by_a_deaths_for_smaller_graphs() -> None:
    total = 32 * GIB
    assert ENGINE.graph_tokens_captured(deep().flags, gpu_total_bytes=total) == 24 * 5
    assert ENGINE.graph_tokens_captured(deep(**SMALL_GRAPHS).flags, gpu_total_bytes=total) == 1 * 7
    deaths = pool_deaths([died(0, deep())], ENGINE, "sglang")
    per_token = 0.01 * GIB
    fractions = EngineFractions(ENGINE, graphs_logged(per_token)["sglang"])
    # the printed 0.941, rounded, plus the graph bytes 113 fewer tokens free over the free memory
    assert fractions.at_most(deep(**SMALL_GRAPHS), deaths) == pytest.approx(0.941 + 0.001 + per_token * 113 / FREE)
    assert fractions.at_most(deep(), deaths) == pytest.approx(0.942)  # the same graphs: no larger
    assert fractions.at_most(deep(**SMALL_GRAPHS, **{"mem-fraction-static": 0.95}), deaths) is None  # given
    assert fractions.at_most(deep(**SMALL_GRAPHS, **{"tp-size": 4}), deaths) is None  # another reserve
    assert fractions.at_most(deep(**SMALL_GRAPHS, **{"chunked-prefill-size": 4096}), deaths) is None
    # no graphs logged yet: nothing bounds what fewer captured tokens free
    assert EngineFractions(ENGINE, models()["sglang"]).at_most(deep(**SMALL_GRAPHS), deaths) is None


def test_a_death_speaks_for_smaller_graphs_only_where_the_bounded_fraction_still_starves_the_pool() -> None:
    rules = ENGINE.memory_rules
    assert rules is not None
    deaths = pool_deaths([died(0, deep())], ENGINE, "sglang")
    sampled = deep(**SMALL_GRAPHS)
    assert first_death(deaths, sampled, rules) is None  # an explicit graph batch is not ordered as it is
    # cheap graphs: the engine's fraction gains about 0.0004, a pool of about 7200 tokens, short of 8192
    cheap = first_death(deaths, sampled, rules, EngineFractions(ENGINE, graphs_logged(0.0001 * GIB)["sglang"]))
    assert cheap is not None and cheap.at_bounded_fraction and cheap.death.trial == 0
    assert "at most 0.942" in cheap.why and "fewer than the 8192 one request needs" in cheap.why
    # costly graphs: at most 0.978, whose pool may hold the request
    assert first_death(deaths, sampled, rules, EngineFractions(ENGINE, graphs_logged(0.01 * GIB)["sglang"])) is None


def test_a_proposal_dead_at_its_bounded_fraction_gets_room_or_is_skipped() -> None:
    history = History([died(0, deep())], number=1)
    sampled = deep(**SMALL_GRAPHS)
    room = MakeRoom(tight_space(), ENGINES, graphs_logged(0.0001 * GIB)).decide(sampled, history)
    assert isinstance(room, Launch) and room.plan.flags["mem-fraction-static"] == 0.95
    assert room.adjusted[0].trials == [0]
    # no offered fraction holds one request (0.9442 by the printed figures): predicted, not launched
    short_space = tight_space((0.90, 0.92, 0.94))
    skip = MakeRoom(short_space, ENGINES, graphs_logged(0.0001 * GIB)).decide(sampled, history)
    assert isinstance(skip, Skip) and skip.outcome == OutcomeKind.predicted_for("too-low") and skip.trials == [0]
    # a proposal no death speaks for even at its bound is left alone
    assert MakeRoom(short_space, ENGINES, graphs_logged(0.01 * GIB)).decide(sampled, history) is None


def test_the_memory_model_counts_the_engines_own_graph_batch_where_a_plan_leaves_it_unset() -> None:
    total = 32 * GIB

    def model(*, engine_knows: bool) -> FeasibilityModel:
        unset = partial(ENGINE.graph_tokens_captured, gpu_total_bytes=total) if engine_knows else None
        learned = FeasibilityModel(ENGINE.memory_rules, free_bytes=FREE, total_bytes=total, weight_bytes=WEIGHTS * 2,
                                   unset_graph_tokens=unset)  # fmt: skip
        learned.observe_graph(20 * 0.01 * GIB, flags=deep(**{"cuda-graph-max-bs-decode": 4}).flags)
        headroom = died(1, deep(**{"mem-fraction-static": 0.95, "cuda-graph-max-bs-decode": 4}), side="too-high")
        assert headroom.lessons.memory is not None
        learned.learn(headroom.lessons.memory)
        return learned

    # graphs of 4 x 5 tokens ran out of headroom at 0.95; SGLang's own batch here captures 24 x 5
    unset = deep(**{"mem-fraction-static": 0.95}).flags
    assert model(engine_knows=True).graph_tokens(unset) == 24 * 5
    prediction = model(engine_knows=True).predict(unset)
    assert not prediction.feasible and prediction.side == "too-high"
    assert model(engine_knows=False).predict(unset).feasible  # unknown graphs: nothing to compare
    assert (
        model(engine_knows=True)
        .predict(deep(**{"mem-fraction-static": 0.95, "cuda-graph-max-bs-decode": 1}).flags)
        .feasible
    )


def test_room_is_sized_by_the_figures_of_any_death_with_the_same_pool_per_token() -> None:
    rules = ENGINE.memory_rules
    assert rules is not None
    bare_reason = SHORT.split(" (twin")[0]  # the engine's fraction, no tokens
    shallow = plan(**{"speculative-num-steps": 2, "speculative-num-draft-tokens": 3})
    bare, figures = pool_deaths([died(0, deep(), reason=bare_reason), died(1, shallow)], ENGINE, "sglang")
    sampled = deep(**{"speculative-num-steps": 6, "speculative-num-draft-tokens": 7})
    assert bare.fraction_needed is None and figures.fraction_needed is not None
    assert fraction_needed(bare, sampled, rules, [bare, figures]) == figures.fraction_needed
    other = sampled.model_copy(update={"flags": {**sampled.flags, "speculative-draft-model-path": "org/other"}})
    assert fraction_needed(bare, other, rules, [bare, figures]) is None  # another drafter: another pool per token


def test_a_fraction_the_weights_fill_is_raised_to_the_smallest_offered_one_that_fits() -> None:
    # 28.8 GiB of weights per GPU in 31 GiB free: 0.92 leaves no pool at all, 0.94 does
    history = History([], number=0)
    starved = MakeRoom(tight_space(), ENGINES, models()).decide(deep(**{"mem-fraction-static": 0.92}), history)
    assert isinstance(starved, Launch) and starved.plan.flags["mem-fraction-static"] == 0.94
    (change,) = starved.adjusted
    assert change.rule == "make-room" and change.trials == []
    assert [(v.flag, v.sampled, v.launched) for v in change.values] == [("mem-fraction-static", 0.92, 0.94)]
    # a fraction that leaves a pool is the sampler's; no offered fraction above the weights: the memory rule's
    assert MakeRoom(tight_space(), ENGINES, models()).decide(deep(**{"mem-fraction-static": 0.95}), history) is None
    short_space = tight_space((0.90, 0.92))
    assert MakeRoom(short_space, ENGINES, models()).decide(deep(**{"mem-fraction-static": 0.90}), history) is None
