"""Measured points, the twin's prediction of each, and a profile fitted to them.

A point is one measured launch: the speculative flags as the engine spells them, concurrency,
input and output length, the total output rate and, when known, the accept length. The twin
predicts a point from the profile's physics: each of ``concurrency`` requests prefills its input
together, then decodes ``output_len`` tokens in verify passes of :func:`physics.decode_pass_seconds`,
``accept_length`` tokens a pass (the measured one where given, else the profile's acceptance).
:func:`fit` scales the per-pass constants the points can tell apart (:func:`identifiable_knobs`;
the rest keep the setup's values) to the points by a Nelder-Mead search on the log error, held
near the starting profile.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from autotune_twin import physics
from autotune_twin.launch import LaunchConfig, LaunchError, resolve_launch
from autotune_twin.profile import CATEGORIES, DrafterSpec, TwinProfile
from autotune_twin.setup import acceptance_table


class PointsError(Exception):
    """A points file or a flag set could not be read; the message names the file and line."""


class Point(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    flags: dict[str, Any] = Field(default_factory=dict)
    concurrency: int = Field(ge=1)
    input_len: int = Field(ge=0)
    output_len: int = Field(ge=1)
    tok_s: float = Field(gt=0)
    accept_length: float | None = Field(default=None, ge=1)

    @model_validator(mode="before")
    @classmethod
    def _synthetic_length(cls, data: Any) -> Any:
        """A vLLM launch with synthetic acceptance ran at the length it set: the point's accept length
        where the point gives none (from its rates, where it set those: 1 + their sum)."""
        if not isinstance(data, dict) or data.get("accept_length") is not None:
            return data
        config = (data.get("flags") or {}).get("speculative-config")
        if isinstance(config, str):
            try:
                config = json.loads(config)
            except json.JSONDecodeError:
                return data  # launch_config names the flag when it reads it
        if not isinstance(config, dict) or config.get("rejection_sample_method") != "synthetic":
            return data
        length, rates = config.get("synthetic_acceptance_length"), config.get("synthetic_acceptance_rates")
        if length is None and isinstance(rates, list):
            length = 1.0 + sum(float(r) for r in rates)
        return {**data, "accept_length": length}


def load_points(path: Path) -> list[tuple[int, Point]]:
    """(line number, point) for each JSON object a line; blank lines are skipped.

    Raises:
        PointsError: unreadable file, a line that is not JSON or not a point, or no points at all.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise PointsError(f"{path}: cannot read: {exc.strerror}") from None
    points = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            points.append((number, Point.model_validate_json(line)))
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err["loc"]) or "(line)"
            raise PointsError(f"{path}:{number}: {where}: {err['msg']}") from None
    if not points:
        raise PointsError(f"{path}: no points")
    return points


# ---------------------------------------------------------------------------------------------
# From flags to the twin's launch configuration


def flags_from_text(text: str) -> dict[str, Any]:
    """``--speculative-num-steps 3 --speculative-eagle-topk 1`` -> the points' flag mapping."""
    flags: dict[str, Any] = {}
    words = shlex.split(text)
    for i, word in enumerate(words):
        if not word.startswith("--"):
            continue
        name, equals, value = word[2:].partition("=")
        if equals:
            flags[name] = value
        elif i + 1 < len(words) and not words[i + 1].startswith("--"):
            flags[name] = words[i + 1]
        else:
            flags[name] = True  # a switch
    return flags


VLLM_METHODS = {"eagle": "EAGLE", "eagle3": "EAGLE3", "mtp": "NEXTN", "deepseek_mtp": "NEXTN"}


