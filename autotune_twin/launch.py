"""SGLang 0.5.23's launch-time rules, applied to parsed flags: the twin's effective configuration.

Everything SGLang decides before loading weights happens here (speculative defaults and rewrites,
DFLASH rules, the context-length limit, the mamba radix strategy, flag consistency). The result is
a :class:`LaunchConfig`; a config SGLang would refuse raises :class:`LaunchError`, which carries
the Python exception type SGLang dies with, so the log ends the same way.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from typing import TypeVar

from passmodel import adaptive
from passmodel.adaptive import AdaptiveConfig
from passmodel.config import DEFAULT_SPEC, LaunchConfig, SpecConfig, default_cuda_graph_max_bs
from passmodel.profile import DrafterSpec, TwinProfile

# Names SGLang 0.5.23 knows (SpeculativeAlgorithm); MTP is not one of them.
KNOWN_ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK")
DEFAULT_SPEC_MAX_RUNNING = 48
# Attention backends that run on Ampere (sm86) GPUs such as the A6000.
AMPERE_BACKENDS = ("flashinfer", "fa3", "triton", "torch_native", "flex_attention")
TREE_BACKENDS = ("flashinfer", "fa3", "triton")
ALLOW_LONGER_CONTEXT_ENV = "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN"
_T = TypeVar("_T")


class LaunchError(Exception):
    """SGLang would refuse this configuration at launch.

    Attributes:
        exc_type: the Python exception SGLang raises (``AssertionError``, ``ValueError``, ...).
        message: its message (empty for a bare ``AssertionError``).
    """

    def __init__(self, exc_type: str, message: str = "") -> None:
        super().__init__(message)
        self.exc_type = exc_type
        self.message = message


def resolve_launch(args: argparse.Namespace, profile: TwinProfile) -> LaunchConfig:
    """Apply SGLang's launch rules to parsed flags.

    Raises:
        LaunchError: the configuration fails at launch in SGLang 0.5.23.
    """
    notes: list[str] = []
    if args.tp_size < 1 or args.tp_size > profile.gpus.count:
        raise LaunchError(
            "RuntimeError",
            f"CUDA error: invalid device ordinal (tp_size={args.tp_size}, "
            f"{profile.gpus.count} GPUs in twin profile {profile.name})",
        )
    context_length = _context_length(args.context_length, profile, notes)
    page_size = args.page_size or 1
    backend = _attention_backend(args.attention_backend, profile)
    spec = _speculative(args, profile, page_size, backend, notes)
    strategy = _radix_strategy(args, profile, spec, page_size, notes)
    chunked = args.chunked_prefill_size or profile.memory.default_chunked_prefill_size
    if chunked > 0 and chunked % page_size != 0:
        raise LaunchError(
            "ValueError", f"chunked_prefill_size ({chunked}) must be a multiple of page_size ({page_size})"
        )
    max_running = args.max_running_requests
    if max_running is None and spec.enabled:
        max_running = DEFAULT_SPEC_MAX_RUNNING
    if max_running is not None and max_running < 1:
        raise LaunchError("ValueError", f"max_running_requests must be positive, got {max_running}")
    graph_bs = args.cuda_graph_max_bs_decode
    if graph_bs is None:
        # memory_hook.py:186-192: a default decode graph batch is lowered to max_running_requests.
        graph_bs = default_cuda_graph_max_bs(profile, args.tp_size)
    if max_running is not None:
        # base_cuda_graph_runner.py:78,101: graphs are captured only up to the request-pool size
        # (req_to_token_pool.size, i.e. max_running_requests), an explicit batch included.
        graph_bs = min(graph_bs, max_running)
    if args.mem_fraction_static is not None and not 0.0 < args.mem_fraction_static < 1.0:
        raise LaunchError("ValueError", f"mem_fraction_static must be in (0, 1), got {args.mem_fraction_static}")
    if args.mamba_full_memory_ratio <= 0:
        raise LaunchError("ValueError", "mamba_full_memory_ratio must be positive")
    return LaunchConfig(
        tp_size=args.tp_size,
        context_length=context_length,
        spec=spec,
        mem_fraction_static=args.mem_fraction_static,
        max_running_requests=max_running,
        mamba_full_memory_ratio=args.mamba_full_memory_ratio,
        mamba_radix_cache_strategy=strategy,
        max_mamba_cache_size=args.max_mamba_cache_size,
        cuda_graph_max_bs_decode=graph_bs,
        disable_cuda_graph=args.disable_cuda_graph or args.cuda_graph_backend_decode == "disabled",
        chunked_prefill_size=chunked,
        attention_backend=backend,
        page_size=page_size,
        kv_cache_dtype=args.kv_cache_dtype,
        notes=tuple(notes),
    )


def _context_length(requested: int | None, profile: TwinProfile, notes: list[str]) -> int:
    derived = profile.model.max_context_length
    if requested is None:
        return derived
    if requested > derived:
        message = (
            f"User-specified context_length ({requested}) is greater than the derived context_length "
            f"({derived}). This may lead to incorrect model outputs or CUDA errors. Note that the derived "
            f"context_length may differ from max_position_embeddings in the model's config. To allow "
            f"overriding this maximum, set the env var {ALLOW_LONGER_CONTEXT_ENV}=1"
        )
        if os.environ.get(ALLOW_LONGER_CONTEXT_ENV, "").lower() not in ("1", "true"):
            raise LaunchError("ValueError", message)
        notes.append(f"Warning: {message}")
    return requested


def _attention_backend(requested: str | None, profile: TwinProfile) -> str:
    backend = requested or profile.memory.default_attention_backend
    if backend not in AMPERE_BACKENDS:
        raise LaunchError(
            "ValueError",
            f"attention backend {backend} is not supported on {profile.gpus.name} (sm86); "
            f"use one of {', '.join(AMPERE_BACKENDS)}",
        )
    return backend


def _speculative(
    args: argparse.Namespace, profile: TwinProfile, page_size: int, backend: str, notes: list[str]
) -> SpecConfig:
    if args.speculative_algorithm is None:
        return SpecConfig(kind="none")
    algorithm = args.speculative_algorithm.upper()
    if algorithm not in KNOWN_ALGORITHMS:
        raise LaunchError("ValueError", f"Unknown speculative algorithm name: {args.speculative_algorithm}")
    steps, topk, draft = args.speculative_num_steps, args.speculative_eagle_topk, args.speculative_num_draft_tokens
    tiers = _adaptive(args, algorithm, topk, notes)
    if algorithm == "DFLASH":
        return _dflash(args, profile, notes)
    kind, drafter = _draft_source(algorithm, args, profile)
    if tiers is not None:
        # speculative_hook.py:1392-1426: topk defaults to 1, steps to the middle candidate, and
        # draft tokens always become steps + 1, before the partial-set checks can fire.
        topk = 1 if topk is None else topk
        steps = _refused_as_launch_error(lambda: adaptive.initial_steps(tiers, steps))
        draft = steps + 1
    given = [v for v in (steps, topk, draft) if v is not None]
    if given and len(given) < 3 and not (steps is not None and topk is not None):
        if steps is not None and topk is None:
            # speculative_hook.py:1274: steps (alone or with draft tokens) reaches a comparison
            # with the unset topk.
            raise LaunchError("TypeError", "'>' not supported between instances of 'NoneType' and 'int'")
        # speculative_hook.py:1160-1163: topk alone, draft alone, topk + draft: a bare assert.
        raise LaunchError("AssertionError")
    if steps is not None and topk is not None and draft is None:
        # steps + topk without draft tokens passes SGLang's resolution (topk == 1 is adjusted to
        # steps + 1 below). With topk > 1 the twin assumes the full tree, steps x topk + 1 tokens.
        draft = steps + 1 if topk == 1 else steps * topk + 1
    if not given:
        steps, topk, draft = DEFAULT_SPEC
        notes.append(
            "speculative_num_steps, speculative_eagle_topk, speculative_num_draft_tokens are not set; "
            f"using {steps}, {topk}, {draft} for {profile.model.architectures[0]}"
        )
    assert steps is not None and topk is not None and draft is not None
    if steps < 1 or topk < 1 or draft < 1:
        raise LaunchError("ValueError", "speculative steps, topk and draft tokens must be positive")
    if topk == 1 and draft != steps + 1:
        notes.append(
            f"speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 = {steps + 1} "
            f"(was {draft}) because speculative_eagle_topk == 1"
        )
        draft = steps + 1
    if topk > 1 and page_size > 1 and backend not in TREE_BACKENDS:
        raise LaunchError(
            "ValueError",
            f"speculative_eagle_topk > 1 with page_size > 1 requires the flashinfer, fa3 or triton "
            f"attention backend, got {backend}",
        )
    return SpecConfig(
        kind=kind,
        algorithm=algorithm,
        num_steps=steps,
        eagle_topk=topk,
        num_draft_tokens=draft,
        draft_model_path=args.speculative_draft_model_path or args.model_path,
        drafter=drafter,
        adaptive=tiers,
    )


def _adaptive(args: argparse.Namespace, algorithm: str, topk: int | None, notes: list[str]) -> AdaptiveConfig | None:
    """``--speculative-adaptive``: its config, or None when off. An unsupported setting is not an
    error in SGLang: it warns and falls back to static steps (speculative_hook.py:1374-1389)."""
    if not args.speculative_adaptive:
        return None
    reason = adaptive.unsupported_reason(algorithm, topk)
    if reason is not None:
        notes.append(f"Warning: speculative_adaptive disabled: {reason}. Falling back to static speculative params.")
        return None
    path = args.speculative_adaptive_config
    return _refused_as_launch_error(lambda: adaptive.load_config(path))


def _refused_as_launch_error(read: Callable[[], _T]) -> _T:
    try:
        return read()
    except adaptive.Refused as refused:
        raise LaunchError(refused.exc_type, refused.message) from None


def _draft_source(algorithm: str, args: argparse.Namespace, profile: TwinProfile) -> tuple[str, DrafterSpec | None]:
    """("mtp", None) for the model's own MTP heads (NEXTN, or EAGLE without a separate draft
    model); ("eagle", drafter) for a separate EAGLE/EAGLE3 draft model the profile knows."""
    path = args.speculative_draft_model_path
    own_heads = path in (None, args.model_path)
    if algorithm in ("NEXTN", "EAGLE") and own_heads:
        if profile.model.mtp is None:
            raise LaunchError("ValueError", f"{profile.model.name} has no MTP heads; NEXTN needs a draft model")
        return "mtp", None
    if algorithm not in ("NEXTN", "EAGLE", "EAGLE3"):
        raise LaunchError(
            "ValueError",
            f"speculative algorithm {algorithm} is not simulated by the autotune twin (profile "
            f"{profile.name} simulates NEXTN/EAGLE with the model's MTP heads, EAGLE/EAGLE3 and DFLASH "
            f"with {[d.path for d in profile.model.drafters]})",
        )
    if own_heads:
        raise LaunchError("ValueError", f"{algorithm} needs --speculative-draft-model-path (its draft model)")
    # NEXTN is EAGLE under another name once a draft model is given.
    drafter = profile.drafter(path, "EAGLE" if algorithm == "NEXTN" else algorithm)
    if drafter is None:
        raise LaunchError(
            "OSError",
            f"{path} is not an {algorithm} draft model the twin knows "
            f"(profile {profile.name} has {[(d.path, d.algorithm) for d in profile.model.drafters]})",
        )
    return "eagle", drafter


def _dflash(args: argparse.Namespace, profile: TwinProfile, notes: list[str]) -> SpecConfig:
    path = args.speculative_draft_model_path
    if path is None:
        raise LaunchError("ValueError", "DFLASH requires --speculative-draft-model-path (the DFlash draft model)")
    drafter = profile.drafter(path, "DFLASH")
    if drafter is None:
        raise LaunchError(
            "OSError",
            f"{path} is not a DFLASH draft model the twin knows "
            f"(profile {profile.name} has {[d.path for d in profile.model.drafters]})",
        )
    block, draft = args.speculative_dflash_block_size, args.speculative_num_draft_tokens
    if block is not None and draft is not None and block != draft:
        raise LaunchError(
            "ValueError",
            f"--speculative-dflash-block-size ({block}) must equal --speculative-num-draft-tokens ({draft})",
        )
    tokens = draft or block or drafter.default_block_size
    if tokens < 2:
        raise LaunchError("ValueError", f"DFLASH block size must be at least 2, got {tokens}")
    for name, value in (
        ("speculative_num_steps", args.speculative_num_steps),
        ("speculative_eagle_topk", args.speculative_eagle_topk),
    ):
        if value not in (None, 1):
            notes.append(f"DFLASH forces {name} = 1 (was {value})")
    return SpecConfig(
        kind="dflash",
        algorithm="DFLASH",
        num_steps=1,
        eagle_topk=1,
        num_draft_tokens=tokens,
        draft_model_path=path,
        dflash_block_size=tokens,
        drafter=drafter,
    )


def _radix_strategy(
    args: argparse.Namespace, profile: TwinProfile, spec: SpecConfig, page_size: int, notes: list[str]
) -> str:
    """``arg_groups/mamba_hook.py``: the mamba radix-cache strategy of a hybrid model."""
    requested: str = args.mamba_radix_cache_strategy
    if not profile.model.hybrid:
        return requested
    strategy = requested
    if strategy == "auto":
        strategy = "extra_buffer"
        notes.append("mamba_radix_cache_strategy auto -> extra_buffer (keeps the overlap scheduler)")
    track_interval = args.mamba_track_interval
    if strategy.startswith("extra_buffer") and spec.enabled and spec.tokens_per_pass > track_interval:
        # mamba_hook.py:133: draft tokens must not exceed --mamba-track-interval; a bare assert.
        raise LaunchError("AssertionError")
    if strategy == "no_buffer":
        if page_size != 1:
            raise LaunchError("AssertionError", "no_buffer only supports page_size=1.")  # mamba_hook.py:157
        if not args.disable_overlap_schedule:
            raise LaunchError(  # mamba_hook.py:158
                "AssertionError",
                "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.",
            )
    return strategy
