"""The measurement protocol's knobs, defined once: a space's ``measurement:`` section and the
settings one measurement runs with (``MeasureSettings``, below) both extend this model.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

ObjectiveMetric = Literal["decode_tok_s", "output_tok_s"]


class MeasureProtocol(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    warmup_requests: int = Field(default=2, ge=0, description="sent first and discarded")
    prompts_per_round: int | None = Field(default=None, ge=1, description="use the suite's first N prompts")
    max_tokens: int | None = Field(default=None, ge=1, description="cap on every prompt's max_tokens")
    ignore_eos: bool = Field(default=False, description="fixed-length generation instead of natural length")
    target_rel_ci: float = Field(default=0.02, gt=0, lt=1, description="stop when the 95% CI is within ±this")
    min_rounds: int = Field(default=3, ge=1, description="rounds before the stop rule may fire")
    # A speculating server's rounds vary by several %, so ±2 % may take tens of rounds: the time cap,
    # not a small round count, bounds a measurement (docs/how-it-works.md, "Measurement").
    max_rounds: int = Field(default=40, ge=1)
    max_seconds: float = Field(default=120.0, gt=0, description="time cap per concurrency level")
    drift_tolerance: float = Field(default=0.03, gt=0, description="early vs late rounds; beyond it: drift")
    request_timeout_s: float = Field(default=300.0, gt=0)

    @model_validator(mode="after")
    def _check_rounds(self) -> MeasureProtocol:
        if self.min_rounds > self.max_rounds:
            raise ValueError(f"min_rounds: {self.min_rounds} is greater than max_rounds ({self.max_rounds})")
        return self


class EarlyStop(BaseModel):
    """Stop measuring a configuration that cannot plausibly reach the best so far: after a round, it
    is hopeless when even ``sigmas`` sd of the noise (``noise_rel``) above its estimate stays below
    ``bar``, the best measured value. At 3 sd, one truly as good as the best is stopped about 1 time
    in 700, while one 20 % slower on a 5 % noise floor stops after its first round."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    bar: float = Field(gt=0, description="the best value measured so far")
    noise_rel: float = Field(gt=0, lt=1, description="relative sd of a configuration's measured value")
    sigmas: float = Field(default=3.0, gt=0)

    def hopeless(self, value: float) -> bool:
        return value * (1 + self.sigmas * self.noise_rel) < self.bar


class MeasureSettings(MeasureProtocol):
    """One measurement's settings: the protocol, the objective and the concurrency level measured."""

    objective: ObjectiveMetric = "decode_tok_s"
    concurrency: int = Field(default=1, ge=1)
    early_stop: EarlyStop | None = Field(default=None, description="stop a hopeless measurement after a round")
