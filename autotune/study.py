"""The study: Optuna storage, sampler, baselines, duplicates, constraints, artifacts, resume.

This is the one place where Optuna's loose user-attr dicts meet autotune's models: outcomes are
written as user attrs here (:func:`record_outcome`) and read back as :class:`TrialRecord`
(:func:`trial_record`). Every outcome is written to storage before anything propagates.

Optuna conventions (shared/optuna.md): a configuration that cannot run (memory, invalid flags) is a
COMPLETE trial with value 0.0 and a positive constraint, so every sampler learns from it; FAIL is
kept for faults of the infrastructure (crash, timeout, interruption).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import socket
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import optuna
import sqlalchemy
from optuna.artifacts import FileSystemArtifactStore, upload_artifact
from optuna.trial import FrozenTrial, TrialState
from pydantic import RootModel

from autotune.engines import get_engine
from autotune.engines.base import Engine, FlagSet, InvalidConfig, LaunchPlan
from autotune.errors import StorageError, UserError
from autotune.feasibility import FeasibilityModel, HeadroomUse, Prediction, headroom_use, model_weight_bytes
from autotune.gpu import GpuInventory, Roofline, check_idle, read_inventory, roofline, wait_for
from autotune.measure import Measurement, MeasureSettings
from autotune.outcomes import MemorySide as Side
from autotune.outcomes import OutcomeKind
from autotune.profile import Profile, ProfileMetric, redact_env
from autotune.records import TrialRecord
from autotune.server import reap_orphans
from autotune.space import (
    Baseline,
    Candidate,
    SearchSpace,
    SLOSpec,
    baseline_params,
    is_secret_name,
    resolve_command,
    suggest,
)
from autotune.stopping import NoImprovement, StopRule, TimeBudget, TotalTrials, first_reason
from autotune.trial import TrialOutcome, TrialSetup, run_trial
from autotune.workload import Suite, load_suite

SamplerName = Literal["tpe", "random"]
CONSTRAINT_KEYS = ("memory", "config")
DEFAULT_STUDIES_DIR = Path("studies")
DUPLICATE_POLL_S = 2.0
LAUNCH_TIME = "launch time [s]"
MEASURE_TIME = "measure time [s]"

# Optuna would print a traceback per failed trial; autotune reports every trial itself.
optuna.logging.set_verbosity(optuna.logging.ERROR)


MeasurementList = RootModel[list[Measurement]]
MEMORY_OUTCOMES: dict[Side, str] = {"too-low": "infeasible-memory-low", "too-high": "infeasible-memory-high"}
MEMORY_SIDES: dict[str, Side] = {
    **{kind: side for side, kind in MEMORY_OUTCOMES.items()},
    **{f"predicted-{kind}": side for side, kind in MEMORY_OUTCOMES.items()},
}


class TrialFault(Exception):
    """A trial failed for a reason that says nothing about its configuration (becomes FAIL)."""


# ---------------------------------------------------------------- durations and places


_DURATION = re.compile(r"(\d+(?:\.\d+)?)\s*([smhd])")


def parse_duration(text: str) -> float:
    """``90s``, ``30m``, ``8h``, ``1h30m`` or plain seconds -> seconds."""
    text = text.strip().lower()
    try:
        return float(text)
    except ValueError:
        pass
    parts = _DURATION.findall(text)
    if not parts or _DURATION.sub("", text).strip():
        raise UserError(f"cannot read duration {text!r}; write e.g. 90s, 30m, 8h or 1h30m")
    scale = {"s": 1, "m": 60, "h": 3600, "d": 86400}
    return sum(float(n) * scale[u] for n, u in parts)


@dataclass(frozen=True)
class StudyPaths:
    """Where a study keeps its files: ``<dir>/<name>.db`` and the folder ``<dir>/<name>/``."""

    studies_dir: Path
    name: str
    artifacts_dir: Path | None = None

    @property
    def folder(self) -> Path:
        return self.studies_dir / self.name

    @property
    def default_storage(self) -> str:
        return f"sqlite:///{self.studies_dir / (self.name + '.db')}"

    @property
    def logs(self) -> Path:
        return self.folder / "logs"

    @property
    def artifacts(self) -> Path:
        return self.artifacts_dir or self.folder / "artifacts"

    @property
    def servers(self) -> Path:
        return self.folder / "servers"


def open_storage(url: str, *, heartbeat_s: int | None = None) -> optuna.storages.RDBStorage:
    """An RDB storage for any SQLAlchemy URL; SQLite waits for locks instead of failing.

    With ``heartbeat_s``, each running trial beats; a trial whose worker stopped beating for three
    intervals is failed by the next worker that asks for a trial, and its config retried once.
    """
    if url.startswith("sqlite:///"):
        Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        kwargs: dict[str, Any] = {"connect_args": {"timeout": 30}}
    else:
        kwargs = {"pool_pre_ping": True}
    for attempt in range(3):
        try:
            with warnings.catch_warnings():  # heartbeats are experimental in Optuna 5
                warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
                heartbeat: dict[str, Any] = {}
                if heartbeat_s:
                    heartbeat = {
                        "heartbeat_interval": heartbeat_s,
                        "grace_period": 3 * heartbeat_s,
                        "heartbeat_stale_trial_callback": optuna.storages.RetryHeartbeatStaleTrialCallback(max_retry=1),
                    }
                return optuna.storages.RDBStorage(url, engine_kwargs=kwargs, **heartbeat)
        except sqlalchemy.exc.IntegrityError:
            # Two workers creating a new database's tables at once: the loser finds them made.
            time.sleep(1.0 + attempt)
        except Exception as exc:  # SQLAlchemy raises many types; all mean "cannot open"
            message = str(exc).splitlines()[0] if str(exc) else ""
            raise StorageError(f"cannot open storage {url!r}: {type(exc).__name__}: {message}") from None
    raise StorageError(f"cannot open storage {url!r}: its tables could not be created")


def load_existing_study(name: str, storage_url: str) -> optuna.Study:
    storage = open_storage(storage_url)
    try:
        return optuna.load_study(study_name=name, storage=storage)
    except KeyError:
        names = [s.study_name for s in optuna.get_all_study_summaries(storage)]
        known = f"; studies there: {', '.join(names)}" if names else "; it holds no studies"
        raise StorageError(f"no study named {name!r} in {storage_url}{known}") from None


def measure_settings(space: SearchSpace) -> MeasureSettings:
    """The measurement protocol's settings from a space (concurrency is set per level)."""
    m = space.measurement
    return MeasureSettings(
        objective=space.objective.metric,
        concurrency=space.objective.concurrency,
        warmup_requests=m.warmup_requests,
        prompts_per_round=m.prompts_per_round,
        max_tokens=m.max_tokens,
        ignore_eos=m.ignore_eos,
        target_rel_ci=m.target_rel_ci,
        min_rounds=m.min_rounds,
        max_rounds=m.max_rounds,
        max_seconds=m.max_seconds,
        drift_tolerance=m.drift_tolerance,
        request_timeout_s=m.request_timeout_s,
    )


