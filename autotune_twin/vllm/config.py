"""The vLLM personality's rules: vLLM 0.33.0's config build and its memory sizing, as pure functions.

``resolve_config`` is what ``vllm serve`` decides in the seconds after parsing (speculative config,
batch limits, context length, compilation): a config vLLM would refuse raises
:class:`~autotune_twin.launch.LaunchError` carrying vLLM's exception type and message. The memory
functions follow vLLM's order at engine start (shared/vllm.md "Memory"): the requested budget
``utilization x total`` must be free at start; weights load; a profile run measures activations
and CUDA-graph memory; the KV cache gets ``budget - (weights + activations + graphs + non-torch)``
and must hold one request of ``max_model_len`` (or auto-fit it); the sampler warm-up then needs
memory outside the budget. Decode speed comes from the shared physics through a
:class:`~autotune_twin.launch.LaunchConfig` built here, so both personalities run on one model.
"""

from __future__ import annotations

import argparse
import math
import os
from dataclasses import dataclass, replace
from typing import Any

from autotune_twin import memory
from autotune_twin.launch import LaunchError
from autotune_twin.memory import MemoryFailure
from autotune_twin.vllm import dynamic_sd
from autotune_twin.vllm._flags import FLAGS
from passmodel import physics
from passmodel.config import LaunchConfig, SpecConfig
from passmodel.physics import GIB, MIB
from passmodel.profile import TwinProfile

# vLLM 0.33's MTPModelTypes: every name but "mtp" is rewritten to "mtp" with a warning.
MTP_ALIASES = frozenset(
    (
        "deepseek_mtp dots3_note_mtp mimo_mtp mimo_v2_mtp glm4_moe_mtp glm4_moe_lite_mtp glm_ocr_mtp ernie_mtp "
        "nemotron_h_mtp exaone_moe_mtp exaone4_5_mtp qwen3_next_mtp qwen4_exp_mtp qwen3_5_mtp longcat_flash_mtp "
        "bailing_hybrid_v3_mtp minimax_m3_mtp bailing_hybrid_mtp kimi_k3_mtp pangu_ultra_moe_mtp step3p5_mtp "
        "step5_mtp hy_v3_mtp hy_v4_mtp gemma4_mtp inkling_mtp glm5_next_mtp"
    ).split()
)
METHODS = (
    frozenset(
        ("ngram", "ngram_gpu", "draft_model", "suffix", "eagle", "eagle3", "dflash", "dspark", "mtp", "custom_class")
    )
    | frozenset({"extract_hidden_states"})
    | MTP_ALIASES
)
KV_CACHE_DTYPES = next(
    tuple(part.strip(" '[]") for part in (metavar or "").split(","))
    for _, names, _, _, metavar in FLAGS
    if names[0] == "--kv-cache-dtype"
)
ALLOW_LONG_ENV = "VLLM_ALLOW_LONG_MAX_MODEL_LEN"
DEFAULT_BLOCK_SIZE = 16


def _validation_error(model: str, field: str, message: str, value: object, kind: str) -> LaunchError:
    """A pydantic ValidationError as vLLM's config classes raise it."""
    return LaunchError(
        "pydantic_core._pydantic_core.ValidationError",
        f"1 validation error for {model}\n{field}\n  {message} [type={kind}, input_value={value!r}, "
        f"input_type={type(value).__name__}]",
    )


@dataclass(frozen=True)
class VllmConfig:
    """What ``vllm serve`` resolved before the engine starts (the twin's ``/v1/models`` and metrics
    report it); ``cfg`` is the same configuration for the shared physics."""

    cfg: LaunchConfig
    model: str
    served_model_name: str
    gpu_memory_utilization: float
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int | None  # None: auto-fit at engine start
    enable_prefix_caching: bool
    kv_cache_dtype: str
    optimization_level: int
    cuda_graphs: bool
    capture_size: int  # tokens in the largest captured graph; 0 without CUDA graphs
    speculative: dict[str, Any] | None
    block_size: int
    per_request_spec_metrics: str
    log_stats: bool
    notes: tuple[str, ...] = ()
    # num_speculative_tokens_per_batch_size expanded: batch size -> k (None: every batch drafts k).
    spec_lookup: tuple[int, ...] | None = None

    @property
    def num_speculative_tokens(self) -> int:
        return int(self.speculative["num_speculative_tokens"]) if self.speculative else 0

    @property
    def state_pages_per_request(self) -> int:
        """Mamba-state pages one running request holds on a hybrid model (shared/vllm.md)."""
        return 1 + self.num_speculative_tokens

    def with_context(self, max_model_len: int) -> VllmConfig:
        return replace(self, max_model_len=max_model_len, cfg=replace(self.cfg, context_length=max_model_len))


