"""The twin's physics: memory sizing, verify-pass timing, draft acceptance, prompt classification.

Pure functions of a :class:`TwinProfile` and a :class:`LaunchConfig`; randomness comes in as a
``random.Random``. Nothing here sleeps, logs or touches the network, so tests call it directly.

Decode is a sequence of verify passes. One pass reads every weight shard once, plus the KV and
recurrent state it attends to, pays fixed costs (launches, sampling, TP all-reduce), verifies the
draft tokens and drafts the next ones. Each pass yields 1 + (accepted draft tokens) tokens per
request; acceptance is drawn per pass from per-position probabilities that depend on the prompt's
category and fall with depth.
"""

from __future__ import annotations

import hashlib
import math
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import lru_cache

from passmodel import adaptive
from passmodel.config import LaunchConfig, SpecConfig
from passmodel.profile import ModelSpec, TwinProfile

GIB = float(1 << 30)
MIB = float(1 << 20)

# ---------------------------------------------------------------------------------------------
# Sizes a pass reads


def checkpoint_bytes(model: ModelSpec) -> int:
    """The target checkpoint's weights as loaded (and as its safetensors index states them): MTP heads
    included, used or not."""
    return model.weight_bytes + (model.mtp.head_bytes if model.mtp is not None else 0)


def weight_bytes_per_gpu(profile: TwinProfile, cfg: LaunchConfig) -> int:
    """Target weights sharded by TP, plus the MTP head or drafter (also sharded)."""
    total = checkpoint_bytes(profile.model)
    if cfg.spec.drafter is not None:
        total += cfg.spec.drafter.weight_bytes
    return total // cfg.tp_size


