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
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from passmodel import adaptive, physics
from passmodel.config import DEFAULT_SPEC, LaunchConfig, SpecConfig, default_cuda_graph_max_bs
from passmodel.profile import CATEGORIES, DrafterSpec, TwinProfile
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
    """The configuration a point's flags (SGLang's spelling, or vLLM's ``speculative-config``) run,
    with the profile's drafter where none is named: SGLang's documented normalisation of the
    speculative flags (topk 1 drafts steps + 1 tokens; DFLASH drafts one block; no depth given: 3
    steps, topk 1, 4 tokens) and the flags a pass's time depends on. What a launch refuses for other
    reasons (memory, context) is the engine's business, not the pass model's.

    Raises:
        ValueError: flags the pass model cannot describe (the message says which).
    """
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
    tp_size = int(flags.get("tp-size") or tp or profile.gpus.count)
    graph_bs = _int(flags, "cuda-graph-max-bs-decode") or default_cuda_graph_max_bs(profile, tp_size)
    fraction = flags.get("mem-fraction-static")
    return LaunchConfig(
        tp_size=tp_size,
        context_length=_int(flags, "context-length") or profile.model.max_context_length,
        spec=_spec(profile, flags),
        mem_fraction_static=float(fraction) if fraction is not None else None,
        max_running_requests=_int(flags, "max-running-requests"),
        mamba_full_memory_ratio=float(flags.get("mamba-full-memory-ratio", 0.9)),
        mamba_radix_cache_strategy=str(flags.get("mamba-radix-cache-strategy", "auto")),
        max_mamba_cache_size=_int(flags, "max-mamba-cache-size"),
        cuda_graph_max_bs_decode=graph_bs,
        disable_cuda_graph=_on(flags, "disable-cuda-graph") or flags.get("cuda-graph-backend-decode") == "disabled",
        chunked_prefill_size=_int(flags, "chunked-prefill-size") or profile.memory.default_chunked_prefill_size,
        attention_backend=str(flags.get("attention-backend") or profile.memory.default_attention_backend),
        page_size=_int(flags, "page-size") or 1,
        kv_cache_dtype=str(flags.get("kv-cache-dtype", "auto")),
    )


def _int(flags: dict[str, Any], name: str) -> int | None:
    value = flags.get(name)
    return int(value) if value is not None and value is not False else None


def _on(flags: dict[str, Any], name: str) -> bool:
    """A switch: true or the bare flag's text ``true``; false or absent: off."""
    value = flags.get(name, False)
    return value is True or str(value).lower() in ("1", "true")


def _spec(profile: TwinProfile, flags: dict[str, Any]) -> SpecConfig:
    name = flags.get("speculative-algorithm")
    if name is None:
        return SpecConfig(kind="none")
    algorithm = str(name).upper()
    path = flags.get("speculative-draft-model-path")
    steps, topk, draft = (_int(flags, f"speculative-{n}") for n in ("num-steps", "eagle-topk", "num-draft-tokens"))
    if algorithm == "DFLASH":
        drafter = profile.drafter(str(path) if path is not None else None, "DFLASH")
        if drafter is None:
            raise ValueError(f"{path} is not a DFLASH draft model the pass model knows (profile {profile.name})")
        tokens = draft or _int(flags, "speculative-dflash-block-size") or drafter.default_block_size
        return SpecConfig(kind="dflash", algorithm="DFLASH", num_steps=1, eagle_topk=1, num_draft_tokens=tokens,
                          draft_model_path=drafter.path, dflash_block_size=tokens, drafter=drafter)  # fmt: skip
    kind, drafter = _draft_source(profile, algorithm, str(path) if path is not None else None)
    tiers = None
    if _on(flags, "speculative-adaptive") and adaptive.unsupported_reason(algorithm, topk) is None:
        try:
            tiers = adaptive.load_config(flags.get("speculative-adaptive-config"))
            steps = adaptive.initial_steps(tiers, steps)
        except adaptive.Refused as refused:
            raise ValueError(f"{refused.exc_type}: {refused.message}") from None
        topk, draft = topk or 1, steps + 1
    if steps is None and topk is None and draft is None:
        steps, topk, draft = DEFAULT_SPEC
    if steps is None or topk is None:
        raise ValueError("speculative-num-steps and speculative-eagle-topk go together (SGLang refuses one alone)")
    if draft is None or topk == 1:
        draft = steps + 1 if topk == 1 else steps * topk + 1
    return SpecConfig(kind=kind, algorithm=algorithm, num_steps=steps, eagle_topk=topk, num_draft_tokens=draft,
                      draft_model_path=drafter.path if drafter else None, drafter=drafter, adaptive=tiers)  # fmt: skip


def _draft_source(profile: TwinProfile, algorithm: str, path: str | None) -> tuple[str, DrafterSpec | None]:
    """("mtp", None) for the model's own MTP heads, else ("eagle", the separate drafter)."""
    if algorithm in ("NEXTN", "EAGLE") and path in (None, profile.model.name):
        if profile.model.mtp is None:
            raise ValueError(f"{profile.model.name} has no MTP heads; {algorithm} needs a draft model")
        return "mtp", None
    if algorithm not in ("NEXTN", "EAGLE", "EAGLE3"):
        raise ValueError(f"speculative algorithm {algorithm} is not described by the pass model")
    drafter = profile.drafter(path, "EAGLE" if algorithm == "NEXTN" else algorithm)
    if drafter is None:
        known = [(d.path, d.algorithm) for d in profile.model.drafters]
        raise ValueError(
            f"{path} is not an {algorithm} draft model the twin knows (profile {profile.name} has {known})"
        )
    return "eagle", drafter


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
