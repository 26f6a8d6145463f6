"""A launch as the pass model reads it: the effective configuration of one server after its
engine's launch rules (the twin's SGLang rules build it in ``autotune_twin.launch``; a study's
flags through :func:`passmodel.launch_flags.launch_config`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from passmodel.adaptive import AdaptiveConfig
from passmodel.profile import DrafterSpec, TwinProfile

# Without any of steps / topk / draft tokens SGLang picks these for Qwen3.5/3.6 and most models.
DEFAULT_SPEC = (3, 1, 4)


@dataclass(frozen=True)
class SpecConfig:
    """Speculative decoding after SGLang's rules; ``kind`` is how the twin simulates it."""

    kind: str  # "none", "mtp" (the model's own MTP heads), "eagle" (a separate EAGLE/EAGLE3 drafter) or "dflash"
    algorithm: str | None = None
    num_steps: int | None = None
    eagle_topk: int | None = None
    num_draft_tokens: int | None = None
    draft_model_path: str | None = None
    dflash_block_size: int | None = None
    drafter: DrafterSpec | None = None
    # --speculative-adaptive in effect: steps move at run time among the config's tiers.
    adaptive: AdaptiveConfig | None = None
    # vLLM's rejection_sample_method: block verification (physics.BLOCK_VERIFICATION_GAIN), or
    # synthetic acceptance at these unconditional per-position rates (the drafter's own ignored).
    block_verification: bool = False
    synthetic_rates: tuple[float, ...] | None = None

    @property
    def enabled(self) -> bool:
        return self.kind != "none"

    @property
    def buffer_tokens(self) -> int:
        """Draft tokens the per-request buffers are sized for: the widest adaptive tier's, else this pass's."""
        if self.adaptive is not None:
            return max(self.adaptive.candidate_steps) + 1
        return self.tokens_per_pass

    @property
    def tokens_per_pass(self) -> int:
        """Tokens each request feeds to one verify pass (1 without speculative decoding)."""
        return self.num_draft_tokens if self.num_draft_tokens is not None else 1


@dataclass(frozen=True)
class LaunchConfig:
    """The effective launch configuration (what ``/server_info`` reports, before memory sizing)."""

    tp_size: int
    context_length: int
    spec: SpecConfig
    mem_fraction_static: float | None
    max_running_requests: int | None
    mamba_full_memory_ratio: float
    mamba_radix_cache_strategy: str
    max_mamba_cache_size: int | None
    cuda_graph_max_bs_decode: int
    disable_cuda_graph: bool
    chunked_prefill_size: int
    attention_backend: str
    page_size: int
    kv_cache_dtype: str
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def kv_bytes_scale(self) -> float:
        """KV element size relative to bf16."""
        return 0.5 if self.kv_cache_dtype.startswith("fp8") else 0.25 if self.kv_cache_dtype.startswith("fp4") else 1.0


def default_cuda_graph_max_bs(profile: TwinProfile, tp_size: int) -> int:
    """SGLang's default ``--cuda-graph-max-bs-decode`` from GPU memory and TP size.

    ``arg_groups/memory_hook.py:118-145``: 32 on 35-60 GB cards at TP < 4 (160 at TP >= 4), 256 on
    60-90 GB cards at TP < 4 (512 at TP >= 4). A profile's ``default_cuda_graph_max_bs`` overrides it.
    """
    if profile.memory.default_cuda_graph_max_bs is not None:
        return profile.memory.default_cuda_graph_max_bs
    gib = profile.gpus.memory_total_bytes / 2**30
    small_tp = tp_size < 4
    if gib < 20:
        return 8
    if gib < 35:
        return 24 if small_tp else 80
    if gib < 60:
        return 32 if small_tp else 160
    return 256 if small_tp else 512
