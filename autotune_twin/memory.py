"""The twin's memory sizing: SGLang's pools, headroom and graph memory, and the failures (with the
messages SGLang dies with) of a configuration that does not fit.

Pure functions of a :class:`TwinProfile` and a :class:`LaunchConfig`, like the pass model
(:mod:`passmodel.physics`) whose sizes they share; what a server logs and how it dies is the twin's,
so it lives here and not in the package the tuner imports.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from passmodel import adaptive
from passmodel.config import LaunchConfig
from passmodel.physics import GIB, MIB, kv_cell_bytes, weight_bytes_per_gpu
from passmodel.profile import TwinProfile


class MemoryFailure(Exception):
    """The server would die sizing its memory.

    Attributes:
        kind: ``too_low`` (pools do not fit in the static budget), ``too_high`` (no headroom left
            for CUDA graphs/activations) or ``load_oom`` (the weights alone do not fit).
        exc_type: the Python exception SGLang raises.
        message: SGLang's message.
        stage: ``load``, ``pool`` or ``graph``: how far startup got.
    """

    def __init__(self, *, kind: str, exc_type: str, message: str, stage: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.exc_type = exc_type
        self.message = message
        self.stage = stage


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory after startup (bytes), as the server logs and reports it."""

    total_bytes: int
    free_bytes: int  # measured at start, before loading weights
    weight_bytes: int  # target shard + draft weights
    mem_fraction_static: float
    pool_bytes: float
    kv_pool_bytes: float
    mamba_pool_bytes: float
    max_total_num_tokens: int
    max_mamba_cache_size: int
    mamba_slots_per_request: int
    max_running_requests: int
    headroom_bytes: float
    needed_headroom_bytes: float
    graph_bytes: float
    cuda_graph_bs: int

    @property
    def avail_after_load_bytes(self) -> float:
        return self.free_bytes - self.weight_bytes


def free_bytes_at_start(profile: TwinProfile) -> int:
    """Free memory the server measures before loading (the same on every simulated rank)."""
    gpus = profile.gpus
    return gpus.memory_total_bytes - gpus.idle_used_bytes - gpus.runtime_reserved_bytes


def graph_tokens(cfg: LaunchConfig) -> int:
    """Tokens in the largest captured decode graph: batch size x tokens per request."""
    return cfg.cuda_graph_max_bs_decode * cfg.spec.tokens_per_pass


def capture_sizes(max_bs: int) -> list[int]:
    """The decode batch sizes SGLang captures CUDA graphs for, up to ``max_bs``."""
    sizes = [1, 2, 4, 8, 12, 16, 24, 32, 40, 48, 56, 64, 80, 96, 112, 128, 160, 192, 224, 256]
    return [b for b in sizes if b < max_bs] + [max_bs]


def graph_bytes(profile: TwinProfile, cfg: LaunchConfig) -> float:
    """CUDA graph memory: one set of graphs, or with adaptive speculation one per step tier, each
    up to the largest batch whose slot lists that tier, feeding steps + 1 tokens per request."""
    if cfg.disable_cuda_graph:
        return 0.0
    mem = profile.memory
    tiers = cfg.spec.adaptive
    if tiers is None:
        return mem.graph_base_bytes + mem.graph_bytes_per_token * graph_tokens(cfg)
    largest = adaptive.tier_graph_batches(tiers, capture_sizes(cfg.cuda_graph_max_bs_decode))
    return sum(mem.graph_base_bytes + mem.graph_bytes_per_token * bs * (step + 1) for step, bs in largest.items())


def needed_headroom_bytes(profile: TwinProfile, cfg: LaunchConfig) -> tuple[float, float]:
    """(activations + CUDA graphs, of which graphs) that must fit in the (1 - fraction) headroom."""
    mem = profile.memory
    activations = mem.activation_base_bytes + mem.activation_per_prefill_token_bytes * max(cfg.chunked_prefill_size, 0)
    graphs = graph_bytes(profile, cfg)
    return activations + graphs, graphs


def auto_mem_fraction(profile: TwinProfile, cfg: LaunchConfig) -> float:
    """SGLang-style automatic fraction: leave the estimated headroom plus a safety margin."""
    needed, _ = needed_headroom_bytes(profile, cfg)
    reserve = needed + profile.memory.auto_fraction_margin_bytes
    return round(1.0 - reserve / free_bytes_at_start(profile), 3)


