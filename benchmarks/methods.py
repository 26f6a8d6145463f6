"""The methods a search benchmark compares, by name (``--methods``): autotune's night with each
sampler, the nights as they were before a change was judged, samplers under comparison, the grid
tools, the peers and the bounds (:mod:`benchmarks.peers`). A method runs one night:
``(problem, seed, budget) -> Run``.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any
from unittest import mock

import optuna

from autotune.engines import get_engine
from autotune.memory_types import FractionWindow
from autotune.study import make_sampler
from autotune.study.rules import RULE_NAMES
from autotune.study.rules.make_room import MakeRoom
from autotune.study.sampler import SamplerName
from benchmarks import peers
from benchmarks.axes import grid
from benchmarks.grid_tools import random_candidates, run_tiered
from benchmarks.judge import MODEL_NIGHT, TPE_NIGHT
from benchmarks.nights import SamplerFactory, run_candidates, run_study
from benchmarks.problems import Problem
from benchmarks.runs import Run


def tpe_factory(**options: Any) -> SamplerFactory:
    base = dict(multivariate=True, group=True, constant_liar=True, n_startup_trials=5)
    base.update(options)

    def make(seed: int) -> optuna.samplers.BaseSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.samplers.TPESampler(seed=seed, **base)

    return make


def gp_factory(**options: Any) -> SamplerFactory:
    def make(seed: int) -> optuna.samplers.BaseSampler:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            independent = optuna.samplers.TPESampler(seed=seed, n_startup_trials=options.get("n_startup_trials", 5))
            return optuna.samplers.GPSampler(seed=seed, independent_sampler=independent, **options)

    return make


@dataclass(frozen=True)
class Method:
    name: str
    run: Callable[[Problem, int, int], Run]


def methods(names: Sequence[str], *, per_tier: int) -> list[Method]:
    known: dict[str, Method] = {
        # A study's night: the search's share of the budget, then the race on the rest. TPE's, the CLI's
        # default until the model-guided search became it (model-sampler-2026-12-07): kept under its name
        # so the reports that pair with it stay comparable.
        "autotune": Method("autotune (TPE)", lambda p, s, b: night(p, s, b, sampler="tpe")),
        # The sampler named: the same night as "autotune" (kept for the reports that name it).
        "autotune-tpe": Method(TPE_NIGHT, lambda p, s, b: night(p, s, b, sampler="tpe")),
        "autotune-model": Method(MODEL_NIGHT, lambda p, s, b: night(p, s, b, sampler="model")),
        "autotune-no-early-stop": Method(
            "autotune, no early stop",
            lambda p, s, b: run_study(p, s, b, early_stop=False, name="autotune, no early stop"),
        ),
        # The night as it was before sampler.Unstuck: TPE proposes on when its proposals stop launching.
        "autotune-stalling": Method("autotune, TPE without Unstuck", stalling_night),
        # The night as it was before the engine's own fraction was bounded for a plan that leaves it unset.
        "autotune-unbounded-fraction": Method("autotune, engine fraction unbounded", unbounded_fraction_night),
        # The night as it was before a pool death's figures spoke across the draft's shape, the running
        # requests and the graph batch, and before make-room's room was judged per plan's own graphs.
        "autotune-pool-by-demand": Method("autotune, pool lessons by ordered demand", pool_by_demand_night),
        # The night as it was before the memory model knew the engine's own graph batch for a plan that
        # leaves it unset, and before make-room read the pool figures of other deaths alike.
        "autotune-unset-graphs-unknown": Method("autotune, unset graphs unknown", unset_graphs_unknown_night),
        "autotune-weights-no-room": Method("autotune, no room above the weights", weights_no_room_night),
        "random-runner": Method("random (autotune loop)", lambda p, s, b: night(p, s, b, sampler="random")),
        "bound-perfect-race": Method(
            "bound-perfect-race", lambda p, s, b: peers.perfect_race(night(p, s, b, sampler="tpe"))
        ),
        "bound-oracle-finalists": Method("bound-oracle-finalists", peers.oracle_finalists),
        "random": Method(
            "random search", lambda p, s, b: run_candidates(p, s, b, "random search", random_candidates(p, s))
        ),
        "grid": Method(
            "full grid (fixed order)",
            lambda p, s, b: run_candidates(p, s, b, "full grid (fixed order)", grid(p.axes, p.space.fixed)),
        ),
        "tiered": Method(f"tiered grid ({per_tier}/tier)", lambda p, s, b: run_tiered(p, s, b, per_tier=per_tier)),
    }
    for peer, play in peers.PEERS.items():
        known[peer] = Method(peer, lambda p, s, b, play=play: play(peers.twin_bench(p, s), s, b))
    for startup in (2, 10, 20):
        known[f"tpe-startup{startup}"] = _sampler_method(f"tpe:n_startup_trials={startup}")
    known["tpe-independent"] = Method(
        "TPE independent",
        lambda p, s, b: run_study(
            p, s, b, factory=tpe_factory(multivariate=False, group=False), name="TPE independent"
        ),
    )
    known["gp"] = Method("GPSampler", lambda p, s, b: run_study(p, s, b, factory=gp_factory(), name="GPSampler"))
    for rule in RULE_NAMES:
        known[f"autotune-minus-{rule}"] = _ablated(f"autotune-minus-{rule}", rules_off=(rule,))
        known[f"random-runner-minus-{rule}"] = _ablated(f"random-runner-minus-{rule}", sampler="random",
                                                        rules_off=(rule,))  # fmt: skip
    chosen = []
    for name in names:
        if name in known:
            chosen.append(known[name])
        elif name.split(":", 1)[0] in ("tpe", "gp"):
            chosen.append(_sampler_method(name))
        else:
            raise SystemExit(
                f"unknown method {name!r}; known: {sorted(known)}, or tpe:KEY=VALUE;... / gp:KEY=VALUE;..."
            )
    return chosen


def night(problem: Problem, seed: int, budget: int, *, sampler: SamplerName) -> Run:
    """The study's night of ``budget`` launches, search and race (:func:`run_study` with ``confirm``),
    run once per problem, seed and sampler: the bounds judge the same night."""
    key = (sampler, seed, budget)
    if key not in problem.nights:
        name = "autotune (TPE)" if sampler == "tpe" else f"{sampler} (autotune loop)"
        problem.nights[key] = run_study(problem, seed, budget, sampler=sampler, name=name, confirm=True)
    return problem.nights[key]


def stalling_night(problem: Problem, seed: int, budget: int) -> Run:
    """The study's night with plain TPE, without :class:`~autotune.study.sampler.Unstuck`."""
    return run_study(problem, seed, budget, factory=lambda s: make_sampler("tpe", s, unstuck=False),
                     name="autotune, TPE without Unstuck", confirm=True)  # fmt: skip


