"""Measured points, the twin's prediction of each, and a profile fitted to them.

A point is one measured launch: the speculative flags as the engine spells them, concurrency,
input and output length, the total output rate and, when known, the accept length. The twin
predicts a point from the profile's physics: each of ``concurrency`` requests prefills its input
together, then decodes ``output_len`` tokens in verify passes of :func:`physics.decode_pass_seconds`,
``accept_length`` tokens a pass (the measured one where given, else the profile's acceptance).
:func:`fit` scales the per-pass constants the points can tell apart (:func:`identifiable_knobs`;
the rest keep the setup's values) to the points by a Nelder-Mead search on the log error, held
near the starting profile (the verify cost a token more lightly where trees of one width identify it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from passmodel import physics
from passmodel.config import LaunchConfig
from passmodel.launch_flags import launch_config
from passmodel.profile import CATEGORIES, TwinProfile
from passmodel.setup import acceptance_table


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


def expected_rate(
    profile: TwinProfile, cfg: LaunchConfig, *, concurrency: int, input_len: int, output_len: int
) -> float:
    """Total output tok/s of a configuration no launch has measured: :func:`predict` with the
    profile's own acceptance."""
    return predict(profile, cfg, concurrency=concurrency, input_len=input_len, output_len=output_len, accept=None).tok_s


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


def drafter_of(cfg: LaunchConfig) -> str:
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


def _scale_dflash(profile: TwinProfile, factor: float) -> TwinProfile:
    """Every DFlash drafter's block cost (its fixed cost and its cost per drafted token)."""
    drafters = [
        d.model_copy(update={"block_fixed_ms": d.block_fixed_ms * factor, "per_token_ms": d.per_token_ms * factor})
        if d.algorithm == "DFLASH"
        else d
        for d in profile.model.drafters
    ]
    return profile.model_copy(update={"model": profile.model.model_copy(update={"drafters": drafters})})


def _scale_tree(profile: TwinProfile, factor: float) -> TwinProfile:
    """A tree's own costs (its bookkeeping a pass, each further branch a draft step): what a tree pays
    that a chain of its depth does not (engines draft and verify the two shapes with other kernels)."""
    tree = profile.tree
    ms = {"bookkeeping_ms": tree.bookkeeping_ms * factor}
    ms["draft_step_per_extra_branch_ms"] = tree.draft_step_per_extra_branch_ms * factor
    return profile.model_copy(update={"tree": tree.model_copy(update=ms)})


DFLASH_KNOB = Knob("dflash_block_ms", _scale_dflash)
TREE_KNOB = Knob("tree_ms", _scale_tree)
ACCEPTANCE_KNOB = Knob("acceptance", _scale_acceptance)
PRIOR_WEIGHT = 0.002  # per squared log-factor: a constant the points cannot tell apart stays put
# The verify cost a token where trees of one width verified token counts VERIFY_SPAN apart: those tell it
# (a chain's further token comes with a draft step; a wider tree's with another acceptance), so the
# prior holds it only lightly (a per-token default off 25-350x costs a whole-night miss otherwise).
VERIFY_SPAN = 2.0
IDENTIFIED_PRIOR_WEIGHT = PRIOR_WEIGHT / 20


def identifiable_knobs(points: Sequence[Point], configs: Sequence[LaunchConfig]) -> tuple[Knob, ...]:
    """The knobs the points can tell apart; the others keep the setup's values.

    Bandwidth (the level of every pass) is always free. A cost that only the points' variation can
    separate from it is free only where they vary it: the fixed per-pass cost and compute need more
    than one concurrency, the fixed cost of speculation a speculative and a plain point, the draft
    step more than one depth, verify cost more than one count of tokens verified a pass; acceptance
    is free where a speculative point gives no accept length; a DFlash drafter's block cost where a
    point drafts with one; a tree's own costs where points draft both chains (topk 1) and trees. Where
    the points draft with more than one drafter, each drafter's step is its own knob, free where that
    drafter drafts at more than one depth (one drafter's step cost says nothing of another's: vLLM's
    EAGLE-3 step costs more than EAGLE's on the same target though it reads less).
    """
    pairs = list(zip(points, configs, strict=True))
    spec = [(p, c) for p, c in pairs if c.spec.enabled]
    batches = {p.concurrency for p in points}
    depths: dict[str, set[int | None]] = {}
    for _, c in spec:
        if c.spec.kind != "dflash":  # a block drafter's cost is not a step's
            depths.setdefault(drafter_of(c), set()).add(c.spec.num_steps)
    free = {
        "bandwidth": True,
        "fixed_pass_ms": len(batches) > 1,
        "compute": len(batches) > 1,
        "spec_pass_ms": bool(spec) and len(spec) < len(pairs),
        "draft_step_ms": len(depths) == 1 and any(len(seen) > 1 for seen in depths.values()),
        "verify_token_ms": len({p.concurrency * c.spec.tokens_per_pass for p, c in spec}) > 1,
    }
    knobs = [k for k in COST_KNOBS if free[k.name]]
    if any(c.spec.kind == "dflash" for _, c in spec):  # no table has a DFlash row: its costs are guesses
        knobs.append(DFLASH_KNOB)
    if len({(c.spec.eagle_topk or 1) > 1 for _, c in spec if c.spec.kind != "dflash"}) > 1:
        knobs.append(TREE_KNOB)
    if len(depths) > 1:
        knobs += [Knob(f"draft_step_ms:{d}", _scale_own_draft_step(d)) for d, seen in depths.items() if len(seen) > 1]
    unknown = any(p.accept_length is None for p, _ in spec)
    return (*knobs, ACCEPTANCE_KNOB) if unknown else tuple(knobs)


