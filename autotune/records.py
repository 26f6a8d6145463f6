"""A trial as autotune reads it back from storage (built from Optuna's records by ``study.attrs``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field, SerializerFunctionWrapHandler, model_serializer

from autotune.decision import Adjusted, Decision, Launch, Reuse
from autotune.feasibility import MemoryLesson
from autotune.models import Frozen
from autotune.space import FlagValue


class MetricRecord(Frozen):
    """One stored metric with its unit, 95% CI half-width and sample count."""

    value: float | None = None
    unit: str = ""
    ci95: float | None = None
    n: int | None = None


class LevelRecord(Frozen):
    """One load level (concurrency) of a trial that measures several: its metrics and its SLO verdict."""

    concurrency: int
    metrics: dict[str, MetricRecord] = Field(default_factory=dict)
    slo_broken: list[str] = Field(default_factory=list, description="SLO limits this level exceeds")

    def metric_value(self, name: str) -> float | None:
        metric = self.metrics.get(name)
        return metric.value if metric else None


class AgreementRecord(Frozen):
    """A trial's greedy outputs against the study's reference, as stored."""

    share: float | None = Field(default=None, description="mean share of matching leading characters")
    reference_trial: int | None = None
    shares: list[float] = Field(default_factory=list)
    first_difference: list[int | None] = Field(default_factory=list, description="per prompt: first departing char")
    outputs: list[str] = Field(default_factory=list, description="this trial's greedy texts")
    error: str | None = None


class Prediction(Frozen):
    """What the model-guided search predicted for a trial before launching it."""

    tok_s: float = Field(description="the objective's predicted rate [tok/s]")
    search: str = Field(description="'model', or 'tpe' with why the model did not propose")


class Proposal(Frozen):
    """Why the study launched this configuration, when not sampled: a retry, or a finalist's relaunch."""

    retry_of: int | None = None
    confirm_of: int | None = Field(default=None, description="a fresh launch re-measuring this trial's config")
    launch_round: int | None = Field(
        default=None, description="a relaunch's round: the relaunches launched together, compared with drift out"
    )
    predicted: Prediction | None = Field(default=None, description="the pass model's rate, predicted before the launch")


class LaunchRecord(Frozen):
    """What was launched, where, and how long it took to serve."""

    engine: str | None = None
    flags: dict[str, FlagValue] = Field(default_factory=dict)
    config_key: str | None = None
    effective: dict[str, FlagValue | None] = Field(default_factory=dict)
    engine_version: str | None = None
    argv: list[str] = Field(default_factory=list)
    host: str | None = None
    worker_pid: int | None = None
    gpus: list[str] = Field(default_factory=list)
    launch_s: float | None = None


class MeasurementRecord(Frozen):
    """What the launch measured."""

    metrics: dict[str, MetricRecord] = Field(default_factory=dict)
    levels: dict[int, LevelRecord] = Field(default_factory=dict, description="per load level, in a levels study")
    measure_s: float | None = None
    early_stopped: bool = Field(default=False, description="measuring stopped as hopeless after a round")
    dropped_requests: list[str] = Field(default_factory=list, description="requests whose decode rate did not count")
    resent_requests: list[str] = Field(
        default_factory=list, description="requests sent again on a fresh connection (the first got no response)"
    )
    confirmed_launches: int | None = Field(
        default=None, description="set on a confirmed best: its value and CI are the mean over this many launches"
    )
    roofline_share: float | None = Field(default=None, description="decode tok/s / bandwidth ceiling")
    readings: dict[str, float | int | str] = Field(
        default_factory=dict, description="memory and roofline readings, as shown to people"
    )
    agreement: AgreementRecord | None = Field(default=None, description="greedy outputs vs the reference")


class Lessons(Frozen):
    """What the trial taught later ones."""

    memory: MemoryLesson | None = Field(default=None, description="what the trial taught about memory")
    failure_names: dict[str, str] = Field(
        default_factory=dict, description="flag values its server failure named (predicted to fail alike)"
    )


# ``show --json`` and ``report``'s summary.json print a trial as one flat object, in this order.
FLAT_ORDER = (
    "number",
    "state",
    "outcome",
    "reason",
    "value",
    "feasible",
    "baseline",
    "decision",
    "retry_of",
    "confirm_of",
    "launch_round",
    "predicted",
    "early_stopped",
    "dropped_requests",
    "resent_requests",
    "confirmed_launches",
    "config_key",
    "failure_names",
    "flags",
    "effective",
    "engine_version",
    "argv",
    "metrics",
    "engine",
    "roofline_share",
    "host",
    "worker_pid",
    "gpus",
    "launch_s",
    "measure_s",
    "memory",
    "agreement",
    "readings",
    "levels",
)
PARTS = ("proposal", "launch", "measurement", "lessons")


class TrialRecord(Frozen):
    """One trial as autotune reads it back from storage: its outcome, and its story in parts."""

    number: int
    state: str
    outcome: str
    reason: str | None = None
    value: float | None = None
    feasible: bool = False
    baseline: str | None = None
    decision: Decision | None = Field(
        default=None, description="what the study decided before launching (None: written before decisions were kept)"
    )
    proposal: Proposal = Proposal()
    launch: LaunchRecord = LaunchRecord()
    measurement: MeasurementRecord = MeasurementRecord()
    lessons: Lessons = Lessons()

    @model_serializer(mode="wrap")
    def _flat(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Printed flat, as before the parts: scripts read ``show --json`` by these keys."""
        nested: dict[str, Any] = handler(self)
        flat = {key: value for key, value in nested.items() if key not in PARTS}
        for part in PARTS:
            flat.update(nested.get(part) or {})
        return {key: flat[key] for key in FLAT_ORDER if key in flat}

    @property
    def flags(self) -> dict[str, FlagValue]:
        """The flags it launched (or was decided on), secrets redacted."""
        return self.launch.flags

    @property
    def engine(self) -> str | None:
        return self.launch.engine

    @property
    def confirm_of(self) -> int | None:
        """The trial whose configuration this one relaunches (a race's launch)."""
        return self.proposal.confirm_of

    @property
    def reused_from(self) -> int | None:
        """The trial whose measurement this one reuses, not launched itself (a rule's decision)."""
        return self.decision.trial if isinstance(self.decision, Reuse) else None

    @property
    def adjusted(self) -> list[Adjusted]:
        """What the study's rules launched in place of sampled values."""
        return self.decision.adjusted if isinstance(self.decision, Launch) else []

    @property
    def served(self) -> bool:
        """Its own launch served and was measured (not a borrowed measurement)."""
        return self.outcome == "ok" and self.reused_from is None

    def metric_value(self, name: str) -> float | None:
        metric = self.measurement.metrics.get(name)
        return metric.value if metric else None

    def metric_ci95(self, name: str) -> float | None:
        metric = self.measurement.metrics.get(name)
        return metric.ci95 if metric else None
