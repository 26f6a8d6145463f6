"""Running a study: ask Optuna for a candidate, normalise it by the engine's rules, decide by the
study's named rules, record the decision, launch, learn; until a stop rule fires.

The objective reads as Optuna's own loop does (ask -> run -> tell), one step a method:
suggest -> normalise -> decide (:mod:`autotune.study.rules`) -> record -> launch -> learn. The
launcher (:mod:`autotune.study.launcher`), the storage and the GPU reading are injected, so the
search benchmark and tests drive the same loop without servers or a database.

Optuna conventions: a configuration that cannot run (memory, invalid flags) is a COMPLETE trial
with value 0.0 and a positive constraint, so every sampler learns from it; FAIL is kept for faults
of the infrastructure (crash, timeout, interruption). Every outcome is written to storage before
anything propagates.
"""

from __future__ import annotations

import json
import math
import os
import socket
import statistics
import time
import warnings
from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.decision import Decision, Launch, Reuse, Skip, Wait
from autotune.engines.base import InvalidConfig, LaunchPlan
from autotune.errors import StorageError
from autotune.gpu import check_idle, read_inventory, wait_for
from autotune.measure.client import Measurement
from autotune.measure.integrity import above_ceiling
from autotune.measure.protocol import EarlyStop
from autotune.model_reads import model_structure
from autotune.outcomes import OutcomeKind
from autotune.records import TrialRecord
from autotune.secrets import is_secret_flag, redact, redact_env, redact_flags, secret_values
from autotune.server import reap_orphans
from autotune.space import Baseline, FlagValue, SLOSpec, suggest
from autotune.stopping import NoImprovement, RepeatedFailure, StopRule, TimeBudget, TotalTrials, first_reason
from autotune.study import attrs, recovery
from autotune.study.artifacts import artifact_store, upload
from autotune.study.confirm import (
    Confirmation,
    choose_finalists,
    confirm,
    confirmation_launches,
    incumbent_mean,
    measure_noise,
    standing,
)
from autotune.study.events import StudyEvents
from autotune.study.history import History
from autotune.study.importance import compute_importance
from autotune.study.launcher import Launcher, ReadGpus, trial_launcher
from autotune.study.memory import feasibility_models, lesson_of, replay, roofline_of
from autotune.study.named_failures import named_values
from autotune.study.paths import StudyPaths
from autotune.study.preflight_checks import Preflight
from autotune.study.rules import build_rules, decide
from autotune.study.sampler import SamplerName, make_sampler
from autotune.study.storage import exclusive, open_storage
from autotune.trial import TrialOutcome

DUPLICATE_POLL_S = 2.0
# ``--trials N`` counts launches; proposals answered without one (reused, skipped) are cheap, but a
# space whose every proposal is already measured must still end: after this many per launch asked.
PROPOSALS_PER_LAUNCH = 25


class TrialFault(Exception):
    """A trial failed for a reason that says nothing about its configuration (becomes FAIL)."""


# The share of a night (launches, or --timeout) kept for the race; chosen on the dev slice
# (benchmarks/results/race-2026-12-04/).
RACE_SHARE = 0.3
# The race's least budget: two rounds of every finalist (a paired noise needs them), then three more
# rounds of a pair, so a leader has five launches against the best baseline.
PAIR_ROUNDS = 3
# The most launches of one configuration in a race (``--confirm-launches``): a pair that is still open
# after this many is not decided by the night.
RACE_LAUNCHES = 8


@dataclass(frozen=True)
class RacePlan:
    """What the confirmation will race, and the most it will spend."""

    configurations: int
    baselines: int
    launches: int
    seconds: float | None
    deadline_s: float | None = None

    def text(self) -> str:
        took = f", about {self.seconds / 60:.0f} min" if self.seconds else ""
        until = f", until the night's end in {self.deadline_s / 60:.0f} min" if self.deadline_s is not None else ""
        return (f"racing {self.configurations} configurations ({self.baselines} of them baselines) on at most "
                f"{self.launches} fresh launches{took}{until}, dropping each as soon as it is decided")  # fmt: skip


def race_floor(finalists: int) -> int:
    """The fewest relaunches a race is given: two rounds of every finalist, then :data:`PAIR_ROUNDS` of a pair."""
    return 2 * finalists + 2 * PAIR_ROUNDS


