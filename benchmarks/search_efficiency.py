"""Search efficiency: launches until autotune's best is within 2 % of the true optimum, vs grids.

Runs autotune's own study loop (``StudyRunner.objective``: the sampler, baselines, engine rules,
duplicate skipping, memory-feasibility prediction and constraints the product uses) on the SGLang
twin's landscape (``benchmarks/landscape.py``: the twin's launch rules and physics called directly,
with measurement noise) instead of real launches, side by side with the baselines SGLang users
have: random search, the full grid in a fixed order, and a tiered grid like ``sglang.auto_benchmark``.

    python benchmarks/search_efficiency.py --twin-profile qwen3.6-27b-2xa6000 \\
        --space search_spaces/qwen3.6-27b-2xa6000-twin.yaml --seeds 10 --budget 80 --json out.json

See docs/benchmarks.md for what is measured and the assumptions behind the simulated seconds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import random
import statistics
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal
from unittest import mock

import optuna

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from autotune.engines import get_engine  # noqa: E402
from autotune.engines.base import Engine, InvalidConfig, LaunchPlan, MemoryFacts  # noqa: E402
from autotune.gpu import GpuInventory  # noqa: E402
from autotune.measure.protocol import EarlyStop  # noqa: E402
from autotune.measure.suites import load_suite  # noqa: E402
from autotune.memory_types import FractionWindow  # noqa: E402
from autotune.records import TrialRecord  # noqa: E402
from autotune.space import (  # noqa: E402
    CategoricalParam,
    FloatParam,
    IntParam,
    SearchSpace,
    load_space,
)
from autotune.study import Launcher, StudyEvents, StudyRunner, make_sampler  # noqa: E402
from autotune.study.confirm import Confirmation  # noqa: E402
from autotune.study.night import Night, run_night  # noqa: E402
from autotune.study.race import RACE_SHARE  # noqa: E402
from autotune.study.rules import RULE_NAMES  # noqa: E402
from autotune.study.rules.make_room import MakeRoom  # noqa: E402
from autotune.study.sampler import SamplerName  # noqa: E402
from autotune.testing import memory_as_logged, simulated_outcome, study_runner  # noqa: E402
from autotune.trial import TrialOutcome  # noqa: E402
from autotune_twin.gpu_state import inventory  # noqa: E402
from benchmarks import family, family_tight, replay  # noqa: E402
from benchmarks.landscape import (  # noqa: E402
    Evaluation,
    GridAxis,
    Landscape,
    LaunchCost,
    MeasureShape,
    Optimum,
    Prompt,
    _random_candidate,
    grid,
)
from benchmarks.recorded import RecordedLaunch  # noqa: E402
from passmodel.profile import TwinProfile, load_profile  # noqa: E402

WITHIN = 0.02  # "reached": the incumbent's true value is within 2 % of the optimum
FLOAT_POINTS = 11  # a float without a step is discretised into this many points (log-spaced if log)
TIER_LEVELS = 4  # values per key a tiered grid tries (a user lists a few per key)
TRIAL_CAP_FACTOR = 5  # a sampled method stops after budget x this many trials, launched or not
FINALISTS = 3  # the race's top configurations (``autotune study --confirm-top``), besides every baseline

# A sampler factory: seed -> sampler (None: the product's own make_sampler).
SamplerFactory = Callable[[int], optuna.samplers.BaseSampler] | None


# ---------------------------------------------------------------------------------------------
# The problem: a profile, a space, its prompts, its landscape and its true optimum


@dataclass
class Problem:
    profile: TwinProfile
    space: SearchSpace
    engine: Engine
    prompts: list[Prompt]
    axes: list[GridAxis]
    measure: MeasureShape
    noise_rel: float
    cost: LaunchCost
    gpus: int
    notes: list[str]
    optimum: Optimum | None = None
    launch_sd: float = 0.0  # the relative sd of speed between launches (the twin's timing.launch_sd)
    nights: dict[tuple[str, int, int], Run] = field(default_factory=dict)  # a study's night, for its bounds

    def landscape(self, seed: int) -> Landscape:
        return Landscape(
            self.profile,
            self.prompts,
            model_path=self.space.model,
            noise_rel=self.noise_rel,
            measure=self.measure,
            cost=self.cost,
            seed=seed,
        )

    def normalise(self, flags: dict[str, Any]) -> dict[str, Any] | None:
        try:
            return self.engine.normalise(flags).flags
        except InvalidConfig:
            return None


def axes_of(space: SearchSpace, notes: list[str]) -> list[GridAxis]:
    """The discrete grid a space defines (floats with a step are discrete; without, 11 points)."""
    axes = []
    for name, param in space.tuned.items():
        values: tuple[Any, ...]
        if isinstance(param, CategoricalParam):
            values = tuple(param.choices)
        elif isinstance(param, IntParam):
            values = tuple(range(param.low, param.high + 1, param.step))
        elif isinstance(param, FloatParam):
            if param.step is not None:
                count = int(math.floor((param.high - param.low) / param.step + 1e-9))
                values = tuple(round(param.low + i * param.step, 10) for i in range(count + 1))
            else:
                values = tuple(_float_points(param.low, param.high, log=param.log))
                notes.append(
                    f"{name} has no step: the optimum is taken over {FLOAT_POINTS} "
                    f"{'log' if param.log else 'evenly'}-spaced points ({values[0]:g} .. {values[-1]:g})"
                )
        else:  # pragma: no cover - the union is closed
            raise TypeError(param)
        when = (param.when.flag, param.when.op, param.when.value) if param.when is not None else None
        axes.append(GridAxis(name=name, values=values, when=when))
    return axes


def _float_points(low: float, high: float, *, log: bool) -> list[float]:
    if low == high:
        return [low]
    if log:
        return [round(math.exp(math.log(low) + (math.log(high) - math.log(low)) * i / (FLOAT_POINTS - 1)), 10)
                for i in range(FLOAT_POINTS)]  # fmt: skip
    return [round(low + (high - low) * i / (FLOAT_POINTS - 1), 10) for i in range(FLOAT_POINTS)]


def load_problem(
    profile_ref: str, space_path: str | Path, *, noise_rel: float | None = None, cost: LaunchCost | None = None
) -> Problem:
    """Read a twin profile and a search space; the landscape's measurement follows the space's."""
    return problem_of(load_profile(profile_ref), load_space(space_path), noise_rel=noise_rel, cost=cost)


def problem_of(
    profile: TwinProfile, space: SearchSpace, *, noise_rel: float | None = None, cost: LaunchCost | None = None
) -> Problem:
    """A profile and a space already in hand (a family member); see :func:`load_problem`."""
    engine = get_engine(space.engine)
    suite = load_suite(space.suite_path())
    m = space.measurement
    prompts = suite.prompts[: m.prompts_per_round] if m.prompts_per_round else suite.prompts
    notes: list[str] = []
    if space.objective.concurrency != 1 or space.objective.metric != "decode_tok_s":
        notes.append(
            f"the space's objective is {space.objective.metric} at concurrency {space.objective.concurrency}; "
            "the landscape measures decode tok/s at concurrency 1"
        )
    axes = axes_of(space, notes)
    measure = MeasureShape(
        warmup_requests=m.warmup_requests,
        min_rounds=m.min_rounds,
        max_rounds=m.max_rounds,
        target_rel_ci=m.target_rel_ci,
        max_seconds=m.max_seconds,
        max_tokens=m.max_tokens,
        ignore_eos=m.ignore_eos,
    )
    devices = space.gpus.devices
    return Problem(
        profile=profile,
        space=space,
        engine=engine,
        prompts=[Prompt(text=p.text, max_new_tokens=p.max_tokens) for p in prompts],
        axes=axes,
        measure=measure,
        # The measurement stops at a 95 % CI of +-target: its mean's relative sd is target / 1.96.
        noise_rel=noise_rel if noise_rel is not None else m.target_rel_ci / 1.96,
        cost=cost or LaunchCost(),
        gpus=len(devices) if devices else profile.gpus.count,
        notes=notes,
    )


def solve(problem: Problem, *, exhaustive: bool | None = None) -> Optimum:
    """The landscape's true feasible optimum over the space's grid (cached on the problem)."""
    if problem.optimum is None or (exhaustive and not problem.optimum.exhaustive):
        problem.optimum = problem.landscape(0).optimum(
            problem.axes, problem.space.fixed, normalise=problem.normalise, exhaustive=exhaustive
        )
    return problem.optimum


# ---------------------------------------------------------------------------------------------
# One run of one method: what each trial cost and found


@dataclass
class Step:
    """One trial: launched or not, its outcome, what it measured and what is true."""

    launched: bool
    outcome: str
    seconds: float = 0.0
    measured: float | None = None
    true: float | None = None
    flags: dict[str, Any] | None = None


@dataclass
class Run:
    method: str
    seed: int
    steps: list[Step] = field(default_factory=list)
    wall_s: float = 0.0
    confirmed_true: float | None = None  # the true value of the study's confirmed best (recorded replays)
    confirm_launches: int = 0
    claims: int = 0  # gains over a baseline the race marked significant
    false_claims: int = 0  # of those, the ones whose sign the truth does not have (as verdicts.py counts)
    defaults_true: float | None = None  # the engine's defaults' true value: an answer below it is harmful

    def summary(self, optimum: float, gpus: int) -> dict[str, Any]:
        """Launches, trials and GPU-hours until the incumbent is within 2 %, memory deaths, final gap.

        The incumbent is the configuration with the highest mean over its launches so far (a study
        launches one again to re-measure it), which a user would deploy. ``launches_to_find_2pct``:
        until any launched configuration is truly within 2 %, whatever it measured; the rest of the
        way to the incumbent is selection under the launch noise, not search."""
        incumbent_true = 0.0
        measured: dict[str, list[float]] = {}
        truth: dict[str, float] = {}
        launches = trials = 0
        seconds = 0.0
        reached: dict[str, Any] | None = None
        found: int | None = None
        memory = 0
        for number, step in enumerate(self.steps):
            trials += 1
            seconds += step.seconds
            if step.launched:
                launches += 1
                memory += step.outcome.startswith("infeasible-memory")
                if step.measured is not None:
                    key = json.dumps(step.flags, sort_keys=True) if step.flags else f"step {number}"
                    measured.setdefault(key, []).append(step.measured)
                    truth[key] = step.true or 0.0
                    best = max(measured, key=lambda k: statistics.fmean(measured[k]))
                    incumbent_true = truth[best]
                    if found is None and truth[key] >= (1 - WITHIN) * optimum:
                        found = launches
            if reached is None and incumbent_true >= (1 - WITHIN) * optimum:
                reached = {"launches": launches, "trials": trials, "gpu_hours": seconds * gpus / 3600}
        answer = self.confirmed_true if self.confirmed_true is not None else incumbent_true
        return {
            "launches_to_2pct": reached["launches"] if reached else None,
            "launches_to_find_2pct": found,
            "trials_to_2pct": reached["trials"] if reached else None,
            "gpu_hours_to_2pct": reached["gpu_hours"] if reached else None,
            "launches": launches,
            "trials": trials,
            "memory_deaths": memory,
            "memory_death_rate": memory / launches if launches else 0.0,
            "gpu_hours": seconds * gpus / 3600,
            "final_gap": 1 - incumbent_true / optimum,
            "final_true_tok_s": incumbent_true,
            "confirmed_gap": None if self.confirmed_true is None else 1 - self.confirmed_true / optimum,
            "confirm_launches": self.confirm_launches,
            "night_launches": launches + self.confirm_launches,
            "claims": self.claims,
            "false_claims": self.false_claims,
            # The night's answer: the race's (or the peer's) pick, else the incumbent by mean.
            "regret_pct": 100 * (1 - answer / optimum),
            "harmful": self.defaults_true is not None and answer < self.defaults_true,
        }


class LandscapeLauncher:
    """``StudyRunner.launch`` for a landscape: the landscape's answer as the TrialOutcome a launch gives.

    ``launch_sd`` (off by default): each launch's speed is also multiplied by one factor drawn from
    ``launch_rng`` with this relative sd, the noise between launches of one configuration that a
    measurement's own interval does not see (the twin's ``timing.launch_sd``).
    """

    def __init__(
        self, problem: Problem, landscape: Landscape, rng: random.Random, *, launch_sd: float = 0.0,
        launch_rng: random.Random | None = None,
    ) -> None:  # fmt: skip
        self.problem = problem
        self.landscape = landscape
        self.rng = rng
        self.launch_sd = launch_sd
        self.launch_rng = launch_rng or random.Random()
        self.evaluations: list[Evaluation] = []

    def __call__(
        self, plan: LaunchPlan, log_path: Path, phase: Callable[[str, str], None], early_stop: EarlyStop | None = None
    ) -> TrialOutcome:
        evaluation = self.landscape.evaluate(plan.flags, rng=self.rng)
        if self.launch_sd > 0 and evaluation.tok_s is not None:
            factor = max(0.5, self.launch_rng.gauss(1.0, self.launch_sd))
            evaluation = dataclasses.replace(evaluation, tok_s=evaluation.tok_s * factor)
        stopped = early_stop is not None and evaluation.tok_s is not None and early_stop.hopeless(evaluation.tok_s)
        if stopped:  # measured one round of the protocol's rounds (the landscape's value is that round's)
            rounds = self.problem.measure.min_rounds
            evaluation = dataclasses.replace(evaluation, measure_s=evaluation.measure_s / rounds)
        self.evaluations.append(evaluation)
        return outcome_of(self.problem, plan, evaluation, early_stopped=stopped)


def outcome_of(
    problem: Problem, plan: LaunchPlan, evaluation: Evaluation, *, early_stopped: bool = False
) -> TrialOutcome:
    """What ``run_trial`` would return; failures are classified by the engine from SGLang's message."""
    memory = _memory_facts(evaluation)
    timing = {"launch_s": evaluation.launch_s, "measure_s": evaluation.measure_s, "stop_s": evaluation.stop_s}
    if not evaluation.feasible:
        failure = problem.engine.classify_failure(exit_code=1, log_text=evaluation.message or "", timed_out=False)
        return simulated_outcome(problem.space, plan, kind=failure.kind, reason=failure.reason, memory=memory,
                                 **timing)  # fmt: skip
    assert evaluation.tok_s is not None and evaluation.accept_length is not None
    # NVML's peak while measuring: the idle GPUs' use plus what the serving server holds.
    held = evaluation.held_bytes
    peak = problem.profile.gpus.idle_used_bytes + held if held is not None else None
    return simulated_outcome(
        problem.space, plan, tok_s=evaluation.tok_s, rounds=1 if early_stopped else problem.measure.min_rounds,
        ci95=evaluation.tok_s * problem.noise_rel * 1.96, accept_length=evaluation.accept_length,
        early_stopped=early_stopped, stop_reason="simulated (landscape)", memory=memory, gpu_peak_used_bytes=peak,
        **timing,
    )  # fmt: skip


