"""``autotune bench``: measure a running server, or re-launch an exported profile and check it.

Reuses the trial (launch -> measure -> stop) without Optuna; a profile is checked against the
figure it recorded, as a non-inferiority test (did the server get slower?): not slower by more than
a margin when the 95 % interval of the change lies above minus the margin, slower when the whole
interval lies below it, and not yet told when the interval holds it. A speculation schedule's
profile is checked at every load level it recorded, on one launch.
"""

from __future__ import annotations

import asyncio
import math
import os
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, computed_field

from autotune.connection import sync_server_client
from autotune.engines import get_engine
from autotune.engines.base import LaunchPlan
from autotune.errors import AutotuneError, UserError
from autotune.measure.client import Measurement
from autotune.measure.protocol import MeasureSettings
from autotune.measure.suites import load_suite
from autotune.outcomes import OutcomeKind
from autotune.profile import Profile
from autotune.space import resolve_command
from autotune.study.rounds import PRIOR_LAUNCH_NOISE
from autotune.trial import TrialSetup, measure_with_server_stats, run_trial


class VerdictCategory(str, Enum):
    """What a relaunch says about the recorded figure, one-sided: did the server get slower?"""

    NOT_SLOWER = "not-slower"
    SLOWER = "slower"
    CANNOT_TELL = "cannot-tell"

    @property
    def exit_code(self) -> int:
        """``bench --profile``'s exit code: 0 not slower, 1 slower, 3 cannot tell yet (2 is a user error)."""
        return {VerdictCategory.NOT_SLOWER: 0, VerdictCategory.SLOWER: 1, VerdictCategory.CANNOT_TELL: 3}[self]


class Verdict(BaseModel):
    """Does a fresh measurement still meet what the profile recorded? A non-inferiority test: not
    slower by more than ``margin`` when the 95 % interval of the change lies at or above ``-margin``,
    slower when the whole interval lies below it, and not yet told when the interval holds it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    metric: str
    recorded: float
    recorded_ci95: float | None
    measured: float
    measured_ci95: float | None
    launch_ci95: float = Field(description="what one launch varies from the next (95 %, the metric's unit)")
    launches: int | None = Field(description="the confirmed launches it was read off; None: the prior")
    margin: float = Field(description="relative: a drop within it is not slower")
    change: float = Field(description="measured / recorded - 1")
    low: float = Field(description="95 % interval of the change, low end")
    high: float

    @computed_field  # type: ignore[prop-decorator]
    @property
    def category(self) -> VerdictCategory:
        if self.low >= -self.margin:
            return VerdictCategory.NOT_SLOWER
        if self.high < -self.margin:
            return VerdictCategory.SLOWER
        return VerdictCategory.CANNOT_TELL

    def text(self) -> str:
        """The verdict in one sentence."""
        interval = f"{self.change:+.1%} ({self.low:+.1%} to {self.high:+.1%})"
        margin = f"{self.margin * 100:g}%"
        if self.category is VerdictCategory.SLOWER:
            return f"slower by {-self.change:.1%} (significant, beyond the {margin} margin): {interval}"
        if self.category is VerdictCategory.CANNOT_TELL:
            below = ", significantly slower but perhaps by less" if self.high < 0 else ""
            return f"cannot tell yet whether it is slower by more than {margin}: {interval}{below}; {self._settle()}"
        if self.low > 0:
            return f"not slower: faster by {self.change:.1%} (significant): {interval}"
        return f"not slower than recorded by more than {margin}: {interval}"

    def _settle(self) -> str:
        """What would narrow the interval enough: the largest of its three parts."""
        rounds, recorded = self.measured_ci95 or 0.0, self.recorded_ci95 or 0.0
        if rounds >= max(recorded, self.launch_ci95):
            return "more rounds (--max-rounds) would settle it"
        if recorded >= self.launch_ci95:
            return "confirming the profile over more launches (autotune confirm, then export) would settle it"
        noise = f"±{self.launch_ci95 / self.recorded:.1%}"
        if self.launches is None:
            return (
                f"confirming the profile (autotune confirm, then export) could settle it, measuring what one "
                f"launch varies by (taken as {noise} until then)"
            )
        narrow = "which more rounds do not narrow: only a wider --margin would settle it"
        return f"one launch varies by {noise} here, {narrow}"


def bench_url(
    engine_name: str,
    url: str,
    suite_ref: str,
    settings: MeasureSettings,
    *,
    api_key: str | None = None,
    on_progress: Callable[[str], None] | None = None,
) -> Measurement:
    """Measure a server someone else started (nothing is launched or stopped)."""
    engine = get_engine(engine_name)
    base_url = server_url(url)
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
    with sync_server_client(headers=headers) as client:
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


def server_url(url: str) -> str:
    """``--url`` as the client needs it: without a scheme (``localhost:30000``, as servers print their
    address) it means http; a scheme other than http or https is refused."""
    url = url.strip().rstrip("/")
    if "://" not in url:
        url = f"http://{url}"
    scheme = url.partition("://")[0]
    if scheme.lower() not in ("http", "https"):
        raise UserError(f"--url {url}: give an http:// or https:// address, not {scheme}://")
    return url


def compare(profile: Profile, measurement: Measurement, *, margin: float) -> Verdict | None:
    """The fresh figure against the recorded one. The difference's interval holds the recorded mean's
    own, the fresh launch's rounds', and what one launch varies from the next: read off a confirmed
    mean's interval (``n`` launches), else the prior for it (a single recorded launch says nothing)."""
    recorded = profile.metrics.get(measurement.objective)
    measured = measurement.metric(measurement.objective)
    if recorded is None or measured is None or not recorded.value:
        return None
    change = measured.value / recorded.value - 1
    launches = recorded.n if profile.confirmed_launches and recorded.ci95 else None
    if launches and recorded.ci95:
        launch_sd = recorded.ci95 * math.sqrt(launches) / 1.96
    else:
        launch_sd = PRIOR_LAUNCH_NOISE * recorded.value
    half = math.hypot(recorded.ci95 or 0.0, 1.96 * launch_sd, measured.ci95 or 0.0) / recorded.value
    return Verdict(
        metric=measurement.objective,
        recorded=recorded.value,
        recorded_ci95=recorded.ci95,
        measured=measured.value,
        measured_ci95=measured.ci95,
        launch_ci95=1.96 * launch_sd,
        launches=launches or None,
        margin=margin,
        change=change,
        low=change - half,
        high=change + half,
    )


