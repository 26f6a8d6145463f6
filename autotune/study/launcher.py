"""The launch path every launch of a study takes, the search's and both races': the plan (with the
secret values storage never holds put back), the wait for idle GPUs, and the launcher that turns the
plan into an outcome. The real launcher starts each engine's server, measures it and stops it
through :func:`autotune.trial.run_trial`; tests and the search benchmark inject their own."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Protocol

from autotune.engines.base import LaunchPlan
from autotune.gpu import GpuInventory, check_idle, wait_for
from autotune.measure.agreement import Reference
from autotune.measure.protocol import EarlyStop
from autotune.records import TrialRecord
from autotune.secrets import is_secret_flag
from autotune.space import FlagValue, SearchSpace
from autotune.study.paths import StudyPaths
from autotune.study.preflight_checks import Preflight
from autotune.trial import Phase, TrialOutcome, TrialSetup, run_trial

ReadGpus = Callable[[], GpuInventory]


class Launcher(Protocol):
    """Turns a plan into an outcome: launch, measure, stop (the real one is :func:`run_trial`)."""

    def __call__(
        self, plan: LaunchPlan, log_path: Path, phase: Phase, early_stop: EarlyStop | None = None
    ) -> TrialOutcome: ...


def trial_launcher(
    checked: Preflight, paths: StudyPaths, read_gpus: ReadGpus | None, reference: Callable[[], Reference | None]
) -> Launcher:
    """The real launcher: each engine's server started, measured and stopped by :func:`run_trial`."""
    space = checked.space
    env = dict(space.env)
    if space.gpus.devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in space.gpus.devices)
    setups = {
        name: TrialSetup(
            launcher=prepared.launcher,
            model=space.model,
            env=env,
            suite=checked.suite,
            measure=space.measure_settings(),
            concurrency_levels=space.measurement.concurrency,
            objective_concurrency=space.objective.concurrency,
            launch_timeout_s=space.launch.timeout_s,
            stop_timeout_s=space.launch.stop_timeout_s,
            records_dir=paths.servers,
            read_gpus=read_gpus,
            release_timeout_s=space.gpus.release_timeout_s,
            agreement=space.measurement.agreement,
            reference=reference,
        )
        for name, prepared in checked.engines.items()
    }

    def launch(plan: LaunchPlan, log_path: Path, phase: Phase, early_stop: EarlyStop | None = None) -> TrialOutcome:
        setup = setups[plan.engine]
        if early_stop is not None:
            setup = setup.model_copy(update={"measure": setup.measure.model_copy(update={"early_stop": early_stop})})
        return run_trial(checked.engines[plan.engine].engine, setup, plan, log_path=log_path, on_phase=phase)

    return launch


def with_secrets(flags: Mapping[str, FlagValue], fixed: Mapping[str, FlagValue]) -> dict[str, FlagValue]:
    """``flags`` as storage holds them, with the secret values it never held put back from the space."""
    return {**flags, **{name: value for name, value in fixed.items() if is_secret_flag(name) and name in flags}}


def launched_plan(record: TrialRecord, space: SearchSpace) -> LaunchPlan:
    """What ``record`` launched, to launch it again exactly."""
    return LaunchPlan(engine=record.engine or space.engine, flags=with_secrets(record.flags, space.fixed))


def wait_for_idle_gpus(
    checked: Preflight, read_gpus: ReadGpus | None, phase: Phase | None = None
) -> tuple[str | None, float]:
    """Wait (at most the space's ``busy_wait_s``) until the GPUs are as idle as at the study's start:
    why they are not (None once idle), and the seconds waited. Never launch onto busy GPUs."""
    if read_gpus is None or checked.inventory is None:
        return None, 0.0
    if phase is not None:
        phase("waiting", "for idle GPUs")
    inventory = checked.inventory
    verdict, waited = wait_for(
        read_gpus, lambda now: check_idle(now, inventory), timeout_s=checked.space.gpus.busy_wait_s
    )
    return (None if verdict.idle else verdict.reason), waited