def race_budget(search_launches: int, finalists: int, *, share: float = RACE_SHARE) -> int:
    """Relaunches the race may spend after a search of ``search_launches`` (``--trials N``): ``share``
    of the whole night, search and race (N x share / (1 - share)), and :func:`race_floor` at least."""
    return max(math.ceil(search_launches * share / (1 - share) - 1e-9), race_floor(finalists))


def split_launches(total: int, finalists: int, *, share: float = RACE_SHARE) -> tuple[int, int]:
    """A night of ``total`` launches, search and race together: (the search's, the race's). The race
    gets ``share`` of it and :func:`race_floor` at least, never more than half."""
    race = min(max(round(total * share), race_floor(finalists)), total // 2)
    return total - race, race


def split_timeout(timeout_s: float, *, share: float = RACE_SHARE) -> float:
    """The search's part of a ``--timeout`` that covers search and race: the race runs to the end."""
    return timeout_s * (1 - share)


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
        rules_off: names of pre-launch rules switched off (:data:`autotune.study.rules.RULE_NAMES`).
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
        rules_off: Collection[str] = (),
    ) -> None:
        if checked.inventory is None:
            raise ValueError("a study needs the GPU inventory: run preflight with read_gpus=True")
        self.checked = checked
        self.inventory = checked.inventory
        self.space = checked.space
        self.engines = {engine: prepared.engine for engine, prepared in checked.engines.items()}
        self.name = name
        self.storage = storage
        self.paths = paths
        self.events = events or StudyEvents()
        self.read_gpus = read_gpus
        self.early_stop = early_stop
        self.launched = 0  # by this runner, in this process: what --trials counts
        self.clock: Callable[[], float] = time.monotonic  # the race's deadline is on this clock
        with exclusive(storage, paths):  # workers started at the same moment create it once
            self.study = optuna.create_study(
                study_name=name,
                storage=storage,
                directions=["maximize"] * len(self.space.objective_levels()),
                sampler=sampler or make_sampler("tpe", None),
                load_if_exists=True,
            )
        self.launch: Launcher = launcher or trial_launcher(
            checked, paths, read_gpus, lambda: attrs.agreement_reference(self.study)
        )
        self.artifact_store = artifact_store(paths.artifacts)
        self.stop_reason: str | None = None
        self.storage_fault: str | None = None
        self.feasibility = feasibility_models(self.space, self.engines, self.inventory)
        self.structure = model_structure(self.space.model)  # what a decode pass reads, for the roofline
        replay(self.feasibility, self.records(), default_engine=self.space.engine)
        self.rules = build_rules(self.space, self.engines, self.feasibility, off=rules_off)

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
        return recovery.recover(self.study, self.storage, self.paths.servers)

    def prepare(self) -> tuple[list[int], list[str]]:
        """Queue interrupted configs again and the baselines not yet measured, once across workers."""
        with exclusive(self.storage, self.paths):
            return recovery.requeue_interrupted(self.study), self.enqueue_baselines()

    def enqueue_baselines(self) -> list[str]:
        return recovery.enqueue_baselines(self.study, self.space)

    def _describe_study(self) -> None:
        shown = self.space.model_copy(update={"fixed": redact_flags(self.space.fixed)})
        with exclusive(self.storage, self.paths):  # two workers writing the same attrs at once
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

    def objective(self, trial: optuna.Trial) -> float | list[float]:
        story = attrs.TrialStory.begin(
            trial, host=socket.gethostname(), pid=os.getpid(), gpus=[g.name for g in self.inventory.gpus]
        )
        candidate = suggest(self.space, trial, self._baseline(story))
        self.events.trial_started(trial.number, candidate)
        engine, flags = self.space.split_engine(candidate.flags)
        history = self._history(trial.number)
        plan = self._normalised(story, engine, flags, history)
        # Before deciding, other workers see what this trial measures (a relaunch's key comes with its outcome).
        relaunch = story.proposal.confirm_of is not None
        story.proposed(engine, config_key=plan.config_key if isinstance(plan, LaunchPlan) and not relaunch else None)
        decision, history = self._decide(story, plan, history)
        shown = redact_flags(plan.flags if isinstance(plan, LaunchPlan) else flags)
        if isinstance(decision, Reuse):
            reused = self.study.get_trials(deepcopy=False)[decision.trial]
            story.decided(decision, flags=shown, reused=reused)
            for key, value in reused.constraints.items():
                trial.set_constraint(key, value)
            return self._values_of(reused)
        story.decided(self._hidden_decision(decision), flags=shown)
        if isinstance(decision, Skip):
            constraint = decision.constraint
            set_constraints(trial, self.space.slo, memory=constraint == "memory", config=constraint == "config")
            return self._values(None)
        self.launched += 1
        outcome = self._launch(story, decision.plan, history)
        return self._learn(story, decision.plan, outcome, history)

    def _normalised(
        self, story: attrs.TrialStory, engine: str, flags: Mapping[str, FlagValue], history: History
    ) -> LaunchPlan | Skip:
        """The candidate by its engine's rules; a confirmation is exactly what its trial launched."""
        confirming = story.proposal.confirm_of
        if confirming is not None:
            return self._launched_plan(history.records[confirming])
        try:
            return self.engines[engine].normalise(dict(flags))
        except InvalidConfig as exc:
            return Skip(
                rule="engine", outcome=OutcomeKind.INVALID_CONFIG, reason=f"engine rule: {exc}", constraint="config"
            )

    def _decide(self, story: attrs.TrialStory, plan: LaunchPlan | Skip, history: History) -> tuple[Decision, History]:
        """The study's rules over its history (a confirmation goes through none: it relaunches what ran)."""
        if isinstance(plan, Skip):
            return plan, history
        confirming = story.proposal.confirm_of
        if confirming is not None:  # what its trial's rules changed is what it launches again
            return Launch(plan=plan, adjusted=history.records[confirming].adjusted), history
        baseline = self._baseline(story) is not None
        while isinstance(decision := decide(self.rules, plan, history, baseline=baseline), Wait):
            self.events.phase("waiting", f"for trial {decision.trial}, measuring the same config on another worker")
            time.sleep(DUPLICATE_POLL_S)
            history = self._history(history.number)
        return decision, history

    def _history(self, number: int) -> History:
        return History(self.records(), number=number)

    def _launched_plan(self, record: TrialRecord) -> LaunchPlan:
        """What ``record`` launched, with the secret values storage never held put back."""
        secrets = {
            name: value for name, value in self.space.fixed.items() if is_secret_flag(name) and name in record.flags
        }
        return LaunchPlan(engine=record.engine or self.space.engine, flags={**record.flags, **secrets})

    def _launch(self, story: attrs.TrialStory, plan: LaunchPlan, history: History) -> TrialOutcome:
        """Launch, measure, stop; an interruption or a bug is recorded before it propagates."""
        self._wait_for_idle_gpus(story, plan)
        try:
            self.paths.logs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the log folder {self.paths.logs}: {exc.strerror}") from None
        log_path = self.paths.logs / f"trial-{story.trial.number:04d}.log"
        searching = story.proposal.confirm_of is None and self._baseline(story) is None
        try:
            return self.launch(plan, log_path, self.events.phase, self._early_stop(history) if searching else None)
        except BaseException as exc:  # Ctrl-C, SIGTERM, bugs: say so in storage, then let it go
            kind = OutcomeKind.INTERRUPTED if isinstance(exc, KeyboardInterrupt) else OutcomeKind.ERROR
            story.not_launched(kind, f"{type(exc).__name__}: {exc}".strip(": "), redact_flags(plan.flags))
            raise

    def _learn(
        self, story: attrs.TrialStory, plan: LaunchPlan, outcome: TrialOutcome, history: History
    ) -> float | list[float]:
        """Record what the launch measured and taught, and what Optuna is told."""
        trial = story.trial
        outcome = self._redacted(outcome)
        model = self.feasibility[plan.engine]
        lesson = lesson_of(outcome, trial=trial.number, inventory=self.inventory)
        model.learn(lesson)
        share = roofline_of(outcome, inventory=self.inventory, model=model, engine=self.engines[plan.engine],
                            structure=self.structure)  # fmt: skip
        impossible = above_ceiling(share.decode_tok_s, share.ceiling_tok_s) if share else None
        if impossible is not None and outcome.kind is OutcomeKind.OK:
            outcome = outcome.model_copy(update={"kind": OutcomeKind.MEASUREMENT_FAILED, "reason": impossible})
        story.measured(outcome, roofline=share, slo=self.space.slo)
        # The set-up has served, so a server that cannot start is most likely this configuration's
        # doing: the sampler is told (a failed trial teaches it nothing). Still relaunched when proposed again.
        against_config = outcome.kind.is_server_failure and any(
            r.served and r.engine in (None, plan.engine) for r in history.records if r.number < trial.number
        )
        story.learned(lesson, against_config=named_values(plan.flags, outcome.reason) if against_config else None)
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
        if against_config:
            set_constraints(trial, self.space.slo, config=True)
            return self._values(None)
        raise TrialFault(f"{outcome.kind.value}: {outcome.reason}")

    def _baseline(self, story: attrs.TrialStory) -> Baseline | None:
        name = story.baseline
        return next((b for b in self.space.baselines if b.name == name), None) if name else None

    def _values_of(self, measured: FrozenTrial) -> float | list[float]:
        """What Optuna is told for a trial that reuses ``measured``'s measurement."""
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

    def _early_stop(self, history: History) -> EarlyStop | None:
        """The bar a new configuration must plausibly reach to be measured in full: the best so far,
        with the study's own measured noise (a prior until it has relaunched anything)."""
        if not self.early_stop:
            return None
        bar = incumbent_mean(history.records)
        if not bar:
            return None
        noise = measure_noise(history.records, self.space.objective.metric).total
        if not noise:  # relaunches that all measured alike (replayed launches can): no spread to judge by
            return None
        return EarlyStop(bar=bar, noise_rel=min(noise, 0.5))

    def _wait_for_idle_gpus(self, story: attrs.TrialStory, plan: LaunchPlan) -> None:
        """Never launch onto busy GPUs: wait (bounded), else record the trial as skipped-busy."""
        if self.read_gpus is None:
            return
        self.events.phase("waiting", "for idle GPUs")
        verdict, waited = wait_for(
            self.read_gpus, lambda inv: check_idle(inv, self.inventory), timeout_s=self.space.gpus.busy_wait_s
        )
        story.busy_wait_s = waited
        if not verdict.idle:
            story.not_launched(OutcomeKind.SKIPPED_BUSY, verdict.reason, redact_flags(plan.flags))
            raise TrialFault(f"{OutcomeKind.SKIPPED_BUSY.value}: {verdict.reason}")

    def _hidden_decision(self, decision: Decision) -> Decision:
        """The decision as storage keeps it: secret flag values redacted."""
        if not isinstance(decision, Launch):
            return decision
        return decision.model_copy(
            update={"plan": decision.plan.model_copy(update={"flags": redact_flags(decision.plan.flags)})}
        )

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
        return any((r.launch.host, r.launch.worker_pid) != (host, pid) for r in map(attrs.trial_record, running))

    def confirm(
        self, *, top: int = 3, launches: int = RACE_LAUNCHES, budget: int | None = None,
        deadline: float | None = None, share: float = RACE_SHARE,
    ) -> Confirmation | None:  # fmt: skip
        """Race the finalists and baselines on fresh launches in interleaved rounds (A B C, then A C):
        after each round a configuration whose comparison with the leader is decided (significantly
        behind, or equivalent within the margin) is no longer relaunched, and the race ends when the
        verdict is settled, when fewer than two configurations are left to relaunch (the fit removes a
        round's effect), when a round would pass ``budget`` relaunches (default :func:`race_budget` of
        the search's launches) or the ``deadline`` (on :attr:`clock`), or at ``launches`` launches of
        a configuration. The verdict is stored; None when nothing feasible was measured. Ctrl-C stops it
        with what it has."""
        records = self.records()
        finalists = choose_finalists(records, top=top)
        if not finalists:
            return None
        margin = self.space.measurement.target_rel_ci
        if budget is None:
            budget = race_budget(self._search_launches(records), len(finalists), share=share)
        baselines = {f.number for f in finalists if f.baseline is not None}
        round_s = self._launch_seconds(records)
        racing, spent = [f.number for f in finalists], 0
        try:
            while True:
                tried = Counter(r.confirm_of for r in self.records() if r.confirm_of is not None)
                racing = [n for n in racing if tried[n] < launches][: budget - spent]
                if deadline is not None and round_s is not None:  # only as many as finish before the end
                    racing = racing[: max(int((deadline - self.clock()) // round_s), 0)]
                if len(racing) < 2:
                    break
                self._relaunch([f for f in finalists if f.number in racing])
                spent += len(racing)
                now = standing(confirmation_launches(self.records(), finalists), margin=margin, baselines=baselines)
                if now.settled:
                    break
                racing = now.racing
        finally:
            result = confirm(self.records(), finalists, objective=self.space.objective.metric,
                             fixed=list(self.space.fixed), margin=margin)  # fmt: skip
            attrs.record_confirmation(self.study, result)
            if result is not None:
                self._publish_note(result)
            self._keep_importance()  # the finalists' launches are completed trials too
        return result

    @staticmethod
    def _search_launches(records: Sequence[TrialRecord]) -> int:
        return sum(1 for r in records if isinstance(r.decision, Launch) and r.confirm_of is None)

    @staticmethod
    def _launch_seconds(records: Sequence[TrialRecord]) -> float | None:
        """The median seconds of one served launch (start and measurement), None before any."""
        spent = [
            (r.launch.launch_s or 0.0) + (r.measurement.measure_s or 0.0)
            for r in records
            if r.served and r.launch.launch_s is not None
        ]
        return statistics.median(spent) if spent else None

    def confirmation_plan(
        self, *, top: int, launches: int, budget: int | None = None, deadline: float | None = None,
        share: float = RACE_SHARE,
    ) -> RacePlan:  # fmt: skip
        """What :meth:`confirm` will race and spend at most, before it starts (to say so)."""
        records = self.records()
        finalists = choose_finalists(records, top=top)
        if budget is None:
            budget = race_budget(self._search_launches(records), len(finalists), share=share)
        most = min(launches * len(finalists), budget)
        seconds = self._launch_seconds(records)
        return RacePlan(
            configurations=len(finalists),
            baselines=sum(1 for f in finalists if f.baseline),
            launches=most,
            seconds=most * seconds if seconds else None,
            deadline_s=max(deadline - self.clock(), 0.0) if deadline is not None else None,
        )

    def _relaunch(self, finalists: Sequence[TrialRecord]) -> None:
        """One round: each finalist launched again, exactly as it first ran (the round is named by the
        next trial's number)."""
        trials = self.study.get_trials(deepcopy=False)
        params = {t.number: t.params for t in trials}
        with exclusive(self.storage, self.paths):
            for finalist in finalists:
                attrs.enqueue_confirmation(self.study, params[finalist.number], finalist, round_=len(trials))
        self.study.optimize(self.objective, n_trials=len(finalists), catch=(TrialFault,), callbacks=[self._after_trial])

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
        gains = [f"- {result.recommended.label if g.trial == result.best else f'trial {g.trial}'}: {g.text()}"
                 for g in result.gains]  # fmt: skip
        header = ["| configuration | launches | mean ± 95% CI | flags changed |", "|---|---|---|---|"]
        note = "\n".join(["## Verdict", "", result.note, "", *gains, "", *header, *rows])
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
        """Run trials until ``trials`` launches (proposals answered from a measurement or skipped as
        predicted failures do not count), the time budget, the patience rule, the study's total
        (counted across every worker) or one of ``rules`` says stop."""
        self._describe_study()
        # more trials: an earlier confirmation, or schedule race, no longer holds
        attrs.record_confirmation(self.study, None)
        attrs.record_schedule_verdict(self.study, None)
        active: list[StopRule] = [*rules, RepeatedFailure()]
        if timeout_s is not None:
            active.append(TimeBudget(timeout_s))
        if patience is not None:
            active.append(NoImprovement(patience))
        if total_trials is not None:
            active.append(TotalTrials(total_trials))

        started = self.launched

        def check_rules(study: optuna.Study, trial: FrozenTrial) -> None:
            reason = first_reason(active, self.records()) if active else None
            if reason is None and trials is not None and self.launched - started >= trials:
                reason = f"{trials} launches done"
            if reason is not None:
                self.stop_reason = reason
                study.stop()

        self.study.optimize(
            self.objective,
            n_trials=trials * PROPOSALS_PER_LAUNCH if trials is not None else None,
            # Optuna's own timeout is the backstop; TimeBudget records the reason.
            timeout=timeout_s,
            catch=(TrialFault,),
            callbacks=[self._after_trial, check_rules],
        )
        if self.storage_fault is not None:
            self.stop_reason = self.storage_fault
        if self.stop_reason is None and trials is not None:
            self.stop_reason = (
                f"{trials * PROPOSALS_PER_LAUNCH} proposals drawn for {trials} launches, and only "
                f"{self.launched - started} launched: the rest were measured already or predicted to fail "
                "(the space looks exhausted)"
            )
        if self.stop_reason is None:
            self.stop_reason = "time budget spent"
        attrs.record_stop_reason(self.study, self.stop_reason)
        self._keep_importance()
        if self.storage_fault is not None:
            hint = "free some space (or pass --artifacts DIR), then re-run to resume: nothing measured is lost"
            raise StorageError(self.storage_fault, hint=hint)