def check_weights_fit(profile: TwinProfile, cfg: LaunchConfig) -> tuple[int, int]:
    """(free bytes at start, weight bytes per GPU): both engines load the weights first.

    Raises:
        MemoryFailure: ``load_oom``, torch's CUDA out-of-memory error, when the weights alone do not fit.
    """
    free = free_bytes_at_start(profile)
    weights = weight_bytes_per_gpu(profile, cfg)
    if weights > free:
        raise MemoryFailure(
            kind="load_oom",
            exc_type="torch.OutOfMemoryError",
            stage="load",
            message=_oom_text(weights - free, profile.gpus.memory_total_bytes, max(free - weights, 0)),
        )
    return free, weights


def plan_memory(profile: TwinProfile, cfg: LaunchConfig) -> MemoryPlan:
    """Size the pools the way SGLang does (sglang.md "Memory"); :func:`check_headroom` comes after.

    pool = fraction x free - weights. Hybrid models give the mamba state r/(1+r) of the pool
    and the full-attention KV the rest; with speculative decoding each mamba slot also holds
    intermediate state per draft token. Feasibility is monotone in the fraction: these pool checks
    only get easier as it grows, the headroom check only harder.

    Raises:
        MemoryFailure: ``load_oom`` or ``too_low``, with SGLang's message for the budget that ran out.
    """
    free, weights = check_weights_fit(profile, cfg)
    fraction = cfg.mem_fraction_static if cfg.mem_fraction_static is not None else auto_mem_fraction(profile, cfg)
    rest = fraction * free - weights
    if rest <= 0:
        minimum = 1 - (free - weights) / free
        raise MemoryFailure(
            kind="too_low",
            exc_type="ValueError",
            stage="pool",
            message=(
                f"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static={fraction}. "
                f"Raise --mem-fraction-static above {math.ceil(minimum * 1000) / 1000:.3f} "
                f"(minimum viable = 1 - available/pre = {minimum:.4f}). If using speculative decoding, "
                f"draft weights are now counted."
            ),
        )
    kv_budget, mamba_budget, mamba_size, slots = _split_pool(profile, cfg, rest)
    tokens = _kv_tokens(profile, cfg, kv_budget, fraction)
    max_running = _max_running(cfg, tokens, mamba_size, slots, profile.model.hybrid)
    needed, graphs = needed_headroom_bytes(profile, cfg)
    return MemoryPlan(
        total_bytes=profile.gpus.memory_total_bytes,
        free_bytes=free,
        weight_bytes=weights,
        mem_fraction_static=fraction,
        pool_bytes=rest,
        kv_pool_bytes=tokens * kv_cell_bytes(profile, cfg),
        mamba_pool_bytes=mamba_budget,
        max_total_num_tokens=tokens,
        max_mamba_cache_size=mamba_size,
        mamba_slots_per_request=slots,
        max_running_requests=max_running,
        headroom_bytes=(1 - fraction) * free,
        needed_headroom_bytes=needed,
        graph_bytes=graphs,
        cuda_graph_bs=0 if cfg.disable_cuda_graph else cfg.cuda_graph_max_bs_decode,
    )


def check_headroom(profile: TwinProfile, plan: MemoryPlan) -> None:
    """CUDA graph capture (and warm-up activations) must fit in the (1 - fraction) headroom.

    Raises:
        MemoryFailure: ``too_high``, the CUDA out-of-memory SGLang hits while capturing graphs.
    """
    if plan.needed_headroom_bytes > plan.headroom_bytes:
        raise MemoryFailure(
            kind="too_high",
            exc_type="torch.OutOfMemoryError",
            stage="graph",
            message=_oom_text(
                plan.needed_headroom_bytes - plan.headroom_bytes + 64 * MIB,
                profile.gpus.memory_total_bytes,
                plan.headroom_bytes * 0.02,
            ),
        )


def held_bytes(profile: TwinProfile, plan: MemoryPlan, *, ready: bool) -> float:
    """Memory per GPU a server holds (what NVML shows) once its pools are allocated: its CUDA
    context, the weights and the pools; once ready also the graphs and the warm-up's activations."""
    held = profile.gpus.runtime_reserved_bytes + plan.weight_bytes + plan.kv_pool_bytes + plan.mamba_pool_bytes
    return held + plan.needed_headroom_bytes if ready else held


