"""One candidate end to end: launch -> ready -> effective config -> measure -> stop -> outcome.

No Optuna in here, so ``autotune bench`` can reuse it. Whatever happens, the server is stopped
before :func:`run_trial` returns or raises, and the outcome says what happened and why.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Callable
from pathlib import Path

import httpx
from pydantic import BaseModel, ConfigDict, Field

from autotune.connection import server_client, sync_server_client
from autotune.engines.base import EffectiveConfig, Engine, LaunchPlan, MemoryFacts
from autotune.errors import MeasurementError
from autotune.gpu import IDLE_TOLERANCE_BYTES, Busy, GpuInventory, used_bytes, wait_for
from autotune.measure.agreement import PROMPTS, Agreement, AgreementSpec, OutputSample, Reference, compare
from autotune.measure.client import Measurement, greedy_texts, run_measurement
from autotune.measure.integrity import failed_check
from autotune.measure.protocol import MeasureSettings
from autotune.measure.suites import Suite
from autotune.outcomes import OutcomeKind
from autotune.secrets import auth_headers, secret_values
from autotune.server import ServerProcess, find_free_port

HOST = "127.0.0.1"


class TrialOutcome(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: OutcomeKind
    reason: str | None = None
    plan: LaunchPlan
    argv: list[str] = Field(default_factory=list)
    effective: EffectiveConfig | None = None
    measurements: list[Measurement] = Field(default_factory=list, description="one per concurrency level")
    objective_concurrency: int = 1
    log_path: Path | None = None
    launch_s: float = 0.0
    measure_s: float = 0.0
    stop_s: float = 0.0
    memory: MemoryFacts | None = Field(default=None, description="what the server logged about its memory")
    gpu_peak_used_bytes: float | None = Field(default=None, description="most memory in use, sampled while it ran")
    release_s: float | None = Field(default=None, description="time until the GPUs had their memory back")
    released: bool | None = None
    agreement: Agreement | None = Field(default=None, description="greedy outputs against the study's reference")

    @property
    def measurement(self) -> Measurement | None:
        """The measurement at the objective's concurrency."""
        return next((m for m in self.measurements if m.concurrency == self.objective_concurrency), None)

    @property
    def objective(self) -> float | None:
        measurement = self.measurement
        return measurement.value if measurement is not None else None


Phase = Callable[[str, str], None]


class TrialSetup(BaseModel):
    """What every trial of a study shares."""

    model_config = ConfigDict(extra="forbid", frozen=True, arbitrary_types_allowed=True)

    launcher: list[str]
    model: str
    env: dict[str, str]
    suite: Suite
    measure: MeasureSettings
    concurrency_levels: list[int] = Field(default=[1])
    objective_concurrency: int = 1
    launch_timeout_s: float
    stop_timeout_s: float
    records_dir: Path
    read_gpus: Callable[[], GpuInventory] | None = None
    release_timeout_s: float = 120.0
    agreement: AgreementSpec | None = None
    reference: Callable[[], Reference | None] | None = Field(default=None, description="the study's, read when needed")


PORT_ATTEMPTS = 3
LOG_TAIL_BYTES = 16_384  # what is read of a starting server's log, each readiness poll
EXIT_GRACE_S = 2.0


def run_trial(
    engine: Engine, setup: TrialSetup, plan: LaunchPlan, *, log_path: Path, on_phase: Phase | None = None
) -> TrialOutcome:
    """Launch the plan's server, measure it, stop it; on a port taken meanwhile, on another port.

    With ``setup.read_gpus``, the GPUs' memory is sampled when measuring starts and ends, and after
    the stop the trial waits (bounded) until the memory is released, so the next trial reads true.
    """
    read = setup.read_gpus
    before = used_bytes(read()) if read else None
    samples: list[float] = []
    sampled_phases: set[str] = set()

    def phase(name: str, detail: str) -> None:
        if read is not None and name in ("measuring", "stopping") and name not in sampled_phases:
            sampled_phases.add(name)
            samples.append(used_bytes(read()))
        if on_phase is not None:
            on_phase(name, detail)

    for _ in range(PORT_ATTEMPTS):
        outcome = _run_once(engine, setup, plan, log_path=log_path, on_phase=phase)
        if outcome.kind is not OutcomeKind.PORT_IN_USE:
            break
    log_text = _read_log(log_path)
    facts = engine.memory_facts(log_text)
    shortfall = engine.pool_shortfall(log_text) if outcome.kind.is_memory else None
    if shortfall is not None:
        facts = (facts or MemoryFacts()).model_copy(update={"shortfall": shortfall})
    update: dict[str, object] = {"memory": facts}
    if read is not None and before is not None:
        if on_phase is not None:
            on_phase("releasing", "waiting for the GPUs' memory")
        verdict, waited = wait_for(
            read,
            lambda inv: Busy(idle=used_bytes(inv) <= before + IDLE_TOLERANCE_BYTES),
            timeout_s=setup.release_timeout_s,
            poll_s=0.5,
        )
        update.update(gpu_peak_used_bytes=max(samples, default=before), release_s=waited, released=verdict.idle)
    return outcome.model_copy(update=update)