def make_sampler(name: SamplerName, seed: int | None) -> optuna.samplers.BaseSampler:
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # benchmarks/search_efficiency.py: baselines count as startup trials; modelling from the third
        # trial on and scoring 64 candidates reached 2% of the optimum in 3 launches instead of 8
        # (A6000 twin, 20 seeds) and never did worse on the other profiles.
        return optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=2, n_ei_candidates=64
        )


# ---------------------------------------------------------------- records read back


def trial_record(trial: FrozenTrial) -> TrialRecord:
    attrs = trial.user_attrs
    return TrialRecord(
        number=trial.number,
        state=trial.state.name,
        outcome=attrs.get("outcome", "interrupted" if trial.state is TrialState.FAIL else trial.state.name.lower()),
        reason=attrs.get("reason"),
        value=trial.value if trial.state is TrialState.COMPLETE else None,
        feasible=bool(attrs.get("feasible", False)),
        baseline=attrs.get("baseline"),
        duplicate_of=attrs.get("duplicate_of"),
        flags=attrs.get("flags", {}),
        effective=attrs.get("effective", {}),
        engine_version=attrs.get("engine_version"),
        argv=attrs.get("argv", []),
        metrics=attrs.get("metrics", {}),
        engine=attrs.get("engine"),
        roofline_share=attrs.get("roofline_share"),
        host=attrs.get("host"),
        gpus=attrs.get("gpus", []),
        launch_s=attrs.get(LAUNCH_TIME),
        measure_s=attrs.get(MEASURE_TIME),
    )


def best_record(study: optuna.Study) -> TrialRecord | None:
    """The best feasible measured trial (feasibility-aware, like ``study.best_trial``)."""
    records = [trial_record(t) for t in study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,))]
    feasible = [r for r in records if r.feasible and r.value is not None]
    return max(feasible, key=lambda r: r.value or 0.0) if feasible else None