def compare_levels(profile: Profile, measurements: list[Measurement], *, margin: float) -> dict[int, Verdict | None]:
    """Each level the profile recorded (a speculation schedule's) against the fresh launch's figure there."""
    fresh = {m.concurrency: m for m in measurements}
    verdicts: dict[int, Verdict | None] = {}
    for level in profile.levels:
        measured = fresh.get(level.concurrency)
        at_level = profile.model_copy(update={"metrics": level.metrics})
        verdicts[level.concurrency] = compare(at_level, measured, margin=margin) if measured is not None else None
    return verdicts


def levels_exit_code(verdicts: Iterable[Verdict | None]) -> int:
    """``bench --profile``'s exit code over a schedule's levels, the worst: 1 when any is slower or was
    not measured (None), else 3 when any cannot tell yet, else 0."""
    codes = {v.category.exit_code if v is not None else 1 for v in verdicts}
    return 1 if 1 in codes else max(codes, default=0)


def bench_profile(
    profile: Profile,
    *,
    settings: MeasureSettings,
    suite_ref: str,
    workdir: Path,
    on_progress: Callable[[str, str], None] | None = None,
) -> Measurement:
    """Launch the profile's command, measure it with the given settings, stop it."""
    return bench_profile_levels(
        profile,
        settings=settings,
        suite_ref=suite_ref,
        workdir=workdir,
        levels=[settings.concurrency],
        on_progress=on_progress,
    )[0]


def bench_profile_levels(
    profile: Profile,
    *,
    settings: MeasureSettings,
    suite_ref: str,
    workdir: Path,
    levels: list[int],
    on_progress: Callable[[str, str], None] | None = None,
) -> list[Measurement]:
    """Launch the profile's command once, measure it at each of ``levels`` (concurrency), stop it; a
    profile holding an adaptive config launches with its own copy of it, written into ``workdir``."""
    engine = get_engine(profile.engine)
    profile = profile.with_secrets(dict(os.environ)).with_adaptive_config_in(workdir)
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
        concurrency_levels=levels,
        objective_concurrency=settings.concurrency if settings.concurrency in levels else levels[0],
        launch_timeout_s=1800,
        stop_timeout_s=30,
        records_dir=workdir / "servers",
    )
    plan = LaunchPlan(engine=profile.engine, flags=profile.flags)
    outcome = run_trial(engine, setup, plan, log_path=workdir / f"bench-{stamp}.log", on_phase=on_progress)
    if outcome.kind is not OutcomeKind.OK or not outcome.measurements:
        raise AutotuneError(
            f"the profile's server did not measure: {outcome.kind.value}: {outcome.reason}", log_path=outcome.log_path
        )
    return sorted(outcome.measurements, key=lambda m: levels.index(m.concurrency) if m.concurrency in levels else 0)