def _memory_facts(evaluation: Evaluation) -> MemoryFacts | None:
    """What the server would have logged about its memory (see :func:`autotune.testing.memory_as_logged`)."""
    return memory_as_logged(
        weights_bytes=evaluation.weights_bytes,
        kv_pool_bytes=evaluation.kv_pool_bytes,
        kv_tokens=evaluation.kv_tokens,
        graph_bytes=evaluation.graph_bytes,
        free_at_start_bytes=evaluation.server_free_bytes,
        avail_after_pools_bytes=evaluation.avail_after_pools_bytes,
        graph_batch=evaluation.graph_batch if evaluation.graph_bytes is not None else None,
    )


# ---------------------------------------------------------------------------------------------
# Methods


def twin_inventory(profile: TwinProfile) -> GpuInventory:
    """The GPUs a twin profile simulates, as autotune reads them from the twin's inventory command."""
    return GpuInventory.model_validate(inventory(profile))


def make_runner(
    problem: Problem,
    folder: Path,
    *,
    sampler: optuna.samplers.BaseSampler,
    launcher: Launcher | None = None,
    events: StudyEvents | None = None,
    storage: optuna.storages.BaseStorage | None = None,
    early_stop: bool = True,
    rules_off: Collection[str] = (),
) -> StudyRunner:
    """autotune's StudyRunner through its front door (:func:`autotune.testing.study_runner`) on the
    twin profile's GPUs: a fresh in-memory storage unless given and, unless given, real launches."""
    return study_runner(problem.space, folder, inventory=twin_inventory(problem.profile), launcher=launcher,
                        sampler=sampler, events=events, storage=storage, early_stop=early_stop,
                        rules_off=rules_off, name="bench")  # fmt: skip