def _run_once(
    engine: Engine, setup: TrialSetup, plan: LaunchPlan, *, log_path: Path, on_phase: Phase | None
) -> TrialOutcome:
    def phase(name: str, detail: str = "") -> None:
        if on_phase is not None:
            on_phase(name, detail)

    port = find_free_port(HOST)
    argv = engine.build_argv(setup.launcher, model=setup.model, plan=plan, host=HOST, port=port)
    base_url = f"http://{HOST}:{port}"
    server = _server(setup, plan, argv, log_path)
    launch_started = time.monotonic()
    phase("launching", f"port {port}")
    headers = auth_headers(plan.flags)  # a server launched with --api-key wants it on every request
    launched = TrialOutcome(
        kind=OutcomeKind.OK, plan=plan, argv=argv, log_path=log_path, objective_concurrency=setup.objective_concurrency
    )
    with server, sync_server_client(headers=headers) as client:
        ready = server.wait_ready(
            lambda: engine.is_ready(client, base_url),
            timeout_s=setup.launch_timeout_s,
            failed=lambda: _lost_its_port(engine, log_path),
        )
        launched = launched.model_copy(update={"launch_s": time.monotonic() - launch_started})
        if not ready.ready:
            phase("stopping", "launch failed")
            stop_started = time.monotonic()
            server.stop(grace_s=setup.stop_timeout_s)
            failure = engine.classify_failure(
                exit_code=ready.exit_code, log_text=_read_log(log_path), timed_out=ready.timed_out
            )
            return launched.model_copy(
                update={"kind": failure.kind, "reason": failure.reason, "stop_s": time.monotonic() - stop_started}
            )
        measure_started = time.monotonic()
        effective, measurements, error = _measure_levels(
            engine, setup, plan, client, base_url, log_path, headers, phase
        )
        agreement = _check_outputs(setup, base_url, headers, phase) if error is None else None
        launched = launched.model_copy(update={"effective": effective, "measure_s": time.monotonic() - measure_started})
        phase("stopping", "")
        stop_started = time.monotonic()
        # A server that dropped the connection may take a moment to exit: give it that moment.
        exit_code = server.wait_exit(EXIT_GRACE_S) if error is not None else server.poll()
        server.stop(grace_s=setup.stop_timeout_s)
        launched = launched.model_copy(update={"stop_s": time.monotonic() - stop_started})
    if error is not None:
        kind, reason = _why_measuring_failed(engine, log_path, error, exit_code)
        return launched.model_copy(update={"kind": kind, "reason": reason})
    return _measured(launched, measurements, agreement)


def _measured(launched: TrialOutcome, measurements: list[Measurement], agreement: Agreement | None) -> TrialOutcome:
    """A launch that served and was measured: OK, or diverged where its greedy outputs departed."""
    diverged = agreement is not None and agreement.diverged
    return launched.model_copy(
        update={
            "kind": OutcomeKind.DIVERGED if diverged else OutcomeKind.OK,
            "reason": agreement.reason() if agreement is not None and diverged else None,
            "agreement": agreement,
            "measurements": measurements,
        }
    )


def _server(setup: TrialSetup, plan: LaunchPlan, argv: list[str], log_path: Path) -> ServerProcess:
    # The server may print its arguments (SGLang does, --api-key's value with them): its log never holds them.
    return ServerProcess(
        argv,
        env=setup.env,
        log_path=log_path,
        records_dir=setup.records_dir,
        secrets=secret_values(setup.env, plan.flags),
    )


