"""Running a study: ask Optuna for a candidate, apply the engine's rules, predict memory, launch,
record, learn; until a stop rule fires.

The launcher (what turns a plan into a :class:`TrialOutcome`), the storage and the GPU reading are
injected, so the search benchmark and tests drive the same loop without servers or a database.

Optuna conventions (shared/optuna.md): a configuration that cannot run (memory, invalid flags) is a
COMPLETE trial with value 0.0 and a positive constraint, so every sampler learns from it; FAIL is
kept for faults of the infrastructure (crash, timeout, interruption). Every outcome is written to
storage before anything propagates.
"""

from __future__ import annotations

import json
import os
import socket
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.engines import get_engine
from autotune.engines.base import Engine, FlagSet, InvalidConfig, LaunchPlan
from autotune.errors import StorageError, UserError
from autotune.feasibility import FractionWindow
from autotune.gpu import GpuInventory, check_idle, read_inventory, wait_for
from autotune.measure.agreement import Reference
from autotune.measure.client import Measurement
from autotune.measure.protocol import EarlyStop
from autotune.measure.suites import Suite, load_suite
from autotune.outcomes import OutcomeKind, outcome_kind
from autotune.records import TrialRecord
from autotune.secrets import redact, redact_env, redact_flags, secret_values
from autotune.server import reap_orphans
from autotune.space import (
    Baseline,
    FloatParam,
    SearchSpace,
    SLOSpec,
    resolve_command,
    suggest,
)
from autotune.stopping import NoImprovement, RepeatedFailure, StopRule, TimeBudget, TotalTrials, first_reason
from autotune.study import attrs, recovery
from autotune.study.artifacts import artifact_store, upload
from autotune.study.confirm import Confirmation, best_first_measured, choose_finalists, confirm, measure_noise
from autotune.study.events import StudyEvents
from autotune.study.importance import compute_importance
from autotune.study.memory import feasibility_models, lesson_of, replay, roofline_of
from autotune.study.named_failures import named_values, predicted_failure
from autotune.study.paths import StudyPaths
from autotune.study.sampler import NeighbourSampler
from autotune.study.storage import exclusive, open_storage
from autotune.trial import Phase, TrialOutcome, TrialSetup, run_trial

SamplerName = Literal["tpe", "random"]
DUPLICATE_POLL_S = 2.0

ReadGpus = Callable[[], GpuInventory]


class Launcher(Protocol):
    """Turns a plan into an outcome: launch, measure, stop (the real one is :func:`run_trial`)."""

    def __call__(
        self, plan: LaunchPlan, log_path: Path, phase: Phase, early_stop: EarlyStop | None = None
    ) -> TrialOutcome: ...


class TrialFault(Exception):
    """A trial failed for a reason that says nothing about its configuration (becomes FAIL)."""


@dataclass(frozen=True)
class PreparedEngine:
    """One engine of a space, checked: its flag set read from its launcher's --help."""

    engine: Engine
    flag_set: FlagSet
    launcher: list[str]


@dataclass(frozen=True)
class CheckedBaseline:
    """A baseline of the space, normalised by its engine's rules (as it will be launched)."""

    name: str
    plan: LaunchPlan


@dataclass
class Preflight:
    """Everything checked before the first launch."""

    space: SearchSpace
    engines: dict[str, PreparedEngine]
    suite: Suite
    inventory: GpuInventory | None
    baselines: list[CheckedBaseline] = field(default_factory=list)


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
    baselines = []
    for baseline in space.baselines:
        name, flags = space.split_engine({**space.fixed, **baseline.flags})
        try:
            baselines.append(CheckedBaseline(name=baseline.name, plan=engines[name].engine.normalise(flags)))
        except InvalidConfig as exc:
            raise UserError(f"baseline {baseline.name!r}: {exc}") from None
    inventory = read_inventory(space.gpus) if read_gpus else None
    return Preflight(space=space, engines=engines, suite=suite, inventory=inventory, baselines=baselines)


