"""The study's sampler: TPE, with some trials spent on neighbours of the best feasible trial."""

from __future__ import annotations

import random
from functools import partial

import optuna
import pytest
from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial

from autotune.decision import Adjusted, Adjustment, Launch, Reuse
from autotune.engines.base import DraftTree, LaunchPlan
from autotune.records import TrialRecord
from autotune.study import attrs
from autotune.study.sampler import (
    HEURISTICS,
    LaunchedSizing,
    NeighbourSampler,
    _repeats,
    continued,
    make_sampler,
    neighbour,
    tree_followed,
)

DISTRIBUTIONS = {
    "backend": CategoricalDistribution(["flashinfer", "fa3", "triton"]),
    "steps": IntDistribution(1, 8),
    "fraction": FloatDistribution(0.5, 0.97, step=0.01),
}


def test_a_neighbour_moves_one_or_two_values_a_step_within_their_ranges() -> None:
    params = {"backend": "fa3", "steps": 8, "fraction": 0.5}
    rng = random.Random(0)
    for _ in range(200):
        moved = neighbour(params, DISTRIBUTIONS, rng)
        changed = [k for k in params if moved[k] != params[k]]
        assert 1 <= len(changed) <= 2
        assert moved["backend"] in ("flashinfer", "fa3", "triton")
        assert 6 <= moved["steps"] <= 8
        assert 0.5 <= moved["fraction"] <= 0.52


def objective(trial: optuna.Trial) -> float:
    backend = trial.suggest_categorical("backend", ["flashinfer", "fa3", "triton"])
    steps = trial.suggest_int("steps", 1, 8)
    fraction = trial.suggest_float("fraction", 0.5, 0.97, step=0.01)
    trial.set_constraint("memory", 1.0 if fraction > 0.9 else 0.0)
    return 0.0 if fraction > 0.9 else steps * (2 if backend == "fa3" else 1)


def test_every_other_trial_after_three_served_is_a_neighbour_of_the_best_feasible_one() -> None:
    tpe = optuna.samplers.RandomSampler(seed=1)
    study = optuna.create_study(direction="maximize", sampler=NeighbourSampler(tpe, seed=1, after=3, every=2))
    study.enqueue_trial({"backend": "triton", "steps": 1, "fraction": 0.95})  # a baseline keeps its values
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for _ in range(30):
        best = study.best_trial if any(t.values and t.values[0] for t in study.trials) else None
        served = sum(1 for t in study.trials if t.values and t.values[0])
        trial = study.ask()
        value = objective(trial)
        study.tell(trial, value)
        frozen = study.trials[-1]
        if frozen.number == 0:
            assert frozen.params == {"backend": "triton", "steps": 1, "fraction": 0.95}
        elif served >= 3 and frozen.number % 2 == 0:
            assert best is not None
            assert 1 <= sum(frozen.params[k] != best.params[k] for k in best.params) <= 2


def test_a_study_with_several_objectives_gets_no_neighbours() -> None:
    sampler = NeighbourSampler(optuna.samplers.RandomSampler(seed=2), seed=2, after=0, every=1)
    study = optuna.create_study(directions=["maximize", "maximize"], sampler=sampler)
    study.optimize(lambda t: (t.suggest_int("x", 0, 100), 1.0), n_trials=10)
    assert not sampler.plans
    assert len({t.params["x"] for t in study.trials}) > 5


def test_a_neighbour_never_moves_a_value_held_still() -> None:
    params = {"backend": "fa3", "steps": 4, "fraction": 0.7}
    rng = random.Random(3)
    for _ in range(100):
        moved = neighbour(params, DISTRIBUTIONS, rng, still=frozenset({"fraction"}))
        assert moved["fraction"] == 0.7 and moved != params


def _distinct_configs(sampler: optuna.samplers.BaseSampler, trials: int = 9) -> int:
    """Distinct (backend, steps) of a study's first trials, over 9 such configs and a value that
    cannot change the objective."""
    study = optuna.create_study(direction="maximize", sampler=sampler)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for _ in range(trials):
        trial = study.ask()
        backend = trial.suggest_categorical("backend", ["flashinfer", "fa3", "triton"])
        steps = trial.suggest_int("steps", 1, 3)
        trial.suggest_float("fraction", 0.5, 0.97, step=0.01)
        study.tell(trial, steps * (2.0 if backend == "fa3" else 1.0))
    return len({(t.params["backend"], t.params["steps"]) for t in study.trials})


def test_a_draw_repeating_a_finished_trial_is_drawn_again() -> None:
    def tpe(seed: int) -> optuna.samplers.TPESampler:
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=2)

    def wrapped(seed: int) -> NeighbourSampler:
        sampler = NeighbourSampler(tpe(seed), seed=seed, after=1000, every=2)
        sampler.hold_still(frozenset({"fraction"}))
        return sampler

    plain = sum(_distinct_configs(tpe(seed)) for seed in range(12))
    fresh = sum(_distinct_configs(wrapped(seed)) for seed in range(12))
    assert fresh >= plain + 6, (plain, fresh)  # 74 against 82 when written