def _from_vllm(flags: dict[str, Any]) -> dict[str, Any]:
    """vLLM's ``speculative-config`` (a mapping or its JSON: ``num_speculative_tokens`` K, and
    optionally ``method`` and ``model``) as the SGLang flags of the same drafting: K steps, topk 1."""
    config = flags.pop("speculative-config", None)
    if config is None:
        return flags
    if isinstance(config, str):
        try:
            config = json.loads(config)
        except json.JSONDecodeError:
            raise ValueError("speculative-config: not JSON") from None
    if not isinstance(config, dict) or "num_speculative_tokens" not in config:
        raise ValueError("speculative-config: needs num_speculative_tokens")
    k = int(config["num_speculative_tokens"])
    if k <= 0:
        return flags
    flags |= {"speculative-num-steps": k, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": k + 1}
    method = str(config.get("method", "")).lower()
    if method:
        if method not in VLLM_METHODS:
            raise ValueError(f"speculative-config: method {method!r} is not simulated; known: {sorted(VLLM_METHODS)}")
        flags["speculative-algorithm"] = VLLM_METHODS[method]
    if config.get("model") is not None and VLLM_METHODS.get(method) != "NEXTN":
        flags["speculative-draft-model-path"] = config["model"]
    return flags


def launch_config(profile: TwinProfile, flags: dict[str, Any], tp: int | None = None) -> LaunchConfig:
    """The twin's configuration for a point's flags, with the profile's drafter where none is named.

    Raises:
        ValueError: flags the twin cannot simulate (the message says which).
    """
    from autotune_twin.sglang.flags import parse_args

    flags = _from_vllm(dict(flags))
    speculative = any(name.startswith("speculative-") for name in flags)
    if "speculative-draft-model-path" in flags:
        known = _named_drafter(profile, str(flags["speculative-draft-model-path"]))
        if known is not None:
            flags["speculative-draft-model-path"] = known.path
            flags.setdefault("speculative-algorithm", known.algorithm)
    if speculative and "speculative-algorithm" not in flags:
        drafter = next((d for d in profile.model.drafters if d.algorithm != "DFLASH"), None)
        if profile.model.mtp is not None:
            flags["speculative-algorithm"] = "NEXTN"
        elif drafter is not None:
            flags |= {"speculative-algorithm": drafter.algorithm, "speculative-draft-model-path": drafter.path}
        else:
            raise ValueError(f"profile {profile.name} has no drafter for speculative flags")
    flags.setdefault("tp-size", tp or profile.gpus.count)
    argv = ["--model-path", profile.model.name]
    for name, value in flags.items():
        if value is False:  # a switch left off, as a launch leaves it out
            continue
        argv += [f"--{name}"] if value is True else [f"--{name}", str(value)]
    stderr = io.StringIO()
    try:
        with contextlib.redirect_stderr(stderr):
            args, _ = parse_args(argv)
    except SystemExit:
        raise ValueError(stderr.getvalue().strip().splitlines()[-1].removeprefix("launch_server.py: ")) from None
    try:
        return resolve_launch(args, profile)
    except LaunchError as exc:
        raise ValueError(f"{exc.exc_type}: {exc.message}" if exc.message else exc.exc_type) from None


def _named_drafter(profile: TwinProfile, path: str) -> DrafterSpec | None:
    """The profile's drafter a launch names by ``path``: the one of that path, else a setup's only
    drafter (a setup describes its drafter by its config, not by the path the user's launches give)."""
    drafters = profile.model.drafters
    known = next((d for d in drafters if d.path == path), None)
    return known if known is not None or len(drafters) != 1 else drafters[0]


# ---------------------------------------------------------------------------------------------
# Prediction


@dataclass(frozen=True)
class Prediction:
    tok_s: float
    accept_length: float


def profile_accept_length(profile: TwinProfile, cfg: LaunchConfig) -> float:
    """The profile's mean accept length over its prompt categories (short prompts)."""
    if not cfg.spec.enabled:
        return 1.0
    lengths = [
        physics.expected_accept_length(
            physics.acceptance_probs(profile, cfg, physics.PromptClass(category=c, prompt_tokens=1, long=False))
        )
        for c in CATEGORIES
    ]
    return sum(lengths) / len(lengths)


def predict(
    profile: TwinProfile, cfg: LaunchConfig, *, concurrency: int, input_len: int, output_len: int, accept: float | None
) -> Prediction:
    """Total output tok/s of ``concurrency`` requests run together (module docstring)."""
    cfg = _own_drafter(profile, cfg)
    accept_length = accept if accept is not None and cfg.spec.enabled else profile_accept_length(profile, cfg)
    contexts = [input_len + output_len // 2] * concurrency
    pass_s = physics.decode_pass_seconds(profile, cfg, contexts)
    prefill_s = physics.prefill_seconds(profile, cfg, input_len * concurrency) if input_len > 0 else 0.0
    seconds = prefill_s + math.ceil(max(output_len - 1, 0) / accept_length) * pass_s
    return Prediction(tok_s=concurrency * output_len / seconds, accept_length=accept_length)


def _own_drafter(profile: TwinProfile, cfg: LaunchConfig) -> LaunchConfig:
    """``cfg`` with its drafter taken from ``profile`` (a configuration resolved once is reused
    while the fit changes the drafter's constants)."""
    drafter = cfg.spec.drafter
    if drafter is None:
        return cfg
    own = profile.drafter(drafter.path, drafter.algorithm)
    return cfg if own is None or own is drafter else replace(cfg, spec=replace(cfg.spec, drafter=own))


def predict_point(profile: TwinProfile, point: Point, cfg: LaunchConfig | None = None) -> Prediction:
    cfg = cfg or launch_config(profile, point.flags)
    return predict(
        profile,
        cfg,
        concurrency=point.concurrency,
        input_len=point.input_len,
        output_len=point.output_len,
        accept=point.accept_length,
    )


# ---------------------------------------------------------------------------------------------
# Fitting


@dataclass(frozen=True)
class Knob:
    """One free constant: how a log-scale factor is applied to a profile."""

    name: str
    apply: Callable[[TwinProfile, float], TwinProfile]


def _scale_overhead(field: str) -> Callable[[TwinProfile, float], TwinProfile]:
    def apply(profile: TwinProfile, factor: float) -> TwinProfile:
        over = profile.overheads
        return profile.model_copy(update={"overheads": over.model_copy(update={field: getattr(over, field) * factor})})

    return apply


def _scale_draft_step(profile: TwinProfile, factor: float) -> TwinProfile:
    over = profile.overheads.model_copy(update={"draft_step_ms": profile.overheads.draft_step_ms * factor})
    drafters = [  # a DFlash drafter drafts a block, not steps: it has no step cost to scale
        d if d.algorithm == "DFLASH" else d.model_copy(update={"step_ms": d.step_ms * factor})
        for d in profile.model.drafters
    ]
    model = profile.model.model_copy(update={"drafters": drafters})
    return profile.model_copy(update={"overheads": over, "model": model})


def _drafter_of(cfg: LaunchConfig) -> str:
    """The drafter a speculative configuration drafts with: its path, or ``mtp`` for MTP heads."""
    return cfg.spec.drafter.path if cfg.spec.drafter is not None else "mtp"


def _scale_own_draft_step(drafter: str) -> Callable[[TwinProfile, float], TwinProfile]:
    """One drafter's step cost alone (``mtp``: the MTP heads' ``draft_step_ms``)."""

    def apply(profile: TwinProfile, factor: float) -> TwinProfile:
        if drafter == "mtp":
            return _scale_overhead("draft_step_ms")(profile, factor)
        drafters = [
            d.model_copy(update={"step_ms": d.step_ms * factor}) if d.path == drafter else d
            for d in profile.model.drafters
        ]
        return profile.model_copy(update={"model": profile.model.model_copy(update={"drafters": drafters})})

    return apply


def _scale_bandwidth(profile: TwinProfile, factor: float) -> TwinProfile:
    gpus = profile.gpus
    efficiency = min(1.0, gpus.bandwidth_efficiency * factor)
    return profile.model_copy(update={"gpus": gpus.model_copy(update={"bandwidth_efficiency": efficiency})})


def _scale_compute(profile: TwinProfile, factor: float) -> TwinProfile:
    gpus = profile.gpus
    efficiency = min(1.0, gpus.compute_efficiency * factor)
    return profile.model_copy(update={"gpus": gpus.model_copy(update={"compute_efficiency": efficiency})})


def _scale_acceptance(profile: TwinProfile, factor: float) -> TwinProfile:
    """Every acceptance table becomes geometric at the rate whose odds are ``factor`` x the first
    position's odds (acceptance unknown: one rate is all a few points can tell)."""

    def rescaled(table: dict[str, list[float]]) -> dict[str, list[float]]:
        first = sum(table[c][0] for c in CATEGORIES) / len(CATEGORIES)
        odds = first / (1 - first) * factor if first < 1 else 1e6
        return acceptance_table(min(odds / (1 + odds), 0.999))

    model = profile.model
    mtp = model.mtp.model_copy(update={"acceptance": rescaled(model.mtp.acceptance)}) if model.mtp else None
    drafters = [d.model_copy(update={"acceptance": rescaled(d.acceptance)}) for d in model.drafters]
    return profile.model_copy(update={"model": model.model_copy(update={"mtp": mtp, "drafters": drafters})})


COST_KNOBS = (
    Knob("bandwidth", _scale_bandwidth),
    Knob("fixed_pass_ms", _scale_overhead("fixed_pass_ms")),
    Knob("spec_pass_ms", _scale_overhead("spec_pass_ms")),
    Knob("draft_step_ms", _scale_draft_step),
    Knob("verify_token_ms", _scale_overhead("verify_token_ms")),
    Knob("compute", _scale_compute),
)
ACCEPTANCE_KNOB = Knob("acceptance", _scale_acceptance)
PRIOR_WEIGHT = 0.002  # per squared log-factor: a constant the points cannot tell apart stays put


def identifiable_knobs(points: Sequence[Point], configs: Sequence[LaunchConfig]) -> tuple[Knob, ...]:
    """The knobs the points can tell apart; the others keep the setup's values.

    Bandwidth (the level of every pass) is always free. A cost that only the points' variation can
    separate from it is free only where they vary it: the fixed per-pass cost and compute need more
    than one concurrency, the fixed cost of speculation a speculative and a plain point, the draft
    step more than one depth, verify cost more than one count of tokens verified a pass; acceptance
    is free where a speculative point gives no accept length. Where the points draft with more than
    one drafter, each drafter's step is its own knob, free where that drafter drafts at more than one
    depth (one drafter's step cost says nothing of another's: vLLM's EAGLE-3 step costs more than
    EAGLE's on the same target though it reads less).
    """
    pairs = list(zip(points, configs, strict=True))
    spec = [(p, c) for p, c in pairs if c.spec.enabled]
    batches = {p.concurrency for p in points}
    depths: dict[str, set[int | None]] = {}
    for _, c in spec:
        if c.spec.kind != "dflash":  # a block drafter's cost is not a step's
            depths.setdefault(_drafter_of(c), set()).add(c.spec.num_steps)
    free = {
        "bandwidth": True,
        "fixed_pass_ms": len(batches) > 1,
        "compute": len(batches) > 1,
        "spec_pass_ms": bool(spec) and len(spec) < len(pairs),
        "draft_step_ms": len(depths) == 1 and any(len(seen) > 1 for seen in depths.values()),
        "verify_token_ms": len({p.concurrency * c.spec.tokens_per_pass for p, c in spec}) > 1,
    }
    knobs = [k for k in COST_KNOBS if free[k.name]]
    if len(depths) > 1:
        knobs += [Knob(f"draft_step_ms:{d}", _scale_own_draft_step(d)) for d, seen in depths.items() if len(seen) > 1]
    unknown = any(p.accept_length is None for p, _ in spec)
    return (*knobs, ACCEPTANCE_KNOB) if unknown else tuple(knobs)


def apply_knobs(profile: TwinProfile, knobs: Sequence[Knob], logs: Sequence[float]) -> TwinProfile:
    for knob, log in zip(knobs, logs, strict=True):
        profile = knob.apply(profile, math.exp(log))
    return profile


def fit(profile: TwinProfile, points: Sequence[Point], knobs: Sequence[Knob] | None = None) -> TwinProfile:
    """The profile with ``knobs`` (default: :func:`identifiable_knobs`) scaled to minimise the
    points' squared log error.

    Raises:
        ValueError: a point's flags the twin cannot simulate.
    """
    configs = [launch_config(profile, p.flags) for p in points]
    if knobs is None:
        knobs = identifiable_knobs(points, configs)
    measured = np.log([p.tok_s for p in points])

    def loss(logs: np.ndarray) -> float:
        trial = apply_knobs(profile, knobs, list(logs))
        predicted = [
            predict(trial, c, concurrency=p.concurrency, input_len=p.input_len, output_len=p.output_len,
                    accept=p.accept_length).tok_s
            for c, p in zip(configs, points, strict=True)
        ]  # fmt: skip
        return float(np.mean((np.log(predicted) - measured) ** 2) + PRIOR_WEIGHT * np.mean(logs**2))

    best = nelder_mead(loss, np.zeros(len(knobs)))
    return apply_knobs(profile, knobs, list(best))


def nelder_mead(
    f: Callable[[np.ndarray], float],
    start: np.ndarray,
    *,
    step: float = 0.5,
    iterations: int = 600,
    restarts: int = 6,
) -> np.ndarray:
    """Minimise ``f`` from ``start`` by the Nelder-Mead simplex (standard coefficients), restarted
    from the best point with a fresh simplex until a restart gains nothing, so a collapsed simplex
    does not stop it early."""
    best, best_value = start, f(start)
    for _ in range(restarts):
        simplex = [best] + [best + step * np.eye(len(best))[i] for i in range(len(best))]
        values = [f(x) for x in simplex]
        for _ in range(iterations):
            order = np.argsort(values)
            simplex, values = [simplex[i] for i in order], [values[i] for i in order]
            if values[-1] - values[0] < 1e-10:
                break
            centroid = np.mean(simplex[:-1], axis=0)
            reflected = centroid + (centroid - simplex[-1])
            fr = f(reflected)
            if fr < values[0]:
                expanded = centroid + 2 * (centroid - simplex[-1])
                fe = f(expanded)
                simplex[-1], values[-1] = (expanded, fe) if fe < fr else (reflected, fr)
            elif fr < values[-2]:
                simplex[-1], values[-1] = reflected, fr
            else:
                contracted = centroid + 0.5 * (simplex[-1] - centroid)
                fc = f(contracted)
                if fc < values[-1]:
                    simplex[-1], values[-1] = contracted, fc
                else:
                    simplex = [simplex[0] + 0.5 * (x - simplex[0]) for x in simplex]
                    values = [f(x) for x in simplex]
        if min(values) > best_value - 1e-9:
            break
        best, best_value = simplex[int(np.argmin(values))], min(values)
    return best