class StepRecorder(StudyEvents):
    """Each finished trial as a step: launched or not (the launcher saw it), measured and true values."""

    def __init__(self, run: Run, launcher: LandscapeLauncher) -> None:
        self.run = run
        self.launcher = launcher
        self.seen = 0

    def trial_finished(self, record: TrialRecord) -> None:
        launched = len(self.launcher.evaluations) > self.seen
        evaluation = self.launcher.evaluations[-1] if launched else None
        self.seen = len(self.launcher.evaluations)
        if record.confirm_of is not None:  # the race's relaunch: counted in the night, not a search step
            self.run.confirm_launches += launched
            return
        self.run.steps.append(
            Step(
                launched=launched,
                outcome=record.outcome,
                seconds=evaluation.seconds if evaluation else 0.0,
                measured=evaluation.tok_s if evaluation else None,
                true=evaluation.true_tok_s if evaluation else None,
                flags=record.flags or None,
            )
        )


def run_study(
    problem: Problem,
    seed: int,
    budget: int,
    *,
    sampler: str = "tpe",
    factory: SamplerFactory = None,
    name: str,
    early_stop: bool = True,
    rules_off: Collection[str] = (),
    until: float | None = None,
    confirm: bool = False,
    race_share: float = RACE_SHARE,
    finalists: int = FINALISTS,
) -> Run:
    """autotune's study loop with the landscape in place of launches, until ``budget`` launches;
    ``rules_off`` names pre-launch rules switched off; ``until`` (the
    optimum): stop once the incumbent is within 2 % of it, the rest of the run being unread;
    ``confirm``: the budget is the night, search and race (:func:`~autotune.study.night.run_night` on
    :meth:`~autotune.study.night.Night.of_launches`): the finalists race as a study does (those launches
    are not kept as search steps; ``run.confirm_launches`` counts them) among the ``finalists`` best and
    the baselines."""
    started = time.monotonic()
    run = Run(method=name, seed=seed)
    night = Night(trials=budget, top=0)
    if confirm:
        night = Night.of_launches(budget, baselines=len(problem.space.baselines), top=finalists, share=race_share)
    budget = night.trials or budget  # the search's launches
    with tempfile.TemporaryDirectory(prefix="autotune-bench-") as tmp:
        launcher = LandscapeLauncher(problem, problem.landscape(seed), random.Random(seed),
                                     launch_sd=problem.launch_sd, launch_rng=random.Random(20_000 + seed))  # fmt: skip
        chosen = factory(seed) if factory is not None else make_sampler(sampler, seed)  # type: ignore[arg-type]
        recorder = StepRecorder(run, launcher)
        runner = make_runner(problem, Path(tmp), sampler=chosen, launcher=launcher, events=recorder,
                             early_stop=early_stop, rules_off=rules_off)  # fmt: skip
        runner.enqueue_baselines()

        def launch_budget(records: Sequence[TrialRecord]) -> str | None:
            if until is not None and run.summary(until, 1)["launches_to_2pct"] is not None:
                return "within 2 %"
            if len(records) >= budget * TRIAL_CAP_FACTOR:
                return f"{len(records)} trials"
            return f"{budget} launches" if sum(s.launched for s in run.steps) >= budget else None

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            confirmation = run_night(runner, night, rules=[launch_budget]).confirmation
        if confirmation is not None and confirmation.best is not None:
            # a step per trial, in trial order (every finished trial reaches the recorder)
            run.confirmed_true = run.steps[confirmation.best].true or 0.0
            count_claims(run, confirmation, lambda trial: run.steps[trial].true or 0.0)
    run.wall_s = time.monotonic() - started
    return run


def count_claims(run: Run, confirmation: Confirmation, true: Callable[[int], float]) -> None:
    """The race's significant gains over a baseline, and the false ones: a sign the truth does not have
    (the leader called faster than a baseline truly as fast or faster, or slower than one truly as slow
    or slower; no tolerance), as ``verdicts.py`` judges them."""
    for gain in confirmation.gains:
        if gain.significant and gain.low is not None:
            leader, baseline = true(gain.trial), true(gain.baseline_trial)
            run.claims += 1
            run.false_claims += not (leader > baseline if gain.low > 0 else leader < baseline)


def _launch_candidate(problem: Problem, landscape: Landscape, rng: random.Random, candidate: dict[str, Any]) -> Step:
    """A grid tool launches what it is given: SGLang refuses invalid flags at launch (it costs a start)."""
    flags = problem.normalise(candidate) or candidate
    evaluation = landscape.evaluate(flags, rng=rng)
    if problem.launch_sd > 0 and evaluation.tok_s is not None:  # the noise LandscapeLauncher draws
        factor = max(0.5, rng.gauss(1.0, problem.launch_sd))
        evaluation = dataclasses.replace(evaluation, tok_s=evaluation.tok_s * factor)
    plan = LaunchPlan(engine=problem.engine.name, flags=flags)
    kind = outcome_of(problem, plan, evaluation).kind.value
    return Step(launched=True, outcome=kind, seconds=evaluation.seconds, measured=evaluation.tok_s,
                true=evaluation.true_tok_s, flags=flags)  # fmt: skip


