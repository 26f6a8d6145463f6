"""The model-guided sampler: proposals from the pass model (:mod:`passmodel`) calibrated on the night's launches.

Stateless across hosts: every proposal rebuilds the model from what the study holds (the setup the
runner recorded, :func:`autotune.study.attrs.pass_setup`; the finished trials as calibration points,
:mod:`autotune.calibration_points`), so storage, several hosts, resume and the dashboard work as
with TPE. Per process the fit is cached by the number of points.

A proposal, for the speculative flags (the others, memory sizing above all, are TPE's):
1. the first launches give the model what it fits: the plain launch (where the space allows it), the
   shallowest and the deepest draft, where the measured trials do not already hold them (one that was
   tried and did not serve is not asked for again, unless it died of memory before any launch served, at a
   drawn sizing the night then left: :func:`~autotune.study.guided_deaths.sizing_deaths`);
2. then each drafter's acceptance is fitted to the measured accept lengths, and the pass's free
   constants to the measured rates (:func:`passmodel.calibrate.fit`);
3. a pool of :data:`POOL` candidates drawn from the space, plus the best measured configuration's
   one-flag neighbours, is scored by an upper confidence bound: the predicted rate (a drafter no
   launch measured at :data:`OPTIMISTIC_ACCEPTANCE`) times 1 + (the fit's error + :data:`DISTANCE_WIDTH`
   x the distance to the nearest measured configuration);
   the highest untried one the study's pre-launch rules would launch is proposed (first of a shape, a
   drafter's chains or its trees, that no launch measured), with the memory sizing they would launch it
   at (:class:`~autotune.study.launchable.WouldLaunch`, handed over by the runner);
4. a tree proposed (by the fit or a start-up role) while the served trees leave the verify cost
   unidentified gives way to the best served tree at half its draft tokens, once the night has room
   (:mod:`autotune.study.guided_sibling`).
It falls back to TPE, saying why, where no model can be built (:class:`~autotune.pass_setup.PassSetup`),
where the space tunes several engines or nothing speculative, where none of its best candidates would
launch or the last :data:`STALLED` proposals launched did not serve (TPE then draws every flag), and where
the median error of its last :data:`JUDGED` predictions made before their launches exceeds :data:`FALLBACK_ERROR`.
"""

from __future__ import annotations

import json
import math
import random
import statistics
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import optuna
from optuna.distributions import BaseDistribution
from optuna.trial import FrozenTrial, TrialState
from pydantic import Field

from autotune.calibration_points import CalibrationPoint
from autotune.models import Frozen
from autotune.pass_setup import PassSetup
from autotune.records import Prediction, TrialRecord
from autotune.space import SearchSpace, suggest
from autotune.study import attrs
from autotune.study.guided_deaths import sizing_deaths, stalled
from autotune.study.guided_reads import (
    JUDGED,
    RATES,
    SPECULATIVE,
    TP,
    Draw,
    apart,
    config_of,
    depth,
    distance,
    flags_of,
    judged_error,
    key,
    model_params,
    neighbours,
    point_of,
    prediction_errors,
    shape,
    spec_key,
)
from autotune.study.guided_sibling import has_room, is_tree, siblings
from autotune.study.sampler import Wrapping
from passmodel import calibrate, launch_flags
from passmodel.profile import TwinProfile
from passmodel.setup import acceptance_table

POOL = 300
DISTANCE_WIDTH = 0.15  # the UCB's width per unit of distance (mean per-flag difference, 0..1)
MIN_FIT_ERROR = 0.03  # a fit on few points looks better than it is
# A drafter no launch has measured: its acceptance is a guess, taken at the top of what drafters
# accept (each further position 85 % given the one before) for the upper bound.
OPTIMISTIC_ACCEPTANCE = 0.85
FALLBACK_ERROR = 0.15  # median relative error of those, above which TPE proposes (fixed before judging)
STARTUP_TRIES = 2  # a start-up role's candidates that did not serve, before the role ends
STARTUP_DEPTHS = 2  # the depths a start-up role walks inward: the shallowest two, the deepest two
STALLED = 3  # the latest proposals launched, none of which served, after which TPE proposes every flag
LAUNCHABLE_ASKED = 20  # the best candidates the study's rules are asked about, in order
NEAR = 0.15  # how far apart (guided_reads.apart) a launch's miss weighs 1/e of its own (about a chain's step)
MODEL_WEIGHT = 0.5  # the pass model's own weight against the misses of the launches near a prediction


