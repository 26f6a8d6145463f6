"""A trial as autotune reads it back from storage (built from Optuna's records in study.py)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from autotune.space import FlagValue


class TrialRecord(BaseModel):
    """One trial as autotune reads it back from storage."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    number: int
    state: str
    outcome: str
    reason: str | None = None
    value: float | None = None
    feasible: bool = False
    baseline: str | None = None
    duplicate_of: int | None = None
    flags: dict[str, FlagValue] = Field(default_factory=dict)
    effective: dict[str, FlagValue | None] = Field(default_factory=dict)
    engine_version: str | None = None
    argv: list[str] = Field(default_factory=list)
    metrics: dict[str, dict[str, float | str | None]] = Field(default_factory=dict)
    engine: str | None = None
    roofline_share: float | None = Field(default=None, description="decode tok/s / bandwidth ceiling")
    host: str | None = None
    gpus: list[str] = Field(default_factory=list)
    launch_s: float | None = None
    measure_s: float | None = None

    def metric_value(self, name: str) -> float | None:
        metric = self.metrics.get(name)
        value = metric.get("value") if metric else None
        return float(value) if isinstance(value, (int, float)) else None