def run_candidates(problem: Problem, seed: int, budget: int, name: str, candidates: Iterator[dict[str, Any]]) -> Run:
    started = time.monotonic()
    run = Run(method=name, seed=seed)
    landscape, rng = problem.landscape(seed), random.Random(seed)
    for candidate in candidates:
        if len(run.steps) >= budget:
            break
        run.steps.append(_launch_candidate(problem, landscape, rng, candidate))
    run.wall_s = time.monotonic() - started
    return run


def random_candidates(problem: Problem, seed: int) -> Iterator[dict[str, Any]]:
    """Uniform draws from the space (conditions honoured), as a plain random-search script does."""
    rng = random.Random(10_000 + seed)
    while True:
        flags: dict[str, Any] = dict(problem.space.fixed)
        for axis in problem.axes:
            if axis.applies(flags):
                flags[axis.name] = rng.choice(axis.values)
        yield {k: v for k, v in flags.items() if v is not False}


def tiered_candidates(
    problem: Problem, landscape: Landscape, rng: random.Random, *, per_tier: int, cartesian_keys: int = 2
) -> list[Step]:
    """A tiered grid like ``sglang.auto_benchmark`` (tier 2, its default), run to the end.

    Stage 1 tunes the server flags with the speculative flags at the baseline's values, stage 2
    the ``speculative-*`` flags on stage 1's best. Each stage: the baseline first, then the
    cartesian product of the first ``cartesian_keys`` keys (in the file's order), then every other
    key one at a time; each key tries up to ``TIER_LEVELS`` of its values; duplicates dropped;
    the first ``per_tier`` candidates kept. Nothing is predicted and nothing is learned.
    """
    space = problem.space
    base = dict(space.fixed)
    if space.baselines:
        base.update(space.baselines[0].flags)
    stages = [
        [a for a in problem.axes if not a.name.startswith("speculative-")],
        [a for a in problem.axes if a.name.startswith("speculative-")],
    ]
    steps: list[Step] = []
    measured_before: set[tuple[tuple[str, Any], ...]] = set()
    for axes in stages:
        if not axes:
            continue
        best: tuple[float, dict[str, Any]] | None = None
        for candidate in _tier_stage(base, axes, per_tier=per_tier, cartesian_keys=cartesian_keys):
            key = tuple(sorted(candidate.items()))
            if key in measured_before:
                continue  # stage 2 starts from stage 1's best, already measured
            measured_before.add(key)
            step = _launch_candidate(problem, landscape, rng, candidate)
            steps.append(step)
            if step.measured is not None and (best is None or step.measured > best[0]):
                best = (step.measured, candidate)
        if best is not None:
            base = best[1]
    return steps


def _levels(values: Sequence[Any]) -> list[Any]:
    if len(values) <= TIER_LEVELS:
        return list(values)
    picks = sorted({round(i * (len(values) - 1) / (TIER_LEVELS - 1)) for i in range(TIER_LEVELS)})
    return [values[i] for i in picks]


def _tier_stage(
    base: dict[str, Any], axes: list[GridAxis], *, per_tier: int, cartesian_keys: int
) -> Iterator[dict[str, Any]]:
    def settle(flags: dict[str, Any]) -> dict[str, Any]:
        # Keys whose condition no longer holds are left out, as the space defines.
        out = {k: v for k, v in flags.items() if k not in {a.name for a in axes}}
        for axis in axes:
            if axis.name in flags and axis.applies(out):
                out[axis.name] = flags[axis.name]
        return {k: v for k, v in out.items() if v is not False}

    def candidates() -> Iterator[dict[str, Any]]:
        yield settle(base)
        head, rest = axes[:cartesian_keys], axes[cartesian_keys:]
        for combo in grid([GridAxis(a.name, tuple(_levels(a.values)), a.when) for a in head], base):
            yield settle(combo)
        for axis in rest:
            for value in _levels(axis.values):
                yield settle({**base, axis.name: value})

    seen: set[tuple[tuple[str, Any], ...]] = set()
    for candidate in candidates():
        key = tuple(sorted(candidate.items()))
        if key in seen:
            continue
        seen.add(key)
        yield candidate
        if len(seen) >= per_tier:
            return


def run_tiered(problem: Problem, seed: int, budget: int, *, per_tier: int) -> Run:
    started = time.monotonic()
    run = Run(method=f"tiered grid ({per_tier}/tier)", seed=seed)
    run.steps = tiered_candidates(problem, problem.landscape(seed), random.Random(seed), per_tier=per_tier)[:budget]
    run.wall_s = time.monotonic() - started
    return run


