"""Optuna's user attrs, both ways: the only module that reads or writes them.

Writing: a trial's :class:`TrialStory`, a call per phase; each way a trial ends
(:class:`~autotune.outcomes.OutcomeKind`) becomes JSON-able attrs with human-readable names, so
optuna-dashboard shows them as columns. Reading: a trial's attrs
become a :class:`~autotune.records.TrialRecord`, the study's attrs a :class:`StudyInfo`.
Everything else in autotune reads those models, never the attrs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import Field, TypeAdapter, ValidationError

from autotune.decision import Decision, Reuse, Skip
from autotune.errors import StorageError
from autotune.feasibility import MemoryLesson
from autotune.measure.agreement import Agreement, Reference, compare
from autotune.models import Frozen
from autotune.outcomes import OutcomeKind
from autotune.pass_setup import PassSetup
from autotune.records import (
    AgreementRecord,
    LaunchRecord,
    Lessons,
    LevelRecord,
    MeasurementRecord,
    MetricRecord,
    Prediction,
    Proposal,
    TrialRecord,
)
from autotune.space import FlagValue, SearchSpace, SLOSpec
from autotune.study.confirm import Confirmation
from autotune.study.importance import Importance
from autotune.study.snapshot import StoredStudy, StoredTrial

if TYPE_CHECKING:
    import optuna
    from optuna.trial import FrozenTrial

    from autotune.gpu import GpuInventory, Roofline
    from autotune.measure.client import Measurement
    from autotune.study.schedule import ScheduleVerdict
    from autotune.trial import TrialOutcome

# Optuna, and the trial module with its HTTP client, are for writing: reading a study (show,
# export, report) imports this module without them.

OUTCOME = "outcome"
LAUNCH_TIME = "launch time [s]"
MEASURE_TIME = "measure time [s]"
MEMORY_LESSON = "memory_lesson"
DECISION = "decision"
# Shown to people (dashboard columns, report readings); never read back to compute anything.
READING_PREFIXES = ("roofline", "memory")
# Why a launch that measured shows no roofline share (read back for the table's cell).
ROOFLINE_UNKNOWN = "roofline_unknown"
ABOVE_COUNT = "the measured rate is above the ceiling counted from config.json: what a pass reads is unknown"
# A reuse copies its original's facts, except who ran it, what it taught (learned once) and what
# was decided for it and launched.
PREDICTED = "predicted"
NOT_COPIED = frozenset(
    {"baseline", "host", "worker_pid", "retry_of", "confirm_of", "launch_round", MEMORY_LESSON, DECISION, "flags"}
    | {"config_key", PREDICTED}
)
CONFIRMATION = "confirmation"
SCHEDULE_VERDICT = "schedule_verdict"
BY_CONCURRENCY = "by_concurrency"
AGREEMENT = "agreement"
REFERENCE = "agreement_reference"
IMPORTANCE = "importance"
PASS_SETUP = "pass_setup"


class StudyInfo(Frozen):
    """What a study says about itself: the space it searches, its objective, where it ran."""

    name: str
    engine: str | None = None
    model: str | None = None
    space: SearchSpace | None = None
    env: dict[str, str | None] = Field(default_factory=dict, description="the space's env, secrets redacted")
    suite: str | None = None
    suite_ref: str | None = None
    objective: str | None = None
    simulated: bool = False
    gpus: list[str] = Field(default_factory=list)
    driver_version: str | None = None
    last_stop_reason: str | None = None
    confirmation: Confirmation | None = Field(default=None, description="the finalists measured again")

    @property
    def objective_metric(self) -> str:
        return self.space.objective.metric if self.space else "decode_tok_s"

    @property
    def objective_concurrency(self) -> int:
        return self.space.objective.concurrency if self.space else 1

    @property
    def levels(self) -> list[int]:
        """The load levels with a winner each, the primary first; empty for a study of one level."""
        return self.space.objective_levels() if self.space and self.space.objective.levels else []

    @property
    def tuned(self) -> list[str]:
        return list(self.space.tuned) if self.space else []


# ---------------------------------------------------------------- the study


def describe_study(
    study: optuna.Study, *, space: SearchSpace, env: Mapping[str, str | None], suite: str, inventory: GpuInventory,
    pass_setup: PassSetup | None = None,
) -> None:  # fmt: skip
    attrs: dict[str, Any] = {
        "engine": ", ".join(space.engine_names()),
        "model": space.model,
        "space_file": str(space.source) if space.source else None,
        "suite": suite,
        "suite_ref": space.suite_path(),
        "objective": f"{space.objective.metric} at concurrency {space.objective.concurrency} (higher is better)",
        "simulated": inventory.simulated,
        "gpus": [g.name for g in inventory.gpus],
        "driver_version": inventory.driver_version,
        "space": {**space.model_dump(mode="json"), "env": dict(env)},
        PASS_SETUP: pass_setup.model_dump(mode="json") if pass_setup else None,
    }
    for key, value in attrs.items():
        study.set_user_attr(key, value)


def pass_setup(study: StoredStudy | optuna.Study) -> PassSetup | None:
    """What the pass model is built from (:func:`describe_study`); None where no run of this version kept it."""
    try:
        return PassSetup.model_validate(study.user_attrs[PASS_SETUP])
    except (KeyError, ValidationError):
        return None


def record_prediction(trial: optuna.Trial, prediction: Prediction) -> None:
    """The rate the model-guided search predicted for this trial, before its launch (the dashboard shows it)."""
    trial.set_user_attr(PREDICTED, prediction.model_dump(mode="json"))


def record_stop_reason(study: optuna.Study, reason: str) -> None:
    study.set_user_attr("last_stop_reason", reason)


def record_confirmation(study: optuna.Study, confirmation: Confirmation | None) -> None:
    """The finalists' confirmed figures; None withdraws an old one (the study has changed since)."""
    study.set_user_attr(CONFIRMATION, confirmation.model_dump(mode="json") if confirmation else None)