def _measure_levels(
    engine: Engine,
    setup: TrialSetup,
    plan: LaunchPlan,
    client: httpx.Client,
    base_url: str,
    log_path: Path,
    headers: dict[str, str],
    phase: Callable[[str, str], None],
) -> tuple[EffectiveConfig | None, list[Measurement], str | None]:
    """The effective config, then one measurement per load level; the first measurement error stops it."""
    effective: EffectiveConfig | None = None
    measurements: list[Measurement] = []
    try:
        effective = engine.effective_config(client, base_url, plan)
        for level in setup.concurrency_levels:
            # A hopeless configuration is judged at the objective's level only.
            early_stop = setup.measure.early_stop if level == setup.objective_concurrency else None
            settings = setup.measure.model_copy(update={"concurrency": level, "early_stop": early_stop})
            measured = measure_with_server_stats(
                engine,
                base_url,
                setup.suite,
                settings,
                log=LogWindow(log_path),
                on_progress=functools.partial(_progress, phase, level),
                headers=headers,
            )
            measurements.append(asyncio.run(measured))
    except MeasurementError as exc:
        return effective, measurements, exc.message
    return effective, measurements, None


def _why_measuring_failed(engine: Engine, log_path: Path, error: str, exit_code: int | None) -> tuple[OutcomeKind, str]:
    """A measurement that failed: the server's death where it died (its log says why), a memory
    failure it logged while alive (the boundary the search must learn), else the error itself."""
    if exit_code is not None:
        failure = engine.classify_failure(exit_code=exit_code, log_text=_read_log(log_path), timed_out=False)
        return failure.kind, f"{failure.reason} ({error})"
    logged = engine.failure_in(_read_log(log_path))
    if logged is not None and logged.kind.is_memory:
        return logged.kind, f"{logged.reason} ({error})"
    return OutcomeKind.MEASUREMENT_FAILED, error


def _check_outputs(setup: TrialSetup, base_url: str, headers: dict[str, str], phase: Phase) -> Agreement | None:
    """The server's greedy texts on the fixed prompts against the study's reference; a failed check
    is noted, never a failed trial (the measurement stands)."""
    spec = setup.agreement
    if spec is None or not spec.enabled:
        return None
    phase("measuring", f"output check ({spec.prompts} prompts x {spec.tokens} tokens)")

    async def sample() -> list[str]:
        async with server_client(timeout_s=setup.measure.request_timeout_s, headers=headers) as client:
            return await greedy_texts(client, base_url, PROMPTS[: spec.prompts], tokens=spec.tokens)

    try:
        texts = asyncio.run(sample())
    except MeasurementError as exc:
        return Agreement(error=exc.message)
    reference = setup.reference() if setup.reference is not None else None
    return compare(OutputSample(key=spec.key, texts=texts), reference)


def _progress(phase: Phase | Callable[[str, str], None], level: int, text: str) -> None:
    phase("measuring", f"concurrency {level}: {text}")


class LogWindow:
    """The part of a log file written after :meth:`mark` (the server's lines during measurement)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def mark(self) -> None:
        self.offset = self.path.stat().st_size if self.path.exists() else 0

    def read(self) -> str:
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                return handle.read().decode(errors="replace")
        except OSError:
            return ""


async def measure_with_server_stats(
    engine: Engine,
    base_url: str,
    suite: Suite,
    settings: MeasureSettings,
    *,
    log: LogWindow | None,
    on_progress: Callable[[str], None] | None = None,
    headers: dict[str, str] | None = None,
) -> Measurement:
    """Measure, and attach the server's own figures over the same window (log lines and /metrics)."""
    async with server_client(timeout_s=settings.request_timeout_s, headers=headers) as client:
        if log is not None:
            log.mark()
        try:
            before = await engine.scrape_metrics(client, base_url)
        except httpx.HTTPError:
            before = None
        measurement = await run_measurement(engine, base_url, suite, settings, client=client, on_progress=on_progress)
        try:
            after = await engine.scrape_metrics(client, base_url)
        except httpx.HTTPError:
            after = None
    stats = engine.server_stats(log_window=log.read() if log else "", metrics_before=before, metrics_after=after)
    measurement = measurement.model_copy(update={"server": stats})
    failed = failed_check(measurement)
    if failed is not None:
        raise MeasurementError(f"integrity check: {failed}")
    return measurement


def _lost_its_port(engine: Engine, log_path: Path) -> bool:
    """Whether the log's end says the port was taken: real SGLang then waits in its shutdown for
    minutes instead of exiting, and the launch timeout would pass before the retry on another port."""
    try:
        with log_path.open("rb") as log:
            log.seek(max(log_path.stat().st_size - LOG_TAIL_BYTES, 0))
            tail = log.read().decode(errors="replace")
    except OSError:
        return False
    failure = engine.failure_in(tail)
    return failure is not None and failure.kind is OutcomeKind.PORT_IN_USE


def _read_log(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""