# ---------------------------------------------------------------------------------------------
# Samplers under comparison


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
    from benchmarks import peers  # it builds on this module

    known: dict[str, Method] = {
        # A study's night: the search's share of the budget, then the race on the rest.
        "autotune": Method("autotune (TPE, default)", lambda p, s, b: night(p, s, b, sampler="tpe")),
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
        name = "autotune (TPE, default)" if sampler == "tpe" else f"{sampler} (autotune loop)"
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
FamilyCase = Literal["all", "tight", "tight-context", "issue-46"]


# ---------------------------------------------------------------------------------------------
# Aggregation and output


def aggregate(rows: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    """Median and worst over seeds; a seed that never got within 2 % counts as not reached."""

    def stat(key: str) -> dict[str, Any]:
        values = [r[key] for r in rows]
        reached = [v for v in values if v is not None]
        ordered = sorted(values, key=lambda v: math.inf if v is None else v)
        median = ordered[(len(ordered) - 1) // 2] if len(ordered) % 2 else None
        if len(ordered) % 2 == 0:
            a, b = ordered[len(ordered) // 2 - 1], ordered[len(ordered) // 2]
            median = None if a is None or b is None else (a + b) / 2
        return {"median": median, "worst": None if len(reached) < len(values) else max(values), "reached": len(reached)}

    return {
        "seeds": len(rows),
        "budget": budget,
        "launches_to_2pct": stat("launches_to_2pct"),
        "trials_to_2pct": stat("trials_to_2pct"),
        "gpu_hours_to_2pct": stat("gpu_hours_to_2pct"),
        "memory_deaths": {"median": statistics.median(r["memory_deaths"] for r in rows),
                          "worst": max(r["memory_deaths"] for r in rows)},
        "memory_death_rate": {"median": statistics.median(r["memory_death_rate"] for r in rows),
                              "worst": max(r["memory_death_rate"] for r in rows)},
        "final_gap": {"median": statistics.median(r["final_gap"] for r in rows),
                      "worst": max(r["final_gap"] for r in rows)},
        "launches": {"median": statistics.median(r["launches"] for r in rows)},
        "gpu_hours": {"median": statistics.median(r["gpu_hours"] for r in rows)},
        "wall_s": {"median": statistics.median(r["wall_s"] for r in rows)},
    }  # fmt: skip


def benchmark(
    problem: Problem, *, seeds: int, budget: int, method_names: Sequence[str] = DEFAULT_METHODS, per_tier: int = 8,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Every method on every seed; returns the numbers the table and ``--json`` show."""
    from benchmarks import peers

    optimum = solve(problem)
    defaults = peers.twin_defaults_true(problem)
    results: dict[str, Any] = {}
    by_method: dict[str, list[dict[str, Any]]] = {}
    for method in methods(method_names, per_tier=per_tier):
        rows = []
        for seed in range(seeds):
            run = method.run(problem, seed, budget)
            run.defaults_true = defaults
            rows.append({**run.summary(optimum.tok_s, problem.gpus), "seed": seed, "wall_s": run.wall_s})
            if progress is not None:
                progress(f"{method.name}: seed {seed} done")
        by_method[method.name] = rows
        results[method.name] = {"summary": {**aggregate(rows, budget), "regret": regret_summary(rows, budget)},
                                "runs": rows}  # fmt: skip
    return {
        "profile": problem.profile.name,
        "space": str(problem.space.source),
        "gpus": problem.gpus,
        "noise_rel": problem.noise_rel,
        "launch_cost": asdict(problem.cost),
        "optimum": {"tok_s": optimum.tok_s, "flags": optimum.flags, "exhaustive": optimum.exhaustive,
                    "grid_candidates": optimum.candidates or None, "within_2pct": optimum.within_2pct or None},
        "notes": problem.notes,
        "seeds": seeds,
        "budget": budget,
        "launch_sd": problem.launch_sd,
        "defaults_tok_s": defaults,
        "methods": results,
        "paired": paired_regret(by_method),
    }  # fmt: skip


REFERENCE = "autotune (TPE, default)"  # the row every other is paired with


def regret_summary(rows: Sequence[dict[str, Any]], budget: int) -> dict[str, Any]:
    """The answer a night ends with, over runs: regret (percent below the optimum) median, 90th
    percentile (nearest rank) and mean; shares within 2 % and 5 %; harmful answers (truly slower than
    the engine's defaults); the race's claims and false claims; the night's launches against ``budget``."""
    regrets = [r["regret_pct"] for r in rows]
    nights = [r["night_launches"] for r in rows]
    return {
        "median": _quantile(regrets, 0.5), "p90": _quantile(regrets, 0.9), "mean": statistics.fmean(regrets),
        "within_2pct": sum(v <= 100 * WITHIN for v in regrets) / len(regrets),
        "within_5pct": sum(v <= 5.0 for v in regrets) / len(regrets),
        "harmful": sum(bool(r["harmful"]) for r in rows),
        "claims": sum(r["claims"] for r in rows), "false_claims": sum(r["false_claims"] for r in rows),
        "night_launches_max": max(nights), "within_budget": all(n <= budget for n in nights),
    }  # fmt: skip


def paired_regret(by_method: dict[str, list[dict[str, Any]]], *, seed: int = 0) -> dict[str, Any]:
    """Each row's regret median and 90th percentile minus :data:`REFERENCE`'s, with the 95 % bootstrap
    interval (runs resampled in pairs: the same member or seed in both rows)."""
    from benchmarks.ablation import paired_interval, quantile

    reference = by_method.get(REFERENCE)
    if reference is None:
        return {}
    mine = [r["regret_pct"] for r in reference]
    paired: dict[str, Any] = {}
    for name, rows in by_method.items():
        if name == REFERENCE:
            continue
        theirs = [r["regret_pct"] for r in rows]
        rng = random.Random(seed)
        paired[name] = {
            label: {"difference": quantile(theirs, q) - quantile(mine, q),
                    "interval": paired_interval(theirs, mine, q, rng)}
            for label, q in (("median", 0.5), ("p90", 0.9))
        }  # fmt: skip
    return paired


def print_regret_table(report: dict[str, Any], title: str) -> None:
    """The headline: the regret of each row's answer, and each row against autotune's, paired."""
    from rich.console import Console
    from rich.table import Table

    table = Table(title=title, caption="regret: how far below the optimum the night's answer truly is (median / "
                  "90th percentile / mean); vs autotune: this row's median and p90 minus autotune's, with the 95 % "
                  "paired bootstrap interval (positive: worse than autotune); harmful: answers truly slower than the "
                  "engine's defaults; claims: false / made; night: most launches a night spent.")  # fmt: skip
    for header in ("method", "regret % med / p90 / mean", "within 2% / 5%", "harmful", "claims", "night",
                   "vs autotune: median", "vs autotune: p90"):  # fmt: skip
        table.add_column(header, justify="left" if header == "method" else "right")
    for name, result in report["methods"].items():
        r = result["summary"]["regret"]
        paired = report.get("paired", {}).get(name)

        def against(label: str, paired: dict[str, Any] | None = paired) -> str:
            if paired is None:
                return "—"
            low, high = paired[label]["interval"]
            return f"{paired[label]['difference']:+.1f} ({low:+.1f} to {high:+.1f})"

        table.add_row(name, f"{r['median']:.1f} / {r['p90']:.1f} / {r['mean']:.1f}",
                      f"{r['within_2pct']:.0%} / {r['within_5pct']:.0%}", str(r["harmful"]),
                      f"{r['false_claims']} / {r['claims']}",
                      f"{r['night_launches_max']}{'' if r['within_budget'] else ' (over)'}",
                      against("median"), against("p90"))  # fmt: skip
    Console(width=max(Console().width, 160)).print(table)


def _fmt(value: Any, digits: int = 0, budget: int | None = None) -> str:
    if value is None:
        return f">{budget}" if budget is not None else "—"
    return f"{value:.{digits}f}"


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))
    opt = report["optimum"]
    budget = report["budget"]
    table = Table(
        title=f"Search efficiency on {report['profile']} ({report['seeds']} seeds, budget {budget} launches); "
        f"true optimum {opt['tok_s']:.2f} tok/s",
        caption="launches/trials/GPU-h: until the best-so-far's true value is within 2 % of the optimum "
        "(median / worst over seeds; >N = not reached in N launches). SIMULATED on the SGLang twin.",
    )
    for header in ("method", "launches to 2%", "trials to 2%", "GPU-h to 2%", "reached", "memory deaths",
                   "final gap", "GPU-h total"):  # fmt: skip
        table.add_column(header, justify="left" if header == "method" else "right")
    for name, result in report["methods"].items():
        s = result["summary"]
        launches, trials, hours = s["launches_to_2pct"], s["trials_to_2pct"], s["gpu_hours_to_2pct"]
        table.add_row(
            name,
            f"{_fmt(launches['median'], 0, budget)} / {_fmt(launches['worst'], 0, budget)}",
            f"{_fmt(trials['median'], 0, budget)} / {_fmt(trials['worst'], 0, budget)}",
            f"{_fmt(hours['median'], 2)} / {_fmt(hours['worst'], 2)}",
            f"{launches['reached']}/{s['seeds']}",
            f"{s['memory_deaths']['median']:g} ({s['memory_death_rate']['median']:.0%})"
            f" / {s['memory_deaths']['worst']}",
            f"{s['final_gap']['median']:.1%} / {s['final_gap']['worst']:.1%}",
            f"{s['gpu_hours']['median']:.2f}",
        )
    console.print(table)
    console.print(f"optimum: {json.dumps(opt['flags'])}")
    for note in report["notes"]:
        console.print(f"note: {note}")


# ---------------------------------------------------------------------------------------------
# A family of landscapes (benchmarks/family.py): the distribution over members


def _quantile(values: Sequence[float | None], q: float) -> float | None:
    """Nearest-rank quantile; a member that never got within 2 % is larger than any number (None)."""
    ordered = sorted(values, key=lambda v: math.inf if v is None else v)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def spread(values: Sequence[float | None]) -> dict[str, float | None]:
    """Median, 90th percentile and worst over members (None: not reached)."""
    return {"median": _quantile(values, 0.5), "p90": _quantile(values, 0.9), "worst": _quantile(values, 1.0)}


def family_benchmark(
    count: int, first_seed: int, *, budget: int, method_names: Sequence[str] = DEFAULT_FAMILY_METHODS,
    per_tier: int = 8, noise_rel: float | None = None, launch_sd: float | None = None,
    progress: Callable[[str], None] | None = None, case: FamilyCase = "all",
) -> dict[str, Any]:  # fmt: skip
    """Every method once on every member (the member's seed seeds the sampler and the noise);
    ``launch_sd``: the relative sd of speed between launches (:class:`LandscapeLauncher`; default each
    member's profile's ``timing.launch_sd``); ``case``: the family's members, its tight members only
    (:func:`family_tight.tight_member`), or issue 46's landscape."""
    from benchmarks import peers

    chosen = methods(method_names, per_tier=per_tier)
    rows: dict[str, list[dict[str, Any]]] = {m.name: [] for m in chosen}
    described = []
    drawn = (
        {
            "all": family.members,
            "tight": family_tight.tight_members,
            "tight-context": family_tight.tight_context_members,
        }[case](count, first_seed)
        if case != "issue-46"
        else [family_tight.issue_46_member()] * count
    )
    for index, fam in enumerate(drawn):
        fam = fam.model_copy(update={"seed": first_seed + index}) if case == "issue-46" else fam
        problem = problem_of(fam.profile, fam.space, noise_rel=noise_rel)
        problem.launch_sd = launch_sd if launch_sd is not None else fam.profile.timing.launch_sd
        optimum = solve(problem)
        defaults = peers.twin_defaults_true(problem)
        described.append({"seed": fam.seed, "summary": fam.summary, "optimum_tok_s": optimum.tok_s,
                          "optimum": optimum.flags, "defaults_tok_s": defaults})  # fmt: skip
        for method in chosen:
            run = method.run(problem, fam.seed, budget)
            run.defaults_true = defaults
            rows[method.name].append({**run.summary(optimum.tok_s, problem.gpus), "seed": fam.seed})
        if progress is not None:
            progress(f"member {fam.seed} done: {fam.summary}")
    results = {}
    for name, runs in rows.items():
        results[name] = {
            "summary": {
                "members": len(runs),
                "reached": sum(r["launches_to_2pct"] is not None for r in runs),
                "launches_to_2pct": spread([r["launches_to_2pct"] for r in runs]),
                "gpu_hours_to_2pct": spread([r["gpu_hours_to_2pct"] for r in runs]),
                "memory_death_rate": spread([r["memory_death_rate"] for r in runs]),
                "final_gap": spread([r["final_gap"] for r in runs]),
                "regret": regret_summary(runs, budget),
            },
            "runs": runs,
        }
    return {"paired": paired_regret(rows), "family_seeds": [first_seed, first_seed + count - 1], "case": case,
            "budget": budget, "launch_sd": launch_sd, "members": described, "methods": results}  # fmt: skip


def print_family_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 150))
    budget = report["budget"]
    first, last = report["family_seeds"]
    table = Table(
        title=f"Search efficiency over family members {first}..{last} ({last - first + 1} landscapes, "
        f"budget {budget} launches)",
        caption="median / 90th percentile / worst over members; >N = not reached in N launches. Memory deaths: "
        "launches that died of memory, as a share of launches (autotune and its random loop launch only what "
        "their feasibility model predicts fits). SIMULATED on generated twin profiles.",
    )
    for header in ("method", "launches to 2%", "GPU-h to 2%", "reached", "memory deaths", "final gap"):
        table.add_column(header, justify="left" if header == "method" else "right")
    for name, result in report["methods"].items():
        s = result["summary"]
        launches, hours = s["launches_to_2pct"], s["gpu_hours_to_2pct"]
        deaths, gap = s["memory_death_rate"], s["final_gap"]
        table.add_row(
            name,
            " / ".join(_fmt(launches[k], 0, budget) for k in ("median", "p90", "worst")),
            " / ".join(_fmt(hours[k], 2, budget) if hours[k] is not None else "—" for k in ("median", "p90", "worst")),
            f"{s['reached']}/{s['members']}",
            " / ".join(f"{deaths[k]:.0%}" for k in ("median", "p90", "worst")),
            " / ".join(f"{gap[k]:.1%}" for k in ("median", "p90", "worst")),
        )
    console.print(table)


# ---------------------------------------------------------------------------------------------
# A recorded real landscape (benchmarks/replay.py): launches drawn from the recorded ones


class RecordedSteps(StudyEvents):
    """Each finished trial of a replayed study as a step (launched when the launcher drew a launch)."""

    def __init__(self, run: Run, launcher: replay.RecordedLauncher) -> None:
        self.run, self.launcher, self.seen = run, launcher, 0

    def trial_finished(self, record: TrialRecord) -> None:
        launched = len(self.launcher.drawn) > self.seen
        self.seen = len(self.launcher.drawn)
        if record.confirm_of is not None:  # the race's relaunch: counted in the night, not a search step
            self.run.confirm_launches += launched
            return
        launch, true = self.launcher.drawn[-1] if launched else (None, None)
        self.run.steps.append(
            Step(launched=launched, outcome=record.outcome or "", flags=record.flags or None,
                 seconds=launch.launch_s + launch.measure_s + launch.stop_s if launch else 0.0,
                 measured=launch.value if launch else None, true=true)
        )  # fmt: skip


def run_recorded_study(
    problem: replay.RecordedProblem, seed: int, budget: int, *, sampler: SamplerName,
    rules_off: Collection[str] = (), confirm: bool = True, race_in_budget: bool = False,
    race_share: float = RACE_SHARE, finalists: int = FINALISTS,
) -> Run:  # fmt: skip
    """autotune's study loop (no baselines) on a recorded landscape, until ``budget`` launches;
    ``rules_off`` names pre-launch rules switched off; ``confirm``: race
    the finalists after the search as a study does, on a race budget of its own (the old replay's way)
    or, ``race_in_budget``, on the race's share of ``budget`` (the search spends the rest)."""
    run = Run(method=f"autotune ({sampler})", seed=seed)
    if not confirm:
        night = Night(trials=budget, top=0)
    elif race_in_budget:
        night = Night.of_launches(budget, baselines=0, top=finalists, share=race_share)
    else:
        night = Night.beyond(budget, baselines=0, top=finalists, share=race_share)
    budget = night.trials or budget  # the search's launches
    launcher = replay.RecordedLauncher(problem, random.Random(seed))
    with tempfile.TemporaryDirectory(prefix="autotune-replay-") as tmp:
        events = RecordedSteps(run, launcher)
        runner = study_runner(problem.space, Path(tmp), inventory=GpuInventory(driver_version="none", gpus=[]),
                              launcher=launcher, sampler=make_sampler(sampler, seed), events=events,
                              rules_off=rules_off, name="replay")  # fmt: skip

        def launch_budget(records: Sequence[TrialRecord]) -> str | None:
            if len(records) >= budget * TRIAL_CAP_FACTOR:
                return f"{len(records)} trials"
            return f"{budget} launches" if len(launcher.drawn) >= budget else None

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # The study's answer is its confirmed best (finalists launched again, as `autotune study`
            # does after its trials); those launches come after the search's and are not its steps.
            confirmation = run_night(runner, night, rules=[launch_budget]).confirmation
        if confirmation is not None:
            best = next(f for f in confirmation.finalists if f.trial == confirmation.best)
            run.confirmed_true = problem.true.get(best.config_key or "", 0.0)
            keys = {f.trial: f.config_key or "" for f in confirmation.finalists}
            count_claims(run, confirmation, lambda trial: problem.true.get(keys[trial], 0.0))
    return run


def run_recorded_random(problem: replay.RecordedProblem, seed: int, budget: int) -> Run:
    """Plain random search over the recorded grid: uniform draws, each launched."""
    run = Run(method="random search", seed=seed)
    rng, launcher = random.Random(10_000 + seed), replay.RecordedLauncher(problem, random.Random(seed))
    while len(run.steps) < budget:
        flags = _random_candidate(problem.axes, problem.space.fixed, rng)
        plan = problem.engine.normalise({k: v for k, v in flags.items() if v is not False})
        run.steps.append(replayed_step(launcher, launcher.draw(plan)))
    return run


def run_recorded_grid_once(problem: replay.RecordedProblem, seed: int) -> Run:
    """Every configuration of the recorded grid launched once, in a shuffled order: the launches to 2 %
    that selection by one measurement each allows, however good the search."""
    run = Run(method="every configuration once", seed=seed)
    rng, launcher = random.Random(20_000 + seed), replay.RecordedLauncher(problem, random.Random(seed))
    for key in rng.sample(sorted(problem.launches), len(problem.launches)):
        run.steps.append(replayed_step(launcher, launcher.draw_config(key), flags={"key": key}))
    return run


def replayed_step(
    launcher: replay.RecordedLauncher, launch: RecordedLaunch, *, flags: dict[str, Any] | None = None
) -> Step:
    """One recorded launch the launcher just drew, as a launched step with its configuration's true value."""
    seconds = launch.launch_s + launch.measure_s + launch.stop_s
    return Step(launched=True, outcome=launch.outcome, measured=launch.value, true=launcher.drawn[-1][1],
                seconds=seconds, flags=flags)  # fmt: skip


RECORDED_NAMES = {"autotune": REFERENCE, "random-runner": "random (autotune loop)"}


def recorded_regret(
    path: Path, *, seeds: Sequence[int], budget: int | None, method_names: Sequence[str],
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The night's answer on a recorded landscape, per method (autotune and its random loop race inside
    the night, the grid's size by default; the peers and bounds of :mod:`benchmarks.peers`)."""
    from benchmarks import peers

    problem = replay.load_problem(path)
    budget = budget or len(problem.launches)
    nights: dict[tuple[str, int], Run] = {}

    def study(sampler: SamplerName, seed: int) -> Run:
        if (sampler, seed) not in nights:
            nights[sampler, seed] = run_recorded_study(problem, seed, budget, sampler=sampler, race_in_budget=True)
        return nights[sampler, seed]

    plays: dict[str, Callable[[int], Run]] = {
        "autotune": lambda seed: study("tpe", seed),
        "random-runner": lambda seed: study("random", seed),
        "bound-perfect-race": lambda seed: peers.perfect_race(study("tpe", seed)),
        "bound-oracle-finalists": lambda seed: peers.recorded_oracle_finalists(problem, seed, budget),
        **{name: (lambda seed, play=play: play(peers.recorded_bench(problem, seed), seed, budget))
           for name, play in peers.PEERS.items()},
    }  # fmt: skip
    unknown = [m for m in method_names if m not in plays]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown} for --recorded; known: {sorted(plays)}")
    defaults = peers.recorded_bench(problem, 0).defaults_true
    by_method: dict[str, list[dict[str, Any]]] = {}
    for name in method_names:
        rows = []
        for seed in seeds:
            run = plays[name](seed)
            run.defaults_true = defaults
            rows.append({**run.summary(problem.optimum, 1), "seed": seed})
        by_method[RECORDED_NAMES.get(name, name)] = rows
        if progress is not None:
            progress(f"{path.stem}: {name} done")
    return {"recorded": str(path), "name": problem.recorded.name, "hardware": problem.recorded.machine.hardware,
            "configs": len(problem.launches), "budget": budget, "optimum": problem.optimum, "seeds": list(seeds),
            "defaults_tok_s": defaults, "paired": paired_regret(by_method),
            "methods": {name: {"summary": {"regret": regret_summary(rows, budget)}, "runs": rows}
                        for name, rows in by_method.items()}}  # fmt: skip


def recorded_benchmark(path: Path, *, seeds: int, budget: int | None = None) -> dict[str, Any]:
    """autotune and random search on a recorded landscape; the budget defaults to the grid's size."""
    problem = replay.load_problem(path)
    budget = budget or len(problem.launches)
    runs = {
        "autotune (TPE, default)": [run_recorded_study(problem, s, budget, sampler="tpe") for s in range(seeds)],
        "random (autotune loop)": [run_recorded_study(problem, s, budget, sampler="random") for s in range(seeds)],
        "random search": [run_recorded_random(problem, s, budget) for s in range(seeds)],
    }
    results = {}
    for name, method_runs in runs.items():
        rows = [{**r.summary(problem.optimum, 1), "seed": r.seed} for r in method_runs]
        confirmed = [r["confirmed_gap"] for r in rows if r["confirmed_gap"] is not None]
        results[name] = {"summary": {"seeds": seeds, "reached": sum(r["launches_to_2pct"] is not None for r in rows),
                                     "launches_to_2pct": spread([r["launches_to_2pct"] for r in rows]),
                                     "final_gap": spread([r["final_gap"] for r in rows]),
                                     "confirmed_gap": spread(confirmed) if confirmed else None,
                                     "confirmed_within_2pct": sum(g <= WITHIN for g in confirmed)},
                         "runs": rows}  # fmt: skip
    return {"recorded": str(path), "name": problem.recorded.name, "hardware": problem.recorded.machine.hardware,
            "configs": len(problem.launches), "grid_points": len(problem.recorded.configs), "budget": budget,
            "optimum": problem.optimum, "methods": results}  # fmt: skip


def print_recorded_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    budget = report["budget"]
    table = Table(
        title=f"Search on the recorded landscape {report['name']} ({report['hardware']}): {report['configs']} distinct "
        f"configs, best mean {report['optimum']:.2f}; budget {budget} launches",
        caption="launches until the best-so-far's mean is within 2 % of the best config's (median / 90th percentile "
        "/ worst over seeds); final gap: of the highest single measurement's config at the budget; confirmed: of "
        "the config the study confirms after the budget (its top 3 launched twice more). Each launch replays one "
        "recorded launch of its config.",
    )
    for header in ("method", "launches to 2%", "reached", "final gap", "confirmed gap", "confirmed within 2%"):
        table.add_column(header, justify="left" if header == "method" else "right")
    for name, result in report["methods"].items():
        s = result["summary"]
        confirmed = s.get("confirmed_gap")
        table.add_row(name, " / ".join(_fmt(s["launches_to_2pct"][k], 0, budget) for k in ("median", "p90", "worst")),
                      f"{s['reached']}/{s['seeds']}",
                      " / ".join(f"{s['final_gap'][k]:.1%}" for k in ("median", "p90", "worst")),
                      " / ".join(f"{confirmed[k]:.1%}" for k in ("median", "p90", "worst")) if confirmed else "-",
                      f"{s['confirmed_within_2pct']}/{s['seeds']}" if confirmed else "-")  # fmt: skip
    Console(width=max(Console().width, 130)).print(table)


def pool_reports(paths: Sequence[Path]) -> dict[str, Any]:
    """Family reports of the same methods and night run apart (members split over processes) as one:
    every member's runs pooled, the regret summary and the paired intervals computed again."""
    reports = [json.loads(path.read_text()) for path in paths]
    budget = reports[0]["budget"]
    rows: dict[str, list[dict[str, Any]]] = {}
    for report in reports:
        if report["budget"] != budget or set(report["methods"]) != set(reports[0]["methods"]):
            raise SystemExit(f"cannot pool {paths}: the nights or the methods differ")
        for name, result in report["methods"].items():
            rows.setdefault(name, []).extend(result["runs"])
    return {"pooled": [str(p) for p in paths], "budget": budget, "paired": paired_regret(rows),
            "members": [m for report in reports for m in report.get("members", [])],
            "methods": {name: {"summary": {"regret": regret_summary(runs, budget)}, "runs": runs}
                        for name, runs in rows.items()}}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--twin-profile", help="twin profile: a built-in name or a YAML path (with --space)")
    parser.add_argument("--space", help="search-space YAML file (with --twin-profile)")
    parser.add_argument("--family", type=int, default=None, metavar="N",
                        help="instead of one profile: N generated landscapes (benchmarks/family.py)")  # fmt: skip
    parser.add_argument("--family-seed", type=int, default=0, metavar="S", help="the first member's seed")
    parser.add_argument("--family-case", choices=["all", "tight", "tight-context", "issue-46"], default="all",
                        help="with --family: every case, tight members only, tight-context members only (issue 54), or "
                        "issue 46's landscape N times "
                        "(the seed then seeds the search)")  # fmt: skip
    parser.add_argument("--recorded", type=Path, default=None, metavar="FILE",
                        help="instead of a twin: a recorded real landscape (benchmarks/landscapes/*.json)")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--budget", type=int, default=None, help="launches per run (default 80; --recorded: the grid)")
    parser.add_argument("--json", type=Path, default=None, help="write the numbers here")
    parser.add_argument("--methods", default=None,
                        help="comma-separated: autotune, random-runner (both race inside the night), "
                        "peer-auto-benchmark, peer-spec-tuner, peer-tune-k, peer-llama-optimus, peer-one-at-a-time, "
                        "bound-perfect-race, bound-oracle-finalists, random, grid, tiered, tpe-startup2, "
                        "tpe-startup10, tpe-startup20, tpe-independent, gp, autotune-minus-RULE, "
                        "random-runner-minus-RULE (RULE a pre-launch rule) (default: "
                        f"{','.join(DEFAULT_METHODS)}; with --family {','.join(DEFAULT_FAMILY_METHODS)})")  # fmt: skip
    parser.add_argument("--per-tier", type=int, default=8, help="candidates per tier of the tiered grid")
    parser.add_argument("--noise", type=float, default=None, help="relative sd of a measurement (default: target/1.96)")
    parser.add_argument(
        "--launch-sd",
        type=float,
        default=None,
        help="relative sd of speed between launches (default: the profile's timing.launch_sd)",
    )
    parser.add_argument("--first-seed", type=int, default=0,
                        help="with --recorded and --methods: the first seed (seeds FIRST to FIRST+N-1)")  # fmt: skip
    parser.add_argument("--exhaustive", action="store_true", help="find the optimum by evaluating every candidate")
    parser.add_argument("--pool", type=Path, nargs="+", default=None, metavar="JSON",
                        help="instead of running: pool --family reports of the same methods and night, and print "
                        "the regret table over all their members")  # fmt: skip
    args = parser.parse_args(argv)
    progress = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    started = time.monotonic()
    if args.pool is not None:
        report = pool_reports(args.pool)
        print_regret_table(report, f"The night's answer over {len(report['members'])} members pooled from "
                           f"{len(args.pool)} reports, night {report['budget']} launches")  # fmt: skip
    elif args.recorded is not None and args.methods:
        report = recorded_regret(args.recorded, seeds=range(args.first_seed, args.first_seed + args.seeds),
                                 budget=args.budget, method_names=[m.strip() for m in args.methods.split(",")
                                                                   if m.strip()], progress=progress)  # fmt: skip
        report["wall_s"] = time.monotonic() - started
        print_regret_table(report, f"The night's answer on the recorded landscape {report['name']} "
                           f"({report['hardware']}), night {report['budget']} launches, seeds {args.first_seed}.."
                           f"{args.first_seed + args.seeds - 1}")  # fmt: skip
    elif args.recorded is not None:
        report = recorded_benchmark(args.recorded, seeds=args.seeds, budget=args.budget)
        print_recorded_table(report)
    elif args.family is not None:
        names = args.methods.split(",") if args.methods else DEFAULT_FAMILY_METHODS
        report = family_benchmark(args.family, args.family_seed, budget=args.budget or 80,
                                  method_names=[m.strip() for m in names if m.strip()], per_tier=args.per_tier,
                                  noise_rel=args.noise, launch_sd=args.launch_sd, progress=progress,
                                  case=args.family_case)  # fmt: skip
        report["wall_s"] = time.monotonic() - started
        print_family_table(report)
        print_regret_table(
            report,
            f"The night's answer over family members {args.family_seed}.."
            f"{args.family_seed + args.family - 1}, night {report['budget']} launches",
        )
    else:
        if args.twin_profile is None or args.space is None:
            parser.error("give --twin-profile and --space, or --family N")
        problem = load_problem(args.twin_profile, args.space, noise_rel=args.noise)
        problem.launch_sd = args.launch_sd if args.launch_sd is not None else problem.profile.timing.launch_sd
        solve(problem, exhaustive=args.exhaustive or None)
        names = args.methods.split(",") if args.methods else DEFAULT_METHODS
        report = benchmark(problem, seeds=args.seeds, budget=args.budget or 80,
                           method_names=[m.strip() for m in names if m.strip()], per_tier=args.per_tier,
                           progress=progress)  # fmt: skip
        report["wall_s"] = time.monotonic() - started
        print_table(report)
        print_regret_table(
            report, f"The night's answer on {report['profile']} ({args.seeds} seeds), night {report['budget']} launches"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