def record_schedule_verdict(study: optuna.Study, verdict: ScheduleVerdict | None) -> None:
    """The speculation schedule's race, kept in the study's database (every host of a PostgreSQL study
    exports and reports it); None withdraws an old one (the study has changed since)."""
    study.set_user_attr(SCHEDULE_VERDICT, verdict.model_dump(mode="json") if verdict else None)


def schedule_verdict(study: StoredStudy) -> ScheduleVerdict | None:
    """The kept race; None when the schedule was never raced since the study last ran."""
    stored = study.user_attrs.get(SCHEDULE_VERDICT)
    if stored is None:
        return None  # most studies: the schedule's modules (engines, HTTP) stay unloaded
    from autotune.study.schedule import ScheduleVerdict

    try:
        return ScheduleVerdict.model_validate(stored)
    except ValidationError as exc:
        raise StorageError(
            f"study {study.study_name!r}: cannot read the schedule's verdict: {exc}",
            hint=f"run `autotune confirm {study.study_name} --schedule` again",
        ) from None


def study_info(study: StoredStudy | optuna.Study) -> StudyInfo:
    attrs = study.user_attrs
    stored = dict(attrs.get("space") or {})
    env = stored.pop("env", {}) or {}
    try:
        space = SearchSpace.model_validate(stored) if stored else None
    except ValidationError:
        space = None  # written by another autotune version: the trials still read
    return StudyInfo(
        name=study.study_name,
        engine=attrs.get("engine"),
        model=attrs.get("model"),
        space=space,
        env=env,
        suite=attrs.get("suite"),
        suite_ref=attrs.get("suite_ref"),
        objective=attrs.get("objective"),
        simulated=bool(attrs.get("simulated", False)),
        gpus=list(attrs.get("gpus", [])),
        driver_version=attrs.get("driver_version"),
        last_stop_reason=attrs.get("last_stop_reason"),
        confirmation=_confirmation(attrs.get(CONFIRMATION)),
    )


def agreement_reference(study: optuna.Study) -> Reference | None:
    """The study's reference outputs (read afresh: another worker may have set it meanwhile)."""
    stored = study.user_attrs.get(REFERENCE)
    try:
        return Reference.model_validate(stored) if isinstance(stored, dict) else None
    except ValidationError:
        return None


def _offer_reference(
    trial: optuna.Trial, outcome: TrialOutcome, agreement: Agreement, *, baseline: str | None
) -> Agreement:
    """The first baseline, or a run without speculation, that found no reference becomes it (and
    agrees with itself). A speculating trial never does (its drafter may be the broken one); trials
    that ran before any reference existed stay unchecked."""
    if outcome.kind is not OutcomeKind.OK or agreement.sample is None or agreement.reference_trial is not None:
        return agreement
    if not (baseline or _plain(outcome)):
        return agreement
    current = agreement_reference(trial.study)
    if current is not None and current.sample.key == agreement.sample.key:
        return compare(agreement.sample, current)  # another worker set it meanwhile
    reference = Reference(trial=trial.number, sample=agreement.sample)
    trial.study.set_user_attr(REFERENCE, reference.model_dump(mode="json"))
    return compare(agreement.sample, reference)


