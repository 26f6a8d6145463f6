"""Running a study: ask Optuna for a candidate, normalise it by the engine's rules, decide by the
study's named rules, record the decision, launch, learn; until a stop rule fires.

The objective reads as Optuna's own loop does (ask -> run -> tell), one step a method:
suggest -> normalise -> decide (:mod:`autotune.study.rules`) -> record -> launch -> learn. The
launcher (:mod:`autotune.study.launcher`), the storage and the GPU reading are injected, so the
search benchmark and tests drive the same loop without servers or a database. The race of the
finalists after the search is :mod:`autotune.study.race`; a night, search then race, is
:mod:`autotune.study.night`.

Optuna conventions: a configuration that cannot run (memory, invalid flags) is a COMPLETE trial
with value 0.0 and a positive constraint, so every sampler learns from it; FAIL is kept for faults
of the infrastructure (crash, timeout, interruption). Every outcome is written to storage before
anything propagates.
"""

from __future__ import annotations

import json
import os
import socket
import time
import warnings
from collections.abc import Callable, Collection, Mapping, Sequence

import optuna
from optuna.trial import FrozenTrial, TrialState

from autotune.decision import Decision, Launch, Reuse, Skip, Wait
from autotune.engines.base import InvalidConfig, LaunchPlan
from autotune.errors import StorageError
from autotune.gpu import read_inventory
from autotune.measure.client import Measurement
from autotune.measure.integrity import above_ceiling
from autotune.model_reads import model_structure
from autotune.outcomes import OutcomeKind
from autotune.pass_setup import read_pass_setup
from autotune.records import TrialRecord
from autotune.secrets import redact, redact_env, redact_flags, secret_values
from autotune.server import reap_orphans
from autotune.space import Baseline, FlagValue, SearchSpace, SLOSpec, suggest
from autotune.stopping import NoImprovement, RepeatedFailure, StopRule, TimeBudget, TotalTrials, first_reason
from autotune.study import attrs, recovery
from autotune.study.artifacts import artifact_store, upload
from autotune.study.confirm import early_stop_bar
from autotune.study.events import StudyEvents
from autotune.study.guided import ModelGuided, keep_prediction
from autotune.study.history import History
from autotune.study.importance import compute_importance
from autotune.study.launchable import WouldLaunch
from autotune.study.launcher import Launcher, ReadGpus, launched_plan, trial_launcher, wait_for_idle_gpus
from autotune.study.memory import feasibility_models, lesson_of, replay, roofline_of
from autotune.study.named_failures import named_values
from autotune.study.paths import StudyPaths
from autotune.study.preflight_checks import Preflight
from autotune.study.rules import build_rules, decide
from autotune.study.rules.context_fit import ContextFit
from autotune.study.sampler import PossibleContexts, SamplerName, make_sampler
from autotune.study.storage import exclusive, open_storage, optimize_riding_out
from autotune.trial import TrialOutcome

DUPLICATE_POLL_S = 2.0
# ``--trials N`` counts launches; proposals answered without one (reused, skipped) are cheap, but a
# space whose every proposal is already measured must still end: after this many per launch asked.
PROPOSALS_PER_LAUNCH = 25


class TrialFault(Exception):
    """A trial failed for a reason that says nothing about its configuration (becomes FAIL)."""


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