def resolve_config(args: argparse.Namespace, profile: TwinProfile) -> VllmConfig:
    """vLLM's config build for parsed flags.

    Raises:
        LaunchError: vLLM refuses the configuration before the engine starts.
    """
    notes: list[str] = []
    tp = args.tensor_parallel_size
    if tp < 1 or tp > profile.gpus.count:
        raise LaunchError(
            "ValueError",
            f"The number of required GPUs ({tp}) exceeds the total number of available GPUs "
            f"({profile.gpus.count}) (twin profile {profile.name}).",
        )
    util = args.gpu_memory_utilization
    if util <= 0:
        raise _validation_error(
            "CacheConfig", "gpu_memory_utilization", "Input should be greater than 0", util, "greater_than"
        )
    if util > 1:
        raise _validation_error(
            "CacheConfig", "gpu_memory_utilization", "Input should be less than or equal to 1", util, "less_than_equal"
        )
    if args.kv_cache_dtype not in KV_CACHE_DTYPES:
        raise LaunchError(
            "ValueError", f"Invalid kv_cache_dtype: {args.kv_cache_dtype!r}. Valid values are {list(KV_CACHE_DTYPES)}."
        )
    max_model_len = _max_model_len(args.max_model_len, profile)
    speculative = _speculative(args, profile, notes)
    k = int(speculative["num_speculative_tokens"]) if speculative else 0
    defaults = profile.vllm
    max_num_seqs = args.max_num_seqs if args.max_num_seqs is not None else defaults.default_max_num_seqs
    if max_num_seqs < 1:
        raise _validation_error(
            "SchedulerConfig", "max_num_seqs", "Input should be greater than 0", max_num_seqs, "greater_than"
        )
    batched = args.max_num_batched_tokens
    if batched is None:
        context = max_model_len or profile.model.max_context_length
        batched = min(defaults.default_max_num_batched_tokens, max_num_seqs * context)
    if (
        args.max_num_batched_tokens is not None
        and args.enable_chunked_prefill is False
        and max_model_len is not None
        and batched < max_model_len
    ):
        # vllm/config/scheduler.py:317-329 (SchedulerConfig.verify_max_model_len).
        raise LaunchError(
            "ValueError",
            f"max_num_batched_tokens ({batched}) is smaller than max_model_len ({max_model_len}). "
            "This effectively limits the maximum sequence length to max_num_batched_tokens and makes vLLM "
            "reject longer sequences. Please increase max_num_batched_tokens or decrease max_model_len.",
        )
    if batched < max_num_seqs:
        raise LaunchError(
            "ValueError",
            f"max_num_batched_tokens ({batched}) must be greater than or equal to max_num_seqs ({max_num_seqs}).",
        )
    level = str(args.optimization_level)
    if level not in ("0", "1", "2", "3"):
        raise LaunchError("ValueError", f"Invalid optimization level: {level!r}; use 0, 1, 2 or 3 (-O0 .. -O3)")
    compilation = args.compilation_config or {}
    if not isinstance(compilation, dict):
        raise LaunchError("ValueError", "--compilation-config must be a JSON object")
    cuda_graphs = (
        not args.enforce_eager and level != "0" and str(compilation.get("cudagraph_mode", "")).upper() != "NONE"
    )
    capture = args.max_cudagraph_capture_size
    if capture is None:
        capture = compilation.get("max_cudagraph_capture_size")
    if capture is not None and int(capture) < 1:
        raise LaunchError("ValueError", f"max_cudagraph_capture_size must be positive, got {capture}")
    if capture is None:
        capture = min(max_num_seqs * (1 + k) * 2, defaults.default_max_cudagraph_capture_size)
    capture = min(int(capture), batched) if cuda_graphs else 0
    hybrid = profile.model.hybrid
    block = _block_size(profile, tp, args.kv_cache_dtype) if hybrid else DEFAULT_BLOCK_SIZE
    if hybrid:
        notes.append(
            f"Setting attention block size to {block} tokens to ensure that attention page size is >= mamba page size."
        )
    spec_lookup = _per_batch(args, speculative, max_num_seqs, notes)
    spec = (
        SpecConfig(kind="mtp", algorithm="MTP", num_steps=k, eagle_topk=1, num_draft_tokens=k + 1)
        if speculative
        else SpecConfig(kind="none")
    )
    served = (args.served_model_name or [args.model])[0]
    cfg = LaunchConfig(
        tp_size=tp,
        context_length=max_model_len or profile.model.max_context_length,
        spec=spec,
        mem_fraction_static=None,
        max_running_requests=max_num_seqs,
        mamba_full_memory_ratio=0.0,
        mamba_radix_cache_strategy="none",
        max_mamba_cache_size=None,
        cuda_graph_max_bs_decode=capture // (1 + k) if cuda_graphs else 0,
        disable_cuda_graph=not cuda_graphs,
        chunked_prefill_size=batched,
        attention_backend=profile.memory.default_attention_backend,
        page_size=1,
        kv_cache_dtype=args.kv_cache_dtype,
        notes=tuple(notes),
    )
    return VllmConfig(
        cfg=cfg,
        model=args.model,
        served_model_name=served,
        gpu_memory_utilization=util,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=batched,
        max_model_len=max_model_len,
        enable_prefix_caching=args.enable_prefix_caching is not False,
        kv_cache_dtype=args.kv_cache_dtype,
        optimization_level=int(level),
        cuda_graphs=cuda_graphs,
        capture_size=capture,
        speculative=speculative,
        block_size=block,
        per_request_spec_metrics=args.per_request_spec_decode_metrics,
        log_stats=not args.disable_log_stats,
        notes=tuple(notes),
        spec_lookup=spec_lookup,
    )


