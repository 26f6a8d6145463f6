"""The study's sampler: Optuna's TPE, with some trials spent on neighbours of the best one.

A launch costs minutes, so a study sees tens of them, and most flags of a space change the decode
rate little once the big choices (drafter, depth, tensor parallelism) are right. TPE with that few
points keeps drawing far from its best; the last percent is found next to it. So once a few
configurations served, every other trial is the best feasible trial with one or two of its values
moved a step (a categorical: another choice), and a flag that the move makes appear (a condition
now true) is drawn by TPE. A neighbour that resolves to a configuration already measured costs no
launch (the runner measures duplicates once). A neighbour turn first goes on where the best came
from: a number (draft steps, a size) that differs between the best and the best before it is moved
as far again in the same direction, the others kept, until that config is finished (a pattern
move). With random moves alone, the one number that matters moved in about one turn in eight, and
a step at a time.

A neighbour that deepens or widens an engine's draft tree (SGLang's steps and topk) scales the
tree's size (draft tokens) with it, filled as the best's tree was: a tree holds at most depth x
width + 1 tokens, so one value moved alone either wastes the new room or overfills the old. Optima
with wide trees were otherwise not reached in 60 launches.

A proposal that repeats a finished trial teaches nothing and, when the sampler has settled, most
would: TPE's joint draw is drawn again (a few times) and a neighbour re-chosen until its values
differ from every finished trial's. Values that cannot change the objective (``still``: the memory
sizing when the objective is one stream's rate, which the runner borrows) do not count as a
difference and are never what a neighbour moves.

A server failure that named values it was given (a draft-model path under another algorithm)
is predicted for every proposal sharing them, so a neighbour that would complete the named
pairing (the best's path with the failure's algorithm) moves the pairing's other values too (the
path): else a drafter first tried with the wrong path is never launched with its own.

Memory sizing values are learned only from launches that used them. A trial whose decision
launched other values than it sampled (a served trial's sizing, another fraction), or borrowed a
measured rate, shows TPE and the neighbours of a best no sizing: else a sampled sizing that never
launched is credited with a served launch's rate, drawn again for a drafter no launch has sized,
and dies. What a trial launched is read from its record (:class:`~autotune.decision.Decision`).

Each of these heuristics has a name in :data:`HEURISTICS` and can be switched off
(``make_sampler(..., off=...)``), so the search benchmark's ablation (``benchmarks/ablation.py``)
can judge each against the sampler without it.
"""

from __future__ import annotations

import random
import warnings
from collections.abc import Callable, Collection, Sequence
from typing import Any, Literal

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState

from autotune.decision import launched_as_sampled
from autotune.engines.base import DraftTree
from autotune.records import TrialRecord
from autotune.study import attrs
from autotune.study.named_failures import open_failures, shares

SamplerName = Literal["tpe", "random"]

# The sampler's heuristics by name (module docstring), each of which can be switched off:
# neighbours of the best; the continuation of the best's last move; a draft tree's size scaled with
# its depth and width; a named failure's pairing moved whole; proposals redrawn until they are new;
# sizing learned only from launches that used it.
HEURISTICS = ("neighbours", "continuation", "tree-scaling", "failure-pairing", "redraw", "launched-sizing")


def make_sampler(name: SamplerName, seed: int | None, *, off: Collection[str] = ()) -> optuna.samplers.BaseSampler:
    """The study's sampler: random draws, or TPE with neighbours of the best (benchmarks/README.md).

    Args:
        name: "tpe" (TPE with the heuristics) or "random".
        seed: seeds every random choice; None draws one.
        off: names of :data:`HEURISTICS` switched off (the random sampler has none).

    Raises:
        ValueError: ``off`` names an unknown heuristic.
    """
    unknown = set(off) - set(HEURISTICS)
    if unknown:
        raise ValueError(f"unknown heuristics {sorted(unknown)}; known: {', '.join(HEURISTICS)}")
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # Baselines count as startup trials: modelling from the third trial on, 64 candidates scored.
        tpe = optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=2, n_ei_candidates=64
        )
    return NeighbourSampler(tpe, seed=seed, after=3, every=2, off=off)


