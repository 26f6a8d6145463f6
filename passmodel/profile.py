"""The twin's profile: the simulated GPUs, model, drafters and calibration constants, from YAML.

A profile is everything the twin's physics needs to know about one deployment (GPU set + model).
It is loaded once at startup; errors name the file and the field. ``docs/twin-profile.md``
documents every field with its unit.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

PROFILE_DIR = Path(__file__).parent / "profiles"
DEFAULT_PROFILE = "qwen3.6-27b-2xa6000"

# The prompt categories the acceptance tables are keyed by; "chat" is the fallback category.
CATEGORIES = ("repetitive", "code", "math", "chat")


class ProfileError(Exception):
    """A profile could not be found, read or validated; the message names the file and field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _check_acceptance(table: dict[str, list[float]]) -> dict[str, list[float]]:
    missing = [c for c in CATEGORIES if c not in table]
    if missing:
        raise ValueError(f"missing categories {missing}; need all of {list(CATEGORIES)}")
    unknown = [c for c in table if c not in CATEGORIES]
    if unknown:
        raise ValueError(f"unknown categories {unknown}; known: {list(CATEGORIES)}")
    for category, probs in table.items():
        if not probs:
            raise ValueError(f"{category}: needs at least one position")
        if any(not 0.0 <= p <= 1.0 for p in probs):
            raise ValueError(f"{category}: probabilities must lie in [0, 1]")
        # Absolute probabilities: position i can only be accepted if position i-1 was.
        if any(b > a for a, b in zip(probs, probs[1:], strict=False)):
            raise ValueError(f"{category}: probabilities must not increase with depth")
    return table


class GpuSpec(_Strict):
    count: int = Field(ge=1)
    name: str
    memory_total_bytes: int = Field(gt=0)
    idle_used_bytes: int = Field(ge=0)
    runtime_reserved_bytes: int = Field(ge=0)
    bandwidth_bytes_per_s: int = Field(gt=0)
    bandwidth_efficiency: float = Field(gt=0, le=1)
    memory_bus_width_bits: int = Field(gt=0)
    memory_max_clock_mhz: int = Field(gt=0)
    compute_flops: float = Field(gt=0)
    compute_efficiency: float = Field(gt=0, le=1)


class InterconnectSpec(_Strict):
    name: str
    allreduce_latency_us: float = Field(ge=0)
    allreduce_bandwidth_bytes_per_s: float = Field(gt=0)
    allreduces_per_layer: int = Field(ge=0)


class MtpSpec(_Strict):
    head_bytes: int = Field(ge=0)
    step_read_bytes: int = Field(ge=0)
    kv_bytes_per_token: int = Field(ge=0)
    acceptance: dict[str, list[float]]

    @field_validator("acceptance")
    @classmethod
    def _acceptance(cls, value: dict[str, list[float]]) -> dict[str, list[float]]:
        return _check_acceptance(value)


# The algorithms a separate draft model can serve: EAGLE/EAGLE3 draft step by step (NEXTN with a
# draft model path is EAGLE), DFLASH drafts a whole block in one pass.
DRAFTER_ALGORITHMS = ("EAGLE", "EAGLE3", "DFLASH")
_DFLASH_FIELDS = ("default_block_size", "block_fixed_ms", "per_token_ms")
_EAGLE_FIELDS = ("step_read_bytes", "step_ms")