def make_sampler(name: SamplerName, seed: int | None) -> optuna.samplers.BaseSampler:
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        # benchmarks/search_efficiency.py: baselines count as startup trials; modelling from the third
        # trial on and scoring 64 candidates reached 2% of the optimum in 3 launches instead of 8
        # (A6000 twin, 20 seeds) and never did worse on the other profiles.
        tpe = optuna.samplers.TPESampler(
            seed=seed, multivariate=True, group=True, constant_liar=True, n_startup_trials=2, n_ei_candidates=64
        )
    # benchmarks/search_efficiency.py --family: every other trial a neighbour of the best once 3 served
    # (chosen on tuning members 0-7) took the median launches to 2% of the optimum from 23 to 14 on
    # held-out members 1000-1029 (budget 60). With repeats redrawn and memory sizing held still (chosen
    # on members 0-23), members 1060-1089, unseen before: median 13, 28/30 reached. Moving on along the
    # number that made the best first: 14 and 16 on 1300-1329 and 1330-1359, unseen. With draft tokens
    # scaled to the draft tree: 14 / 27, 13 / 38 and 11 / 27 (median / p90) on 1360-1449, unseen.
    # sampler.py says why.
    return NeighbourSampler(tpe, seed=seed, after=3, every=2)


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


def set_constraints(
    trial: optuna.Trial,
    slo: SLOSpec,
    *,
    memory: bool = False,
    config: bool = False,
    measured: Sequence[Measurement] = (),
) -> None:
    """Every key on every trial (GPSampler needs a stable count); > 0 means violated.

    SLO constraints are relative excess over the limit (0.1 = 10 % over); unmeasured trials get 0.
    With several load levels measured, the least excess: the trial is infeasible only when every
    level breaks the limit (a level that breaks it alone scores 0 at that level instead).
    """
    trial.set_constraint("memory", 1.0 if memory else 0.0)
    trial.set_constraint("config", 1.0 if config else 0.0)
    for name, limit in slo.limits().items():
        excess = [(metric.value - limit) / limit for m in measured if (metric := m.metric(name)) is not None]
        trial.set_constraint(f"slo_{name}", min(excess) if excess else 0.0)


