"""What users run instead of autotune, and the two bounds, each ending a night with one configuration.

Each peer is written from its tool's public description (the rows and their exact rules are fixed in
``benchmarks/results/regret-2026-12-05/README.md``): SGLang's ``auto_benchmark`` tiered grid, SGLang's
speculation tuner (PR 34839), vLLM's ``tune_speculative_k``, llama-optimus (Optuna TPE, two repeats)
and one knob at a time from the defaults. A knob a peer does not cover stays at the engine's default.
The bounds judge autotune's own night: ``perfect race`` (the truly best configuration its search
launched) and ``oracle finalists`` (its race given the landscape's true top three).

A peer sees a landscape through :class:`Bench` (a twin landscape or a recorded one), so the same
peer runs on both; its answer's true value is ``Run.confirmed_true``.
"""

from __future__ import annotations

import random
import statistics
import tempfile
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import optuna

from autotune.gpu import GpuInventory
from autotune.space import FlagValue
from autotune.study import make_sampler
from autotune.study.night import Night, run_night
from autotune.testing import study_runner
from benchmarks import replay
from benchmarks.axes import GridAxis
from benchmarks.grid_tools import tier_stage
from benchmarks.nights import (
    FINALISTS,
    LandscapeLauncher,
    RecordedSteps,
    StepRecorder,
    count_claims,
    launch_candidate,
    make_runner,
    replayed_step,
)
from benchmarks.problems import Problem, solve, twin_defaults, twin_defaults_true
from benchmarks.runs import Run, Step

SPEC_PREFIXES = ("speculative-", "spec-")
ALGORITHM_AXES = ("speculative-algorithm", "spec-type")
DRAFTER_AXES = (*ALGORITHM_AXES, "speculative-draft-model-path", "spec-draft-model")
OFF = (False, "none", None)
SPEC_TUNER_LEVELS = 6  # draft-token counts the speculation tuner tries
ONE_AT_A_TIME_LEVELS = 5  # values of each knob the engineer tried by hand
OPTIMUS_TRIALS, OPTIMUS_REPEATS = 35, 2
TUNE_K_RUNS = 3  # at least this many runs of each K
TUNE_K_TIE = 0.01  # within 1 % of the best penalised score: tied, the smaller K wins


