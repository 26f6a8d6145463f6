"""``autotune bench``: measure a running server, or re-launch an exported profile and check it.

Reuses the trial (launch -> measure -> stop) without Optuna; a profile is checked against the
numbers it recorded, within their confidence intervals.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict

from autotune.engines import get_engine
from autotune.engines.base import LaunchPlan
from autotune.errors import AutotuneError, UserError
from autotune.measure.client import Measurement
from autotune.measure.protocol import MeasureSettings
from autotune.measure.suites import load_suite
from autotune.outcomes import OutcomeKind
from autotune.profile import Profile
from autotune.space import resolve_command
from autotune.trial import TrialSetup, measure_with_server_stats, run_trial


class Verdict(BaseModel):
    """Does a fresh measurement still meet what the profile recorded?"""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str
    recorded: float
    recorded_ci95: float | None
    measured: float
    measured_ci95: float | None
    meets: bool


def bench_url(
    engine_name: str, url: str, suite_ref: str, settings: MeasureSettings, *, api_key: str | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> Measurement:
    """Measure a server someone else started (nothing is launched or stopped)."""
    engine = get_engine(engine_name)
    base_url = url.rstrip("/")
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    with httpx.Client(headers=headers) as client:
        if not engine.is_ready(client, base_url):
            raise UserError(
                f"cannot reach a ready {engine_name} server at {base_url}", hint="is it running and healthy?"
            )
    suite = load_suite(suite_ref)
    if on_progress is not None:
        on_progress(f"measuring {base_url} (suite {suite_ref}, up to {settings.max_seconds:.0f} s)")
    return asyncio.run(
        measure_with_server_stats(engine, base_url, suite, settings, log=None, on_progress=on_progress, headers=headers)
    )


def compare(profile: Profile, measurement: Measurement) -> Verdict | None:
    """Meets when the new estimate reaches the recorded one, allowing for both intervals."""
    recorded = profile.metrics.get(measurement.objective)
    measured = measurement.metric(measurement.objective)
    if recorded is None or measured is None:
        return None
    slack = (recorded.ci95 or 0.0) + (measured.ci95 or 0.0)
    return Verdict(
        metric=measurement.objective,
        recorded=recorded.value,
        recorded_ci95=recorded.ci95,
        measured=measured.value,
        measured_ci95=measured.ci95,
        meets=measured.value + slack >= recorded.value,
    )


def bench_profile(
    profile: Profile, *, settings: MeasureSettings, suite_ref: str, workdir: Path,
    on_progress: Callable[[str, str], None] | None = None,
) -> Measurement:
    """Launch the profile's command, measure it with the given settings, stop it."""
    engine = get_engine(profile.engine)
    profile = profile.with_secrets(dict(os.environ))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    env = {k: v for k, v in profile.env.items() if v is not None}
    if profile.gpu_devices is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in profile.gpu_devices)
    setup = TrialSetup(
        launcher=resolve_command(profile.launcher),
        model=profile.model,
        env=env,
        suite=load_suite(suite_ref),
        measure=settings,
        concurrency_levels=[settings.concurrency],
        objective_concurrency=settings.concurrency,
        launch_timeout_s=1800,
        stop_timeout_s=30,
        records_dir=workdir / "servers",
    )
    plan = LaunchPlan(engine=profile.engine, flags=profile.flags)
    outcome = run_trial(engine, setup, plan, log_path=workdir / f"bench-{stamp}.log", on_phase=on_progress)
    if outcome.kind is not OutcomeKind.OK or outcome.measurement is None:
        raise AutotuneError(
            f"the profile's server did not measure: {outcome.kind.value}: {outcome.reason}", log_path=outcome.log_path
        )
    return outcome.measurement
