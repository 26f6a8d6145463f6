"""The study runner with its surroundings stood in for: no launcher's ``--help``, no GPU reading, an
in-memory storage, an injected launcher; and the :class:`~autotune.trial.TrialOutcome` a simulated
launch returns."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

import optuna

from autotune.engines import get_engine
from autotune.engines.base import FlagSet, LaunchPlan, MemoryFacts
from autotune.gpu import GpuInventory
from autotune.measure.client import Measurement
from autotune.measure.statistics import Metric
from autotune.measure.suites import load_suite
from autotune.outcomes import OutcomeKind
from autotune.space import SearchSpace, resolve_command
from autotune.study import Launcher, Preflight, PreparedEngine, StudyEvents, StudyPaths, StudyRunner
from autotune.study.preflight_checks import checked_baselines
from autotune.trial import TrialOutcome

GIB = float(1 << 30)


def checked_space(space: SearchSpace, inventory: GpuInventory) -> Preflight:
    """What :func:`~autotune.study.preflight` returns for ``space``, without starting anything.

    Each engine's flag set is the space's own flag names (no launcher's ``--help`` is read, so every
    flag the space names is taken as accepted); its launcher is the space's command, resolved as
    preflight resolves it. The baselines are normalised by their engine's rules as preflight does
    them (an invalid one raises :class:`~autotune.errors.UserError`). ``inventory`` stands for the
    machine's GPUs: the space's ``gpus.devices`` are selected from it.
    """
    names = frozenset(space.all_flag_names())
    engines = {
        name: PreparedEngine(
            engine=get_engine(name),
            flag_set=FlagSet(flags=names | frozenset(space.flags_for(name))),
            launcher=resolve_command(space.launcher_for(name)),
        )
        for name in space.engine_names()
    }
    return Preflight(
        space=space,
        engines=engines,
        suite=load_suite(space.suite_path()),
        inventory=inventory.select(space.gpus.devices),
        baselines=checked_baselines(space, engines),
    )


def study_runner(
    space: SearchSpace,
    folder: Path,
    *,
    inventory: GpuInventory,
    launcher: Launcher | None,
    sampler: optuna.samplers.BaseSampler | None = None,
    events: StudyEvents | None = None,
    storage: optuna.storages.BaseStorage | None = None,
    early_stop: bool = True,
    rules_off: Collection[str] = (),
    name: str = "study",
) -> StudyRunner:
    """autotune's :class:`~autotune.study.StudyRunner` on ``space``, through its front door.

    Args:
        space: the search space.
        folder: the study's folder (logs and artifacts are written under it).
        inventory: the GPUs the study plans memory for (see :func:`checked_space`); they are never
            read again before a launch.
        launcher: turns each plan the runner decides to launch into its outcome; None launches real
            servers with the space's launcher (what the tests of the twin as a process do).
        sampler: None: the product's default (:func:`~autotune.study.make_sampler` "tpe", unseeded).
        events: the live view's hooks (e.g. a recorder of finished trials).
        storage: a fresh in-memory storage unless given (the storage does not change what is sampled).
        early_stop: stop measuring hopeless trials (the launcher is handed the bar).
        rules_off: names of pre-launch rules switched off (:data:`autotune.study.rules.RULE_NAMES`).
        name: the study's name in the storage.
    """
    paths = StudyPaths(folder, name)
    return StudyRunner(
        checked_space(space, inventory),
        name=paths.name,
        storage=storage or optuna.storages.InMemoryStorage(),
        paths=paths,
        launcher=launcher,
        read_gpus=None,
        sampler=sampler,
        events=events,
        early_stop=early_stop,
        rules_off=rules_off,
    )


def simulated_outcome(
    space: SearchSpace,
    plan: LaunchPlan,
    *,
    kind: OutcomeKind = OutcomeKind.OK,
    reason: str | None = None,
    tok_s: float | None = None,
    rounds: int = 1,
    ci95: float | None = None,
    accept_length: float | None = None,
    early_stopped: bool = False,
    stop_reason: str = "simulated",
    memory: MemoryFacts | None = None,
    gpu_peak_used_bytes: float | None = None,
    launch_s: float = 0.0,
    measure_s: float = 0.0,
    stop_s: float = 0.0,
) -> TrialOutcome:
    """What :func:`~autotune.trial.run_trial` would return for ``plan``, from a simulation's numbers:
    a launch that did not serve carries its reason, memory facts and timing and no measurement; one
    that served, ``rounds`` rounds at the objective concurrency that each measured ``tok_s``."""
    objective = space.objective
    if kind is not OutcomeKind.OK:
        return TrialOutcome(
            kind=kind,
            reason=reason,
            plan=plan,
            objective_concurrency=objective.concurrency,
            memory=memory,
            launch_s=launch_s,
            measure_s=measure_s,
            stop_s=stop_s,
        )
    if tok_s is None:
        raise ValueError("an outcome that served needs its measured rate (tok_s)")
    measurement = _simulated_measurement(
        space,
        tok_s=tok_s,
        rounds=rounds,
        ci95=ci95,
        accept_length=accept_length,
        early_stopped=early_stopped,
        stop_reason=stop_reason,
        measure_s=measure_s,
    )
    return TrialOutcome(
        kind=kind,
        reason=reason,
        plan=plan,
        measurements=[measurement],
        objective_concurrency=objective.concurrency,
        memory=memory,
        gpu_peak_used_bytes=gpu_peak_used_bytes,
        launch_s=launch_s,
        measure_s=measure_s,
        stop_s=stop_s,
    )


def _simulated_measurement(
    space: SearchSpace,
    *,
    tok_s: float,
    rounds: int,
    ci95: float | None,
    accept_length: float | None,
    early_stopped: bool,
    stop_reason: str,
    measure_s: float,
) -> Measurement:
    """One measurement at the space's objective concurrency whose every round measured ``tok_s``,
    standing for the objective metric (``ci95`` the half width of its 95 % interval); the accept length
    where given, and ``decode_tok_s`` where the objective is another metric."""
    objective, settings = space.objective, space.measurement
    metrics = [Metric(name=objective.metric, unit="tok/s", value=tok_s, n=rounds, ci95=ci95)]
    if accept_length is not None:
        metrics.append(Metric(name="accept_length", unit="tok/step", value=accept_length, n=rounds))
    if objective.metric != "decode_tok_s":
        metrics.append(Metric(name="decode_tok_s", unit="tok/s", value=tok_s, n=rounds))
    return Measurement(
        objective=objective.metric,
        concurrency=objective.concurrency,
        max_tokens_cap=settings.max_tokens,
        ignore_eos=settings.ignore_eos,
        warmup_requests=settings.warmup_requests,
        rounds=rounds,
        round_values=[tok_s] * rounds,
        precision_target=settings.target_rel_ci,
        precision_reached=True,
        stop_reason=stop_reason,
        steadiness=None,
        metrics=metrics,
        categories=[],
        duration_s=measure_s,
        requests=[],
        early_stopped=early_stopped,
    )


def memory_as_logged(
    *,
    weights_bytes: float | None = None,
    kv_pool_bytes: float | None = None,
    kv_tokens: int | None = None,
    graph_bytes: float | None = None,
    free_at_start_bytes: float | None = None,
    avail_after_pools_bytes: float | None = None,
    graph_batch: int | None = None,
) -> MemoryFacts | None:
    """A server's memory figures as an engine reads them from its log: sizes in GiB with two decimals.

    None where neither the weights nor the KV pool are known (the server died before logging them).
    """
    if weights_bytes is None and kv_pool_bytes is None:
        return None

    def logged(value: float | None) -> float | None:
        return round(value / GIB, 2) * GIB if value is not None else None

    return MemoryFacts(
        weights_bytes=logged(weights_bytes),
        kv_pool_bytes=logged(kv_pool_bytes),
        kv_tokens=kv_tokens,
        graph_bytes=logged(graph_bytes),
        free_at_start_bytes=logged(free_at_start_bytes),
        avail_after_pools_bytes=logged(avail_after_pools_bytes),
        graph_batch=graph_batch,
    )