def unbounded_fraction_night(problem: Problem, seed: int, budget: int) -> Run:
    """The study's night with no captured graph tokens known to the engine
    (:meth:`~autotune.engines.base.Engine.graph_tokens_captured` None), so
    :class:`~autotune.study.pool_deaths.EngineFractions` bounds no engine fraction."""
    engine = type(get_engine(problem.space.engine))
    with mock.patch.object(engine, "graph_tokens_captured", lambda self, flags, *, gpu_total_bytes: None):
        return run_study(problem, seed, budget, sampler="tpe", name="autotune, engine fraction unbounded", confirm=True)


def pool_by_demand_night(problem: Problem, seed: int, budget: int) -> Run:
    """The study's night with no flag neutral to a pool's bytes per token
    (``MemoryRules.per_token_neutral`` empty) and make-room's fractions below every headroom death of
    alike launches (``FractionWindow.open_above`` as ``open``)."""
    engine = type(get_engine(problem.space.engine))
    rules = engine.memory_rules
    unordered = rules.model_copy(update={"per_token_neutral": frozenset()}) if rules is not None else None
    with mock.patch.object(engine, "memory_rules", unordered), \
            mock.patch.object(FractionWindow, "open_above", FractionWindow.open):  # fmt: skip
        return run_study(problem, seed, budget, sampler="tpe", name="autotune, pool lessons by ordered demand",
                         confirm=True)  # fmt: skip


def unset_graphs_unknown_night(problem: Problem, seed: int, budget: int) -> Run:
    """The study's night with no graph tokens known for an unset graph batch
    (``FeasibilityModel.unset_graph_tokens`` None) and make-room reading only the figures of the death
    that speaks for the proposal."""
    with mock.patch("autotune.study.memory.partial", lambda *args, **kwargs: None), \
            mock.patch("autotune.study.rules.make_room.fraction_needed",
                       lambda death, plan, rules, deaths: death.fraction_needed):  # fmt: skip
        return run_study(problem, seed, budget, sampler="tpe", name="autotune, unset graphs unknown", confirm=True)


def weights_no_room_night(problem: Problem, seed: int, budget: int) -> Run:
    """The study's night where make-room leaves a fraction the weights fill to the memory rule
    (``MakeRoom._clear_of_weights`` off) and, without a death's figures, makes no room at or past an
    alike headroom death (``MakeRoom._past_headroom_deaths`` empty): follow-up 7 as kept."""
    no_window = staticmethod(lambda fractions, floor, open_: [])
    with mock.patch.object(MakeRoom, "_clear_of_weights", lambda self, plan, model, fractions, deaths: None), \
            mock.patch.object(MakeRoom, "_past_headroom_deaths", no_window):  # fmt: skip
        return run_study(problem, seed, budget, sampler="tpe", name="autotune, no room above the weights", confirm=True)


def _ablated(name: str, *, sampler: SamplerName = "tpe", rules_off: Collection[str] = ()) -> Method:
    """The study loop with pre-launch rules (``rules_off``) switched off."""
    return Method(name, lambda p, s, b: run_study(p, s, b, sampler=sampler, rules_off=rules_off, name=name))


def _sampler_method(spec: str) -> Method:
    """``tpe:n_startup_trials=2;n_ei_candidates=64`` or ``gp:n_startup_trials=5``: a sampler variant."""
    kind, _, rest = spec.partition(":")
    options: dict[str, Any] = {}
    for item in filter(None, rest.split(";")):
        key, _, value = item.partition("=")
        options[key.strip()] = json.loads(value) if value.strip() not in ("True", "False") else value.strip() == "True"
    factory = tpe_factory(**options) if kind == "tpe" else gp_factory(**options)
    return Method(spec, lambda p, s, b: run_study(p, s, b, factory=factory, name=spec))


DEFAULT_METHODS = ("autotune", "random-runner", "random", "grid", "tiered")
DEFAULT_FAMILY_METHODS = ("autotune", "random", "tiered")