def _plain(outcome: TrialOutcome) -> bool:
    """Whether the trial ran without speculation, as far as its measurement tells."""
    measured = outcome.measurement
    accept = measured.metric("accept_length") if measured is not None else None
    return accept is None or accept.value <= 1.0


def _learn_numerics(trial: optuna.Trial, outcome: TrialOutcome, agreement: Agreement) -> None:
    """A run without speculation that departed from the reference and was not diverged shows where
    numerics alone change this model's text: later trials are not blamed for departing there."""
    if outcome.kind is not OutcomeKind.OK or not _plain(outcome) or agreement.reference_trial == trial.number:
        return
    if all(at is None for at in agreement.first_difference):
        return
    current = agreement_reference(trial.study)
    if current is not None and current.trial == agreement.reference_trial:
        trial.study.set_user_attr(REFERENCE, current.with_numerics(agreement).model_dump(mode="json"))


def record_importance(study: optuna.Study, importance: Importance, *, complete_trials: int) -> None:
    """Keep the importance computed when the study held ``complete_trials`` completed trials (for ``show``)."""
    study.set_user_attr(IMPORTANCE, {"complete_trials": complete_trials, "result": importance.model_dump(mode="json")})


def recorded_importance(study: StoredStudy) -> Importance | None:
    """The kept importance while it is current: computed on every completed trial the study holds."""
    stored = study.user_attrs.get(IMPORTANCE)
    if not isinstance(stored, dict) or stored.get("complete_trials") != study.complete_trials:
        return None
    try:
        return Importance.model_validate(stored.get("result"))
    except ValidationError:
        return None  # written by another autotune version: computed afresh


def _confirmation(stored: object) -> Confirmation | None:
    if not isinstance(stored, dict):
        return None
    try:
        return Confirmation.model_validate(stored)
    except ValidationError:
        return None  # written by another autotune version: shown as unconfirmed


# ---------------------------------------------------------------- one trial, written