@dataclass(frozen=True)
class Launched:
    """A trial whose own launch was measured: its speculative parameters and its point."""

    params: dict[str, Any]
    point: CalibrationPoint


@dataclass(frozen=True)
class Fitted:
    """The calibrated model: its profile, its error on the points it was fitted to, the mean request."""

    profile: TwinProfile
    error: float
    concurrency: int
    input_len: int
    output_len: int
    per_request: bool  # the objective is one request's rate (decode_tok_s), not the total
    drafters: frozenset[str]  # the drafters whose acceptance a launch measured ("mtp": the MTP heads)
    # Each measured launch's shape, launch (spec_key) and log error of the fit's rate (what it measured over
    # what the fit predicts): the model's misses near a launch, which a prediction of its shape takes on.
    misses: tuple[tuple[tuple[str, bool] | None, tuple[Any, ...], float], ...] = ()


class ModelGuided(Wrapping):
    """Speculative flags from the calibrated pass model (module docstring); the rest from the fallback
    sampler it wraps (``base``)."""

    def __init__(self, fallback: optuna.samplers.BaseSampler, seed: int | None) -> None:
        super().__init__(fallback)
        self.rng = random.Random(seed)
        self._space: SearchSpace | None = None
        self._profile: TwinProfile | None = None
        self._fits: dict[tuple[int, bool], Fitted | None] = {}
        self._chosen: dict[int, tuple[dict[str, Any] | None, str]] = {}  # trial -> (spec params, search)
        self._read: dict[int, tuple[TrialRecord, Launched | None]] = {}
        self._depths: dict[str, int | None] = {}
        self.would_launch: Callable[[Mapping[str, Any]], dict[str, Any] | None] = dict

    def ask_rules(self, would_launch: Callable[[Mapping[str, Any]], dict[str, Any] | None]) -> None:
        """Propose only what the study's pre-launch rules would launch: ``would_launch`` (the runner's
        :class:`~autotune.study.launchable.WouldLaunch`) completes the model's flags with the others (memory
        sizing) at which the rules would launch them, or says none would; the model proposes the whole."""
        self.would_launch = would_launch

    # ---------------------------------------------------------------- Optuna's interface

    # The fallback samples every flag the model does not choose, jointly (TPE is multivariate): where the
    # model proposes nothing, the trial is the fallback's own.
    def infer_relative_search_space(self, study: optuna.Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        space = self.base.infer_relative_search_space(study, trial)
        chosen, _ = self.choice(study, trial.number)
        return {name: d for name, d in space.items() if chosen is None or name not in chosen}

    def sample_relative(
        self, study: optuna.Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        if not search_space:
            return {}
        # a grouped TPE samples its whole groups; only the flags left to it may come back
        sampled = self.base.sample_relative(study, trial, search_space)
        return {name: value for name, value in sampled.items() if name in search_space}

    def sample_independent(
        self, study: optuna.Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        chosen, _ = self.choice(study, trial.number)
        if chosen is not None and param_name in chosen:
            return chosen[param_name]
        return self.base.sample_independent(study, trial, param_name, param_distribution)

    # ---------------------------------------------------------------- the model

    def search(self, study: optuna.Study, number: int) -> str:
        """'model', or 'tpe: why' for the trial ``number``'s proposal."""
        return self.choice(study, number)[1]

    def choice(self, study: optuna.Study, number: int) -> tuple[dict[str, Any] | None, str]:
        """The speculative parameters the model proposes for trial ``number`` (None: TPE proposes), and
        the search that chose them; worked out once per trial."""
        if number not in self._chosen:
            self._chosen[number] = self._choose(study)
        return self._chosen[number]

    def prediction(self, study: optuna.Study, flags: Mapping[str, Any], search: str) -> Prediction | None:
        """The objective's rate the model predicts for ``flags`` (a proposal's, which ``search`` chose),
        before its launch; None without a model or before it can be fitted."""
        space = self._study_space(study)
        fitted = self._fitted(study) if space is not None else None
        if space is None or fitted is None:
            return None
        rate = _rate(fitted, space, flags)
        return Prediction(tok_s=rate, search=search) if rate is not None else None

    def _study_space(self, study: optuna.Study) -> SearchSpace | None:
        if self._space is None:
            self._space = attrs.study_info(study).space
        return self._space

    def _model_profile(self, study: optuna.Study) -> tuple[TwinProfile | None, str]:
        if self._profile is None:
            setup = attrs.pass_setup(study)
            if setup is None:
                return None, "the study recorded no pass-model setup"
            if setup.setup is None:
                return None, setup.summary()
            self._profile = setup.profile()
        return self._profile, ""

    def _finished(self, study: optuna.Study, space: SearchSpace) -> list[tuple[TrialRecord, Launched | None]]:
        """Each finished trial's record and, where its own launch was measured, its point (read once: a
        finished trial does not change)."""
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))
        for trial in finished:
            if trial.number not in self._read:
                record = attrs.trial_record(trial)
                point = point_of(record, space)
                one = Launched(params=model_params(space, trial.params), point=point) if point is not None else None
                self._read[trial.number] = (record, one)
        return [self._read[t.number] for t in sorted(finished, key=lambda t: t.number)]

    def _records(self, study: optuna.Study, space: SearchSpace) -> list[TrialRecord]:
        return [record for record, _ in self._finished(study, space)]

    def _launched(self, study: optuna.Study, space: SearchSpace) -> list[Launched]:
        return [one for _, one in self._finished(study, space) if one is not None]

    def _room(self, study: optuna.Study, space: SearchSpace) -> bool:
        failed = study.get_trials(deepcopy=False, states=(TrialState.FAIL,))
        return has_room([*self._records(study, space), *map(attrs.trial_record, failed)])

    def _choose(self, study: optuna.Study) -> tuple[dict[str, Any] | None, str]:
        space = self._study_space(study)
        if space is None:
            return None, "tpe: the study's space is not recorded"
        if space.engines:
            return None, "tpe: the space tunes several engines; the model compares one engine's drafts"
        if not any(name.startswith(SPECULATIVE) for name in space.tuned):
            return None, "tpe: the space tunes no speculative flag"
        if space.objective.metric not in RATES or space.objective.levels:
            return None, f"tpe: the model predicts {' or '.join(RATES)} at one concurrency, not this objective"
        profile, why = self._model_profile(study)
        if profile is None:
            return None, f"tpe: {why}"
        launched = self._launched(study, space)
        pool = self._pool(space, launched)
        if not pool:
            return None, "tpe: no candidate of the space is one the model describes"
        records = self._records(study, space)
        if stalled(records, STALLED):
            return None, (
                f"tpe: the last {STALLED} proposals launched did not serve; TPE (at random while stuck) draws "
                "every flag until one does"
            )
        finished = study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.FAIL))
        served = {t.number for t in finished if t.number in self._read and self._read[t.number][1] is not None}
        # Each finished trial as the model reads it (DFLASH ignores adaptive steps), read once.
        chosen = {t.number: model_params(space, t.params) for t in finished}
        specs = {number: self._spec(profile, space, params) for number, params in chosen.items()}
        # Tried and never served (died, skipped, failed), but for deaths of a sizing the night has left.
        left = sizing_deaths(records)
        dead = {
            spec: depth(profile, space, chosen[number])
            for number, spec in specs.items()
            if number not in served and number not in left and spec is not None
        }
        startup = self._startup(profile, space, launched, pool, dead)
        if startup is not None:
            # A start-up role's tree too: its deepest draft walks full trees, which leave the verify cost unknown.
            return self._sibling(study, profile, space, launched, dead, startup) or startup, "model"
        fitted = self._fitted(study)
        if fitted is None:
            return None, "tpe: the model could not be fitted to the launches"
        error = judged_error(records, space)
        if error is not None and error > FALLBACK_ERROR:
            return None, (
                f"tpe: the model's median error on its last {JUDGED} predictions made before the launch is "
                f"{error:.0%} (above {FALLBACK_ERROR:.0%})"
            )
        # Measured, reused or skipped: known (a death of a sizing left says nothing of its draft).
        known = [t for t in finished if t.state == TrialState.COMPLETE and t.number not in left]
        tried = {spec for t in known if (spec := specs[t.number])}
        best, why = self._best(fitted, space, launched, tried, pool, list(dead))
        if best is None:
            return None, f"tpe: {why}"
        return self._sibling(study, profile, space, launched, dead, best) or best, "model"

    # ---------------------------------------------------------------- candidates

    def _pool(self, space: SearchSpace, launched: Sequence[Launched]) -> list[dict[str, Any]]:
        """Speculative parameter sets: drawn from the space, and the best measured one's neighbours."""
        seen: dict[str, dict[str, Any]] = {}
        for _ in range(POOL):
            params = model_params(space, suggest(space, Draw(self.rng)).params)
            seen.setdefault(key(params), params)
        best = _best_measured(launched)
        if best is not None:
            for name, param in space.tuned.items():
                if name in best:
                    for value in neighbours(param, best[name]):
                        fixed = {**best, name: value}
                        params = model_params(space, suggest(space, Draw(self.rng, fixed)).params)
                        seen.setdefault(key(params), params)
        return list(seen.values())

    def _startup(
        self,
        profile: TwinProfile,
        space: SearchSpace,
        launched: Sequence[Launched],
        pool: list[dict[str, Any]],
        dead: Mapping[tuple[Any, ...], int | None],
    ) -> dict[str, Any] | None:
        """The plain launch, the shallowest and the deepest draft, where no measured trial gives them.

        A role's candidate that was tried and did not serve (``dead``: died, skipped by a rule, failed) is
        not proposed again: the role moves on to its next candidate (within its :data:`STARTUP_DEPTHS` depths),
        and ends after :data:`STARTUP_TRIES` such; one the study's rules would not launch is passed over."""
        for params in pool:
            if key(params) not in self._depths:
                self._depths[key(params)] = depth(profile, space, params)
        depths = self._depths
        usable = [p for p in pool if depths[key(p)] is not None]
        measured = {self._depths.get(key(one.params), depth(profile, space, one.params)) for one in launched}
        served = {k for one in launched if (k := self._spec(profile, space, one.params)) is not None}
        plain = [p for p in usable if depths[key(p)] == 0]
        drafts = sorted((p for p in usable if depths[key(p)]), key=lambda p: depths[key(p)] or 0)
        for role in (plain, drafts, drafts[::-1]):
            if not role or depths[key(role[0])] in measured:
                continue
            near = sorted({depths[key(p)] or 0 for p in role}, reverse=role is not drafts)[:STARTUP_DEPTHS]
            specs = [(self._spec(profile, space, p), p) for p in role if depths[key(p)] in near]
            if sum(d in near for d in dead.values()) >= STARTUP_TRIES or any(s in served for s, _ in specs):
                continue
            for spec, params in specs:
                if spec not in dead and (launchable := self.would_launch(params)) is not None:
                    return launchable
        return None

    def _sibling(
        self,
        study: optuna.Study,
        profile: TwinProfile,
        space: SearchSpace,
        launched: Sequence[Launched],
        dead: Mapping[tuple[Any, ...], int | None],
        proposal: Mapping[str, Any],
    ) -> dict[str, Any] | None:
        """Where the proposal (the fit's or a start-up role's) is a tree and the night has room, the best served
        tree's sibling at half its tokens instead, while the served trees leave the verify cost to the prior
        (:func:`~autotune.study.guided_sibling.siblings`): the fit prices the trees it proposes by that cost."""
        cfg = config_of(profile, space, flags_of(space, proposal))
        if cfg is None or not is_tree(cfg) or not self._room(study, space):
            return None
        served = [(one.params, one.point.tok_s) for one in launched]
        asked = (self.would_launch(params) for params in siblings(profile, space, served, dead, STARTUP_TRIES))
        return next((launchable for launchable in asked if launchable is not None), None)

    def _spec(self, profile: TwinProfile, space: SearchSpace, params: Mapping[str, Any]) -> tuple[Any, ...] | None:
        cfg = config_of(profile, space, flags_of(space, params))
        return spec_key(cfg) if cfg is not None else None

    def _best(
        self,
        fitted: Fitted,
        space: SearchSpace,
        launched: Sequence[Launched],
        tried: set[tuple[Any, ...]],
        pool: list[dict[str, Any]],
        dead: Sequence[tuple[Any, ...]],
    ) -> tuple[dict[str, Any] | None, str]:
        """The untried candidate of the highest upper bound that the study's rules would launch (None, and
        why: every candidate drawn was tried, or none of the :data:`LAUNCHABLE_ASKED` best would launch).

        A shape (:func:`~autotune.study.guided_reads.shape`: a drafter's chains, its trees) no launch served
        comes first, until :data:`STARTUP_TRIES` of its launches (``dead``: tried, never served) did not serve:
        the fit prices a shape it has not measured at the other's costs, whatever its error on those.

        Even where none promises more than the best measured, the most promising untried one is launched:
        the best measured one again would differ only in memory flags, which the pre-launch rules answer
        from its measurement without a launch."""
        width = max(fitted.error, MIN_FIT_ERROR)
        served = {shape(spec_key(cfg)) for one in launched if (cfg := config_of(fitted.profile, space, one.params))}
        lost = Counter(shape(spec) for spec in dead)
        scored: list[tuple[float, dict[str, Any], bool]] = []
        for params in pool:
            cfg = config_of(fitted.profile, space, flags_of(space, params))
            if cfg is None or spec_key(cfg) in tried:
                continue
            unknown = cfg.spec.enabled and calibrate.drafter_of(cfg) not in fitted.drafters
            bound_fit = _optimistic(fitted, calibrate.drafter_of(cfg)) if unknown else fitted
            rate = _rate(bound_fit, space, flags_of(space, params))
            if rate is None:
                continue
            far = min((distance(space, params, one.params) for one in launched), default=1.0)
            new = (own := shape(spec_key(cfg))) is not None and own not in served and lost[own] < STARTUP_TRIES
            scored.append((rate * (1 + width + DISTANCE_WIDTH * far), params, new))
        if not scored:
            return None, "every candidate the model drew from the space is tried"
        scored.sort(key=lambda s: -s[0])
        first = [s for s in scored if s[2]][:LAUNCHABLE_ASKED] + scored[:LAUNCHABLE_ASKED]
        asked = (self.would_launch(params) for _, params, _ in first)
        best = next((launchable for launchable in asked if launchable is not None), None)
        if best is None:
            return None, f"the study's rules would launch none of the model's {LAUNCHABLE_ASKED} best candidates"
        return best, ""

    # ---------------------------------------------------------------- the fit

    def _fitted(self, study: optuna.Study) -> Fitted | None:
        profile, _ = self._model_profile(study)
        space = self._study_space(study)
        if profile is None or space is None:
            return None
        points = [one.point for one in self._launched(study, space)]
        room = self._room(study, space)  # the verify cost's lighter prior waits for it, as the sibling does
        if (len(points), room) not in self._fits:
            self._fits[len(points), room] = _fit(profile, space, points, room) if len(points) >= 2 else None
        return self._fits[len(points), room]