def verify_identified(configs: Sequence[LaunchConfig]) -> bool:
    """Whether trees (topk above 1) of one width verified token counts :data:`VERIFY_SPAN` apart or more."""
    counts: dict[int, list[int]] = {}
    for cfg in configs:
        if cfg.spec.enabled and cfg.spec.kind != "dflash" and (cfg.spec.eagle_topk or 1) > 1:
            counts.setdefault(cfg.spec.eagle_topk or 1, []).append(cfg.spec.tokens_per_pass)
    return any(max(seen) >= VERIFY_SPAN * min(seen) for seen in counts.values())


def prior_weights(knobs: Sequence[Knob], configs: Sequence[LaunchConfig], *, lighten: bool = True) -> np.ndarray:
    """Each knob's prior weight: :data:`PRIOR_WEIGHT`, the verify cost's lighter where the points identify it
    (and ``lighten``: the model night's only once it has room, so a short night's fit is the plain one)."""
    light = lighten and verify_identified(configs)
    return np.array([IDENTIFIED_PRIOR_WEIGHT if light and k.name == "verify_token_ms" else PRIOR_WEIGHT for k in knobs])


def apply_knobs(profile: TwinProfile, knobs: Sequence[Knob], logs: Sequence[float]) -> TwinProfile:
    for knob, log in zip(knobs, logs, strict=True):
        profile = knob.apply(profile, math.exp(log))
    return profile


def fit(
    profile: TwinProfile,
    points: Sequence[Point],
    knobs: Sequence[Knob] | None = None,
    *,
    iterations: int = 600,
    restarts: int = 6,
    lighten: bool = True,
) -> TwinProfile:
    """The profile with ``knobs`` (default: :func:`identifiable_knobs`) scaled to minimise the
    points' squared log error; ``iterations`` and ``restarts`` bound the simplex search; ``lighten``:
    the verify cost's prior lighter where the points identify it (:func:`prior_weights`).

    Raises:
        ValueError: a point's flags the twin cannot simulate.
    """
    configs = [launch_config(profile, p.flags) for p in points]
    if knobs is None:
        knobs = identifiable_knobs(points, configs)
    measured = np.log([p.tok_s for p in points])
    weights = prior_weights(knobs, configs, lighten=lighten)

    def loss(logs: np.ndarray) -> float:
        trial = apply_knobs(profile, knobs, list(logs))
        predicted = [
            predict(trial, c, concurrency=p.concurrency, input_len=p.input_len, output_len=p.output_len,
                    accept=p.accept_length).tok_s
            for c, p in zip(configs, points, strict=True)
        ]  # fmt: skip
        return float(np.mean((np.log(predicted) - measured) ** 2) + np.mean(weights * logs**2))

    best = nelder_mead(loss, np.zeros(len(knobs)), iterations=iterations, restarts=restarts)
    return apply_knobs(profile, knobs, list(best))


ACCEPTANCE_RATES = tuple(round(0.05 + 0.01 * i, 2) for i in range(95))  # 0.05 .. 0.99


def fit_acceptance(profile: TwinProfile, points: Sequence[Point], configs: Sequence[LaunchConfig]) -> TwinProfile:
    """Each drafter's acceptance (the MTP heads', each draft model's) made geometric at the rate whose
    mean accept length best matches, in squared log error, the accept lengths its points measured;
    a drafter without a measured accept length keeps its table. One rate per drafter is what a few
    launches at a few depths can tell (a rate per position and prompt category is not)."""
    by_drafter: dict[str, list[tuple[LaunchConfig, float]]] = {}
    for point, cfg in zip(points, configs, strict=True):
        if cfg.spec.enabled and point.accept_length is not None:
            by_drafter.setdefault(drafter_of(cfg), []).append((cfg, point.accept_length))
    for drafter, measured in by_drafter.items():
        length = 15 if measured[0][0].spec.kind == "dflash" else 16
        fitted = profile
        best = min(ACCEPTANCE_RATES, key=lambda rate: _accept_error(fitted, drafter, measured, rate, length))
        profile = with_acceptance(profile, drafter, acceptance_table(best, length))
    return profile


def _accept_error(
    profile: TwinProfile, drafter: str, measured: Sequence[tuple[LaunchConfig, float]], rate: float, length: int
) -> float:
    trial = with_acceptance(profile, drafter, acceptance_table(rate, length))
    return sum((math.log(profile_accept_length(trial, _own_drafter(trial, c))) - math.log(a)) ** 2 for c, a in measured)


def with_acceptance(profile: TwinProfile, drafter: str, table: dict[str, list[float]]) -> TwinProfile:
    """``profile`` with one drafter's acceptance table (``mtp``: the MTP heads'; a path: that drafter's)."""
    model = profile.model
    if drafter == "mtp":
        assert model.mtp is not None
        return profile.model_copy(
            update={"model": model.model_copy(update={"mtp": model.mtp.model_copy(update={"acceptance": table})})}
        )
    drafters = [d.model_copy(update={"acceptance": table}) if d.path == drafter else d for d in model.drafters]
    return profile.model_copy(update={"model": model.model_copy(update={"drafters": drafters})})


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