def memory_outcome(profile: TwinProfile, cfg: LaunchConfig) -> str:
    """``ok`` or the failure kind (``too_low``, ``too_high``, ``load_oom``) of this configuration."""
    try:
        check_headroom(profile, plan_memory(profile, cfg))
    except MemoryFailure as failure:
        return failure.kind
    return "ok"


def _split_pool(profile: TwinProfile, cfg: LaunchConfig, rest: float) -> tuple[float, float, int, int]:
    """(KV budget, mamba budget, mamba slots, slots per request) for the pool ``rest``."""
    model = profile.model
    if not model.hybrid:
        return rest, 0.0, 0, 1
    slots = profile.memory.mamba_slots_per_request[cfg.mamba_radix_cache_strategy]
    per_req = model.mamba_state_bytes_per_request / cfg.tp_size
    per_draft = model.mamba_state_bytes_per_draft_token / cfg.tp_size
    draft = cfg.spec.buffer_tokens if cfg.spec.enabled else 0
    if cfg.max_mamba_cache_size is not None:
        size = cfg.max_mamba_cache_size
        serving = min(cfg.max_running_requests or size // slots, size // slots)
        mamba = size * per_req + serving * draft * per_draft
        kv = rest - mamba
    else:
        ratio = cfg.mamba_full_memory_ratio
        mamba = rest * ratio / (1 + ratio)
        # Solve jointly: size x state + (size / slots) x draft x intermediate state = budget.
        size = int(mamba // (per_req + draft * per_draft / slots))
        kv = rest - mamba
    if size <= 0:
        raise MemoryFailure(
            kind="too_low",
            exc_type="RuntimeError",
            stage="pool",
            message=(
                f"Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
                f"max_mamba_cache_size={size} (total_rest_memory={rest / GIB:.2f} GB, "
                f"mamba_cache_per_req={per_req / MIB:.2f} MB). Try: (1) reduce --max-running-requests, "
                f"(2) increase --mem-fraction-static, (3) reduce --speculative-num-draft-tokens, or "
                f"(4) use GPUs with more memory."
            ),
        )
    return kv, mamba, size, slots


def _kv_tokens(profile: TwinProfile, cfg: LaunchConfig, kv_budget: float, fraction: float) -> int:
    cell = kv_cell_bytes(profile, cfg)
    tokens = int(max(kv_budget, 0) // cell) // cfg.page_size * cfg.page_size
    message = (
        f"Not enough memory. Please try to increase --mem-fraction-static. "
        f"Current value: mem_fraction_static={fraction}"
    )
    if tokens <= 0:
        raise MemoryFailure(kind="too_low", exc_type="RuntimeError", stage="pool", message=message)
    if tokens < cfg.context_length:
        # Twin rule (SGLang would shorten the longest input instead): the full-attention KV pool
        # must hold one request of the configured context length.
        raise MemoryFailure(
            kind="too_low",
            exc_type="RuntimeError",
            stage="pool",
            message=f"{message} (twin: the KV pool holds {tokens} tokens, fewer than one "
            f"context_length={cfg.context_length} request)",
        )
    return tokens


def _max_running(cfg: LaunchConfig, tokens: int, mamba_size: int, slots: int, hybrid: bool) -> int:
    if cfg.max_running_requests is not None:
        running = min(cfg.max_running_requests, tokens // 2)
    else:
        estimated = max(min(int(tokens / cfg.context_length * 512), 4096), 2048)
        running = min(estimated, tokens // 2)
    if hybrid:
        running = min(running, mamba_size // slots)
        if running <= 0:
            raise MemoryFailure(
                kind="too_low",
                exc_type="RuntimeError",
                stage="pool",
                message=(
                    f"Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
                    f"max_mamba_cache_size={mamba_size}, mamba_ratio={slots}, resulting max_num_reqs={running}. "
                    f"Try: (1) reduce --max-running-requests, (2) increase --mem-fraction-static, or "
                    f"(3) use GPUs with more memory."
                ),
            )
    return running


def _oom_text(shortfall: float, total: int, free: float) -> str:
    return (
        f"CUDA out of memory. Tried to allocate {max(shortfall, MIB) / MIB:.2f} MiB. GPU 0 has a total "
        f"capacity of {total / GIB:.2f} GiB of which {max(free, 0) / MIB:.2f} MiB is free. Of the allocated "
        f"memory {0.97 * (total - free) / GIB:.2f} GiB is allocated by PyTorch. If reserved but unallocated "
        f"memory is large try setting PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation."
    )