def _optimistic(fitted: Fitted, drafter: str) -> Fitted:
    """The fit with ``drafter``'s acceptance at :data:`OPTIMISTIC_ACCEPTANCE` (none of its launches measured it)."""
    own = next((d for d in fitted.profile.model.drafters if d.path == drafter), None)
    length = 15 if own is not None and own.algorithm == "DFLASH" else 16
    table = acceptance_table(OPTIMISTIC_ACCEPTANCE, length)
    return replace(fitted, profile=calibrate.with_acceptance(fitted.profile, drafter, table))


def _rate(fitted: Fitted, space: SearchSpace, flags: Mapping[str, Any]) -> float | None:
    """The objective's rate the fitted model predicts for ``flags``; None where it cannot describe them."""
    cfg = config_of(fitted.profile, space, flags)
    if cfg is None:
        return None
    rate = calibrate.expected_rate(
        fitted.profile, cfg, concurrency=fitted.concurrency, input_len=fitted.input_len, output_len=fitted.output_len
    )
    rate *= math.exp(_near_miss(fitted, spec_key(cfg)))
    return rate / fitted.concurrency if fitted.per_request else rate


def _near_miss(fitted: Fitted, launch: tuple[Any, ...]) -> float:
    """The fit's log error at the measured launches of ``launch``'s shape: their mean (the model itself weighs
    :data:`MODEL_WEIGHT` against each launch), then what is left of each launch's miss, weighted by its nearness
    (:func:`~autotune.study.guided_reads.apart`; at :data:`NEAR`, 1/e; the model's own weight again
    :data:`MODEL_WEIGHT`). A shape misses as a whole (its own kernels, which the fit prices at the other
    shape's where it measured that one more), and neighbouring configurations miss alike (a draft-token count,
    a depth's acceptance), which the physics' few constants cannot express."""
    own = shape(launch)
    misses = [(at, miss) for kind, at, miss in fitted.misses if kind == own]
    offset = sum(miss for _, miss in misses) / (MODEL_WEIGHT + len(misses))
    weights = [(math.exp(-apart(launch, at) / NEAR), miss - offset) for at, miss in misses]
    return offset + sum(w * left for w, left in weights) / (MODEL_WEIGHT + sum(w for w, _ in weights))


