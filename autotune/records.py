"""A trial as autotune reads it back from storage (built from Optuna's records by ``study.attrs``)."""

from __future__ import annotations

from pydantic import Field

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
    duplicate_of: int | None = None
    retry_of: int | None = None
    confirm_of: int | None = Field(default=None, description="a fresh launch re-measuring this trial's config")
    sizing_from: int | None = Field(
        default=None, description="launched with the memory sizing of this served trial in place of the sampled one"
    )
    fraction_between_deaths_of: list[int] = Field(
        default_factory=list,
        description="launched at a memory fraction inside what these trials' memory deaths left open, in place of "
        "the sampled one",
    )
    early_stopped: bool = Field(default=False, description="measuring stopped as hopeless after a round")
    confirmed_launches: int | None = Field(
        default=None, description="set on a confirmed best: its value and CI are the mean over this many launches"
    )
    config_key: str | None = None
    rate_key: str | None = Field(default=None, description="identity of its single-stream decode rate, where known")
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
    def served(self) -> bool:
        """Its own launch served and was measured (not a borrowed measurement)."""
        return self.outcome == "ok" and self.duplicate_of is None

    def metric_value(self, name: str) -> float | None:
        metric = self.metrics.get(name)
        return metric.value if metric else None

    def metric_ci95(self, name: str) -> float | None:
        metric = self.metrics.get(name)
        return metric.ci95 if metric else None