class TrialStory:
    """One trial's record, written a phase at a time: who runs it (:meth:`begin`), what it proposes,
    what the study decided, how the launch ended (measured, or not launched), what it taught.

    What was queued with the trial (a baseline's name, a relaunch's original) is read once, here.
    """

    def __init__(self, trial: optuna.Trial) -> None:
        self.trial = trial
        self.proposal = _proposal(trial.user_attrs)
        name = trial.user_attrs.get("baseline")
        self.baseline = str(name) if name else None
        self.busy_wait_s = 0.0  # the wait for idle GPUs, written with the launch's end
        self.reason: str | None = None

    @classmethod
    def begin(cls, trial: optuna.Trial, *, host: str, pid: int, gpus: list[str]) -> TrialStory:
        """The trial names its host and worker first: a tuner that dies later leaves it claimable."""
        story = cls(trial)
        story._set(host=host, worker_pid=pid, gpus=gpus)
        return story

    def proposed(self, engine: str, *, config_key: str | None) -> None:
        """Before deciding: other workers see which effective configuration this trial measures."""
        self._set(engine=engine, **({"config_key": config_key} if config_key else {}))

    def decided(self, decision: Decision, *, flags: Mapping[str, FlagValue], reused: FrozenTrial | None = None) -> None:
        """What the study decided before launching, with the flags it decided on (secrets redacted). A
        skip ends the trial here; a reuse copies ``reused``'s measured facts (marked by the decision as
        borrowed), a reason the decision gave replacing the original's."""
        self._set(**{DECISION: decision.model_dump(mode="json"), "flags": dict(flags)})
        if isinstance(decision, Skip):
            self._ended(decision.outcome, decision.reason, flags)
            if decision.outcome.predicted:
                self._set(predicted_infeasible=True)
            if decision.predicted_pool_gib is not None:
                self._set(predicted_pool_gib=decision.predicted_pool_gib)
        if isinstance(decision, Reuse) and reused is not None:
            self._set(**{key: value for key, value in reused.user_attrs.items() if key not in NOT_COPIED})
            if decision.reason:
                self._set(reason=decision.reason)

    def not_launched(self, kind: OutcomeKind, reason: str, flags: Mapping[str, FlagValue]) -> None:
        """A launch that ended without a measurement: busy GPUs, Ctrl-C, a bug."""
        self._ended(kind, reason, flags)

    def measured(self, outcome: TrialOutcome, *, roofline: Roofline | None = None, slo: SLOSpec | None = None) -> None:
        """A launched trial's facts: outcome, effective config, metrics with units, memory, durations."""
        trial = self.trial
        self._ended(outcome.kind, outcome.reason, outcome.plan.flags)
        trial.set_user_attr("config_key", outcome.plan.config_key)
        if outcome.plan.notes:
            trial.set_user_attr("engine_rules_applied", outcome.plan.notes)
        if outcome.argv:
            trial.set_user_attr("argv", outcome.argv)
        if outcome.effective is not None:
            trial.set_user_attr("effective", outcome.effective.values)
            trial.set_user_attr("engine_version", outcome.effective.version)
        if outcome.measurement is not None:
            _record_measurement(trial, outcome.measurement)
        if len(outcome.measurements) > 1:
            by_level = {str(m.concurrency): _level(m, slo or SLOSpec()) for m in outcome.measurements}
            trial.set_user_attr(BY_CONCURRENCY, by_level)
        trial.set_user_attr(LAUNCH_TIME, round(outcome.launch_s, 2))
        trial.set_user_attr(MEASURE_TIME, round(outcome.measure_s, 2))
        trial.set_user_attr("stop time [s]", round(outcome.stop_s, 2))
        _record_memory(trial, outcome)
        if outcome.agreement is not None:
            _record_agreement(trial, outcome, outcome.agreement, baseline=self.baseline)
        if roofline is not None and roofline.share is not None:
            trial.set_user_attr("roofline_share", round(roofline.share, 3))
            trial.set_user_attr("ceiling_tok_s", round(roofline.ceiling_tok_s, 1))
        elif roofline is not None:
            trial.set_user_attr(ROOFLINE_UNKNOWN, roofline.unknown or ABOVE_COUNT)

    def learned(self, lesson: MemoryLesson | None, *, against_config: Mapping[str, str] | None = None) -> None:
        """The memory lesson in exact bytes (read back by resumed studies). ``against_config``: a server
        failure the sampler is told to avoid, the set-up having served before it, with the flag values its
        message names, predicted to fail alike (:mod:`autotune.study.named_failures`)."""
        if lesson is not None:
            self._set(**{MEMORY_LESSON: lesson.model_dump(mode="json")})
            if lesson.runtime_bytes is not None:
                self._set(memory_runtime_gib=round(lesson.runtime_bytes / 2**30, 3))
        if against_config is not None:
            note = "counted against this configuration: the set-up served earlier trials"
            self._set(reason=f"{self.reason}; {note}" if self.reason else note)
            if against_config:
                self._set(failure_names=dict(against_config))

    def _ended(self, kind: OutcomeKind, reason: str | None, flags: Mapping[str, FlagValue]) -> None:
        self.reason = reason
        if self.busy_wait_s > 0:
            self._set(busy_wait_s=round(self.busy_wait_s, 1))
        self._set(**{OUTCOME: kind.value, **({"reason": reason} if reason else {})})
        self._set(feasible=kind is OutcomeKind.OK, flags=dict(flags))

    def _set(self, **values: Any) -> None:
        for key, value in values.items():
            self.trial.set_user_attr(key, value)


def _metrics(measurement: Measurement) -> dict[str, dict[str, Any]]:
    return {m.name: {"value": m.value, "unit": m.unit, "ci95": m.ci95, "n": m.n} for m in measurement.metrics}


def _level(measurement: Measurement, slo: SLOSpec) -> dict[str, Any]:
    """One load level: its metrics and the SLO limits it breaks (judged per level, not per trial)."""
    broken = slo.broken({m.name: m.value for m in measurement.metrics})
    return {"metrics": _metrics(measurement), "slo_broken": broken}