def keep_importance(study: optuna.Study, space: SearchSpace) -> None:
    """Compute the parameter importance and keep it in the study, so ``show`` need not: once per search
    or race, never per trial (the benchmarks run thousands of trials through this loop)."""
    # Counted first: a trial another worker completes meanwhile leaves the kept one stale, never
    # wrongly current.
    complete = len(study.get_trials(deepcopy=False, states=(TrialState.COMPLETE,)))
    levels = len(space.objective_levels()) if space.objective.levels else 0
    attrs.record_importance(study, compute_importance(study, levels=levels), complete_trials=complete)


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
        self._finished: dict[int, TrialRecord] = {}  # read once: see records()
        self.feasibility = feasibility_models(self.space, self.engines, self.inventory)
        self.rules = build_rules(self.space, self.engines, self.feasibility, off=rules_off)
        self.sampler = sampler or make_sampler("tpe", None)  # what proposes (the study's may wrap it)
        if isinstance(self.sampler, ModelGuided):  # it proposes only what these rules would launch
            self.sampler.ask_rules(WouldLaunch(self.space, self.engines, self.rules, self.records))
        fit = next((rule for rule in self.rules if isinstance(rule, ContextFit)), None)
        contexts = fit.context_flags() if fit is not None else frozenset()
        proposer = self.sampler
        if fit is not None and contexts:  # contexts context-fit knows cannot fit are not proposed
            proposer = PossibleContexts(self.sampler, contexts, lambda p: fit.proposal(p, self.records()))
        with exclusive(storage, paths):  # workers started at the same moment create it once
            self.study = optuna.create_study(
                study_name=name,
                storage=storage,
                directions=["maximize"] * len(self.space.objective_levels()),
                sampler=proposer,
                load_if_exists=True,
            )
        self.launch: Launcher = launcher or trial_launcher(
            checked, paths, read_gpus, lambda: attrs.agreement_reference(self.study)
        )
        self.artifact_store = artifact_store(paths.artifacts)
        self.stop_reason: str | None = None
        self.storage_fault: str | None = None
        # what a decode pass reads, for the roofline
        self.structure = model_structure(self.space.model, self.space.named_config())
        self.pass_setup = read_pass_setup(self.space, self.inventory)
        self.search: str | None = None  # the search that proposed the last trial (model-guided, or why not)
        replay(self.feasibility, self.records(), default_engine=self.space.engine)  # the rules read these models

    @classmethod
    def open(
        cls,
        checked: Preflight,
        *,
        name: str,
        storage_url: str,
        paths: StudyPaths,
        sampler: SamplerName = "model",
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
        """Every trial's record; a finished trial's is read once (Optuna refuses to change a finished
        trial), since the loop reads them all several times a proposal and a night proposes ~1,000."""
        out = []
        for trial in self.study.get_trials(deepcopy=False):
            record = self._finished.get(trial.number)
            if record is None:
                record = attrs.trial_record(trial)
                if trial.state.is_finished():
                    self._finished[trial.number] = record
            out.append(record)
        return out

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
                self.study,
                space=shown,
                env=redact_env(self.space.env),
                suite=self.checked.suite.name,
                inventory=self.inventory,
                pass_setup=self.pass_setup,
            )
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
        sampled = story.baseline is None and story.proposal.confirm_of is None and story.proposal.retry_of is None
        self.search = keep_prediction(
            self.sampler, trial, candidate.flags, sampled=sampled, last=self.search, note=self.events.note
        )
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
        """The candidate by its engine's rules; a race's relaunch is exactly what its trial launched."""
        confirming = story.proposal.confirm_of
        if confirming is not None:
            return launched_plan(history.records[confirming], self.space)
        try:
            return self.engines[engine].normalise(dict(flags))
        except InvalidConfig as exc:
            return Skip(
                rule="engine", outcome=OutcomeKind.INVALID_CONFIG, reason=f"engine rule: {exc}", constraint="config"
            )

    def _decide(self, story: attrs.TrialStory, plan: LaunchPlan | Skip, history: History) -> tuple[Decision, History]:
        """The study's rules over its history (a race's relaunch goes through none: it relaunches what ran)."""
        if isinstance(plan, Skip):
            return plan, history
        confirming = story.proposal.confirm_of
        if confirming is not None:  # what its trial's rules changed is what it launches again
            return Launch(plan=plan, adjusted=history.records[confirming].adjusted), history
        baseline = self._baseline(story) is not None
        announced = plan.config_key
        while True:
            decision = decide(self.rules, plan, history, baseline=baseline)
            if isinstance(decision, Launch) and not baseline and decision.plan.config_key != announced:
                # The rules changed what launches: other workers see it before it is checked against theirs.
                announced = decision.plan.config_key
                story.proposed(plan.engine, config_key=announced)
                history = self._history(history.number)
                continue
            if not isinstance(decision, Wait):
                return decision, history
            self.events.phase("waiting", f"for trial {decision.trial}, measuring the same config on another worker")
            time.sleep(DUPLICATE_POLL_S)
            history = self._history(history.number)

    def _history(self, number: int) -> History:
        return History(self.records(), number=number)

    def _launch(self, story: attrs.TrialStory, plan: LaunchPlan, history: History) -> TrialOutcome:
        """Launch onto idle GPUs (else the trial is skipped as busy), measure, stop; an interruption or a
        bug is recorded before it propagates."""
        busy, waited = wait_for_idle_gpus(self.checked, self.read_gpus, self.events.phase)
        if waited > 0:
            story.busy_wait_s = waited
        if busy is not None:
            story.not_launched(OutcomeKind.SKIPPED_BUSY, busy, redact_flags(plan.flags))
            raise TrialFault(f"{OutcomeKind.SKIPPED_BUSY.value}: {busy}")
        try:
            self.paths.logs.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the log folder {self.paths.logs}: {exc.strerror}") from None
        log_path = self.paths.logs / f"trial-{story.trial.number:04d}.log"
        # Never a baseline or a finalist's relaunch: those are measured in full.
        stoppable = self.early_stop and story.proposal.confirm_of is None and self._baseline(story) is None
        try:
            bar = early_stop_bar(history.records, self.space.objective.metric) if stoppable else None
            return self.launch(plan, log_path, self.events.phase, bar)
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
        lesson = lesson_of(outcome, trial=trial.number, inventory=self.inventory, engine=self.engines[plan.engine])
        model.learn(lesson)
        share = roofline_of(
            outcome, inventory=self.inventory, model=model, engine=self.engines[plan.engine], structure=self.structure
        )
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

    def after_trial(self, study: optuna.Study, trial: FrozenTrial) -> None:
        # Another worker on this host may have died with its server running: clean up after it.
        reap_orphans(self.paths.servers)
        self.events.trial_finished(attrs.trial_record(trial))

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

        optimize_riding_out(
            self.study,
            self.storage,
            self.objective,
            n_trials=trials * PROPOSALS_PER_LAUNCH if trials is not None else None,
            # Optuna's own timeout is the backstop; TimeBudget records the reason.
            timeout=timeout_s,
            catch=(TrialFault,),
            callbacks=[self.after_trial, check_rules],
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
        keep_importance(self.study, self.space)
        if self.storage_fault is not None:
            hint = "free some space (or pass --artifacts DIR), then re-run to resume: nothing measured is lost"
            raise StorageError(self.storage_fault, hint=hint)
