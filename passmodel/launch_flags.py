"""A launch's flags read as the pass model's configuration: SGLang's spelling (or vLLM's
``speculative-config``) normalised as the engine normalises it, with the profile's drafter where the
flags name none. The points, the twin and the model night read every launch through here."""

from __future__ import annotations

import json
import shlex
from typing import Any

from passmodel import adaptive
from passmodel.config import DEFAULT_SPEC, LaunchConfig, SpecConfig, default_cuda_graph_max_bs
from passmodel.profile import DrafterSpec, TwinProfile


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