class DrafterSpec(_Strict):
    """A separate draft model, matched by ``--speculative-draft-model-path`` and algorithm.

    Common fields, then the cost fields of its algorithm: DFLASH ``default_block_size``,
    ``block_fixed_ms``, ``per_token_ms``; EAGLE/EAGLE3 ``step_read_bytes``, ``step_ms``. Setting
    the other algorithm's fields is an error, so a generated profile cannot mix them up.
    """

    path: str
    algorithm: str
    weight_bytes: int = Field(ge=0)
    kv_bytes_per_token: int = Field(ge=0)
    # KV heads per layer: at a TP size above it the engines keep one whole head per GPU (None: split by TP).
    kv_heads: int | None = Field(default=None, ge=1)
    acceptance: dict[str, list[float]]
    # A broken checkpoint (wrong tokenizer, wrong target): its tokens depart from greedy text.
    diverges: bool = False
    default_block_size: int = Field(default=16, ge=2)
    block_fixed_ms: float = Field(default=0.0, ge=0)
    per_token_ms: float = Field(default=0.0, ge=0)
    # None: the whole drafter is read per step (weight_bytes).
    step_read_bytes: int | None = Field(default=None, ge=0)
    step_ms: float = Field(default=0.0, ge=0)

    @field_validator("acceptance")
    @classmethod
    def _acceptance(cls, value: dict[str, list[float]]) -> dict[str, list[float]]:
        return _check_acceptance(value)

    @field_validator("algorithm")
    @classmethod
    def _algorithm(cls, value: str) -> str:
        upper = value.upper()
        if upper not in DRAFTER_ALGORITHMS:
            raise ValueError(f"unknown drafter algorithm {value!r}; known: {list(DRAFTER_ALGORITHMS)}")
        return upper

    @model_validator(mode="after")
    def _fields_of_its_algorithm(self) -> DrafterSpec:
        foreign = _EAGLE_FIELDS if self.algorithm == "DFLASH" else _DFLASH_FIELDS
        wrong = sorted(set(foreign) & self.model_fields_set)
        if wrong:
            raise ValueError(f"{wrong} do not apply to a {self.algorithm} drafter")
        return self

    @property
    def step_bytes(self) -> int:
        """Bytes one EAGLE draft step reads."""
        return self.weight_bytes if self.step_read_bytes is None else self.step_read_bytes


class ModelSpec(_Strict):
    name: str
    architectures: list[str]
    dtype: str
    hybrid: bool
    num_layers: int = Field(ge=1)
    full_attention_layers: int = Field(ge=1)
    hidden_size: int = Field(ge=1)
    weight_bytes: int = Field(gt=0)
    decode_read_bytes: int = Field(gt=0)
    active_params: float = Field(gt=0)
    max_context_length: int = Field(ge=1)
    kv_bytes_per_token: int = Field(gt=0)
    # KV heads per layer (its MTP layer's too): at a TP size above it SGLang and vLLM keep one whole head
    # per GPU, so a GPU holds more than 1/TP of each token's KV (None: split by TP).
    kv_heads: int | None = Field(default=None, ge=1)
    mamba_state_bytes_per_request: int = Field(ge=0)
    mamba_state_bytes_per_draft_token: int = Field(ge=0)
    eos_token_id: int
    mtp: MtpSpec | None = None
    drafters: list[DrafterSpec] = Field(default_factory=list)
    # MoE: a pass reads the routed experts its tokens touch, not a fixed top-k share (0: dense).
    moe_expert_bytes: int = Field(default=0, ge=0)
    moe_experts: int = Field(default=0, ge=0)
    moe_experts_per_token: int = Field(default=0, ge=0)
    # How far each further token one request verifies spreads over new experts, as a share of an
    # independent token's spread (0: a request's draft tokens route with its first; 1: independently).
    moe_draft_token_spread: float = Field(default=1.0, ge=0, le=1)

    @model_validator(mode="after")
    def _hybrid_has_state(self) -> ModelSpec:
        if self.hybrid and self.mamba_state_bytes_per_request <= 0:
            raise ValueError("a hybrid model needs mamba_state_bytes_per_request > 0")
        return self


class CategoryRule(_Strict):
    name: str
    keywords: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _known(cls, value: str) -> str:
        if value not in CATEGORIES:
            raise ValueError(f"unknown category {value!r}; known: {list(CATEGORIES)}")
        return value


class PromptsSpec(_Strict):
    chars_per_token: float = Field(gt=0)
    rules: list[CategoryRule]
    long_prompt_tokens: int = Field(ge=1)
    long_acceptance_scale: float = Field(gt=0, le=1)
    natural_completion_min_tokens: int = Field(ge=1)
    natural_completion_max_tokens: int = Field(ge=1)

    @model_validator(mode="after")
    def _range(self) -> PromptsSpec:
        if self.natural_completion_max_tokens < self.natural_completion_min_tokens:
            raise ValueError("natural_completion_max_tokens must be >= natural_completion_min_tokens")
        return self


class TreeSpec(_Strict):
    miss_factor_per_doubling: float = Field(gt=0, le=1)
    bookkeeping_ms: float = Field(ge=0)
    draft_step_per_extra_branch_ms: float = Field(ge=0)