def _fit(profile: TwinProfile, space: SearchSpace, measured: Sequence[CalibrationPoint], room: bool) -> Fitted | None:
    """Acceptance, then the free constants, fitted to the points (one per distinct launch, rates averaged;
    ``room``: the night's, :func:`~autotune.study.guided_sibling.has_room`)."""
    grouped: dict[str, list[CalibrationPoint]] = {}
    for point in measured:
        grouped.setdefault(json.dumps([point.flags, point.concurrency], sort_keys=True, default=str), []).append(point)
    points: list[calibrate.Point] = []
    for same in grouped.values():
        accepts = [p.accept_length for p in same if p.accept_length is not None]
        points.append(
            calibrate.Point(
                flags=same[0].flags,
                concurrency=same[0].concurrency,
                input_len=round(statistics.mean(p.input_len for p in same)),
                output_len=round(statistics.mean(p.output_len for p in same)),
                tok_s=statistics.mean(p.tok_s for p in same),
                accept_length=statistics.mean(accepts) if accepts and set(same[0].flags) - {TP} else None,
            )
        )
    try:
        configs = [launch_flags.launch_config(profile, p.flags) for p in points]
        accepted = calibrate.fit_acceptance(profile, points, configs)
        fitted = calibrate.fit(accepted, points, iterations=150, restarts=2, lighten=room)
    except ValueError:
        return None
    errors = [
        abs(math.log(calibrate.predict_point(fitted, p, c).tok_s / p.tok_s))
        for p, c in zip(points, configs, strict=True)
    ]
    misses = tuple(
        (
            shape(spec_key(c)),
            spec_key(c),
            math.log(
                p.tok_s
                / calibrate.expected_rate(
                    fitted, c, concurrency=p.concurrency, input_len=p.input_len, output_len=p.output_len
                )
            ),
        )
        for p, c in zip(points, configs, strict=True)
    )
    return Fitted(
        profile=fitted,
        error=math.sqrt(statistics.mean(e * e for e in errors)),
        concurrency=points[-1].concurrency,
        input_len=round(statistics.mean(p.input_len for p in points)),
        output_len=round(statistics.mean(p.output_len for p in points)),
        per_request=space.objective.metric == "decode_tok_s",
        drafters=frozenset(
            calibrate.drafter_of(c)
            for p, c in zip(points, configs, strict=True)
            if c.spec.enabled and p.accept_length is not None
        ),
        misses=misses,
    )


