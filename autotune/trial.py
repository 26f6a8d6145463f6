"""One candidate end to end: launch -> ready -> effective config -> measure -> stop -> outcome.

No Optuna in here, so ``autotune bench`` can reuse it. Whatever happens, the server is stopped
before :func:`run_trial` returns or raises, and the outcome says what happened and why.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from enum import Enum
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict, Field

from autotune.engines.base import EffectiveConfig, Engine, FailureKind, LaunchPlan
from autotune.errors import MeasurementError
from autotune.measure import Measurement, MeasureSettings, run_measurement
from autotune.server import ServerProcess, find_free_port
from autotune.workload import Suite

HOST = "127.0.0.1"


class OutcomeKind(str, Enum):
    OK = "ok"
    MEMORY_TOO_LOW = FailureKind.MEMORY_TOO_LOW.value
    MEMORY_TOO_HIGH = FailureKind.MEMORY_TOO_HIGH.value
    INVALID_CONFIG = FailureKind.INVALID_CONFIG.value
    LAUNCH_TIMEOUT = FailureKind.LAUNCH_TIMEOUT.value
    CRASHED = FailureKind.CRASHED.value
    MEASUREMENT_FAILED = "measurement-failed"

    @property
    def is_memory(self) -> bool:
        return self in (OutcomeKind.MEMORY_TOO_LOW, OutcomeKind.MEMORY_TOO_HIGH)

    @property
    def is_config_fault(self) -> bool:
        """The configuration itself is at fault (the sampler should learn to avoid it)."""
        return self.is_memory or self is OutcomeKind.INVALID_CONFIG


class TrialOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: OutcomeKind
    reason: str | None = None
    plan: LaunchPlan
    argv: list[str] = Field(default_factory=list)
    effective: EffectiveConfig | None = None
    measurement: Measurement | None = None
    log_path: Path | None = None
    launch_s: float = 0.0
    measure_s: float = 0.0
    stop_s: float = 0.0

    @property
    def objective(self) -> float | None:
        if self.measurement is None:
            return None
        metric = self.measurement.metric("decode_tok_s")
        return metric.value if metric else None


Phase = Callable[[str, str], None]


class TrialSetup(BaseModel):
    """What every trial of a study shares."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    launcher: list[str]
    model: str
    env: dict[str, str]
    suite: Suite
    measure: MeasureSettings
    launch_timeout_s: float
    stop_timeout_s: float
    records_dir: Path


def run_trial(
    engine: Engine, setup: TrialSetup, plan: LaunchPlan, *, log_path: Path, on_phase: Phase | None = None
) -> TrialOutcome:
    """Launch the plan's server, measure it, stop it."""

    def phase(name: str, detail: str = "") -> None:
        if on_phase is not None:
            on_phase(name, detail)

    port = find_free_port(HOST)
    argv = engine.build_argv(setup.launcher, model=setup.model, plan=plan, host=HOST, port=port)
    base_url = f"http://{HOST}:{port}"
    server = ServerProcess(argv, env=setup.env, log_path=log_path, records_dir=setup.records_dir)
    launch_started = time.monotonic()
    phase("launching", f"port {port}")
    with server, httpx.Client() as client:
        ready = server.wait_ready(lambda: engine.is_ready(client, base_url), timeout_s=setup.launch_timeout_s)
        launch_s = time.monotonic() - launch_started
        if not ready.ready:
            phase("stopping", "launch failed")
            stop_started = time.monotonic()
            server.stop(grace_s=setup.stop_timeout_s)
            failure = engine.classify_failure(
                exit_code=ready.exit_code, log_text=_read_log(log_path), timed_out=ready.timed_out
            )
            return TrialOutcome(
                kind=OutcomeKind(failure.kind.value),
                reason=failure.reason,
                plan=plan,
                argv=argv,
                log_path=log_path,
                launch_s=launch_s,
                stop_s=time.monotonic() - stop_started,
            )
        measure_started = time.monotonic()
        effective: EffectiveConfig | None = None
        measurement: Measurement | None = None
        error: str | None = None
        try:
            effective = engine.effective_config(client, base_url, plan)
            phase("measuring", f"{setup.measure.warmup_requests} warm-up + {setup.measure.requests} requests")
            measurement = asyncio.run(
                run_measurement(
                    engine,
                    base_url,
                    setup.suite,
                    setup.measure,
                    on_request=lambda done, total: phase("measuring", f"request {done}/{total}"),
                )
            )
        except MeasurementError as exc:
            error = exc.message
        measure_s = time.monotonic() - measure_started
        phase("stopping", "")
        stop_started = time.monotonic()
        exit_code = server.poll()
        server.stop(grace_s=setup.stop_timeout_s)
        stop_s = time.monotonic() - stop_started
    if error is not None:
        kind = OutcomeKind.MEASUREMENT_FAILED
        if exit_code is not None:  # the server died under load: let its log say why
            failure = engine.classify_failure(exit_code=exit_code, log_text=_read_log(log_path), timed_out=False)
            kind, error = OutcomeKind(failure.kind.value), f"{failure.reason} ({error})"
        return TrialOutcome(
            kind=kind,
            reason=error,
            plan=plan,
            argv=argv,
            effective=effective,
            log_path=log_path,
            launch_s=launch_s,
            measure_s=measure_s,
            stop_s=stop_s,
        )
    return TrialOutcome(
        kind=OutcomeKind.OK,
        plan=plan,
        argv=argv,
        effective=effective,
        measurement=measurement,
        log_path=log_path,
        launch_s=launch_s,
        measure_s=measure_s,
        stop_s=stop_s,
    )


def _read_log(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
