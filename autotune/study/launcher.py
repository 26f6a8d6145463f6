"""The study's launcher: what turns a plan into an outcome. The real one starts each engine's server,
measures it and stops it through :func:`autotune.trial.run_trial`; tests and the search benchmark
inject their own."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Protocol

from autotune.engines.base import LaunchPlan
from autotune.gpu import GpuInventory
from autotune.measure.agreement import Reference
from autotune.measure.protocol import EarlyStop
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
