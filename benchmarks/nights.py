"""One night of one method, run on a landscape: autotune's own study loop through its front door with
the landscape answering each launch (:class:`LandscapeLauncher`, :func:`run_study`), a list of
candidates launched as given (:func:`run_candidates`), and the same on a recorded real landscape
(:func:`run_recorded_study`), each recorded as a :class:`~benchmarks.runs.Run`.
"""

from __future__ import annotations

import dataclasses
import random
import tempfile
import time
import warnings
from collections.abc import Callable, Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

import optuna

from autotune.engines.base import LaunchPlan, MemoryFacts
from autotune.gpu import GpuInventory
from autotune.measure.protocol import EarlyStop
from autotune.records import TrialRecord
from autotune.study import Launcher, StudyEvents, StudyRunner, make_sampler
from autotune.study.confirm import Confirmation
from autotune.study.night import Night, run_night
from autotune.study.race import RACE_SHARE
from autotune.study.sampler import SamplerName
from autotune.testing import memory_as_logged, simulated_outcome, study_runner
from autotune.trial import TrialOutcome
from autotune_twin.gpu_state import inventory
from benchmarks import replay
from benchmarks.axes import random_candidate
from benchmarks.landscape import Evaluation, Landscape
from benchmarks.problems import Problem
from benchmarks.recorded import RecordedLaunch
from benchmarks.runs import Run, Step
from passmodel.profile import TwinProfile

FINALISTS = 3  # the race's top configurations (``autotune study --confirm-top``), besides every baseline

# A sampler factory: seed -> sampler (None: the product's own make_sampler).
SamplerFactory = Callable[[int], optuna.samplers.BaseSampler] | None


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
    memory = _memory_facts(problem, evaluation)
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


def _memory_facts(problem: Problem, evaluation: Evaluation) -> MemoryFacts | None:
    """What the server would have logged about its memory (see :func:`autotune.testing.memory_as_logged`),
    with what the engine reads from the line its log ends with: an out-of-memory death's figures reach the
    study as they do from a real log."""
    logged = memory_as_logged(
        weights_bytes=evaluation.weights_bytes,
        kv_pool_bytes=evaluation.kv_pool_bytes,
        kv_tokens=evaluation.kv_tokens,
        graph_bytes=evaluation.graph_bytes,
        free_at_start_bytes=evaluation.server_free_bytes,
        avail_after_pools_bytes=evaluation.avail_after_pools_bytes,
        graph_batch=evaluation.graph_batch if evaluation.graph_bytes is not None else None,
    )
    last_line = problem.engine.memory_facts(evaluation.message) if evaluation.message else None
    if logged is None or last_line is None or last_line.oom_shortfall_bytes is None:
        return logged
    return logged.model_copy(update={"oom_shortfall_bytes": last_line.oom_shortfall_bytes})


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
                predicted=record.proposal.predicted.tok_s if record.proposal.predicted is not None else None,
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

        # The night ends as a study's does: at its launches, or at the study's own cap on proposals
        # (PROPOSALS_PER_LAUNCH a launch asked), which run_night's search applies.
        def launch_budget(records: Sequence[TrialRecord]) -> str | None:
            if until is not None and run.summary(until, 1)["launches_to_2pct"] is not None:
                return "within 2 %"
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


def launch_candidate(problem: Problem, landscape: Landscape, rng: random.Random, candidate: dict[str, Any]) -> Step:
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
        run.steps.append(launch_candidate(problem, landscape, rng, candidate))
    run.wall_s = time.monotonic() - started
    return run


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

        def launch_budget(records: Sequence[TrialRecord]) -> str | None:  # proposals capped as in run_study
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
        flags = random_candidate(problem.axes, problem.space.fixed, rng)
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