class NeighbourSampler(optuna.samplers.BaseSampler):
    """TPE, with every ``every``-th trial (once ``after`` trials served) a neighbour of the best.

    Args:
        base: the sampler for the other trials and for flags a neighbour does not set.
        seed: seeds the choice of neighbours.
        after: completed feasible trials needed before neighbours are drawn.
        every: one trial in ``every`` is a neighbour.
        redraws: joint draws of the base sampler until one differs from the finished trials.
        off: names of :data:`HEURISTICS` switched off.
    """

    def __init__(
        self,
        base: optuna.samplers.BaseSampler,
        *,
        seed: int | None,
        after: int,
        every: int,
        redraws: int = 5,
        off: Collection[str] = (),
    ) -> None:
        self.base = base
        self.rng = random.Random(seed)
        self.after = after
        self.every = every
        self.off = frozenset(off)
        self.redraws = 1 if "redraw" in self.off else redraws
        self.still: frozenset[str] = frozenset()
        self.trees: tuple[DraftTree, ...] = ()
        self.plans: dict[int, dict[str, Any]] = {}
        self.records: dict[tuple[str, int], TrialRecord] = {}  # finished trials never change

    def hold_still(self, names: frozenset[str]) -> None:
        """Parameters that cannot change the objective: no difference in them makes a trial new."""
        self.still = names

    def follow_trees(self, trees: Sequence[DraftTree]) -> None:
        """The engines' draft trees: a neighbour moving a tree's depth or width scales its size."""
        self.trees = () if "tree-scaling" in self.off else tuple(trees)

    def reseed_rng(self) -> None:
        self.base.reseed_rng()
        self.rng.seed()

    def before_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        self.base.before_trial(study, trial)
        plan = self._plan(study, trial)
        if plan is not None:
            self.plans[trial.number] = plan

    def after_trial(
        self, study: optuna.Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        self.plans.pop(trial.number, None)
        self.base.after_trial(study, trial, state, values)

    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        if trial.number in self.plans:
            return {}
        return self.base.infer_relative_search_space(self._learned(study), trial)

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if trial.number in self.plans:
            return {}
        finished = _sampled_params(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        learned = self._learned(study)
        for _ in range(self.redraws):
            values = self.base.sample_relative(learned, trial, search_space)
            if not _repeats(values, finished, self.still):
                break
        return values

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        plan = self.plans.get(trial.number, {})
        if param_name in plan:  # a planned None is a value too (a categorical may offer it)
            value = _clamped(plan[param_name], param_distribution)
            if _contains(param_distribution, value):
                return value
        return self.base.sample_independent(self._learned(study), trial, param_name, param_distribution)

    def _learned(self, study: optuna.Study) -> optuna.Study:
        """The study as the base sampler learns from it (module docstring)."""
        if not self.still or "launched-sizing" in self.off:
            return study
        return LaunchedSizing(study, self.still, self.record)  # type: ignore[return-value]

    def record(self, study_name: str, trial: FrozenTrial) -> TrialRecord:
        """A trial's record; a finished one's read once (it never changes)."""
        if trial.state not in FINISHED:
            return attrs.trial_record(trial)
        key = (study_name, trial.number)
        if key not in self.records:
            self.records[key] = attrs.trial_record(trial)
        return self.records[key]

    def _plan(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, Any] | None:
        """The values of a neighbour of the best feasible trial, or None for a TPE trial."""
        if "neighbours" in self.off or len(study.directions) != 1 or "fixed_params" in trial.system_attrs:
            return None  # a levels study has no single best; an enqueued trial has its values
        complete = self._learned(study).get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        served = [t for t in complete if _feasible(t)]
        if len(served) < self.after or trial.number % self.every:
            return None
        sign = 1.0 if study.direction.name == "MAXIMIZE" else -1.0
        best = max(served, key=lambda t: sign * t.values[0])
        finished = _sampled_params(complete)
        failures: list[dict[str, str]] = []
        if "failure-pairing" not in self.off:
            failures = [r.failure_names for r in open_failures([self.record(study.study_name, t) for t in complete])]
        if "redraw" in self.off:
            finished = []  # a repeat is proposed as drawn
        before = [t for t in served if t.number < best.number]
        if before and "continuation" not in self.off:
            previous = max(before, key=lambda t: sign * t.values[0])
            plan = continued(previous.params, best.params, best.distributions, self.rng, still=self.still)
            if plan is not None:
                plan = tree_followed(best.params, plan, self.trees, best.distributions)
                if _completed(plan, failures) is None and not _repeats(plan, finished, self.still):
                    return plan
        for _ in range(NEIGHBOUR_TRIES):
            plan = neighbour(best.params, best.distributions, self.rng, still=self.still)
            plan = tree_followed(best.params, plan, self.trees, best.distributions)
            while (named := _completed(plan, failures)) is not None:
                kept = [n for n in named if plan[n] == best.params[n] and n not in self.still]
                kept = [n for n in kept if _moves(best.distributions[n])]
                if not kept:
                    break
                for name in kept:  # the pairing's other values move too
                    plan[name] = _moved(plan[name], best.distributions[name], self.rng)
            if named is None and not _repeats(plan, finished, self.still):
                return plan
        return None


NEIGHBOUR_TRIES = 20
FINISHED = (TrialState.COMPLETE, TrialState.FAIL, TrialState.PRUNED)


class LaunchedSizing:
    """A study whose trials show only the memory sizing they launched: ``names`` (the sizing flags)
    are left out of every trial whose record says its sampled values did not launch. Everything else
    is the study's own.

    The one seam with Optuna's internals: TPE reads trials through ``Study._get_trials``, so the view
    overrides it (tests/test_sampler.py fails if TPE stops reading through it)."""

    def __init__(
        self, study: optuna.Study, names: frozenset[str], record: Callable[[str, FrozenTrial], TrialRecord]
    ) -> None:
        self.study = study
        self.names = names
        self.record = record

    def __getattr__(self, name: str) -> Any:
        return getattr(self.study, name)

    def get_trials(self, deepcopy: bool = True, states: Sequence[TrialState] | None = None) -> list[FrozenTrial]:
        return [self._shown(t) for t in self.study.get_trials(deepcopy=deepcopy, states=states)]

    def _get_trials(  # what Optuna's TPE and its search spaces read
        self, deepcopy: bool = True, states: Sequence[TrialState] | None = None, use_cache: bool = False
    ) -> list[FrozenTrial]:
        return [self._shown(t) for t in self.study._get_trials(deepcopy=deepcopy, states=states, use_cache=use_cache)]

    def _shown(self, trial: FrozenTrial) -> FrozenTrial:
        if not self.names & trial.params.keys():
            return trial
        if launched_as_sampled(self.record(self.study.study_name, trial).decision):
            return trial
        return attrs.trial_without(trial, self.names)


def _completed(values: dict[str, Any], failures: Sequence[dict[str, str]]) -> dict[str, str] | None:
    """The first named failure whose values ``values`` all share."""
    return next((named for named in failures if shares(values, named)), None)


def _sampled_params(complete: Sequence[FrozenTrial]) -> list[dict[str, Any]]:
    """The parameters of finished sampled trials (an enqueued one, a baseline, holds only some)."""
    return [t.params for t in complete if "fixed_params" not in t.system_attrs]


def _repeats(values: dict[str, Any], finished: Sequence[dict[str, Any]], still: frozenset[str]) -> bool:
    """Whether ``values`` repeat a finished trial: every parameter it had (those in ``still`` aside)
    has its value among ``values``. A trial's parameters are those active in it, so values that
    a condition would leave out (a drafter's, without a drafter) do not make a proposal new."""
    return any(
        all(name in values and values[name] == value for name, value in params.items() if name not in still)
        for params in finished
    )


def continued(
    previous: dict[str, Any],
    best: dict[str, Any],
    distributions: dict[str, BaseDistribution],
    rng: random.Random,
    *,
    still: frozenset[str] = frozenset(),
) -> dict[str, Any] | None:
    """``best`` with one of the numbers that moved from the ``previous`` best (chosen at random)
    moved as far again in the same direction, up to its range's end; None when no number moved or
    the chosen one is at that end already."""
    moved = [
        name
        for name, value in best.items()
        if name not in still
        and name in previous
        and isinstance(distributions[name], (IntDistribution, FloatDistribution))
        and previous[name] != value
    ]
    if not moved:
        return None
    name = rng.choice(moved)
    value = _clamped(best[name] + (best[name] - previous[name]), distributions[name])
    return None if value == best[name] else {**best, name: value}


def neighbour(
    params: dict[str, Any],
    distributions: dict[str, BaseDistribution],
    rng: random.Random,
    *,
    still: frozenset[str] = frozenset(),
) -> dict[str, Any]:
    """``params`` with one value moved (two, a third of the time): a step up or down, another choice;
    names in ``still`` stay."""
    movable = [name for name in params if name not in still and _moves(distributions[name])]
    out = dict(params)
    for name in rng.sample(movable, min(len(movable), 2 if rng.random() < 1 / 3 else 1)):
        out[name] = _moved(params[name], distributions[name], rng)
    return out


def tree_followed(
    before: dict[str, Any],
    after: dict[str, Any],
    trees: Sequence[DraftTree],
    distributions: dict[str, BaseDistribution],
) -> dict[str, Any]:
    """``after`` (``before`` with values moved), each draft tree whose depth x width moved given the
    size that fills the new tree as ``before`` filled its own (a one-wide tree, a chain, is full).
    A size the move set itself, or a tree now one wide (its size is then depth + 1), is left alone;
    a size past its range is clipped to it (where ``distributions`` has it, else when drawn)."""
    out = dict(after)
    for tree in trees:
        shape = [values.get(name) for values in (before, after) for name in (tree.depth, tree.width)]
        sizes = [v for v in shape if isinstance(v, int) and not isinstance(v, bool)]
        if len(sizes) < len(shape):
            continue
        depth, width, new_depth, new_width = sizes
        if depth * width == new_depth * new_width or new_width == 1:
            continue
        if tree.size in before and after.get(tree.size, before[tree.size]) != before[tree.size]:
            continue  # the move set the size itself
        fill = (before[tree.size] - 1) / (depth * width) if width > 1 and tree.size in before else 1.0
        size = 1 + fill * new_depth * new_width
        known = distributions.get(tree.size)
        out[tree.size] = _clamped(size, known) if known is not None else round(size)
    return out


def _clamped(value: Any, distribution: BaseDistribution) -> Any:
    """A number inside a numeric distribution's range, as Optuna holds it; anything else as it is."""
    if not isinstance(distribution, (IntDistribution, FloatDistribution)) or not isinstance(value, (int, float)):
        return value
    return _typed(min(max(value, distribution.low), distribution.high), distribution)


def _moves(distribution: BaseDistribution) -> bool:
    if isinstance(distribution, CategoricalDistribution):
        return len(distribution.choices) > 1
    return isinstance(distribution, (IntDistribution, FloatDistribution)) and distribution.high > distribution.low


def _moved(value: Any, distribution: BaseDistribution, rng: random.Random) -> Any:
    if isinstance(distribution, CategoricalDistribution):
        return rng.choice([c for c in distribution.choices if c != value])
    assert isinstance(distribution, (IntDistribution, FloatDistribution))
    step = distribution.step or (distribution.high - distribution.low) / 10
    low, high = distribution.low - 1e-9, distribution.high + 1e-9
    for stride in (step * rng.choice([1, 1, 2]), step):  # two steps past both ends: one step
        inside = [v for v in (value - stride, value + stride) if low <= v <= high]
        if inside:
            break
    return _typed(rng.choice(inside), distribution)


def _typed(value: float, distribution: IntDistribution | FloatDistribution) -> int | float:
    """A number computed from a distribution's values, as Optuna holds them: an int, or a float
    without the arithmetic's last-digit noise."""
    return int(round(value)) if isinstance(distribution, IntDistribution) else round(value, 10)


def _contains(distribution: BaseDistribution, value: Any) -> bool:
    try:
        return bool(distribution._contains(distribution.to_internal_repr(value)))
    except (ValueError, TypeError):
        return False


def _feasible(trial: FrozenTrial) -> bool:
    return trial.values is not None and bool(trial.values[0]) and all(c <= 0 for c in trial.constraints.values())
