"""A real engine's landscape, measured once and kept as data: the format of ``benchmarks/landscapes/*.json``.

``record_landscape.py`` writes it; ``search_efficiency.py --recorded FILE`` replays searches on it.
A landscape is a grid: every combination of each tuned flag's recorded values (a flag whose ``when``
does not hold is left out, as the study would leave it out), each configuration launched several
times on fresh servers, in an interleaved order so that drift of the machine spreads over all of
them. Nothing is summarised away: every launch keeps its outcome, value and seconds.
"""

from __future__ import annotations

import statistics
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from autotune.measure.protocol import MeasureSettings
from autotune.space import FlagValue


class _Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GridFlag(_Record):
    """One tuned flag of the grid: the values recorded, and the space's condition for the flag."""

    name: str
    values: list[FlagValue]
    when: str | None = None


class RecordedLaunch(_Record):
    """One fresh launch of one configuration: what the study's trial path measured."""

    round: int = Field(ge=0, description="which pass over the grid (0 = first)")
    outcome: str = Field(description="the trial outcome kind: ok, or why it failed")
    reason: str | None = None
    value: float | None = Field(default=None, description="the objective as measured (None unless ok)")
    rel_ci95: float | None = None
    accept_length: float | None = None
    rounds: int | None = Field(default=None, description="measurement rounds the protocol ran")
    launch_s: float
    measure_s: float
    stop_s: float
    started_at: str


class RecordedConfig(_Record):
    """A grid point (active flags only, before the engine's normalisation) and its launches."""

    flags: dict[str, FlagValue]
    launches: list[RecordedLaunch]

    @property
    def values(self) -> list[float]:
        return [launch.value for launch in self.launches if launch.value is not None]

    @property
    def mean(self) -> float | None:
        values = self.values
        return statistics.fmean(values) if values and len(values) == len(self.launches) else None


class Machine(_Record):
    hardware: str = Field(description="GPU or CPU model and count, as the machine reported it")
    driver: str | None = None
    cores: int | None = None


class RecordedLandscape(_Record):
    name: str
    recorded_at: str
    machine: Machine
    engine: str
    engine_version: str
    model: str = Field(description="the target model (file name and size)")
    draft_model: str | None = None
    space: str = Field(description="the space file the grid was cut from (relative to the repository)")
    fixed: dict[str, FlagValue] = Field(description="flags every launch had (the space's fixed flags)")
    grid: list[GridFlag]
    objective: str
    measurement: MeasureSettings = Field(description="the measurement settings every launch used")
    configs: list[RecordedConfig]

    @property
    def best(self) -> RecordedConfig:
        """The configuration with the highest mean over its launches (all of them succeeded)."""
        scored = [c for c in self.configs if c.mean is not None]
        return max(scored, key=lambda c: c.mean or 0.0)


def load_recorded(path: Path) -> RecordedLandscape:
    return RecordedLandscape.model_validate_json(path.read_text())