class ModelFit(Frozen):
    """The model-guided search's account of a study, as ``show`` prints it."""

    setup: str = Field(description="what the model is built from, or why there is none")
    errors: list[float] = Field(default_factory=list, description="each launch's error, predicted before it")
    fit_error: float | None = Field(default=None, description="the fit's rms log error on every launch so far")
    best_untried: dict[str, Any] | None = Field(default=None, description="its speculative flags")
    best_untried_rate: float | None = None

    @property
    def median_error(self) -> float | None:
        return statistics.median(self.errors) if self.errors else None


def model_fit(space: SearchSpace, setup: PassSetup, records: Sequence[TrialRecord], *, seed: int = 0) -> ModelFit:
    """The fit to ``records``' launches, the errors of the predictions made before them, and the
    configuration of the highest predicted rate among :data:`POOL` drawn from the space that no
    trial ran (compared as the model reads them, so a normalised spelling is not new)."""
    profile = setup.profile()
    fitted = None
    if profile is not None and space.objective.metric in RATES and not space.objective.levels:
        points = [p for r in records if (p := point_of(r, space)) is not None]
        fitted = _fit(profile, space, points, has_room(records)) if len(points) >= 2 else None
    found = ModelFit(setup=setup.summary(), errors=prediction_errors(records, space))
    if fitted is None:
        return found
    ran = {spec_key(cfg) for r in records if r.served and (cfg := config_of(fitted.profile, space, r.flags))}
    rng = random.Random(seed)
    best: tuple[float, dict[str, Any]] | None = None
    for _ in range(POOL):
        params = model_params(space, suggest(space, Draw(rng)).params)
        cfg = config_of(fitted.profile, space, flags_of(space, params))
        rate = _rate(fitted, space, flags_of(space, params)) if cfg is not None and spec_key(cfg) not in ran else None
        if rate is not None and (best is None or rate > best[0]):
            best = (rate, params)
    return found.model_copy(
        update={
            "fit_error": fitted.error,
            "best_untried": best[1] if best else None,
            "best_untried_rate": best[0] if best else None,
        }
    )