def build_profile(study: optuna.Study, record: TrialRecord) -> Profile:
    """The exported profile of one measured trial."""
    stored = dict(study.user_attrs["space"])
    env: dict[str, str | None] = stored.pop("env", {})
    space = SearchSpace.model_validate(stored)
    metrics = {
        name: ProfileMetric(value=float(m["value"] or 0.0), unit=str(m["unit"]), ci95=m.get("ci95"), n=m.get("n"))  # type: ignore[arg-type]
        for name, m in record.metrics.items()
    }
    engine = record.engine or space.engine
    return Profile(
        study=study.study_name,
        trial=record.number,
        engine=engine,
        engine_version=record.engine_version,
        model=space.model,
        launcher=space.launcher_for(engine),
        flags=record.flags,
        env=env,
        gpu_devices=space.gpus.devices,
        gpus=study.user_attrs.get("gpus", []),
        simulated=bool(study.user_attrs.get("simulated", False)),
        suite=study.user_attrs.get("suite_ref", space.measurement.suite),
        measure=measure_settings(space),
        metrics=metrics,
    )


def record_outcome(trial: optuna.Trial, outcome: TrialOutcome) -> None:
    """Write an outcome's facts to the trial's user attrs (JSON-able, human-readable names)."""
    trial.set_user_attr("outcome", outcome.kind.value)
    if outcome.reason:
        trial.set_user_attr("reason", outcome.reason)
    trial.set_user_attr("feasible", outcome.kind is OutcomeKind.OK)
    trial.set_user_attr("config_key", outcome.plan.config_key)
    trial.set_user_attr("flags", outcome.plan.flags)
    if outcome.plan.notes:
        trial.set_user_attr("engine_rules_applied", outcome.plan.notes)
    if outcome.argv:
        trial.set_user_attr("argv", outcome.argv)
    if outcome.effective is not None:
        trial.set_user_attr("effective", outcome.effective.values)
        trial.set_user_attr("engine_version", outcome.effective.version)
    measurement = outcome.measurement
    if measurement is not None:
        record_measurement(trial, measurement)
    if len(outcome.measurements) > 1:
        trial.set_user_attr("by_concurrency", {str(m.concurrency): _rounded(m) for m in outcome.measurements})
    trial.set_user_attr(LAUNCH_TIME, round(outcome.launch_s, 2))
    trial.set_user_attr(MEASURE_TIME, round(outcome.measure_s, 2))
    trial.set_user_attr("stop time [s]", round(outcome.stop_s, 2))


def _rounded(measurement: Measurement) -> dict[str, float]:
    return {m.name: round(m.value, 3) for m in measurement.metrics}


def record_measurement(trial: optuna.Trial, measurement: Measurement) -> None:
    """Metrics with units, precision, steadiness, per-category numbers and the server's own figures."""
    metrics = {m.name: {"value": m.value, "unit": m.unit, "ci95": m.ci95, "n": m.n} for m in measurement.metrics}
    trial.set_user_attr("metrics", metrics)
    for m in measurement.metrics:
        trial.set_user_attr(f"{m.name} [{m.unit}]", round(m.value, 3))
    trial.set_user_attr("precision_reached", measurement.precision_reached)
    trial.set_user_attr("measurement_stop", measurement.stop_reason)
    trial.set_user_attr("rounds", measurement.rounds)
    if measurement.steadiness is not None:
        trial.set_user_attr("steady", measurement.steadiness.steady)
        trial.set_user_attr("drift", round(measurement.steadiness.drift, 4))
    categories = {}
    for c in measurement.categories:
        categories[c.category] = {
            "decode_tok_s": round(c.decode_tok_s.value, 2),
            "accept_length": round(c.accept_length.value, 3) if c.accept_length else None,
            "requests": c.requests,
        }
    trial.set_user_attr("categories", categories)
    if measurement.server is not None:
        trial.set_user_attr("server", measurement.server.model_dump(exclude_none=True))


def set_constraints(
    trial: optuna.Trial,
    slo: SLOSpec,
    *,
    memory: bool = False,
    config: bool = False,
    measured: Measurement | None = None,
) -> None:
    """Every key on every trial (GPSampler needs a stable count); > 0 means violated.

    SLO constraints are relative excess over the limit (0.1 = 10 % over); unmeasured trials get 0.
    """
    trial.set_constraint("memory", 1.0 if memory else 0.0)
    trial.set_constraint("config", 1.0 if config else 0.0)
    for name, limit in slo.limits().items():
        metric = measured.metric(name) if measured is not None else None
        trial.set_constraint(f"slo_{name}", (metric.value - limit) / limit if metric is not None else 0.0)


# ---------------------------------------------------------------- running a study