def kv_share_per_gpu(kv_heads: int | None, tp: int) -> float:
    """The share of a token's KV one GPU holds at TP ``tp``: its heads, at least one whole head
    (SGLang's and vLLM's ``max(1, heads // tp)``); unknown heads split evenly."""
    return max(1, kv_heads // tp) / kv_heads if kv_heads else 1 / tp


def kv_cell_bytes(profile: TwinProfile, cfg: LaunchConfig) -> float:
    """Bytes of full-attention KV per token per GPU, including the draft model's KV layers."""
    model = profile.model
    per_token = model.kv_bytes_per_token * kv_share_per_gpu(model.kv_heads, cfg.tp_size)
    if cfg.spec.kind == "mtp" and model.mtp is not None:
        per_token += model.mtp.kv_bytes_per_token * kv_share_per_gpu(model.kv_heads, cfg.tp_size)
    if cfg.spec.drafter is not None:
        drafter = cfg.spec.drafter
        per_token += drafter.kv_bytes_per_token * kv_share_per_gpu(drafter.kv_heads, cfg.tp_size)
    return per_token * cfg.kv_bytes_scale


def tier_config(cfg: LaunchConfig, steps: int) -> LaunchConfig:
    """The configuration one adaptive tier runs a pass with (0 steps: no drafting)."""
    if steps == 0:
        return replace(cfg, spec=SpecConfig(kind="none"))
    return replace(cfg, spec=replace(cfg.spec, num_steps=steps, num_draft_tokens=steps + 1))


def deepest_tier(cfg: LaunchConfig) -> LaunchConfig:
    """With adaptive speculation, the deepest tier (whose acceptance table covers every tier's)."""
    tiers = cfg.spec.adaptive
    return tier_config(cfg, max(tiers.candidate_steps)) if tiers is not None else cfg


# ---------------------------------------------------------------------------------------------
# Prompts


@dataclass(frozen=True)
class PromptClass:
    """What the twin infers from a prompt's text (the real engine sees only text too)."""

    category: str
    prompt_tokens: int
    long: bool


@lru_cache(maxsize=64)
def _keyword_pattern(keyword: str) -> re.Pattern[str]:
    # Whole-word match where the keyword starts/ends with a word character ("repeat" must not
    # match "repeatedly"); symbols such as ``` match anywhere.
    start = r"(?<!\w)" if keyword[:1].isalnum() else ""
    end = r"(?!\w)" if keyword[-1:].isalnum() else ""
    return re.compile(start + re.escape(keyword.lower()) + end)


def prompt_tokens(profile: TwinProfile, text: str) -> int:
    """Prompt length in tokens: characters / chars_per_token (about 4 for English and code)."""
    return max(1, round(len(text) / profile.prompts.chars_per_token))


def classify_prompt(profile: TwinProfile, text: str) -> PromptClass:
    """Category by the rule with the most distinct keywords in the text (ties: the earlier rule;
    none: chat), so a math problem that mentions a "function" stays math; long by token count."""
    lowered = text.lower()
    category, best = "chat", 0
    for rule in profile.prompts.rules:
        hits = sum(1 for k in rule.keywords if _keyword_pattern(k).search(lowered))
        if hits > best:
            category, best = rule.name, hits
    tokens = prompt_tokens(profile, text)
    return PromptClass(category=category, prompt_tokens=tokens, long=tokens > profile.prompts.long_prompt_tokens)


def stable_hash(text: str) -> int:
    """A hash that is the same in every process (``hash()`` is salted per process)."""
    return int.from_bytes(hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest(), "big")


def natural_completion_tokens(profile: TwinProfile, text: str) -> int:
    """Where the model would stop by itself (EOS): fixed per prompt, spread over the profile's range."""
    low = profile.prompts.natural_completion_min_tokens
    high = profile.prompts.natural_completion_max_tokens
    return low + stable_hash("eos:" + text) % (high - low + 1)


# ---------------------------------------------------------------------------------------------
# Acceptance


def _extend(table: Sequence[float], length: int) -> list[float]:
    """The table's first ``length`` positions; beyond its end, keep decaying at the last ratio."""
    values = list(table[:length])
    if len(values) < length:
        last = table[-1]
        ratio = table[-1] / table[-2] if len(table) > 1 and table[-2] > 0 else last
        while len(values) < length:
            last *= ratio
            values.append(last)
    return values


# Block verification (vLLM's rejection_sample_method "block"; Sun et al., "Block Verification
# Accelerates Speculative Decoding", ICLR 2025, arXiv:2403.10444) accepts at least as many draft
# tokens as token-by-token verification, the same for a single draft token. The paper measures +7-10 %
# block efficiency (tokens per verify pass) and +5-8 % wall clock, more with longer drafts; the twin
# takes the low end: each position's acceptance x (1 + 0.07 x (1 - 1/k)) for k draft tokens (capped
# at 1), so +3.5 % at k = 2 and +5.25 % at k = 4 on the accepted drafts (docs/twin-profile.md).
BLOCK_VERIFICATION_GAIN = 0.07


def acceptance_probs(profile: TwinProfile, cfg: LaunchConfig, prompt: PromptClass) -> tuple[float, ...]:
    """Absolute probability that draft position i (1-based) is accepted, for i = 1..depth."""
    spec = cfg.spec
    if not spec.enabled:
        return ()
    if spec.synthetic_rates is not None:  # vLLM accepts at the set rates, whatever the prompt
        return spec.synthetic_rates
    probs = _drafter_probs(profile, cfg, prompt)
    if spec.block_verification and len(probs) > 1:
        factor = 1 + BLOCK_VERIFICATION_GAIN * (1 - 1 / len(probs))
        probs = tuple(min(1.0, p * factor) for p in probs)
    return probs


def _drafter_probs(profile: TwinProfile, cfg: LaunchConfig, prompt: PromptClass) -> tuple[float, ...]:
    """The drafter's acceptance by position, verified token by token."""
    spec = cfg.spec
    category = prompt.category
    if spec.kind == "dflash":
        assert spec.drafter is not None and spec.num_draft_tokens is not None
        probs = _extend(spec.drafter.acceptance[category], spec.num_draft_tokens - 1)
    else:
        table = spec.drafter.acceptance if spec.drafter is not None else _mtp_acceptance(profile)
        assert spec.num_steps and spec.eagle_topk and spec.num_draft_tokens
        depth = min(spec.num_steps, spec.num_draft_tokens - 1)
        probs = _extend(table[category], depth)
        branch = min(spec.eagle_topk, (spec.num_draft_tokens - 1) / max(depth, 1))
        if branch > 1:
            probs = _widen(probs, branch, profile.tree.miss_factor_per_doubling)
    if prompt.long:
        scale = profile.prompts.long_acceptance_scale
        probs = [p * scale ** (i + 1) for i, p in enumerate(probs)]
    return tuple(probs)


def _mtp_acceptance(profile: TwinProfile) -> dict[str, list[float]]:
    mtp = profile.model.mtp
    assert mtp is not None  # launch refuses NEXTN without MTP heads
    return mtp.acceptance


def _widen(probs: list[float], branch: float, miss_factor: float) -> list[float]:
    """A tree with ``branch`` candidates per depth misses less often at every depth."""
    keep = miss_factor ** math.log2(branch)
    out: list[float] = []
    previous = 1.0
    for p in probs:
        conditional = p / previous if previous > 0 else 0.0
        previous = p
        widened = 1 - (1 - conditional) * keep
        out.append((out[-1] if out else 1.0) * widened)
    return out


def expected_accept_length(probs: Sequence[float]) -> float:
    """Mean tokens per verify pass: the bonus token plus each position's acceptance probability."""
    return 1.0 + sum(probs)


def draw_accept_length(probs: Sequence[float], rng: random.Random) -> int:
    """One pass's accepted length: positions are accepted in order until the first rejection."""
    length = 1
    previous = 1.0
    for p in probs:
        if previous <= 0 or rng.random() >= p / previous:
            break
        previous = p
        length += 1
    return length


# ---------------------------------------------------------------------------------------------
# Timing


def _allreduce_s(profile: TwinProfile, cfg: LaunchConfig, tokens: int) -> float:
    if cfg.tp_size <= 1:
        return 0.0
    link = profile.interconnect
    count = profile.model.num_layers * link.allreduces_per_layer
    payload = tokens * profile.model.hidden_size * 2  # bf16 hidden states
    return count * (link.allreduce_latency_us * 1e-6 + payload / link.allreduce_bandwidth_bytes_per_s)


def _bandwidth(profile: TwinProfile) -> float:
    return profile.gpus.bandwidth_bytes_per_s * profile.gpus.bandwidth_efficiency


def _flops(profile: TwinProfile) -> float:
    return profile.gpus.compute_flops * profile.gpus.compute_efficiency


def draft_seconds(profile: TwinProfile, cfg: LaunchConfig, batch: int) -> float:
    """Drafting the next pass's tokens: MTP or EAGLE steps in sequence, or one DFlash block."""
    spec = cfg.spec
    scale = 1 + profile.overheads.batch_scale * (batch - 1)
    if spec.kind in ("mtp", "eagle"):
        assert spec.num_steps is not None and spec.eagle_topk is not None
        step_read, step_ms = _draft_step_costs(profile, cfg)
        step_ms += (spec.eagle_topk - 1) * profile.tree.draft_step_per_extra_branch_ms
        step_s = step_read / cfg.tp_size / _bandwidth(profile) + step_ms * 1e-3 * scale
        tree_s = profile.tree.bookkeeping_ms * 1e-3 if spec.eagle_topk > 1 else 0.0
        return spec.num_steps * step_s + tree_s
    if spec.kind == "dflash":
        drafter = spec.drafter
        assert drafter is not None and spec.num_draft_tokens is not None
        read_s = drafter.weight_bytes / cfg.tp_size / _bandwidth(profile)
        return read_s + (drafter.block_fixed_ms + drafter.per_token_ms * spec.num_draft_tokens) * 1e-3 * scale
    return 0.0


def _draft_step_costs(profile: TwinProfile, cfg: LaunchConfig) -> tuple[int, float]:
    """(bytes read, fixed ms) of one draft step: the EAGLE drafter's, else the MTP head's."""
    drafter = cfg.spec.drafter
    if drafter is not None:
        return drafter.step_bytes, drafter.step_ms
    mtp = profile.model.mtp
    assert mtp is not None
    return mtp.step_read_bytes, profile.overheads.draft_step_ms


def weight_read_bytes(profile: TwinProfile, batch: int, tokens: int) -> float:
    """Weights one forward pass over ``batch`` requests of ``tokens`` tokens each reads (all TP
    ranks together).

    A dense model reads ``decode_read_bytes`` whatever the tokens. An MoE model's
    ``decode_read_bytes`` holds one token's top-k experts; a pass reads every expert at least one
    of its tokens routes to: with E experts and k per token, a share 1 - (1 - k/E)^n of
    ``moe_expert_bytes``, routing taken as uniform over n independent tokens. Requests route
    independently; a request's further tokens (its draft tokens, consecutive positions of one
    text) each count as ``moe_draft_token_spread`` of an independent token.
    """
    model = profile.model
    if model.moe_experts <= 0 or model.moe_expert_bytes <= 0:
        return float(model.decode_read_bytes)
    share = min(model.moe_experts_per_token / model.moe_experts, 1.0)
    independent = max(batch, 1) * (1 + model.moe_draft_token_spread * (max(tokens, 1) - 1))
    touched = 1.0 - float((1.0 - share) ** independent)
    return model.decode_read_bytes + model.moe_expert_bytes * (touched - share)


def decode_pass_seconds(profile: TwinProfile, cfg: LaunchConfig, contexts: Sequence[int]) -> float:
    """One verify pass over a batch; ``contexts`` holds each running request's current length.

    Memory-bound until the batch's tokens make it compute-bound: the weight read is shared by
    all requests, KV and recurrent-state reads are per request.
    """
    batch = len(contexts)
    if batch == 0:
        return 0.0
    model = profile.model
    tokens = cfg.spec.tokens_per_pass
    read = weight_read_bytes(profile, batch, tokens) / cfg.tp_size + sum(contexts) * kv_cell_bytes(profile, cfg)
    if model.hybrid:
        state = model.mamba_state_bytes_per_request / cfg.tp_size
        intermediate = model.mamba_state_bytes_per_draft_token / cfg.tp_size
        read += batch * (2 * state + (tokens - 1) * intermediate)
    memory_s = read / _bandwidth(profile)
    compute_s = batch * tokens * 2 * model.active_params / cfg.tp_size / _flops(profile)
    over = profile.overheads
    overhead_ms = over.fixed_pass_ms + batch * over.per_request_pass_ms
    overhead_ms += over.attention_backend_pass_ms.get(cfg.attention_backend, 0.0)
    if cfg.spec.enabled:
        overhead_ms += over.spec_pass_ms
    if cfg.disable_cuda_graph:
        overhead_ms += over.no_cuda_graph_pass_ms
    verify_ms = (tokens - 1) * over.verify_token_ms * (1 + over.batch_scale * (batch - 1))
    return (
        max(memory_s, compute_s)
        + _allreduce_s(profile, cfg, batch * tokens)
        + (overhead_ms + verify_ms) * 1e-3
        + draft_seconds(profile, cfg, batch)
    )


def prefill_seconds(profile: TwinProfile, cfg: LaunchConfig, new_tokens: int) -> float:
    """Prefill ``new_tokens`` (uncached prompt tokens of one batch) in chunked-prefill chunks."""
    if new_tokens <= 0:
        return profile.overheads.prefill_fixed_ms * 1e-3
    chunk = cfg.chunked_prefill_size if cfg.chunked_prefill_size > 0 else new_tokens
    weights_s = profile.model.decode_read_bytes / cfg.tp_size / _bandwidth(profile)
    per_token_s = 2 * profile.model.active_params / cfg.tp_size / _flops(profile)
    total = 0.0
    remaining = new_tokens
    while remaining > 0:
        step = min(chunk, remaining)
        total += max(weights_s, step * per_token_s) + _allreduce_s(profile, cfg, step)
        total += profile.overheads.prefill_fixed_ms * 1e-3
        remaining -= step
    if cfg.spec.enabled:
        total *= 1.05  # the draft model's own prefill over the same tokens
    return total


def noisy(seconds: float, profile: TwinProfile, rng: random.Random) -> float:
    """Per-pass timing noise (clock jitter, kernel variance), never below half the mean."""
    return seconds * max(0.5, rng.gauss(1.0, profile.timing.noise_rel))


# ---------------------------------------------------------------------------------------------
# Single-stream estimate (what a client at concurrency 1 would measure)


@dataclass(frozen=True)
class StreamEstimate:
    decode_tok_s: float
    accept_length: float
    passes: int


def simulate_stream(
    profile: TwinProfile, cfg: LaunchConfig, text: str, completion_tokens: int, rng: random.Random
) -> StreamEstimate:
    """Decode ``completion_tokens`` for one request alone, as the server would, without sleeping.

    decode tok/s = (completion_tokens - 1) / (time of last token - time of first token), the
    client's measure; accept length = completion_tokens / verify passes, SGLang's.
    """
    prompt = classify_prompt(profile, text)
    probs = acceptance_probs(profile, deepest_tier(cfg), prompt)
    tiers = cfg.spec.adaptive
    steps = adaptive.StepController(tiers, cfg.spec.num_steps or 0) if tiers is not None else None
    produced, passes, elapsed = 1, 0, 0.0  # the first token comes from prefill
    while produced < completion_tokens:
        pass_cfg = tier_config(cfg, steps.steps_for(1)) if steps is not None else cfg
        depth = (pass_cfg.spec.num_draft_tokens or 1) - 1 if pass_cfg.spec.enabled else 0
        elapsed += noisy(decode_pass_seconds(profile, pass_cfg, [prompt.prompt_tokens + produced]), profile, rng)
        accepted = draw_accept_length(probs[:depth], rng)
        if steps is not None:
            steps.observe(1, [accepted - 1])
        produced += min(accepted, completion_tokens - produced)
        passes += 1
    return StreamEstimate(
        decode_tok_s=(produced - 1) / elapsed if elapsed > 0 else 0.0,
        accept_length=produced / max(passes, 1),
        passes=passes,
    )