def _record_measurement(trial: optuna.Trial, measurement: Measurement) -> None:
    """Metrics with units, precision, steadiness, per-category numbers and the server's own figures."""
    trial.set_user_attr("metrics", _metrics(measurement))
    for m in measurement.metrics:
        trial.set_user_attr(f"{m.name} [{m.unit}]", round(m.value, 3))
    trial.set_user_attr("precision_reached", measurement.precision_reached)
    if measurement.early_stopped:
        trial.set_user_attr("early_stopped", True)
    trial.set_user_attr("measurement_stop", measurement.stop_reason)
    if measurement.dropped:
        trial.set_user_attr("dropped_requests", measurement.dropped)
    if measurement.resent:
        trial.set_user_attr("resent_requests", measurement.resent)
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


def _record_agreement(
    trial: optuna.Trial, outcome: TrialOutcome, agreement: Agreement, *, baseline: str | None
) -> None:
    agreement = _offer_reference(trial, outcome, agreement, baseline=baseline)
    _learn_numerics(trial, outcome, agreement)
    share = agreement.share
    stored = AgreementRecord(
        share=share,
        reference_trial=agreement.reference_trial,
        shares=agreement.shares,
        first_difference=agreement.first_difference,
        outputs=agreement.sample.texts if agreement.sample else [],
        error=agreement.error,
    )
    trial.set_user_attr(AGREEMENT, stored.model_dump(mode="json", exclude_defaults=True))
    if share is not None:
        trial.set_user_attr("agreement [share]", round(share, 3))  # a dashboard column


def _record_memory(trial: optuna.Trial, outcome: TrialOutcome) -> None:
    """GiB readings for people."""
    facts = outcome.memory
    if facts is not None:
        for name, value in (
            ("weights", facts.weights_bytes),
            ("kv_pool", facts.kv_pool_bytes),
            ("graph", facts.graph_bytes),
        ):
            if value is not None:
                trial.set_user_attr(f"memory_{name}_gib", round(value / 2**30, 2))
        if facts.graph_batch is not None:
            trial.set_user_attr("memory_graph_batch", facts.graph_batch)
        if facts.free_at_start_bytes is not None:
            trial.set_user_attr("memory_server_free_gib", round(facts.free_at_start_bytes / 2**30, 3))
    if outcome.gpu_peak_used_bytes is not None:
        trial.set_user_attr("gpu_peak_used_gib", round(outcome.gpu_peak_used_bytes / 2**30, 2))
    if outcome.release_s is not None:
        trial.set_user_attr("memory_release_s", round(outcome.release_s, 2))
        trial.set_user_attr("memory_released", outcome.released)


def mark_stale(storage: optuna.storages.BaseStorage, study: str, trial: FrozenTrial, reason: str) -> None:
    """Fail a trial whose tuner died (it stays RUNNING otherwise): interrupted, to be measured again."""
    from optuna.trial import TrialState

    trial_id = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name(study), trial.number)
    storage.set_trial_user_attr(trial_id, OUTCOME, OutcomeKind.INTERRUPTED.value)
    storage.set_trial_user_attr(trial_id, "reason", reason)
    storage.set_trial_state_values(trial_id, TrialState.FAIL)


def enqueue_baseline(study: optuna.Study, params: dict[str, Any], name: str) -> None:
    study.enqueue_trial(params, user_attrs={"baseline": name})


def enqueue_confirmation(study: optuna.Study, params: dict[str, Any], record: TrialRecord, *, round_: int) -> None:
    """Queue a fresh launch of a measured configuration (a baseline keeps its name: its flags), in
    ``round_``: the relaunches queued together, so drift between rounds cancels from their comparison."""
    extra: dict[str, Any] = {"confirm_of": record.number, "launch_round": round_}
    if record.baseline:
        extra["baseline"] = record.baseline
    study.enqueue_trial(params, user_attrs=extra)


def enqueue_retry(study: optuna.Study, params: dict[str, Any], number: int) -> None:
    """Queue an interrupted trial's configuration again, marked as its retry."""
    study.enqueue_trial(params, user_attrs={"retry_of": number})


# ---------------------------------------------------------------- one trial, read


def answered_without_launch(trial: FrozenTrial) -> bool:
    """Whether the pre-launch rules answered this proposal without a launch (reused or skipped)."""
    decision = trial.user_attrs.get(DECISION)
    return isinstance(decision, dict) and decision.get("kind") != "launch"


def has_outcome(trial: FrozenTrial) -> bool:
    """Whether autotune recorded how the trial ended (a duplicate may only borrow from such a trial)."""
    return bool(trial.user_attrs.get(OUTCOME))