def test_a_repeat_is_judged_on_the_values_a_finished_trial_had() -> None:
    finished = [{"backend": "fa3", "steps": 2, "fraction": 0.8}, {"backend": "triton"}]
    still = frozenset({"fraction"})
    assert _repeats({"backend": "fa3", "steps": 2, "fraction": 0.6}, finished, still)  # only a still value moved
    assert _repeats({"backend": "triton", "steps": 3}, finished, still)  # steps was not active there
    assert not _repeats({"backend": "fa3", "steps": 3, "fraction": 0.8}, finished, still)
    assert not _repeats({"backend": "flashinfer"}, finished, still)


# A trial whose sampled fraction did not launch: a rule launched a served trial's instead.
BORROWED = Launch(
    plan=LaunchPlan(engine="sglang", flags={"fraction": 0.8}),
    adjusted=[Adjusted(rule="served-sizing", values=[Adjustment(flag="fraction", sampled=0.6, launched=0.8)],
                       trials=[0], why="the memory sizing of served trial 0")],
)  # fmt: skip


def read_record(study_name: str, trial: FrozenTrial) -> TrialRecord:
    return attrs.trial_record(trial)


def test_a_trial_that_never_launched_its_sampled_sizing_shows_the_sampler_no_sizing() -> None:
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=4))
    for borrowed in (False, True, False):
        trial = study.ask()
        trial.suggest_categorical("backend", ["flashinfer", "fa3"])
        trial.suggest_float("fraction", 0.5, 0.97, step=0.01)
        if borrowed:
            attrs.record_decision(trial, BORROWED, flags={})
        study.tell(trial, 1.0)
    trial = study.ask()
    trial.suggest_float("fraction", 0.5, 0.97, step=0.01)
    attrs.record_decision(trial, Reuse(rule="same-rate", trial=0, same_config=False), flags={})
    study.tell(trial, 1.0)

    shown = LaunchedSizing(study, frozenset({"fraction"}), read_record)._get_trials(deepcopy=False, states=None)
    assert [sorted(t.params) for t in shown] == [["backend", "fraction"], ["backend"], ["backend", "fraction"], []]
    assert [t.values for t in shown] == [t.values for t in study.trials]
    assert all(set(t.distributions) == set(t.params) for t in shown)
    assert [sorted(t.params) for t in LaunchedSizing(study, frozenset(), read_record).get_trials()] == [
        sorted(t.params) for t in study.trials
    ]


def _neighbour_of_a_best_at(fraction: float, *, borrowed: bool, seed: int) -> dict[str, object]:
    """The values of the neighbour drawn right after one served trial (no drafter, ``fraction``)."""
    sampler = NeighbourSampler(optuna.samplers.RandomSampler(seed=seed), seed=seed, after=1, every=1)
    sampler.hold_still(frozenset({"fraction"}))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.enqueue_trial({"drafter": False, "fraction": fraction})
    for _ in range(2):
        trial = study.ask()
        trial.suggest_categorical("drafter", [False, True])
        trial.suggest_float("fraction", 0.5, 0.97, step=0.01)
        if borrowed and trial.number == 0:
            attrs.record_decision(trial, BORROWED, flags={})
        study.tell(trial, 10.0)
    return study.trials[1].params


def test_a_neighbour_of_a_best_that_borrowed_its_sizing_draws_a_sizing_of_its_own() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for seed in range(8):
        launched = _neighbour_of_a_best_at(0.97, borrowed=False, seed=seed)
        assert launched == {"drafter": True, "fraction": 0.97}  # the one movable value moved, the sizing held
        borrowed = _neighbour_of_a_best_at(0.97, borrowed=True, seed=seed)
        assert borrowed["drafter"] is True and borrowed["fraction"] != 0.97


PAIRING = {"algorithm": ["EAGLE3", "DFLASH"], "path": ["eagle3-drafter", "dflash-drafter"]}


def _drafter_trial(study: optuna.Study, *, named: bool) -> dict[str, object]:
    """One trial of a space listing both drafters' paths under either algorithm: a path of the other
    kind crashes at launch, its message naming both values (recorded as such when ``named``)."""
    trial = study.ask()
    neighbour = isinstance(study.sampler, NeighbourSampler) and trial.number in study.sampler.plans
    algorithm = trial.suggest_categorical("algorithm", PAIRING["algorithm"])
    path = trial.suggest_categorical("path", PAIRING["path"])
    steps = trial.suggest_int("steps", 1, 4)
    crashed = path != f"{algorithm.lower()}-drafter"
    if crashed and named:
        attrs.record_counted_against_config(trial, f"{path} is not a {algorithm} drafter", {
            "algorithm": algorithm, "path": path})  # fmt: skip
    trial.set_constraint("config", 1.0 if crashed else 0.0)
    study.tell(trial, 0.0 if crashed else steps * (3.0 if algorithm == "DFLASH" else 2.0))
    return trial.params | {"crashed": crashed, "neighbour": neighbour}


