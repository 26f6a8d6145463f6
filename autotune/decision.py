"""What the study decided for a trial before launching anything: one typed record.

Arrow: a normalised :class:`~autotune.engines.base.LaunchPlan` and the study's history -> the named
rules of :mod:`autotune.study.rules` -> a :class:`Decision`: launch (the exact plan, with every value
a rule changed and where it came from), reuse a measured result (whose, and why), or skip (the
outcome, the reason, the constraint the sampler is told). The runner acts on it, storage keeps it
(``decision`` in the trial's attrs), the sampler learns from it and ``show`` explains it.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from autotune.engines.base import LaunchPlan
from autotune.models import Frozen
from autotune.outcomes import OutcomeKind
from autotune.space import FlagValue


class Adjustment(Frozen):
    """One value a rule launched in place of the sampled one."""

    flag: str
    sampled: FlagValue | None = Field(description="the value the sampler proposed (None: not set)")
    launched: FlagValue | None = Field(description="the value the server was launched with (None: not set)")


class Adjusted(Frozen):
    """What one rule changed in a plan, and the trials its evidence came from."""

    rule: str
    values: list[Adjustment]
    trials: list[int] = Field(default_factory=list)
    why: str


class Launch(Frozen):
    """Launch ``plan`` as it is: the sampled configuration after the engine's and the study's rules."""

    kind: Literal["launch"] = "launch"
    plan: LaunchPlan
    adjusted: list[Adjusted] = Field(default_factory=list, description="rules that changed what is launched")


class Reuse(Frozen):
    """Not launched: trial ``trial``'s measurement stands for this configuration."""

    kind: Literal["reuse"] = "reuse"
    rule: str
    trial: int
    same_config: bool = Field(description="the same effective configuration (else one the objective cannot tell)")
    reason: str | None = None


class Skip(Frozen):
    """Not launched, and nothing measured: the configuration cannot run, or is predicted not to."""

    kind: Literal["skip"] = "skip"
    rule: str
    outcome: OutcomeKind
    reason: str
    constraint: Literal["memory", "config"]
    trials: list[int] = Field(default_factory=list, description="the trials the prediction rests on")
    predicted_pool_gib: float | None = None


Decision = Annotated[Launch | Reuse | Skip, Field(discriminator="kind")]


class Wait(Frozen):
    """Not yet decidable: another worker is measuring the same configuration (never stored)."""

    trial: int