class StudyRunner:
    """Runs (or resumes) one study of a search space.

    Args:
        checked: the space, its engines and the GPU inventory (from :func:`preflight`).
        name: the study's name in the storage.
        storage: any Optuna storage (:func:`~autotune.study.storage.open_storage`, or in memory).
        paths: the study's folder (logs, artifacts, server records, lock).
        launcher: turns a plan into an outcome; default: real servers through :func:`run_trial`.
        read_gpus: reads the GPUs before each launch (idle check); None skips the check.
        sampler: Optuna's sampler; default :func:`make_sampler` ("tpe").
        events: the live view's hooks.
        early_stop: stop measuring a trial that cannot plausibly reach the best (never a baseline or
            a finalist's confirmation).
    """

    def __init__(
        self,
        checked: Preflight,
        *,
        name: str,
        storage: optuna.storages.BaseStorage,
        paths: StudyPaths,
        launcher: Launcher | None = None,
        read_gpus: ReadGpus | None = None,
        sampler: optuna.samplers.BaseSampler | None = None,
        events: StudyEvents | None = None,
        early_stop: bool = True,
    ) -> None:
        if checked.inventory is None:
            raise ValueError("a study needs the GPU inventory: run preflight with read_gpus=True")
        self.checked = checked
        self.inventory = checked.inventory
        self.space = checked.space
        self.engines = {engine: prepared.engine for engine, prepared in checked.engines.items()}
        self.name = name
        self.paths = paths
        self.events = events or StudyEvents()
        self.read_gpus = read_gpus
        self.early_stop = early_stop
        with exclusive(storage, paths):  # workers started at the same moment create it once
            self.study = optuna.create_study(
                study_name=name,
                storage=storage,
                directions=["maximize"] * len(self.space.objective_levels()),
                sampler=sampler or make_sampler("tpe", None),
                load_if_exists=True,
            )
        if isinstance(self.study.sampler, NeighbourSampler):
            if self._one_stream_rate():
                sizing = {name for engine in self.engines.values() for name in engine.memory_sizing_flags}
                self.study.sampler.hold_still(frozenset(sizing & set(self.space.tuned)))
            self.study.sampler.follow_trees([e.draft_tree for e in self.engines.values() if e.draft_tree is not None])
        self.launch: Launcher = launcher or trial_launcher(
            checked, paths, read_gpus, lambda: attrs.agreement_reference(self.study)
        )
        self.artifact_store = artifact_store(paths.artifacts)
        self.stop_reason: str | None = None
        self.storage_fault: str | None = None
        self.feasibility = feasibility_models(self.space, self.engines, self.inventory)
        replay(self.feasibility, self.records(), default_engine=self.space.engine)

    @classmethod
    def open(
        cls,
        checked: Preflight,
        *,
        name: str,
        storage_url: str,
        paths: StudyPaths,
        sampler: SamplerName = "tpe",
        seed: int | None = None,
        heartbeat_s: int | None = None,
        early_stop: bool = True,
    ) -> StudyRunner:
        """The runner the CLI uses: a storage URL, real servers, NVML (or the twin's inventory)."""
        gpus = checked.space.gpus
        return cls(
            checked,
            name=name,
            storage=open_storage(storage_url, heartbeat_s=heartbeat_s),
            paths=paths,
            read_gpus=lambda: read_inventory(gpus),
            sampler=make_sampler(sampler, seed),
            early_stop=early_stop,
        )

    def records(self) -> list[TrialRecord]:
        return [attrs.trial_record(t) for t in self.study.get_trials(deepcopy=False)]

    # ---------------------------------------------------------------- before the first trial

    def recover(self) -> tuple[int, int]:
        """After a crash: kill orphaned servers, fail trials left RUNNING by a dead tuner on this host."""
        return recovery.recover(self.study, self.paths.servers)

    def prepare(self) -> tuple[list[int], list[str]]:
        """Queue interrupted configs again and the baselines not yet measured, once across workers."""
        with exclusive(self.study._storage, self.paths):
            return recovery.requeue_interrupted(self.study), self.enqueue_baselines()

    def enqueue_baselines(self) -> list[str]:
        return recovery.enqueue_baselines(self.study, self.space)

    def _describe_study(self) -> None:
        shown = self.space.model_copy(update={"fixed": redact_flags(self.space.fixed)})
        with exclusive(self.study._storage, self.paths):  # two workers writing the same attrs at once
            attrs.describe_study(
                self.study, space=shown, env=redact_env(self.space.env), suite=self.checked.suite.name,
                inventory=self.inventory,
            )  # fmt: skip
        with warnings.catch_warnings():  # Optuna 5 still calls metric names experimental
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            # optuna-dashboard names the objective axis with it (instead of "Objective 0").
            metric = self.space.objective.metric
            self.study.set_metric_names(
                [f"{metric} at concurrency {level} [tok/s]" for level in self.space.objective_levels()]
                if self.space.objective.levels
                else [f"{metric} [tok/s]"]
            )

    # ---------------------------------------------------------------- one trial

    def _baseline(self, trial: optuna.Trial) -> Baseline | None:
        name = attrs.baseline_of(trial)
        return next((b for b in self.space.baselines if b.name == name), None) if name else None

    def _find_duplicate(self, trial: optuna.Trial, key: str) -> FrozenTrial | None:
        """A finished trial with the same effective config; one still running elsewhere is awaited."""
        attrs.record_config_key(trial, key)  # before launching, so other workers see it
        while True:
            running = False
            for other in self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE, TrialState.RUNNING)):
                record = attrs.trial_record(other)
                if other.number == trial.number or record.config_key != key:
                    continue
                if other.state is TrialState.RUNNING:
                    running = other.number < trial.number  # the older one measures, the newer one waits
                elif record.duplicate_of is None and attrs.has_outcome(other) and not _server_failure(record):
                    return other
            if not running:
                return None
            self.events.phase("waiting", "for another worker measuring the same config")
            time.sleep(DUPLICATE_POLL_S)

    def _same_rate(self, trial: optuna.Trial, plan: LaunchPlan, known: Sequence[TrialRecord]) -> TrialRecord | None:
        """A measured trial among ``known`` that decodes one stream as ``plan`` would: where the
        objective is that rate (one stream, no other level, no SLO), a config differing only in memory
        sizing is not launched again. Its speed is known; what it would add is only another memory
        layout. The trial's rate key is recorded either way (a baseline's too, with ``known`` empty)."""
        if not self._one_stream_rate():
            return None
        key = self.engines[plan.engine].rate_key(plan)
        if key is None:
            return None
        attrs.record_rate_key(trial, key)
        return next((r for r in known if r.rate_key == key and r.served), None)

    def _one_stream_rate(self) -> bool:
        """Whether the objective is one stream's decode rate (one level, no SLO): memory sizing cannot buy it."""
        objective, measured = self.space.objective, self.space.measurement.concurrency
        single = objective.metric == "decode_tok_s" and not objective.levels and measured == [1]
        return single and not self.space.slo.limits()

    def _served_sizing(
        self, plan: LaunchPlan, known: Sequence[TrialRecord]
    ) -> tuple[LaunchPlan, TrialRecord | None] | None:
        """Where memory sizing cannot buy the objective, a new config launches with the memory sizing of
        a served launch like it rather than the sampled sizing, which could only add a memory death:
        one that vouches for it (it fitted with demands no smaller, feasibility 5), else the one it
        exceeds in the fewest demands; of those, the sizing that differs least from the sampled one
        (the latest on a tie). The plan as sampled, with no source, where a served launch vouches for
        its sizing; None when no served launch is alike (or the objective is not one stream's rate), or
        when the config exceeds the chosen one while launches like it died of headroom at or below its
        fraction (more draft tokens at a borrowed sizing that already killed some)."""
        engine = self.engines[plan.engine]
        sizing = set(engine.memory_sizing_flags)
        if not sizing or not self._one_stream_rate():
            return None
        model = self.feasibility[plan.engine]
        kept = {name: value for name, value in plan.flags.items() if name not in sizing}
        chosen: tuple[tuple[int, int], LaunchPlan, TrialRecord] | None = None
        for record in reversed(known):
            if not record.served or record.engine != plan.engine:
                continue
            flags = {**kept, **{name: value for name, value in record.flags.items() if name in sizing}}
            excess = model.excess(record.flags, flags)
            if excess is None:
                continue
            rank = (excess, sum(flags.get(name) != plan.flags.get(name) for name in sizing))
            if rank == (0, 0):
                return plan, None
            if chosen is None or rank < chosen[0]:
                try:
                    chosen = (rank, engine.normalise(flags), record)
                except InvalidConfig:
                    continue
        if chosen is None:
            return None
        (excess, _), sized, source = chosen
        fraction = sized.flags.get(model.rules.fraction_flag) if model.rules is not None else None
        died_above = model.fraction_window(plan.flags).high
        if excess and isinstance(fraction, (int, float)) and died_above is not None and fraction >= died_above:
            return None  # launches like it ran out of headroom there, and it demands more than the one that served
        return sized, source

    def _fraction_inside(self, plan: LaunchPlan) -> tuple[LaunchPlan, FractionWindow] | None:
        """Where memory sizing cannot buy the objective and no served launch vouches for a sizing, a
        sampled fraction beyond what deaths of alike launches left open (feasibility 6) launches in
        the middle of that window instead: found in a few deaths rather than one per draw."""
        rules = self.engines[plan.engine].memory_rules
        if rules is None or not self._one_stream_rate():
            return None
        param, fraction = self.space.tuned.get(rules.fraction_flag), plan.flags.get(rules.fraction_flag)
        if not isinstance(param, FloatParam) or not isinstance(fraction, (int, float)):
            return None
        window = self.feasibility[plan.engine].fraction_window(plan.flags)
        middle = None if window.open(fraction) else window.middle(param.low, param.high, param.step)
        if middle is None:
            return None
        try:
            return self.engines[plan.engine].normalise({**plan.flags, rules.fraction_flag: middle}), window
        except InvalidConfig:
            return None

    def _values_of(self, measured: FrozenTrial) -> float | list[float]:
        """What Optuna is told for a trial that borrows ``measured``'s measurement."""
        return list(measured.values) if self.space.objective.levels else measured.values[0]

    def _values(self, outcome: TrialOutcome | None) -> float | list[float]:
        """What Optuna is told: the objective, or in a levels study one value per level (primary
        first), 0 at a level that was not measured or breaks the SLO there."""
        if not self.space.objective.levels:
            return (outcome.objective if outcome is not None else None) or 0.0
        by_level = {m.concurrency: m for m in outcome.measurements} if outcome is not None else {}
        slo = self.space.slo
        return [
            m.value if m is not None and not slo.broken({x.name: x.value for x in m.metrics}) else 0.0
            for m in map(by_level.get, self.space.objective_levels())
        ]

    def objective(self, trial: optuna.Trial) -> float | list[float]:
        gpus = [g.name for g in self.inventory.gpus]
        attrs.record_start(trial, host=socket.gethostname(), pid=os.getpid(), gpus=gpus)
        candidate = suggest(self.space, trial, self._baseline(trial))
        self.events.trial_started(trial.number, candidate)
        engine_name, flags = self.space.split_engine(candidate.flags)
        attrs.record_engine(trial, engine_name)
        try:
            plan = self.engines[engine_name].normalise(flags)
        except InvalidConfig as exc:
            reason = f"engine rule: {exc}"
            attrs.record_not_run(trial, OutcomeKind.INVALID_CONFIG, reason, redact_flags(candidate.flags))
            set_constraints(trial, self.space.slo, config=True)
            return self._values(None)
        confirming = attrs.confirm_of(trial) is not None
        duplicate = None if confirming else self._find_duplicate(trial, plan.config_key)
        if duplicate is not None:
            attrs.record_duplicate(trial, self._hidden(plan), duplicate)
            for key, value in duplicate.constraints.items():
                trial.set_constraint(key, value)
            return self._values_of(duplicate)
        searching = not confirming and not self._baseline(trial)
        known = self.records() if searching else []
        same_rate = self._same_rate(trial, plan, known)
        if same_rate is not None:
            borrowed = self.study.get_trials(deepcopy=False)[same_rate.number]
            sizing = sorted(k for k in {*plan.flags, *same_rate.flags} if plan.flags.get(k) != same_rate.flags.get(k))
            attrs.record_same_rate(trial, self._hidden(plan), borrowed, sizing)
            for key, value in borrowed.constraints.items():
                trial.set_constraint(key, value)
            return self._values_of(borrowed)
        if searching:
            sized = self._served_sizing(plan, known)
            if sized is not None and (source := sized[1]) is not None:
                plan = sized[0]
                attrs.record_sizing_from(trial, source.number)
            elif sized is None and (inside := self._fraction_inside(plan)) is not None:
                plan, window = inside
                attrs.record_fraction_inside(trial, window)
            failed = predicted_failure(plan.flags, known)
            if failed is not None:
                attrs.record_predicted_failure(trial, self._hidden(plan), failed)
                set_constraints(trial, self.space.slo, config=True)
                return self._values(None)
        prediction = self.feasibility[plan.engine].predict(plan.flags)
        if not prediction.feasible:
            attrs.record_predicted(trial, self._hidden(plan), prediction)
            set_constraints(trial, self.space.slo, memory=True)
            return self._values(None)
        self._wait_for_idle_gpus(trial, plan)
        try:
            self.paths.logs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the log folder {self.paths.logs}: {exc.strerror}") from None
        log_path = self.paths.logs / f"trial-{trial.number:04d}.log"
        try:
            early_stop = None if confirming or self._baseline(trial) else self._early_stop()
            outcome = self.launch(plan, log_path, self.events.phase, early_stop)
        except BaseException as exc:  # Ctrl-C, SIGTERM, bugs: say so in storage, then let it go
            kind = OutcomeKind.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else OutcomeKind.ERROR
            attrs.record_not_run(trial, kind, f"{type(exc).__name__}: {exc}".strip(": "), redact_flags(plan.flags))
            raise
        outcome = self._redacted(outcome)
        model = self.feasibility[plan.engine]
        lesson = lesson_of(outcome, trial=trial.number, inventory=self.inventory)
        model.learn(lesson)
        share = roofline_of(outcome, inventory=self.inventory, model=model, engine=self.engines[plan.engine])
        attrs.record_outcome(trial, outcome, lesson=lesson, roofline=share, slo=self.space.slo)
        try:
            upload(self.artifact_store, trial, outcome)
        except OSError as exc:  # a full disk: keep the measurement (the trial completes), then stop
            self.storage_fault = f"cannot keep trial {trial.number}'s artifacts in {self.paths.artifacts}: {exc}"
            self.study.stop()
        if outcome.kind is OutcomeKind.OK:
            measured = [m for m in outcome.measurements if m.concurrency in self.space.objective_levels()]
            set_constraints(trial, self.space.slo, measured=measured)
            return self._values(outcome)
        if outcome.kind.is_config_fault:
            set_constraints(trial, self.space.slo, memory=outcome.kind.is_memory, config=not outcome.kind.is_memory)
            return self._values(None)
        if outcome.kind.is_server_failure and self._served(plan.engine, before=trial.number):
            # The set-up has served, so a server that cannot start is most likely this configuration's
            # doing: tell the sampler (a failed trial teaches it nothing). Still relaunched when proposed again.
            attrs.record_counted_against_config(trial, outcome.reason, named_values(plan.flags, outcome.reason))
            set_constraints(trial, self.space.slo, config=True)
            return self._values(None)
        raise TrialFault(f"{outcome.kind.value}: {outcome.reason}")

    def _served(self, engine: str, *, before: int) -> bool:
        """Whether an earlier trial of this study measured a server of this engine."""
        return any(r.number < before and r.served and r.engine in (None, engine) for r in self.records())

    def _early_stop(self) -> EarlyStop | None:
        """The bar a new configuration must plausibly reach to be measured in full: the best so far,
        with the study's own measured noise (a prior until it has relaunched anything)."""
        if not self.early_stop:
            return None
        records = self.records()
        best = best_first_measured(records)
        if best is None or not best.value:
            return None
        noise = measure_noise(records, self.space.objective.metric)
        return EarlyStop(bar=best.value, noise_rel=min(noise.total, 0.5))

    def _wait_for_idle_gpus(self, trial: optuna.Trial, plan: LaunchPlan) -> None:
        """Never launch onto busy GPUs: wait (bounded), else record the trial as skipped-busy."""
        if self.read_gpus is None:
            return
        self.events.phase("waiting", "for idle GPUs")
        verdict, waited = wait_for(
            self.read_gpus, lambda inv: check_idle(inv, self.inventory), timeout_s=self.space.gpus.busy_wait_s
        )
        if waited > 0:
            attrs.record_busy_wait(trial, waited)
        if not verdict.idle:
            attrs.record_not_run(trial, OutcomeKind.SKIPPED_BUSY, verdict.reason, redact_flags(plan.flags))
            raise TrialFault(f"{OutcomeKind.SKIPPED_BUSY.value}: {verdict.reason}")

    def _hidden(self, plan: LaunchPlan) -> LaunchPlan:
        return plan.model_copy(update={"flags": redact_flags(plan.flags)})

    def _redacted(self, outcome: TrialOutcome) -> TrialOutcome:
        """Secret values (environment, secret flags such as --api-key) never reach storage: not the
        flags, argv, effective config or reason, nor the log kept as an artifact."""
        secrets = secret_values(self.space.env, self.space.fixed)
        if not secrets:
            return outcome
        if outcome.log_path is not None and outcome.log_path.exists():  # as written, or as Python's repr
            written = secrets + [repr(secret)[1:-1] for secret in secrets]
            outcome.log_path.write_text(redact(outcome.log_path.read_text(errors="replace"), written))
        as_json = [json.dumps(secret)[1:-1] for secret in secrets]  # as they appear inside JSON strings
        return TrialOutcome.model_validate_json(redact(outcome.model_dump_json(), as_json))

    def _after_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        # Another worker on this host may have died with its server running: clean up after it.
        reap_orphans(self.paths.servers)
        self.events.trial_finished(attrs.trial_record(trial))

    # ---------------------------------------------------------------- confirmation

    def others_running(self) -> bool:
        """Whether another worker is still measuring a trial of this study (then it confirms at its end)."""
        host, pid = socket.gethostname(), os.getpid()
        running = self.study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))
        return any((r.host, r.worker_pid) != (host, pid) for r in map(attrs.trial_record, running))

    def confirm(self, *, top: int = 3, launches: int = 2) -> Confirmation | None:
        """Measure the finalists again on fresh launches, interleaved (A B C A B C), and store the
        confirmed best; None when nothing feasible was measured. Ctrl-C stops it with what it has."""
        records = self.records()
        finalists = choose_finalists(records, top=top)
        if not finalists:
            return None
        params = {t.number: t.params for t in self.study.get_trials(deepcopy=False)}
        with exclusive(self.study._storage, self.paths):
            for _ in range(launches):
                for finalist in finalists:
                    attrs.enqueue_confirmation(self.study, params[finalist.number], finalist)
        try:
            self.study.optimize(
                self.objective, n_trials=launches * len(finalists), catch=(TrialFault,), callbacks=[self._after_trial]
            )
        finally:
            result = confirm(
                self.records(), finalists, objective=self.space.objective.metric, fixed=list(self.space.fixed),
                launches=launches, negligible=self.space.measurement.target_rel_ci,
            )  # fmt: skip
            attrs.record_confirmation(self.study, result)
            if result is not None:
                self._publish_note(result)
            self._keep_importance()  # the finalists' launches are completed trials too
        return result

    def _keep_importance(self) -> None:
        """Compute the parameter importance and keep it in the study, so ``show`` need not: once per run
        or confirmation, never per trial (the benchmarks run thousands of trials through this loop)."""
        # Counted first: a trial another worker completes meanwhile leaves the kept one stale, never
        # wrongly current.
        complete = len(self.study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
        levels = len(self.space.objective_levels()) if self.space.objective.levels else 0
        attrs.record_importance(self.study, compute_importance(self.study, levels=levels), complete_trials=complete)

    def _publish_note(self, result: Confirmation) -> None:
        """The confirmed best as the study's note in optuna-dashboard (an optional extra)."""
        try:
            import optuna_dashboard
        except ImportError:
            return
        rows = [f"| {f.label} (#{f.trial}) | {len(f.values)} | {f.mean:.2f}" + (f" ± {f.ci95:.2f}" if f.ci95 else "")
                + f" | {f.changed_flags} |" for f in result.finalists]  # fmt: skip
        note = "\n".join(
            ["## Confirmed best", "", result.note, "", "| finalist | launches | mean ± 95% CI | flags changed |",
             "|---|---|---|---|", *rows]
        )  # fmt: skip
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            optuna_dashboard.save_note(self.study, note)

    # ---------------------------------------------------------------- the loop

    def run(
        self,
        *,
        trials: int | None,
        timeout_s: float | None,
        patience: int | None = None,
        total_trials: int | None = None,
        rules: Sequence[StopRule] = (),
    ) -> None:
        """Run trials until the trial count, the time budget, the patience rule, the study's total
        (counted across every worker) or one of ``rules`` says stop."""
        self._describe_study()
        attrs.record_confirmation(self.study, None)  # more trials: an earlier confirmation no longer holds
        active: list[StopRule] = [*rules, RepeatedFailure()]
        if timeout_s is not None:
            active.append(TimeBudget(timeout_s))
        if patience is not None:
            active.append(NoImprovement(patience))
        if total_trials is not None:
            active.append(TotalTrials(total_trials))

        def check_rules(study: optuna.Study, trial: FrozenTrial) -> None:
            reason = first_reason(active, self.records()) if active else None
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
        if self.storage_fault is not None:
            self.stop_reason = self.storage_fault
        if self.stop_reason is None:
            self.stop_reason = f"{trials} trials done" if trials else "time budget spent"
        attrs.record_stop_reason(self.study, self.stop_reason)
        self._keep_importance()
        if self.storage_fault is not None:
            hint = "free some space (or pass --artifacts DIR), then re-run to resume: nothing measured is lost"
            raise StorageError(self.storage_fault, hint=hint)


def _server_failure(record: TrialRecord) -> bool:
    kind = outcome_kind(record.outcome)
    return kind is not None and kind.is_server_failure