class StudyEvents:
    """Hooks the live view implements; the defaults do nothing."""

    def trial_started(self, number: int, candidate: Candidate) -> None: ...

    def phase(self, name: str, detail: str) -> None: ...

    def trial_finished(self, record: TrialRecord) -> None: ...


@dataclass(frozen=True)
class PreparedEngine:
    """One engine of a space, checked: its flag set read from its launcher's --help."""

    engine: Engine
    flag_set: FlagSet
    launcher: list[str]


@dataclass
class Preflight:
    """Everything checked before the first launch."""

    space: SearchSpace
    engines: dict[str, PreparedEngine]
    suite: Suite
    inventory: GpuInventory | None


def preflight(space: SearchSpace, *, read_gpus: bool = True) -> Preflight:
    """Check the space against every engine it names, without launching anything."""
    suite = load_suite(space.suite_path())
    engines: dict[str, PreparedEngine] = {}
    for name in space.engine_names():
        engine = get_engine(name)
        launcher = resolve_command(space.launcher_for(name))
        flag_set = engine.read_flag_set(launcher, env=space.env)
        engine.check_flags(space.flags_for(name), flag_set)
        engines[name] = PreparedEngine(engine=engine, flag_set=flag_set, launcher=launcher)
    for baseline in space.baselines:
        name, flags = space.split_engine({**space.fixed, **baseline.flags})
        try:
            engines[name].engine.normalise(flags)
        except InvalidConfig as exc:
            raise UserError(f"baseline {baseline.name!r}: {exc}") from None
    inventory = read_inventory(space.gpus) if read_gpus else None
    return Preflight(space=space, engines=engines, suite=suite, inventory=inventory)