def _per_batch(
    args: argparse.Namespace, speculative: dict[str, Any] | None, max_num_seqs: int, notes: list[str]
) -> tuple[int, ...] | None:
    """The per-batch-size k table, or None: no schedule, or data parallelism turned it off."""
    schedule = speculative.get(dynamic_sd.KEY) if speculative else None
    if speculative is None or schedule is None:
        return None
    k = int(speculative["num_speculative_tokens"])
    if int(getattr(args, "data_parallel_size", None) or 1) > 1:
        notes.append(dynamic_sd.DP_WARNING.format(k=k))
        return None
    return dynamic_sd.lookup(schedule, max_num_seqs, k)


def _max_model_len(requested: int | None, profile: TwinProfile) -> int | None:
    derived = profile.model.max_context_length
    if requested is None:
        return derived
    if requested == -1:
        return None
    if requested < 1:
        raise LaunchError("ValueError", f"max_model_len must be positive or -1 (auto), got {requested}")
    if requested > derived and os.environ.get(ALLOW_LONG_ENV, "").lower() not in ("1", "true"):
        raise LaunchError(
            "ValueError",
            f"User-specified max_model_len ({requested}) is greater than the derived max_model_len "
            f"(max_position_embeddings={derived} in model's config.json). To allow overriding this maximum, "
            f"set the env var {ALLOW_LONG_ENV}=1.",
        )
    return requested


def _speculative(args: argparse.Namespace, profile: TwinProfile, notes: list[str]) -> dict[str, Any] | None:
    given = args.speculative_config
    if given is not None and not isinstance(given, dict):
        raise LaunchError("ValueError", "--speculative-config must be a JSON object")
    config: dict[str, Any] = {str(k).replace("-", "_"): v for k, v in (given or {}).items()}
    for flag, key, value in (
        ("--spec-method", "method", args.spec_method),
        ("--spec-model", "model", args.spec_model),
        ("--spec-tokens", "num_speculative_tokens", args.spec_tokens),
    ):
        if value is None:
            continue
        if key in config:
            raise LaunchError("ValueError", f"{flag} and --speculative-config['{key}'] are mutually exclusive")
        config[key] = value
    if given is None and not config:
        return None
    method, model, k = config.get("method"), config.get("model"), config.get("num_speculative_tokens")
    dynamic_sd.check_type(config.get(dynamic_sd.KEY))
    if method is None:
        method = "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    if method not in METHODS:
        raise _validation_error(
            "SpeculativeConfig", "method", f"Input should be one of {sorted(METHODS)}", method, "literal_error"
        )
    if method in MTP_ALIASES:
        notes.append(f"method `{method}` is deprecated and replaced with mtp.")
        method = "mtp"
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < 1):
        raise _validation_error(
            "SpeculativeConfig", "num_speculative_tokens", "Input should be greater than 0", k, "greater_than"
        )
    if model is None and k is not None and method not in ("mtp", "dspark", "ngram", "ngram_gpu", "suffix"):
        raise LaunchError("ValueError", "num_speculative_tokens was provided but without speculative model.")
    draft_tp = config.get("draft_tensor_parallel_size")
    if draft_tp is not None and draft_tp not in (1, args.tensor_parallel_size):
        raise LaunchError(
            "ValueError",
            f"draft_tensor_parallel_size={draft_tp} cannot be other than 1 or target model "
            f"tensor_parallel_size={args.tensor_parallel_size}",
        )
    if method in ("ngram", "ngram_gpu"):
        low, high = config.get("prompt_lookup_min"), config.get("prompt_lookup_max")
        low, high = (low if low is not None else high or 5), (high if high is not None else low or 5)
        if low > high:
            raise LaunchError("ValueError", f"prompt_lookup_min={low} must be <= prompt_lookup_max={high}")
    if method != "mtp" or (model is not None and model != args.model):
        raise LaunchError(
            "ValueError",
            f"speculative method {method} (model {model}) is not simulated by the autotune twin (profile "
            f"{profile.name} simulates method mtp with the model's own MTP layers)",
        )
    if profile.model.mtp is None:
        raise LaunchError("ValueError", f"{profile.model.name} has no MTP layers; method mtp needs them")
    if k is None:
        raise LaunchError("ValueError", "num_speculative_tokens is required for method 'mtp'")
    return {**config, "method": "mtp", "model": args.model, "num_speculative_tokens": k}