@dataclass
class Bench:
    """What a peer sees of a landscape: the grid, the engine's defaults, a drafter, one launch."""

    axes: list[GridAxis]
    fixed: dict[str, FlagValue]
    defaults: dict[str, FlagValue]
    drafter: dict[str, FlagValue]
    launch: Callable[[dict[str, FlagValue]], Step]
    defaults_true: float
    complete: bool = False  # a recorded grid: every axis that applies needs a value (its first: the default)

    def settle(self, flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
        """``flags`` with the axes whose condition fails left out (and, on a recording, the missing
        ones that apply at their first value), in the grid's order."""
        out = dict(self.fixed)
        for axis in self.axes:
            if not axis.applies(out):
                continue
            if axis.name in flags:
                out[axis.name] = flags[axis.name]
            elif self.complete:
                out[axis.name] = axis.values[0]
        return {k: v for k, v in out.items() if v is not False}

    def axis(self, *names: str) -> GridAxis | None:
        return next((a for a in self.axes if a.name in names), None)


def levels(values: Sequence[FlagValue], count: int) -> list[FlagValue]:
    """Up to ``count`` of ``values``, evenly spaced over the list, both ends included."""
    if len(values) <= count:
        return list(values)
    return [values[i] for i in sorted({round(j * (len(values) - 1) / (count - 1)) for j in range(count)})]


def twin_bench(problem: Problem, seed: int) -> Bench:
    """A twin landscape: launches with the measurement's noise and the profile's launch noise."""
    landscape, rng = problem.landscape(seed), random.Random(seed)
    return Bench(axes=problem.axes, fixed=dict(problem.space.fixed), defaults=twin_defaults(problem),
                 drafter=_drafter(problem.axes, [b.flags for b in problem.space.baselines]),
                 defaults_true=twin_defaults_true(problem),
                 launch=lambda candidate: launch_candidate(problem, landscape, rng, candidate))  # fmt: skip


def recorded_bench(problem: replay.RecordedProblem, seed: int) -> Bench:
    """A recorded landscape: each launch one recorded launch of the configuration (refused if unrecorded)."""
    launcher = replay.RecordedLauncher(problem, random.Random(seed))

    def launch(flags: dict[str, FlagValue]) -> Step:
        key = problem.key(flags)
        if key is None or key not in problem.launches:
            return Step(launched=True, outcome="invalid", true=0.0, flags=flags)
        return replayed_step(launcher, launcher.draw_config(key), flags=flags)

    bench = Bench(axes=problem.axes, fixed=dict(problem.recorded.fixed), defaults={}, complete=True,
                  drafter=_drafter(problem.axes, []), launch=launch, defaults_true=0.0)  # fmt: skip
    bench.defaults = bench.settle({})
    bench.defaults_true = problem.true.get(problem.key(bench.defaults) or "", 0.0)
    return bench


def _drafter(axes: Sequence[GridAxis], baselines: Sequence[dict[str, FlagValue]]) -> dict[str, FlagValue]:
    """The drafter flags of the first baseline that turns one on, else the algorithm axis's first on value."""
    for flags in baselines:
        if any(flags.get(name) not in OFF for name in ALGORITHM_AXES):
            return {k: v for k, v in flags.items() if k in DRAFTER_AXES}
    axis = next((a for a in axes if a.name in ALGORITHM_AXES), None)
    on = next((v for v in axis.values if v not in OFF), None) if axis is not None else None
    return {axis.name: on} if axis is not None and on is not None else {}


# ---------------------------------------------------------------------------------------------
# The peers: each returns its night (steps) and the true value of its pick


def _true(step: Step) -> float:
    return step.true or 0.0


def _night(name: str, seed: int) -> Run:
    return Run(method=name, seed=seed)


def _pick_highest(run: Run, bench: Bench) -> None:
    """The answer of a grid tool: the configuration of the highest single measurement (defaults if none served)."""
    served = [s for s in run.steps if s.measured is not None]
    run.confirmed_true = _true(max(served, key=lambda s: s.measured or 0.0)) if served else bench.defaults_true


def _launch_all(run: Run, bench: Bench, candidates: Iterator[dict[str, FlagValue]], budget: int) -> None:
    seen: set[tuple[tuple[str, FlagValue], ...]] = set()
    for candidate in candidates:
        if len(run.steps) >= budget:
            return
        flags = bench.settle(candidate)
        key = tuple(sorted(flags.items(), key=str))
        if key not in seen:
            seen.add(key)
            run.steps.append(bench.launch(flags))


def auto_benchmark(bench: Bench, seed: int, budget: int) -> Run:
    """SGLang ``auto_benchmark``'s tiered grid from the defaults: server flags, then speculation on the
    best; each tier half the night; one run each; the highest single measurement."""
    run = _night("peer-auto-benchmark", seed)
    stages = [[a for a in bench.axes if not a.name.startswith(SPEC_PREFIXES)],
              [a for a in bench.axes if a.name.startswith(SPEC_PREFIXES)]]  # fmt: skip
    base = dict(bench.defaults)
    for axes in stages:
        if not axes or len(run.steps) >= budget:
            continue
        before = len(run.steps)
        _launch_all(run, bench, tier_stage(base, axes, per_tier=max(budget // 2, 1), cartesian_keys=2), budget)
        served = [s for s in run.steps[before:] if s.measured is not None and s.flags is not None]
        if served:
            base = dict(max(served, key=lambda s: s.measured or 0.0).flags or {})
    _pick_highest(run, bench)
    return run


def spec_tuner(bench: Bench, seed: int, budget: int) -> Run:
    """SGLang's speculation tuner (PR 34839): draft tokens x topk, one relaunch each, the highest."""
    run = _night("peer-spec-tuner", seed)
    base = {**bench.defaults, **bench.drafter}
    draft = bench.axis("speculative-num-draft-tokens")
    topk = bench.axis("speculative-eagle-topk")
    steps = bench.axis("speculative-num-steps")
    block = bench.axis("speculative-dflash-block-size")
    n_max, p_min = bench.axis("spec-draft-n-max"), bench.axis("spec-draft-p-min")
    candidates: list[dict[str, FlagValue]] = []
    if base.get("speculative-algorithm") == "DFLASH" and block is not None:
        candidates = [{**base, block.name: v} for v in levels(block.values, SPEC_TUNER_LEVELS)]
    elif draft is not None and topk is not None:
        for k in topk.values:
            for tokens in levels(draft.values, SPEC_TUNER_LEVELS):
                flags = {**base, topk.name: k, draft.name: tokens}
                if steps is not None:  # a chain drafts steps + 1 tokens; a tree keeps the middle depth
                    chain = max(min(int(tokens) - 1, int(steps.values[-1])), int(steps.values[0]))  # type: ignore[arg-type]
                    flags[steps.name] = chain if k == 1 else steps.values[len(steps.values) // 2]
                candidates.append(flags)
    elif n_max is not None:
        candidates = [{**base, n_max.name: n, **({p_min.name: p} if p_min else {})}
                      for n in n_max.values for p in (p_min.values if p_min else (None,))]  # fmt: skip
    _launch_all(run, bench, iter(candidates), budget)
    _pick_highest(run, bench)
    return run


def tune_k(bench: Bench, seed: int, budget: int) -> Run:
    """vLLM ``tune_speculative_k``: a K grid (0 = no drafter), at least three runs of each in rounds,
    median minus one MAD, ties within 1 % of the best to the smaller K."""
    run = _night("peer-tune-k", seed)
    dflash = bench.drafter.get("speculative-algorithm") == "DFLASH"  # its K is the block it drafts
    length = (
        bench.axis("speculative-dflash-block-size")
        if dflash
        else bench.axis("speculative-num-steps", "spec-draft-n-max")
    )
    configs: list[tuple[int, dict[str, FlagValue]]] = [(0, bench.settle(bench.defaults))]
    if length is not None:
        topk = bench.axis("speculative-eagle-topk")
        for k in length.values:
            chain = {**bench.defaults, **bench.drafter, length.name: k, **({topk.name: 1} if topk else {})}
            configs.append((int(k), bench.settle(chain)))  # type: ignore[arg-type]
    configs = configs[: max(budget // TUNE_K_RUNS, 1)]
    runs = max(TUNE_K_RUNS, budget // len(configs))
    measured: dict[int, list[float]] = {k: [] for k, _ in configs}
    failed: set[int] = set()
    truth: dict[int, float] = {}
    for _ in range(runs):
        for k, flags in configs:
            if len(run.steps) >= budget:
                break
            step = bench.launch(flags)
            run.steps.append(step)
            truth[k] = _true(step)
            if step.measured is None:
                failed.add(k)  # a failed or incomplete run rejects its K
            else:
                measured[k].append(step.measured)
    scores = {}
    for k, values in measured.items():
        if values and k not in failed:
            middle = statistics.median(values)
            scores[k] = middle - statistics.median(abs(v - middle) for v in values)
    if not scores:
        run.confirmed_true = bench.defaults_true
        return run
    best = max(scores.values())
    chosen = min(k for k, score in scores.items() if score >= best * (1 - TUNE_K_TIE))
    run.confirmed_true = truth[chosen]
    return run


def llama_optimus(bench: Bench, seed: int, budget: int) -> Run:
    """llama-optimus: Optuna's TPE (its defaults) over every flag, 35 trials of two runs each cut to the
    night, a failed run counting 0; the best mean."""
    run = _night("peer-llama-optimus", seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=seed))
    truth: dict[int, float] = {}
    for _ in range(min(OPTIMUS_TRIALS, budget // OPTIMUS_REPEATS)):
        trial = study.ask()
        flags: dict[str, FlagValue] = dict(bench.fixed)
        for axis in bench.axes:
            if axis.applies(flags):
                flags[axis.name] = trial.suggest_categorical(axis.name, list(axis.values))  # type: ignore[arg-type]
        steps = [bench.launch(bench.settle(flags)) for _ in range(OPTIMUS_REPEATS)]
        run.steps.extend(steps)
        truth[trial.number] = _true(steps[0])
        study.tell(trial, statistics.fmean(s.measured or 0.0 for s in steps))
    run.confirmed_true = truth[study.best_trial.number] if truth else bench.defaults_true
    return run


def one_at_a_time(bench: Bench, seed: int, budget: int) -> Run:
    """By hand: from the defaults, each knob in the file's order at up to 5 values, one run each; the
    best of the knob is kept before the next; the answer is what is held at the end."""
    run = _night("peer-one-at-a-time", seed)
    held = bench.settle(bench.defaults)
    first = bench.launch(held)
    run.steps.append(first)
    best_value, best_true = first.measured or 0.0, _true(first)
    for axis in bench.axes:
        if not axis.applies(held):
            continue
        chosen = held
        for value in levels(axis.values, ONE_AT_A_TIME_LEVELS):
            # a drafter is one knob: its algorithm comes with its model
            with_drafter = bench.drafter if bench.drafter.get(axis.name) == value else {}
            flags = bench.settle({**held, **with_drafter, axis.name: value})
            if flags == held or len(run.steps) >= budget:
                continue
            step = bench.launch(flags)
            run.steps.append(step)
            if (step.measured or 0.0) > best_value:
                best_value, best_true, chosen = step.measured or 0.0, _true(step), flags
        held = chosen
    run.confirmed_true = best_true
    return run


PEERS: dict[str, Callable[[Bench, int, int], Run]] = {
    "peer-auto-benchmark": auto_benchmark,
    "peer-spec-tuner": spec_tuner,
    "peer-tune-k": tune_k,
    "peer-llama-optimus": llama_optimus,
    "peer-one-at-a-time": one_at_a_time,
}


# ---------------------------------------------------------------------------------------------
# The bounds


def perfect_race(night: Run) -> Run:
    """The truly best configuration autotune's search launched: what a perfect selection would name."""
    bound = Run(
        method="bound-perfect-race", seed=night.seed, steps=night.steps, confirm_launches=night.confirm_launches
    )
    bound.confirmed_true = max((s.true or 0.0 for s in night.steps if s.launched and s.measured is not None),
                               default=0.0)  # fmt: skip
    return bound


def oracle_finalists(problem: Problem, seed: int, budget: int) -> Run:
    """The product's race given the landscape's true top three and every baseline, each launched once
    first, on the race budget a night of ``budget`` leaves (:meth:`Night.of_launches`)."""
    run = Run(method="bound-oracle-finalists", seed=seed)
    optimum = solve(problem)
    baselines = len(problem.space.baselines)
    night = Night.of_launches(budget, baselines=baselines, top=FINALISTS)
    tuned = problem.space.tuned
    with tempfile.TemporaryDirectory(prefix="autotune-oracle-") as tmp:
        launcher = LandscapeLauncher(problem, problem.landscape(seed), random.Random(seed),
                                     launch_sd=problem.launch_sd, launch_rng=random.Random(20_000 + seed))  # fmt: skip
        runner = make_runner(problem, Path(tmp), sampler=make_sampler("random", seed), launcher=launcher,
                             events=StepRecorder(run, launcher))  # fmt: skip
        runner.enqueue_baselines()
        for _, flags in optimum.top:
            runner.study.enqueue_trial({k: v for k, v in flags.items() if k in tuned})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            searched = night.model_copy(update={"trials": baselines + len(optimum.top)})
            confirmation = run_night(runner, searched).confirmation
    if confirmation is not None:
        run.confirmed_true = run.steps[confirmation.best].true or 0.0
        count_claims(run, confirmation, lambda trial: run.steps[trial].true or 0.0)
    return run


def recorded_oracle_finalists(problem: replay.RecordedProblem, seed: int, budget: int) -> Run:
    """:func:`oracle_finalists` on a recording (no baselines): its three best configurations raced."""
    run = Run(method="bound-oracle-finalists", seed=seed)
    night = Night.of_launches(budget, baselines=0, top=FINALISTS)
    flags_of = {problem.key({**problem.recorded.fixed, **c.flags}): c.flags for c in problem.recorded.configs}
    best = sorted(problem.true, key=lambda k: -problem.true[k])[:FINALISTS]
    launcher = replay.RecordedLauncher(problem, random.Random(seed))
    with tempfile.TemporaryDirectory(prefix="autotune-oracle-") as tmp:
        runner = study_runner(problem.space, Path(tmp), inventory=GpuInventory(driver_version="none", gpus=[]),
                              launcher=launcher, sampler=make_sampler("random", seed),
                              events=RecordedSteps(run, launcher), name="oracle")  # fmt: skip
        for key in best:
            runner.study.enqueue_trial(dict(flags_of[key]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            confirmation = run_night(runner, night.model_copy(update={"trials": len(best)})).confirmation
    if confirmation is not None:
        chosen = next(f for f in confirmation.finalists if f.trial == confirmation.best)
        run.confirmed_true = problem.true.get(chosen.config_key or "", 0.0)
    return run