def keep_prediction(
    sampler: optuna.samplers.BaseSampler,
    trial: optuna.Trial,
    flags: Mapping[str, Any],
    *,
    sampled: bool,
    last: str | None,
    note: Callable[[str], None],
) -> str | None:
    """With the model-guided sampler, keep its prediction of this proposal before the launch (a sampler
    cannot set user attrs) and say a change of search (to TPE and why, or back) once; the search now."""
    if not isinstance(sampler, ModelGuided):
        return None
    # A baseline, a retry or a race's relaunch: no search chose it, but its prediction is still judged.
    search = sampler.search(trial.study, trial.number) if sampled else "none: not sampled"
    prediction = sampler.prediction(trial.study, flags, search)
    if prediction is not None:
        attrs.record_prediction(trial, prediction)
    if not sampled:
        return last
    if search != last and (last is not None or search != "model"):
        note(f"trial {trial.number}: search {search}")
    return search


def describe_search(sampler: optuna.samplers.BaseSampler, setup: PassSetup) -> str:
    """The study's first word on its search: which runs and why, and what the pass model could not read."""
    if not isinstance(sampler, ModelGuided):
        line = "search: random draws" if isinstance(sampler, optuna.samplers.RandomSampler) else "search: TPE"
        return line + (f"\n{setup.summary()}" if setup.missing else "")
    if setup.setup is None:
        return f"search: model-guided, falling back to TPE: {setup.summary()}"
    return (
        f"search: model-guided ({setup.summary()}), calibrated on each launch; "
        "TPE where the model cannot propose (said when it happens)"
    )


def _best_measured(launched: Sequence[Launched]) -> dict[str, Any] | None:
    best = max(launched, key=lambda one: one.point.tok_s, default=None)
    return best.params if best is not None else None