def _block_size(profile: TwinProfile, tp: int, kv_cache_dtype: str) -> int:
    """Hybrid models: the attention block grows until one attention page holds a mamba page."""
    model = profile.model
    state_per_layer = model.mamba_state_bytes_per_request / max(model.num_layers - model.full_attention_layers, 1) / tp
    scale = 0.5 if kv_cache_dtype.startswith("fp8") else 1.0
    kv_per_token_per_layer = model.kv_bytes_per_token * scale / model.full_attention_layers / tp
    return int(math.ceil(state_per_layer / kv_per_token_per_layer / DEFAULT_BLOCK_SIZE) * DEFAULT_BLOCK_SIZE)


# ---------------------------------------------------------------------------------------------
# Memory


@dataclass(frozen=True)
class ProfileRun:
    """Per GPU, after the weights loaded and the profile run measured the rest (bytes)."""

    total_bytes: int
    free_bytes: int
    requested_bytes: float
    weight_bytes: int
    activation_bytes: float
    graph_bytes: float
    non_torch_bytes: float

    @property
    def available_kv_bytes(self) -> float:
        """vLLM's ``Available KV cache memory`` (may be negative: then the engine stops)."""
        return (
            self.requested_bytes - self.weight_bytes - self.activation_bytes - self.graph_bytes - self.non_torch_bytes
        )


@dataclass(frozen=True)
class KvPlan:
    """The KV cache as sized: what the scheduler may fill."""

    available_bytes: float
    kv_cell_bytes: float
    state_page_bytes: float
    pages_per_request: int
    block_size: int
    kv_tokens: int
    max_model_len: int
    max_concurrency: float
    auto_fit: bool

    def request_bytes(self, tokens: int) -> float:
        """KV and state one running request of ``tokens`` tokens holds."""
        blocks = math.ceil(max(tokens, 1) / self.block_size)
        return blocks * self.block_size * self.kv_cell_bytes + self.pages_per_request * self.state_page_bytes


def check_free_memory(profile: TwinProfile, vc: VllmConfig) -> None:
    """The requested budget must be free at start (vLLM checks before loading anything).

    Raises:
        MemoryFailure: ``too_high``.
    """
    total = profile.gpus.memory_total_bytes
    free = memory.free_bytes_at_start(profile)
    requested = vc.gpu_memory_utilization * total
    if requested > free:
        raise MemoryFailure(
            kind="too_high",
            exc_type="ValueError",
            stage="init",
            message=(
                f"Free memory on device cuda:0 ({free / GIB:.2f}/{total / GIB:.2f} GiB) on startup is less than "
                f"desired GPU memory utilization ({vc.gpu_memory_utilization}, {requested / GIB:.2f} GiB). "
                "Decrease GPU memory utilization or reduce GPU memory used by other processes."
            ),
        )


def profile_run(profile: TwinProfile, vc: VllmConfig) -> ProfileRun:
    """Weights, peak activations of a ``max_num_batched_tokens`` step, CUDA-graph memory.

    Raises:
        MemoryFailure: ``load_oom`` when the weights alone do not fit.
    """
    total = profile.gpus.memory_total_bytes
    free, weights = memory.check_weights_fit(profile, vc.cfg)
    mem = profile.memory
    activations = mem.activation_base_bytes + mem.activation_per_prefill_token_bytes * vc.max_num_batched_tokens
    graphs = mem.graph_base_bytes + mem.graph_bytes_per_token * vc.capture_size if vc.cuda_graphs else 0.0
    return ProfileRun(
        total_bytes=total,
        free_bytes=free,
        requested_bytes=vc.gpu_memory_utilization * total,
        weight_bytes=weights,
        activation_bytes=activations,
        graph_bytes=graphs,
        non_torch_bytes=profile.vllm.non_torch_bytes,
    )