def trial_record(trial: FrozenTrial | StoredTrial) -> TrialRecord:
    attrs = trial.user_attrs
    state = trial.state if isinstance(trial, StoredTrial) else trial.state.name
    default_outcome = OutcomeKind.FAILED.value if state == "FAIL" else state.lower()
    lesson = attrs.get(MEMORY_LESSON)
    agreement = attrs.get(AGREEMENT)
    readings = {
        key: value
        for key, value in attrs.items()
        if key.startswith(READING_PREFIXES) and isinstance(value, (int, float, str)) and not isinstance(value, bool)
    }
    return TrialRecord(
        number=trial.number,
        state=state,
        outcome=attrs.get(OUTCOME, default_outcome),
        reason=attrs.get("reason"),
        # A levels study has one value per level, the primary first: the trial's value is the primary's.
        value=trial.values[0] if state == "COMPLETE" and trial.values else None,
        feasible=bool(attrs.get("feasible", False)),
        baseline=attrs.get("baseline"),
        decision=_decision(attrs.get(DECISION), legacy_duplicate_of=attrs.get("duplicate_of")),
        proposal=_proposal(attrs),
        launch=LaunchRecord(
            engine=attrs.get("engine"),
            flags=attrs.get("flags", {}),
            config_key=attrs.get("config_key"),
            effective=attrs.get("effective", {}),
            engine_version=attrs.get("engine_version"),
            argv=attrs.get("argv", []),
            host=attrs.get("host"),
            worker_pid=attrs.get("worker_pid") if isinstance(attrs.get("worker_pid"), int) else None,
            gpus=attrs.get("gpus", []),
            launch_s=attrs.get(LAUNCH_TIME),
        ),
        measurement=MeasurementRecord(
            metrics=_metric_records(attrs.get("metrics")),
            levels=_level_records(attrs.get(BY_CONCURRENCY)),
            measure_s=attrs.get(MEASURE_TIME),
            early_stopped=bool(attrs.get("early_stopped", False)),
            dropped_requests=list(attrs.get("dropped_requests") or []),
            resent_requests=list(attrs.get("resent_requests") or []),
            roofline_share=attrs.get("roofline_share"),
            readings=readings,
            agreement=AgreementRecord.model_validate(agreement) if isinstance(agreement, dict) else None,
        ),
        lessons=Lessons(
            memory=MemoryLesson.model_validate(lesson) if isinstance(lesson, dict) else None,
            failure_names=attrs.get("failure_names") or {},
        ),
    )


def _proposal(attrs: Mapping[str, Any]) -> Proposal:
    """What was enqueued with the trial (nothing, for a sampled one)."""
    return Proposal(
        retry_of=attrs.get("retry_of"), confirm_of=attrs.get("confirm_of"), launch_round=attrs.get("launch_round"),
        predicted=attrs.get(PREDICTED),
    )  # fmt: skip


_DECISION_ADAPTER: TypeAdapter[Decision] = TypeAdapter(Decision)


def _decision(stored: object, *, legacy_duplicate_of: object = None) -> Decision | None:
    """A stored decision; a study written before decisions were kept reads its duplicates as reuses."""
    if isinstance(stored, dict):
        try:
            return _DECISION_ADAPTER.validate_python(stored)
        except ValidationError:
            return None  # written by another autotune version
    if isinstance(legacy_duplicate_of, int):
        return Reuse(rule="duplicate", trial=legacy_duplicate_of, same_config=True)
    return None


def _metric_records(stored: object) -> dict[str, MetricRecord]:
    if not isinstance(stored, dict):
        return {}
    return {
        name: MetricRecord(value=m.get("value"), unit=str(m.get("unit") or ""), ci95=m.get("ci95"), n=m.get("n"))
        for name, m in stored.items()
        if isinstance(m, dict)
    }


def _level_records(stored: object) -> dict[int, LevelRecord]:
    """Per-level records; an older study's rounded figures (no "metrics" key) read as none."""
    if not isinstance(stored, dict):
        return {}
    return {
        int(level): LevelRecord(
            concurrency=int(level),
            metrics=_metric_records(entry["metrics"]),
            slo_broken=[str(name) for name in entry.get("slo_broken", [])],
        )
        for level, entry in stored.items()
        if isinstance(entry, dict) and isinstance(entry.get("metrics"), dict)
    }