def test_a_neighbour_that_would_complete_a_named_failure_moves_the_pairings_other_value_too() -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = NeighbourSampler(optuna.samplers.RandomSampler(seed=5), seed=5, after=1, every=1)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.enqueue_trial({"algorithm": "EAGLE3", "path": "eagle3-drafter", "steps": 2})
    study.enqueue_trial({"algorithm": "DFLASH", "path": "eagle3-drafter", "steps": 2})
    assert not _drafter_trial(study, named=True)["crashed"]
    assert _drafter_trial(study, named=True)["crashed"]
    named = [("DFLASH", "eagle3-drafter")]
    for _ in range(12):
        proposed = _drafter_trial(study, named=True)
        pairing = (proposed["algorithm"], proposed["path"])
        if proposed["neighbour"]:
            assert pairing not in named  # a crash names a pairing: no neighbour proposes it again
        if proposed["crashed"]:
            named.append(pairing)
    assert study.best_trial.params["algorithm"] == "DFLASH"  # found through the pairing's other value


def test_tpe_reads_the_trials_through_the_view_that_hides_untried_sizing() -> None:
    """Optuna's TPE reads trials through a private method the view overrides: when every finished
    trial borrowed its sizing, TPE's joint search space holds no sizing to model."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sampler = make_sampler("tpe", 0)
    assert isinstance(sampler, NeighbourSampler)
    sampler.hold_still(frozenset({"fraction"}))
    study = optuna.create_study(direction="maximize", sampler=sampler)
    for _ in range(5):
        trial = study.ask()
        trial.suggest_int("steps", 1, 4)
        trial.suggest_float("fraction", 0.5, 0.97, step=0.01)
        attrs.record_decision(trial, BORROWED, flags={})
        study.tell(trial, 1.0)
    asked = study.ask()  # trial 5: odd, so a TPE trial rather than a neighbour
    space = sampler.infer_relative_search_space(study, study._storage.get_trial(asked._trial_id))
    assert "steps" in space and "fraction" not in space


def test_a_number_that_moved_to_the_best_is_moved_as_far_again() -> None:
    previous = {"backend": "fa3", "steps": 2, "fraction": 0.6}
    best = {"backend": "triton", "steps": 4, "fraction": 0.8}
    rng, still = random.Random(5), frozenset({"fraction"})
    assert continued(previous, best, DISTRIBUTIONS, rng, still=still) == {**best, "steps": 6}
    ended = continued({**previous, "steps": 1}, {**best, "steps": 7}, DISTRIBUTIONS, rng, still=still)
    assert ended == {**best, "steps": 8}  # as far again is past the range: its end
    assert continued({**previous, "steps": 4}, best, DISTRIBUTIONS, rng, still=still) is None
    # steps was not set before (a condition made it appear): only the fraction moved, and is not held still
    assert continued({"backend": "fa3", "fraction": 0.6}, best, DISTRIBUTIONS, rng) == {**best, "fraction": 0.97}


def test_a_neighbour_turn_first_moves_on_along_the_number_that_made_the_best() -> None:
    sampler = NeighbourSampler(optuna.samplers.RandomSampler(seed=6), seed=6, after=2, every=1)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for steps in (2, 4):  # the best so far (4 steps) came from 2 steps
        study.enqueue_trial({"backend": "fa3", "steps": steps, "fraction": 0.7})
    proposed = []
    for _ in range(3):
        trial = study.ask()
        backend = trial.suggest_categorical("backend", ["flashinfer", "fa3", "triton"])
        steps = trial.suggest_int("steps", 1, 8)
        trial.suggest_float("fraction", 0.5, 0.97, step=0.01)
        proposed.append((backend, steps))
        study.tell(trial, float(steps))
    assert proposed[2] == ("fa3", 6)


TREE = DraftTree(depth="steps", width="topk", size="draft")
TREE_DISTRIBUTIONS = {
    "steps": IntDistribution(1, 8),
    "topk": CategoricalDistribution([1, 2, 4]),
    "draft": IntDistribution(2, 16),
}


def test_a_deeper_or_wider_draft_tree_gets_a_size_filling_it_as_the_best_filled_its_own() -> None:
    best = {"steps": 3, "topk": 2, "draft": 7}  # a full tree: 3 x 2 + 1
    followed = partial(tree_followed, best, trees=[TREE], distributions=TREE_DISTRIBUTIONS)
    assert followed({**best, "topk": 4})["draft"] == 13
    assert followed({**best, "steps": 4})["draft"] == 9
    assert followed({**best, "steps": 6, "topk": 4})["draft"] == 16  # 25 is past the range: its end
    half = {"steps": 4, "topk": 2, "draft": 5}  # half the tree's room used
    assert tree_followed(half, {**half, "topk": 4}, [TREE], TREE_DISTRIBUTIONS)["draft"] == 9
    assert followed({**best, "topk": 4, "draft": 8})["draft"] == 8  # the move set the size itself
    assert followed({**best, "topk": 1}) == {**best, "topk": 1}  # a chain: SGLang sets its size
    assert followed({**best, "backend": "fa3"}) == {**best, "backend": "fa3"}  # the tree did not move
    assert tree_followed(best, {**best, "topk": 4}, [], TREE_DISTRIBUTIONS)["draft"] == 7  # no tree named


def test_a_chain_widened_into_a_tree_gets_the_full_tree_and_the_drawn_size_its_range() -> None:
    chain = {"steps": 3, "topk": 1}  # the size is not a parameter of a chain
    assert tree_followed(chain, {**chain, "topk": 2}, [TREE], {})["draft"] == 7
    sampler = NeighbourSampler(optuna.samplers.RandomSampler(seed=7), seed=7, after=1, every=1)
    sampler.follow_trees([TREE])
    study = optuna.create_study(direction="maximize", sampler=sampler)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study.enqueue_trial({"steps": 8, "topk": 1})
    drafts = []
    for _ in range(6):  # fewer than the chain's 8 neighbours: each trial is one
        trial = study.ask()
        steps = trial.suggest_int("steps", 1, 8)
        topk = trial.suggest_categorical("topk", [1, 2, 4])
        if topk > 1:
            drafts.append((steps, topk, trial.suggest_int("draft", 2, 16)))
        study.tell(trial, 1.0 if trial.number == 0 else 0.0)  # the chain stays the best
    assert drafts and all(draft == min(16, steps * topk + 1) for steps, topk, draft in drafts)


def test_every_heuristic_has_a_switch_and_an_unknown_name_is_refused() -> None:
    sampler = make_sampler("tpe", 0, off=HEURISTICS)
    assert isinstance(sampler, NeighbourSampler) and sampler.off == frozenset(HEURISTICS)
    assert isinstance(make_sampler("random", 0, off=("continuation",)), optuna.samplers.RandomSampler)
    with pytest.raises(ValueError, match="unknown heuristics \\['momentum'\\]; known: neighbours"):
        make_sampler("tpe", 0, off=("momentum",))


def _proposals(off: tuple[str, ...], *, trees: bool = False) -> list[dict[str, object]]:
    """What a sampler with ``off`` switched off proposes after two enqueued trials (2 then 4 steps,
    a tree 2 wide and full), each trial a neighbour turn once two served."""
    sampler = NeighbourSampler(optuna.samplers.RandomSampler(seed=6), seed=6, after=2, every=1, off=off)
    if trees:
        sampler.follow_trees([TREE])
    study = optuna.create_study(direction="maximize", sampler=sampler)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    for steps in (2, 4):
        study.enqueue_trial({"steps": steps, "topk": 2, "draft": 2 * steps + 1})
    for _ in range(6):
        trial = study.ask()
        steps = trial.suggest_int("steps", 1, 8)
        trial.suggest_categorical("topk", [1, 2, 4])
        if trial.params["topk"] > 1:
            trial.suggest_int("draft", 2, 16)
        study.tell(trial, 10.0 if trial.number == 1 else 1.0)  # the 4-step tree stays the best
    return [t.params for t in study.trials[2:]]


def test_switched_off_heuristics_are_not_applied() -> None:
    best = {"steps": 4, "topk": 2, "draft": 9}
    assert _proposals(())[0] == {**best, "steps": 6}  # the continuation
    assert _proposals(("continuation",))[0] != {**best, "steps": 6}
    near = [p for p in _proposals(("continuation",)) if sum(p.get(k) != v for k, v in best.items()) <= 2]
    assert near  # neighbours of the best, as before
    far = _proposals(("neighbours",))
    assert far[0] != {**best, "steps": 6}
    widened = [p for p in _proposals(("continuation",), trees=True) if p.get("topk") == 4 and p["steps"] == 4]
    assert widened and all(p["draft"] == 16 for p in widened)  # 4 x 4 + 1, past the range: its end
    kept = [p for p in _proposals(("continuation", "tree-scaling"), trees=True) if p.get("topk") == 4]
    assert kept and all(p["draft"] == 9 for p in kept)  # the size is not scaled