def size_kv(profile: TwinProfile, vc: VllmConfig, run: ProfileRun) -> KvPlan:
    """The KV cache from what the profile run left; one request of ``max_model_len`` must fit.

    Raises:
        MemoryFailure: ``too_low`` with vLLM's message for the check that failed.
    """
    available = run.available_kv_bytes
    if available <= 0:
        raise MemoryFailure(
            kind="too_low",
            exc_type="ValueError",
            stage="kv",
            message=(
                "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
                "initializing the engine (this flag also controls CPU memory reservation on the CPU backend, "
                "despite its name). See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ "
                "for more details."
            ),
        )
    model = profile.model
    cell = physics.kv_cell_bytes(profile, vc.cfg)
    state = model.mamba_state_bytes_per_request / vc.cfg.tp_size if model.hybrid else 0.0
    pages = vc.state_pages_per_request + (profile.vllm.prefix_caching_state_pages if vc.enable_prefix_caching else 0)
    pages = pages if model.hybrid else 0
    block = vc.block_size
    fit = int((available - pages * state) // (cell * block)) * block
    auto = vc.max_model_len is None
    if auto:
        if fit < 1:
            raise MemoryFailure(
                kind="too_low",
                exc_type="ValueError",
                stage="kv",
                message=(
                    "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single "
                    "token. Try increasing `gpu_memory_utilization`."
                ),
            )
        length = min(fit, model.max_context_length)
    else:
        assert vc.max_model_len is not None
        length = vc.max_model_len
    plan = KvPlan(
        available_bytes=available,
        kv_cell_bytes=cell,
        state_page_bytes=state,
        pages_per_request=pages,
        block_size=block,
        kv_tokens=int(available // (cell * block)) * block,
        max_model_len=length,
        max_concurrency=0.0,
        auto_fit=auto,
    )
    needed = plan.request_bytes(length)
    if needed > available:
        estimate = f"Based on the available memory, the estimated maximum model length is {fit}. " if fit > 0 else ""
        raise MemoryFailure(
            kind="too_low",
            exc_type="ValueError",
            stage="kv",
            message=(
                f"To serve at least one request with the model's max seq len ({length}), ({needed / GIB:.2f} GiB "
                f"KV cache is needed, which is larger than the available KV cache memory ({available / GIB:.2f} "
                f"GiB). {estimate}Try increasing `gpu_memory_utilization` (which also controls CPU memory on the "
                f"CPU backend) or decreasing `max_model_len` when initializing the engine. See "
                f"https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
            ),
        )
    return replace(plan, max_concurrency=available / needed)


def sampler_bytes(profile: TwinProfile, vc: VllmConfig) -> float:
    """Logits the sampler warm-up holds for ``max_num_seqs`` dummy requests (1 + k positions each)."""
    return profile.vllm.sampler_bytes_per_token * vc.max_num_seqs * (1 + vc.num_speculative_tokens)


def check_sampler(profile: TwinProfile, vc: VllmConfig, run: ProfileRun) -> None:
    """The sampler warm-up runs outside the budget: in ``free - utilization x total``.

    Raises:
        MemoryFailure: ``too_high``, vLLM's wrapped CUDA out-of-memory.
    """
    outside = run.free_bytes - run.requested_bytes
    if sampler_bytes(profile, vc) > outside:
        raise MemoryFailure(
            kind="too_high",
            exc_type="RuntimeError",
            stage="sampler",
            message=(
                f"CUDA out of memory occurred when warming up sampler with {vc.max_num_seqs} dummy requests. "
                "Please try lowering `max_num_seqs` or `gpu_memory_utilization` when initializing the engine."
            ),
        )


def memory_outcome(profile: TwinProfile, vc: VllmConfig) -> str:
    """``ok`` or the failure kind (``too_low``, ``too_high``, ``load_oom``) of this configuration."""
    try:
        check_free_memory(profile, vc)
        run = profile_run(profile, vc)
        size_kv(profile, vc, run)
        check_sampler(profile, vc, run)
    except MemoryFailure as failure:
        return failure.kind
    return "ok"


__all__ = ["GIB", "MIB", "KvPlan", "ProfileRun", "VllmConfig", "memory_outcome", "resolve_config"]
