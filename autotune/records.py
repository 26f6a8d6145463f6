"""A trial as autotune reads it back from storage (built from Optuna's records by ``study.attrs``)."""

from __future__ import annotations

from pydantic import Field

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


class TrialRecord(Frozen):
    """One trial as autotune reads it back from storage."""

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
    retry_of: int | None = None
    confirm_of: int | None = Field(default=None, description="a fresh launch re-measuring this trial's config")
    launch_round: int | None = Field(
        default=None, description="a relaunch's round: the relaunches launched together, compared with drift out"
    )
    early_stopped: bool = Field(default=False, description="measuring stopped as hopeless after a round")
    dropped_requests: list[str] = Field(default_factory=list, description="requests whose decode rate did not count")
    resent_requests: list[str] = Field(
        default_factory=list, description="requests sent again on a fresh connection (the first got no response)"
    )
    confirmed_launches: int | None = Field(
        default=None, description="set on a confirmed best: its value and CI are the mean over this many launches"
    )
    config_key: str | None = None
    failure_names: dict[str, str] = Field(
        default_factory=dict, description="flag values its server failure named (predicted to fail alike)"
    )
    flags: dict[str, FlagValue] = Field(default_factory=dict)
    effective: dict[str, FlagValue | None] = Field(default_factory=dict)
    engine_version: str | None = None
    argv: list[str] = Field(default_factory=list)
    metrics: dict[str, MetricRecord] = Field(default_factory=dict)
    engine: str | None = None
    roofline_share: float | None = Field(default=None, description="decode tok/s / bandwidth ceiling")
    host: str | None = None
    worker_pid: int | None = None
    gpus: list[str] = Field(default_factory=list)
    launch_s: float | None = None
    measure_s: float | None = None
    memory: MemoryLesson | None = Field(default=None, description="what the trial taught about memory")
    agreement: AgreementRecord | None = Field(default=None, description="greedy outputs vs the reference")
    readings: dict[str, float | int | str] = Field(
        default_factory=dict, description="memory and roofline readings, as shown to people"
    )
    levels: dict[int, LevelRecord] = Field(default_factory=dict, description="per load level, in a levels study")

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
        metric = self.metrics.get(name)
        return metric.value if metric else None

    def metric_ci95(self, name: str) -> float | None:
        metric = self.metrics.get(name)
        return metric.ci95 if metric else None
