"""What the model-guided search (:mod:`autotune.study.guided`) reads of a space's candidates and a
study's trials: the flags it chooses (the speculative ones and a tuned TP), a candidate's launch as the
pass model describes it at its own TP, a measured trial as a calibration point, and the errors of the
rates predicted before the launches."""

from __future__ import annotations

import json
import math
import random
import statistics
from collections.abc import Mapping, Sequence
from typing import Any

from autotune.calibration_points import CalibrationPoint
from autotune.engines import DEFAULT_ENGINE, get_engine
from autotune.pass_setup import tp_flag
from autotune.records import TrialRecord
from autotune.space import CategoricalParam, FloatParam, IntParam, SearchSpace
from passmodel import launch_flags
from passmodel.config import LaunchConfig
from passmodel.profile import TwinProfile

JUDGED = 5  # the last predictions judged for the fallback
SPECULATIVE = "speculative-"
TP = "tp-size"  # the pass model's spelling of a launch's TP (any engine's flag, as the pass model reads it)
# The objectives the model predicts: a request's decode rate, the total output rate.
RATES = ("decode_tok_s", "output_tok_s")


class Draw:
    """A :class:`~autotune.space.TrialLike` that draws each value at random (a pool candidate)."""

    def __init__(self, rng: random.Random, fixed: Mapping[str, Any] | None = None) -> None:
        self.rng = rng
        self.fixed = fixed or {}

    def suggest_int(self, name: str, low: int, high: int, *, step: int = 1, log: bool = False) -> int:
        if name in self.fixed:
            return int(self.fixed[name])
        return low + step * self.rng.randrange((high - low) // step + 1)

    def suggest_float(
        self, name: str, low: float, high: float, *, step: float | None = None, log: bool = False
    ) -> float:
        if name in self.fixed:
            return float(self.fixed[name])
        if step:
            return low + step * self.rng.randrange(int(round((high - low) / step)) + 1)
        return self.rng.uniform(low, high)

    def suggest_categorical(self, name: str, choices: Any) -> Any:
        return self.fixed[name] if name in self.fixed else self.rng.choice(list(choices))


def spec_key(cfg: LaunchConfig) -> tuple[Any, ...]:
    spec = cfg.spec
    drafter = spec.drafter.path if spec.drafter is not None else None
    adaptive = spec.adaptive is not None
    return (cfg.tp_size, spec.kind, spec.num_steps, spec.eagle_topk, spec.num_draft_tokens, drafter, adaptive)


def shape(spec: tuple[Any, ...]) -> tuple[str, bool] | None:
    """A speculative launch's shape (a :func:`spec_key`'s): its drafter ("mtp": the MTP heads) and whether
    it drafts a tree (topk above 1; a DFlash block is one shape); None without speculation."""
    _, kind, _, topk, _, drafter, _ = spec
    return None if kind == "none" else (drafter or kind, kind != "dflash" and (topk or 1) > 1)


def apart(a: tuple[Any, ...], b: tuple[Any, ...]) -> float:
    """How far apart two launches (each a :func:`spec_key`) are: the mean |log2| ratio of their TP, steps, topk
    and tokens a pass (a chain's step from 3 to 4 is 0.18; a doubling of one of them 0.25)."""
    return sum(abs(math.log2((a[i] or 1) / (b[i] or 1))) for i in (0, 2, 3, 4)) / 4


def judged_error(records: Sequence[TrialRecord], space: SearchSpace, last: int = JUDGED) -> float | None:
    """The median relative error of the last ``last`` rates predicted before their launch; None with fewer."""
    errors = prediction_errors(records, space)
    return statistics.median(errors[-last:]) if len(errors) >= last else None


def prediction_errors(records: Sequence[TrialRecord], space: SearchSpace) -> list[float]:
    """Each measured trial's error |predicted / measured - 1|, of the rate predicted before its launch."""
    errors = []
    for record in records:
        predicted = record.proposal.predicted
        measured = record.metric_value(space.objective.metric) if point_of(record, space) is not None else None
        if predicted is not None and measured and record.confirm_of is None:
            errors.append(abs(predicted.tok_s / measured - 1))
    return errors


def point_of(record: TrialRecord, space: SearchSpace) -> CalibrationPoint | None:
    """The record's own measured launch as the objective's point (None: not launched, or reused another's).

    A decode rate (``decode_tok_s``: a request's tokens between its first and its last, the client's
    measure) is predicted without prefill, for one request; the total output rate with its prompts' prefill.
    Its flags are the speculative ones and the launch's TP (:data:`TP`).
    """
    metric = space.objective.metric
    level = space.objective.concurrency
    value = record.metric_value(metric) if not space.objective.levels else None
    spec = get_engine(record.engine or space.engine or DEFAULT_ENGINE).calibration_flags(record.flags)
    flags = {**spec, TP: tp_of(space, record.flags)} if spec is not None else None
    if not record.served or flags is None or metric not in RATES or value is None or value <= 0:
        return None
    completion = record.measurement.metrics.get("completion_tokens")
    prompt = record.measurement.metrics.get("prompt_tokens")
    output_len = round(completion.value / completion.n) if completion and completion.value and completion.n else None
    input_len = round(prompt.value / prompt.n) if prompt and prompt.value and prompt.n else 0
    return CalibrationPoint(
        flags=flags,
        concurrency=level,
        input_len=0 if metric == "decode_tok_s" else input_len,
        output_len=output_len or space.measurement.max_tokens or 256,
        tok_s=value * level if metric == "decode_tok_s" else value,
        accept_length=record.metric_value("accept_length"),
    )


def model_params(space: SearchSpace, params: Mapping[str, Any]) -> dict[str, Any]:
    """The parameters the model chooses: the speculative flags and, where tuned, TP."""
    tp = tp_flag(space)
    return {k: v for k, v in params.items() if k.startswith(SPECULATIVE) or k == tp}


def key(params: Mapping[str, Any]) -> str:
    return json.dumps(params, sort_keys=True, default=str)


def tp_of(space: SearchSpace, flags: Mapping[str, Any]) -> int:
    """A launch's TP: its own flag (tuned or fixed), else 1."""
    value = {**space.fixed, **flags}.get(tp_flag(space))
    try:
        return max(1, int(value)) if value is not None and not isinstance(value, bool) else 1
    except ValueError:
        return 1


def flags_of(space: SearchSpace, params: Mapping[str, Any]) -> dict[str, Any]:
    """A candidate's flags as launched: the fixed ones and its parameters (``false`` leaves a flag out)."""
    return {k: v for k, v in {**space.fixed, **params}.items() if v is not False}


def config_of(profile: TwinProfile, space: SearchSpace, flags: Mapping[str, Any]) -> LaunchConfig | None:
    """The launch the model reads in ``flags``, at their own TP; None where it cannot describe them (a TP
    above the GPUs it is built for included)."""
    spec = get_engine(space.engine or DEFAULT_ENGINE).calibration_flags(dict(flags))
    tp = tp_of(space, flags)
    if spec is None or tp > profile.gpus.count:
        return None
    try:
        return launch_flags.launch_config(profile, {**spec, TP: tp})
    except ValueError:
        return None


def depth(profile: TwinProfile, space: SearchSpace, params: Mapping[str, Any]) -> int | None:
    """Draft tokens verified a pass beyond the first (0: no speculation); None where the model cannot say."""
    cfg = config_of(profile, space, flags_of(space, params))
    return None if cfg is None else cfg.spec.tokens_per_pass - 1


def neighbours(param: IntParam | FloatParam | CategoricalParam, value: Any) -> list[Any]:
    if isinstance(param, CategoricalParam):
        return [c for c in param.choices if c != value]
    step = param.step or (param.high - param.low) / 10
    return [v for v in (value - step, value + step) if param.low <= v <= param.high]


def distance(space: SearchSpace, a: Mapping[str, Any], b: Mapping[str, Any]) -> float:
    """Mean per-flag difference over the speculative flags either sets: numbers by their range, others 0/1."""
    names = sorted(set(a) | set(b))
    if not names:
        return 0.0
    total = 0.0
    for name in names:
        param = space.tuned.get(name)
        if name not in a or name not in b:
            total += 1.0
        elif isinstance(param, (IntParam, FloatParam)) and param.high > param.low:
            total += abs(float(a[name]) - float(b[name])) / (param.high - param.low)
        else:
            total += 0.0 if a[name] == b[name] else 1.0
    return total / len(names)
