"""Memory feasibility: predict, before launching, whether a candidate fits; learn from launches.

Two sources, both things a user's machine can know:

1. The engine's memory rule with the free memory NVML reports and the weight bytes of the model
   (from its safetensors index or the space's ``model_bytes``, later from the server's own log):
   SGLang's static pool is ``fraction x free - weights``; at or below zero it cannot start.
2. Launches that died of memory. Feasibility is monotone: a configuration that failed "too low"
   fails for every smaller fraction with demands at least as large (context, running requests,
   draft tokens); one that failed "too high" fails for every larger fraction with graph demands
   at least as large (graph batch, draft tokens). Flags an engine's rules do not order must be
   equal for a failure to speak for a candidate.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from autotune.space import FlagValue

Side = Literal["too-low", "too-high"]


class MemoryRules(BaseModel):
    """An engine's memory monotonicity, as data (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fraction_flag: str
    default_fraction: float | None = Field(default=None, description="fraction assumed when the flag is unset")
    tp_flag: str = "tp-size"
    pool_demand: frozenset[str] = frozenset()
    pool_irrelevant: frozenset[str] = frozenset()
    headroom_demand: frozenset[str] = frozenset()
    headroom_irrelevant: frozenset[str] = frozenset()


class Prediction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    feasible: bool
    side: Side | None = None
    reason: str | None = None
    pool_bytes: float | None = Field(default=None, description="predicted static pool per GPU")


class Observation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    flags: dict[str, FlagValue]
    side: Side
    trial: int | None = None


def _number(value: FlagValue | None) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(value)
    except ValueError:
        return None


def _dominates(
    failed: Mapping[str, FlagValue],
    candidate: Mapping[str, FlagValue],
    *,
    demand: frozenset[str],
    ignore: frozenset[str],
) -> bool:
    """Every demand flag of the candidate is at least the failed one's; every other flag equal."""
    for name in set(failed) | set(candidate):
        if name in ignore:
            continue
        a, b = failed.get(name), candidate.get(name)
        if name in demand and a is not None and b is not None:
            fa, fb = _number(a), _number(b)
            if fa is None or fb is None or fb < fa:
                return False
        elif a != b:
            return False
    return True


class FeasibilityModel:
    """What is known about memory in one study; ``predict`` before each launch, ``observe`` after.

    Args:
        rules: the engine's memory rules (None: never predict anything).
        free_bytes: free memory per GPU at study start (the smallest over the GPUs used).
        weight_bytes: the model's weight bytes, all shards together (None if unknown).
    """

    def __init__(self, rules: MemoryRules | None, *, free_bytes: float | None, weight_bytes: float | None) -> None:
        self.rules = rules
        self.free_bytes = free_bytes
        self.weight_bytes = weight_bytes
        self.weights_per_gpu_logged: float | None = None
        self.failures: list[Observation] = []

    def observe(self, flags: Mapping[str, FlagValue], side: Side, *, trial: int | None = None) -> None:
        self.failures.append(Observation(flags=dict(flags), side=side, trial=trial))

    def observe_weights(self, bytes_per_gpu: float) -> None:
        """The weights per GPU a server logged: better than the estimate from the model's files."""
        self.weights_per_gpu_logged = bytes_per_gpu

    def _fraction(self, flags: Mapping[str, FlagValue]) -> float | None:
        assert self.rules is not None
        value = _number(flags.get(self.rules.fraction_flag))
        return value if value is not None else self.rules.default_fraction

    def weights_per_gpu(self, flags: Mapping[str, FlagValue]) -> float | None:
        if self.weights_per_gpu_logged is not None:
            return self.weights_per_gpu_logged
        if self.weight_bytes is None or self.rules is None:
            return None
        tp = _number(flags.get(self.rules.tp_flag)) or 1.0
        return self.weight_bytes / tp

    def predict(self, flags: Mapping[str, FlagValue]) -> Prediction:
        if self.rules is None:
            return Prediction(feasible=True)
        rules = self.rules
        fraction = self._fraction(flags)
        weights = self.weights_per_gpu(flags)
        pool = fraction * self.free_bytes - weights if None not in (fraction, weights, self.free_bytes) else None  # type: ignore[operator]
        if weights is not None and self.free_bytes is not None and weights >= self.free_bytes:
            return Prediction(
                feasible=False, side="too-high", pool_bytes=pool,
                reason=f"the weights ({weights / 2**30:.1f} GiB per GPU) exceed the free memory "
                f"({self.free_bytes / 2**30:.1f} GiB)",
            )  # fmt: skip
        if pool is not None and pool <= 0:
            return Prediction(
                feasible=False, side="too-low", pool_bytes=pool,
                reason=f"{rules.fraction_flag} {fraction:g} of {self.free_bytes / 2**30:.1f} GiB free leaves nothing "  # type: ignore[operator]
                f"after {weights / 2**30:.1f} GiB of weights per GPU",  # type: ignore[operator]
            )  # fmt: skip
        for failure in self.failures:
            failed_fraction = self._fraction(failure.flags)
            if fraction is None or failed_fraction is None:
                continue
            ignore_common = frozenset({rules.fraction_flag})
            if failure.side == "too-low" and fraction <= failed_fraction and _dominates(
                failure.flags, flags, demand=rules.pool_demand, ignore=ignore_common | rules.pool_irrelevant
            ):
                return Prediction(
                    feasible=False, side="too-low", pool_bytes=pool,
                    reason=f"trial {failure.trial} ran out of pool memory at {rules.fraction_flag} "
                    f"{failed_fraction:g} with demands no larger",
                )  # fmt: skip
            if failure.side == "too-high" and fraction >= failed_fraction and _dominates(
                failure.flags, flags, demand=rules.headroom_demand, ignore=ignore_common | rules.headroom_irrelevant
            ):
                return Prediction(
                    feasible=False, side="too-high", pool_bytes=pool,
                    reason=f"trial {failure.trial} ran out of headroom at {rules.fraction_flag} "
                    f"{failed_fraction:g} with graph demands no larger",
                )  # fmt: skip
        return Prediction(feasible=True, pool_bytes=pool)


def model_weight_bytes(model: str) -> float | None:
    """Weight bytes of a local model folder (safetensors index, else the files' sizes); None if remote."""
    folder = Path(model)
    if not folder.is_dir():
        return None
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        try:
            total = json.loads(index.read_text())["metadata"]["total_size"]
            return float(total)
        except (KeyError, TypeError, ValueError):
            pass
    sizes = [p.stat().st_size for p in folder.glob("*.safetensors")]
    return float(sum(sizes)) if sizes else None