class OverheadSpec(_Strict):
    fixed_pass_ms: float = Field(ge=0)
    per_request_pass_ms: float = Field(ge=0)
    batch_scale: float = Field(ge=0)
    verify_token_ms: float = Field(ge=0)
    draft_step_ms: float = Field(ge=0)
    no_cuda_graph_pass_ms: float = Field(ge=0)
    attention_backend_pass_ms: dict[str, float] = Field(default_factory=dict)
    prefill_fixed_ms: float = Field(ge=0)
    # The fixed cost of speculation per pass (draft extend, bookkeeping, lost overlap).
    spec_pass_ms: float = Field(default=0.0, ge=0)


class MemorySpec(_Strict):
    activation_base_bytes: int = Field(ge=0)
    activation_per_prefill_token_bytes: int = Field(ge=0)
    graph_base_bytes: int = Field(ge=0)
    graph_bytes_per_token: int = Field(ge=0)
    # None: SGLang's default from GPU memory and TP size (launch.default_cuda_graph_max_bs).
    default_cuda_graph_max_bs: int | None = Field(default=None, ge=1)
    default_chunked_prefill_size: int = Field(ge=1)
    auto_fraction_margin_bytes: int = Field(ge=0)
    default_attention_backend: str
    mamba_slots_per_request: dict[str, int]

    @field_validator("mamba_slots_per_request")
    @classmethod
    def _strategies(cls, value: dict[str, int]) -> dict[str, int]:
        need = {"no_buffer", "extra_buffer", "extra_buffer_lazy"}
        if set(value) != need:
            raise ValueError(f"needs exactly the keys {sorted(need)}")
        if any(v < 1 for v in value.values()):
            raise ValueError("slot counts must be >= 1")
        return value


class TimingSpec(_Strict):
    load_seconds: float = Field(ge=0)
    noise_rel: float = Field(ge=0, lt=0.5)
    # A real H200 moved the same configuration's decode rate 1-5 % between launches (3.6 % sd in a
    # 5-minute llama.cpp study): every pass of one launch is slower or faster by one draw of this sd.
    launch_sd: float = Field(default=0.04, ge=0, lt=0.5, description="relative sd of speed between launches")


class VllmSpec(_Strict):
    """What the vLLM personality needs beyond the shared physics (every field has a default, so
    profiles written before the personality existed still load)."""

    non_torch_bytes: int = Field(default=536_870_912, ge=0)
    sampler_bytes_per_token: int = Field(default=2_097_152, ge=0)
    default_max_num_seqs: int = Field(default=256, ge=1)
    default_max_num_batched_tokens: int = Field(default=2048, ge=1)
    default_max_cudagraph_capture_size: int = Field(default=512, ge=1)
    prefix_caching_state_pages: int = Field(default=1, ge=0)
    extra_pass_ms: float = Field(default=0.0, ge=0)


class TwinProfile(_Strict):
    """One simulated deployment: GPU set, model, drafters, calibration constants."""

    name: str
    simulated: str
    gpus: GpuSpec
    interconnect: InterconnectSpec
    model: ModelSpec
    prompts: PromptsSpec
    tree: TreeSpec
    overheads: OverheadSpec
    memory: MemorySpec
    timing: TimingSpec
    vllm: VllmSpec = VllmSpec()

    def drafter(self, path: str | None, algorithm: str) -> DrafterSpec | None:
        """The drafter the profile knows for this draft model path and algorithm, if any."""
        for spec in self.model.drafters:
            if spec.algorithm == algorithm and (path is None or spec.path == path):
                return spec
        return None


def profile_path(name_or_path: str) -> Path:
    """A built-in profile name (file stem under ``profiles/``) or a path to a YAML file."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or candidate.exists():
        return candidate
    return PROFILE_DIR / f"{name_or_path}.yaml"


def builtin_profiles() -> list[str]:
    return sorted(p.stem for p in PROFILE_DIR.glob("*.yaml"))


def load_profile(name_or_path: str = DEFAULT_PROFILE) -> TwinProfile:
    """Read and validate a profile.

    Raises:
        ProfileError: the file is missing, is not YAML, or a field is wrong (named in the message).
    """
    path = profile_path(name_or_path)
    if not path.is_file():
        raise ProfileError(
            f"twin profile {name_or_path!r} not found (looked for {path}); built-in profiles: {builtin_profiles()}"
        )
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ProfileError(f"{path}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ProfileError(f"{path}: expected a mapping at the top level")
    try:
        return TwinProfile.model_validate(data)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc']) or '(top level)'}: {err['msg']}" for err in exc.errors()
        )
        raise ProfileError(f"{path}: invalid twin profile: {problems}") from None