class StudyRunner:
    """Runs (or resumes) one study of a search space."""

    def __init__(
        self,
        checked: Preflight,
        *,
        name: str,
        storage_url: str,
        paths: StudyPaths,
        sampler: SamplerName = "tpe",
        seed: int | None = None,
        events: StudyEvents | None = None,
        heartbeat_s: int | None = None,
    ) -> None:
        if checked.inventory is None:
            raise ValueError("a study needs the GPU inventory: run preflight with read_gpus=True")
        self.checked = checked
        self.inventory = checked.inventory
        self.space = checked.space
        self.engines = {name: prepared.engine for name, prepared in checked.engines.items()}
        self.name = name
        self.paths = paths
        self.events = events or StudyEvents()
        self.suite = checked.suite
        self.storage_url = storage_url
        self.heartbeat_s = heartbeat_s
        storage = open_storage(storage_url, heartbeat_s=heartbeat_s)
        self.study = optuna.create_study(
            study_name=name,
            storage=storage,
            direction="maximize",
            sampler=make_sampler(sampler, seed),
            load_if_exists=True,
        )
        self.artifact_store = FileSystemArtifactStore(str(self._mkdir(paths.artifacts)))
        env = dict(self.space.env)
        if self.space.gpus.devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(str(d) for d in self.space.gpus.devices)
        self.setups = {
            name: TrialSetup(
                launcher=prepared.launcher,
                model=self.space.model,
                env=env,
                suite=self.suite,
                measure=measure_settings(self.space),
                concurrency_levels=self.space.measurement.concurrency,
                objective_concurrency=self.space.objective.concurrency,
                launch_timeout_s=self.space.launch.timeout_s,
                stop_timeout_s=self.space.launch.stop_timeout_s,
                records_dir=paths.servers,
                read_gpus=lambda: read_inventory(self.space.gpus),
                release_timeout_s=self.space.gpus.release_timeout_s,
            )
            for name, prepared in checked.engines.items()
        }
        self.stop_reason: str | None = None
        self.baseline_inventory = self.inventory
        weight_bytes = self.space.gpus.model_bytes or model_weight_bytes(self.space.model)
        free = min((g.memory_free_bytes for g in self.inventory.gpus), default=None)
        total = min((g.memory_total_bytes for g in self.inventory.gpus), default=None)
        self.feasibility = {
            name: FeasibilityModel(engine.memory_rules, free_bytes=free, total_bytes=total, weight_bytes=weight_bytes)
            for name, engine in self.engines.items()
        }
        self._replay_memory()
        self.launch: Callable[[LaunchPlan, Path, Callable[[str, str], None]], TrialOutcome] = (
            lambda plan, log_path, phase: run_trial(
                self.engines[plan.engine], self.setups[plan.engine], plan, log_path=log_path, on_phase=phase
            )
        )

    @property
    def setup(self) -> TrialSetup:
        """The trial setup of a single-engine space."""
        (only,) = self.setups.values()
        return only

    @setup.setter
    def setup(self, value: TrialSetup) -> None:
        (name,) = self.setups
        self.setups[name] = value

    def _replay_memory(self) -> None:
        """A resumed study predicts with what its earlier launches taught."""
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)):
            model = self.feasibility.get(trial.user_attrs.get("engine", self.space.engine))
            if model is None:
                continue
            side = MEMORY_SIDES.get(trial.user_attrs.get("outcome", ""))
            flags = trial.user_attrs.get("flags", {})
            if side is not None and trial.user_attrs.get("duplicate_of") is None:
                model.observe(flags, side, trial=trial.number)
            weights = trial.user_attrs.get("memory_weights_gib")
            if isinstance(weights, (int, float)):
                model.observe_weights(weights * 2**30, flags=flags)
            graph = trial.user_attrs.get("memory_graph_gib")
            if isinstance(graph, (int, float)) and graph > 0:
                model.observe_graph(graph * 2**30, flags=flags, logged_batch=trial.user_attrs.get("memory_graph_batch"))
            runtime = trial.user_attrs.get("memory_runtime_gib")
            server_free = trial.user_attrs.get("memory_server_free_gib")
            if isinstance(server_free, (int, float)):
                model.observe_server_free(server_free * 2**30)
            if isinstance(runtime, (int, float)) and isinstance(server_free, (int, float)):
                model.observe_headroom(
                    HeadroomUse(
                        flags=flags,
                        server_free_bytes=server_free * 2**30,
                        runtime_bytes=runtime * 2**30,
                        trial=trial.number,
                    )
                )

    @staticmethod
    def _mkdir(path: Path) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        return path

    def _describe_study(self) -> None:
        attrs = {
            "engine": ", ".join(self.space.engine_names()),
            "model": self.space.model,
            "space_file": str(self.space.source) if self.space.source else None,
            "suite": self.suite.name,
            "suite_ref": self.space.suite_path(),
            "objective": f"{self.space.objective.metric} at concurrency {self.space.objective.concurrency}"
            " (higher is better)",
            "simulated": self.inventory.simulated,
            "gpus": [g.name for g in self.inventory.gpus],
            "driver_version": self.inventory.driver_version,
            "space": {**self.space.model_dump(mode="json"), "env": redact_env(self.space.env)},
        }
        for key, value in attrs.items():
            self.study.set_user_attr(key, value)
        try:  # the dashboard is an optional extra; without it the axis is just "Objective 0"
            import optuna_dashboard

            optuna_dashboard.set_objective_names(self.study, [f"{self.space.objective.metric} [tok/s]"])
        except ImportError:
            pass

    def recover(self) -> tuple[int, int]:
        """After a crash: kill orphaned servers, fail trials left RUNNING by a dead tuner on this host.

        With heartbeats on, Optuna fails stale trials itself (and retries them once), on any host.
        """
        killed = len(reap_orphans(self.paths.servers))
        failed = 0
        if self.heartbeat_s:
            return killed, failed
        host = socket.gethostname()
        storage = self.study._storage
        for trial in self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
            pid = trial.user_attrs.get("worker_pid")
            if trial.user_attrs.get("host") != host or not isinstance(pid, int) or _pid_alive(pid):
                continue
            storage.set_trial_user_attr(trial._trial_id, "outcome", "interrupted")
            storage.set_trial_user_attr(trial._trial_id, "reason", "the tuner running it died")
            storage.set_trial_state_values(trial._trial_id, TrialState.FAIL)
            failed += 1
        return killed, failed

    def requeue_interrupted(self) -> list[int]:
        """Queue again, once, the sampled configurations whose trial was interrupted (Ctrl-C, crash)."""
        trials = self.study.get_trials(deepcopy=False)
        retried = {t.user_attrs.get("retry_of") for t in trials}
        queued = []
        for trial in trials:
            if trial.state is not TrialState.FAIL or trial.user_attrs.get("outcome") != "interrupted":
                continue
            if trial.number in retried or trial.user_attrs.get("retry_of") is not None or not trial.params:
                continue
            if trial.user_attrs.get("baseline"):
                continue  # enqueue_baselines queues it again
            self.study.enqueue_trial(trial.params, user_attrs={"retry_of": trial.number})
            queued.append(trial.number)
        return queued

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """One worker at a time (several hosts: a PostgreSQL advisory lock; one host: a file lock)."""
        storage = self.study._storage
        engine = getattr(getattr(storage, "_backend", storage), "engine", None)
        if self.storage_url.startswith("postgresql") and engine is not None:
            key = int(hashlib.sha256(self.name.encode()).hexdigest()[:15], 16)
            with engine.connect() as conn:
                conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:key)"), {"key": key})
                try:
                    yield
                finally:
                    conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:key)"), {"key": key})
            return
        lock_path = self._mkdir(self.paths.folder) / "study.lock"
        with lock_path.open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def prepare(self) -> tuple[list[int], list[str]]:
        """Queue interrupted configs again and the baselines not yet measured, once across workers."""
        with self._exclusive():
            return self.requeue_interrupted(), self.enqueue_baselines()

    def enqueue_baselines(self) -> list[str]:
        """Enqueue each baseline once per study (a resumed study does not measure them again)."""
        present = {
            t.user_attrs.get("baseline")
            for t in self.study.get_trials(deepcopy=False)
            if t.state is not TrialState.FAIL or t.user_attrs.get("outcome") != "interrupted"
        }
        queued = []
        for baseline in self.space.baselines:
            if baseline.name in present:
                continue
            self.study.enqueue_trial(baseline_params(self.space, baseline), user_attrs={"baseline": baseline.name})
            queued.append(baseline.name)
        return queued

    def _baseline(self, trial: optuna.Trial) -> Baseline | None:
        name = trial.user_attrs.get("baseline")
        return next((b for b in self.space.baselines if b.name == name), None) if name else None

    def _find_duplicate(self, trial: optuna.Trial, key: str) -> FrozenTrial | None:
        """A finished trial with the same effective config; one still running elsewhere is awaited."""
        trial.set_user_attr("config_key", key)  # before launching, so other workers see it
        while True:
            running = False
            for other in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)):
                if other.number == trial.number or other.user_attrs.get("config_key") != key:
                    continue
                if other.state is TrialState.RUNNING:
                    running = other.number < trial.number  # the older one measures, the newer one waits
                elif other.user_attrs.get("duplicate_of") is None and other.user_attrs.get("outcome"):
                    return other
            if not running:
                return None
            self.events.phase("waiting", "for another worker measuring the same config")
            time.sleep(DUPLICATE_POLL_S)

    def objective(self, trial: optuna.Trial) -> float:
        trial.set_user_attr("host", socket.gethostname())
        trial.set_user_attr("worker_pid", os.getpid())
        trial.set_user_attr("gpus", [g.name for g in self.inventory.gpus])
        candidate = suggest(self.space, trial, self._baseline(trial))
        self.events.trial_started(trial.number, candidate)
        engine_name, flags = self.space.split_engine(candidate.flags)
        trial.set_user_attr("engine", engine_name)
        try:
            plan = self.engines[engine_name].normalise(flags)
        except InvalidConfig as exc:
            return self._finish_invalid(trial, candidate, str(exc))
        duplicate = self._find_duplicate(trial, plan.config_key)
        if duplicate is not None:
            return self._finish_duplicate(trial, plan, duplicate)
        prediction = self.feasibility[plan.engine].predict(plan.flags)
        if not prediction.feasible:
            return self._finish_predicted(trial, plan, prediction)
        self._wait_for_idle_gpus(trial, plan)
        log_path = self._mkdir(self.paths.logs) / f"trial-{trial.number:04d}.log"
        try:
            outcome = self.launch(plan, log_path, self.events.phase)
        except BaseException as exc:  # Ctrl-C, SIGTERM, bugs: say so in storage, then let it go
            trial.set_user_attr("outcome", "interrupted" if isinstance(exc, KeyboardInterrupt) else "error")
            trial.set_user_attr("reason", f"{type(exc).__name__}: {exc}".strip(": "))
            trial.set_user_attr("flags", plan.flags)
            raise
        outcome = self._redacted(outcome)
        record_outcome(trial, outcome)
        self._learn_memory(trial, outcome)
        self._upload_artifacts(trial, outcome)
        if outcome.kind is OutcomeKind.OK:
            set_constraints(trial, self.space.slo, measured=outcome.measurement)
            value = outcome.objective
            assert value is not None
            return value
        if outcome.kind.is_config_fault:
            set_constraints(trial, self.space.slo, memory=outcome.kind.is_memory, config=not outcome.kind.is_memory)
            return 0.0
        raise TrialFault(f"{outcome.kind.value}: {outcome.reason}")

    def _wait_for_idle_gpus(self, trial: optuna.Trial, plan: LaunchPlan) -> None:
        """Never launch onto busy GPUs: wait (bounded), else record the trial as skipped-busy."""
        read = self.setups[plan.engine].read_gpus
        if read is None:
            return
        self.events.phase("waiting", "for idle GPUs")
        verdict, waited = wait_for(
            read, lambda inv: check_idle(inv, self.baseline_inventory), timeout_s=self.space.gpus.busy_wait_s
        )
        if waited > 0:
            trial.set_user_attr("busy_wait_s", round(waited, 1))
        if not verdict.idle:
            trial.set_user_attr("outcome", "skipped-busy")
            trial.set_user_attr("reason", verdict.reason)
            trial.set_user_attr("flags", plan.flags)
            raise TrialFault(f"skipped-busy: {verdict.reason}")

    def _finish_predicted(self, trial: optuna.Trial, plan: LaunchPlan, prediction: Prediction) -> float:
        """Not launched: predicted not to fit; recorded as infeasible so the sampler learns it."""
        assert prediction.side is not None
        trial.set_user_attr("outcome", f"predicted-{MEMORY_OUTCOMES[prediction.side]}")
        trial.set_user_attr("reason", f"predicted without launching: {prediction.reason}")
        trial.set_user_attr("feasible", False)
        trial.set_user_attr("predicted_infeasible", True)
        trial.set_user_attr("flags", plan.flags)
        trial.set_user_attr("config_key", plan.config_key)
        if prediction.pool_bytes is not None:
            trial.set_user_attr("predicted_pool_gib", round(prediction.pool_bytes / 2**30, 2))
        set_constraints(trial, self.space.slo, memory=True)
        return 0.0

    def _learn_memory(self, trial: optuna.Trial, outcome: TrialOutcome) -> None:
        """Memory failures move the boundary; logged weights sharpen the estimate; record readings."""
        model = self.feasibility[outcome.plan.engine]
        side = MEMORY_SIDES.get(outcome.kind.value)
        if side is not None:
            model.observe(outcome.plan.flags, side, trial=trial.number)
        facts = outcome.memory
        if facts is not None:
            if facts.weights_bytes:
                model.observe_weights(facts.weights_bytes, flags=outcome.plan.flags)
            if facts.graph_bytes:
                model.observe_graph(facts.graph_bytes, flags=outcome.plan.flags, logged_batch=facts.graph_batch)
            for name, value in (("weights", facts.weights_bytes), ("kv_pool", facts.kv_pool_bytes),
                                ("graph", facts.graph_bytes)):  # fmt: skip
                if value is not None:
                    trial.set_user_attr(f"memory_{name}_gib", round(value / 2**30, 2))
            if facts.graph_batch is not None:
                trial.set_user_attr("memory_graph_batch", facts.graph_batch)
            if facts.free_at_start_bytes is not None:
                model.observe_server_free(facts.free_at_start_bytes)
                trial.set_user_attr("memory_server_free_gib", round(facts.free_at_start_bytes / 2**30, 3))
        use = self._headroom_use(trial, outcome)
        if use is not None:
            model.observe_headroom(use)
            trial.set_user_attr("memory_runtime_gib", round(use.runtime_bytes / 2**30, 3))
        if outcome.gpu_peak_used_bytes is not None:
            trial.set_user_attr("gpu_peak_used_gib", round(outcome.gpu_peak_used_bytes / 2**30, 2))
        if outcome.release_s is not None:
            trial.set_user_attr("memory_release_s", round(outcome.release_s, 2))
            trial.set_user_attr("memory_released", outcome.released)
        share = self._roofline(outcome)
        if share is not None:
            trial.set_user_attr("roofline_share", round(share.share, 3))
            trial.set_user_attr("ceiling_tok_s", round(share.ceiling_tok_s, 1))

    def _headroom_use(self, trial: optuna.Trial, outcome: TrialOutcome) -> HeadroomUse | None:
        """A served launch's run-time memory outside its graphs, from its log and the NVML peak."""
        facts, peak = outcome.memory, outcome.gpu_peak_used_bytes
        totals = [g.memory_total_bytes for g in self.inventory.gpus]
        if outcome.kind is not OutcomeKind.OK or facts is None or peak is None or not totals:
            return None
        if facts.free_at_start_bytes is None or facts.avail_after_pools_bytes is None or facts.graph_bytes is None:
            return None
        return headroom_use(
            outcome.plan.flags,
            server_free_bytes=facts.free_at_start_bytes,
            avail_after_pools_bytes=facts.avail_after_pools_bytes,
            graph_bytes=facts.graph_bytes,
            free_at_peak_bytes=min(totals) - peak,
            trial=trial.number,
        )

    def _roofline(self, outcome: TrialOutcome) -> Roofline | None:
        measurement = outcome.measurement
        bandwidth = min((g.bandwidth_bytes_per_s or 0 for g in self.inventory.gpus), default=0)
        weights = outcome.memory.weights_bytes if outcome.memory else None
        weights = weights or self.feasibility[outcome.plan.engine].weights_per_gpu(outcome.plan.flags)
        if measurement is None or not bandwidth or not weights:
            return None
        speed = measurement.metric("decode_tok_s")
        accept = measurement.metric("accept_length")
        contexts = [(r.prompt_tokens or 0) + r.completion_tokens / 2 for r in measurement.requests if r.round >= 0]
        if speed is None or not contexts:
            return None
        return roofline(
            decode_tok_s=speed.value,
            accept_length=accept.value if accept else None,
            weights_bytes_per_gpu=weights,
            kv_bytes_per_token_per_gpu=outcome.memory.kv_bytes_per_token if outcome.memory else None,
            mean_context_tokens=sum(contexts) / len(contexts),
            bandwidth_bytes_per_s=bandwidth,
        )

    def _finish_invalid(self, trial: optuna.Trial, candidate: Candidate, reason: str) -> float:
        trial.set_user_attr("outcome", OutcomeKind.INVALID_CONFIG.value)
        trial.set_user_attr("reason", f"engine rule: {reason}")
        trial.set_user_attr("feasible", False)
        trial.set_user_attr("flags", candidate.flags)
        set_constraints(trial, self.space.slo, config=True)
        return 0.0

    def _finish_duplicate(self, trial: optuna.Trial, plan: LaunchPlan, original: FrozenTrial) -> float:
        for key, value in original.user_attrs.items():
            if key not in ("baseline", "host", "worker_pid"):
                trial.set_user_attr(key, value)
        trial.set_user_attr("duplicate_of", original.number)
        trial.set_user_attr("flags", plan.flags)
        for key, value in original.constraints.items():
            trial.set_constraint(key, value)
        assert original.value is not None
        return original.value

    def _redacted(self, outcome: TrialOutcome) -> TrialOutcome:
        """Secret environment values never reach the stored reason or the log kept as an artifact."""
        secrets = [value for name, value in self.space.env.items() if is_secret_name(name) and value]
        if not secrets:
            return outcome
        if outcome.log_path is not None and outcome.log_path.exists():
            outcome.log_path.write_text(redact(outcome.log_path.read_text(errors="replace"), secrets))
        return outcome.model_copy(update={"reason": redact(outcome.reason, secrets) if outcome.reason else None})

    def _upload_artifacts(self, trial: optuna.Trial, outcome: TrialOutcome) -> None:
        if outcome.log_path is not None and outcome.log_path.exists():
            upload_artifact(
                artifact_store=self.artifact_store,
                file_path=str(outcome.log_path),
                study_or_trial=trial,
                mimetype="text/plain",
            )
        if outcome.measurements and outcome.log_path is not None:
            path = outcome.log_path.with_suffix(".measurement.json")
            path.write_text(MeasurementList(outcome.measurements).model_dump_json(indent=2))
            upload_artifact(
                artifact_store=self.artifact_store,
                file_path=str(path),
                study_or_trial=trial,
                mimetype="application/json",
            )

    def _after_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        # Another worker on this host may have died with its server running: clean up after it.
        reap_orphans(self.paths.servers)
        self.events.trial_finished(trial_record(trial))

    def run(
        self,
        *,
        trials: int | None,
        timeout_s: float | None,
        patience: int | None = None,
        total_trials: int | None = None,
    ) -> None:
        """Run trials until the trial count, the time budget, the patience rule or the study's
        total (counted across every worker) says stop."""
        self._describe_study()
        rules: list[StopRule] = []
        if timeout_s is not None:
            rules.append(TimeBudget(timeout_s))
        if patience is not None:
            rules.append(NoImprovement(patience))
        if total_trials is not None:
            rules.append(TotalTrials(total_trials))

        def check_rules(study: optuna.Study, trial: FrozenTrial) -> None:
            reason = first_reason(rules, records(study))
            if reason is not None:
                self.stop_reason = reason
                study.stop()

        self.study.optimize(
            self.objective,
            n_trials=trials,
            # Optuna's own timeout is the backstop; TimeBudget records the reason.
            timeout=timeout_s,
            catch=(TrialFault,),
            callbacks=[self._after_trial, check_rules],
        )
        if self.stop_reason is None:
            self.stop_reason = f"{trials} trials done" if trials else "time budget spent"
        self.study.set_user_attr("last_stop_reason", self.stop_reason)


def redact(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def records(study: optuna.Study) -> list[TrialRecord]:
    return [trial_record(t) for t in study.get_trials(deepcopy=False)]
