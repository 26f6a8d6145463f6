"""A twin profile from public facts: the GPU, its count and TP, the model's config.json, the drafter.

``SETUP.yaml`` (docs/twin-profile.md, "A profile from public facts") is what a user knows about a
deployment; :func:`profile_from_setup` turns it into a :class:`TwinProfile` whose sizes come from
the model's config and whose per-pass costs come from :data:`DEFAULT_COSTS`, the constants fitted on
the published tables of ``shared/spec-tables`` (``benchmarks/spec_tables.py``). The generated family
(``benchmarks/family.py``) takes the same path: it draws facts (a GPU, a count, a config.json, a dtype,
drafters) and costs around :data:`DEFAULT_COSTS`, and builds each member with :func:`profile_from_setup`.
"""

from __future__ import annotations

import json
import math
from functools import cache
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from passmodel.profile import (
    CATEGORIES,
    DrafterSpec,
    GpuSpec,
    InterconnectSpec,
    MemorySpec,
    ModelSpec,
    MtpSpec,
    OverheadSpec,
    TimingSpec,
    TreeSpec,
    TwinProfile,
    load_profile,
)

GIB = 1 << 30


class SetupError(Exception):
    """A setup file could not be read or validated; the message names the file and the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuFacts(_Strict):
    """A GPU as its datasheet gives it (per GPU)."""

    memory_gb: float = Field(gt=0)
    bandwidth_gb_s: float = Field(gt=0)
    bf16_tflops: float = Field(gt=0)
    fp8_tflops: float | None = Field(default=None, gt=0)
    nvlink: bool = True
    name: str = "custom GPU"


# Datasheet figures (memory GB, bandwidth GB/s, dense bf16 and fp8 TFLOP/s, NVLink).
KNOWN_GPUS: dict[str, GpuFacts] = {
    "RTX 3090": GpuFacts(
        name="NVIDIA GeForce RTX 3090", memory_gb=24, bandwidth_gb_s=936, bf16_tflops=71, nvlink=False
    ),
    "RTX 4090": GpuFacts(
        name="NVIDIA GeForce RTX 4090", memory_gb=24, bandwidth_gb_s=1008, bf16_tflops=165, fp8_tflops=330, nvlink=False
    ),
    "RTX 5090": GpuFacts(
        name="NVIDIA GeForce RTX 5090", memory_gb=32, bandwidth_gb_s=1792, bf16_tflops=209, fp8_tflops=419, nvlink=False
    ),
    "L4": GpuFacts(name="NVIDIA L4", memory_gb=24, bandwidth_gb_s=300, bf16_tflops=121, fp8_tflops=242, nvlink=False),
    "A6000": GpuFacts(name="NVIDIA RTX A6000", memory_gb=48, bandwidth_gb_s=768, bf16_tflops=155, nvlink=False),
    "L40S": GpuFacts(
        name="NVIDIA L40S", memory_gb=48, bandwidth_gb_s=864, bf16_tflops=362, fp8_tflops=733, nvlink=False
    ),
    "A100": GpuFacts(name="NVIDIA A100-SXM4-80GB", memory_gb=80, bandwidth_gb_s=2039, bf16_tflops=312),
    "H100": GpuFacts(name="NVIDIA H100 80GB HBM3", memory_gb=80, bandwidth_gb_s=3350, bf16_tflops=989, fp8_tflops=1979),
    "H20": GpuFacts(name="NVIDIA H20", memory_gb=96, bandwidth_gb_s=4000, bf16_tflops=148, fp8_tflops=296),
    "H200": GpuFacts(name="NVIDIA H200", memory_gb=141, bandwidth_gb_s=4800, bf16_tflops=989, fp8_tflops=1979),
    "B200": GpuFacts(name="NVIDIA B200", memory_gb=180, bandwidth_gb_s=8000, bf16_tflops=2250, fp8_tflops=4500),
    "MI300X": GpuFacts(
        name="AMD Instinct MI300X", memory_gb=192, bandwidth_gb_s=5300, bf16_tflops=1307, fp8_tflops=2615
    ),
    "Radeon 8060S": GpuFacts(
        name="AMD Radeon 8060S (Ryzen AI MAX+ 395)", memory_gb=96, bandwidth_gb_s=256, bf16_tflops=59, nvlink=False
    ),
}

BYTES_PER_PARAM = {"bf16": 2.0, "bfloat16": 2.0, "fp16": 2.0, "float16": 2.0, "fp8": 1.0, "float8_e4m3fn": 1.0}
BYTES_PER_PARAM |= {"int8": 1.0, "int4": 0.55, "w4a16": 0.55, "awq": 0.55, "gptq": 0.55, "fp4": 0.55, "nvfp4": 0.55}
ALGORITHMS = ("EAGLE", "EAGLE3", "NEXTN", "MTP", "DFLASH", "STANDALONE", "NGRAM")


class ModelFacts(_Strict):
    config: dict[str, Any] | str
    dtype: str = "bf16"


class DrafterFacts(_Strict):
    algorithm: str
    config: dict[str, Any] | str | None = None
    # Not a public fact but a guess a user may state: the chance each further draft position is
    # accepted given the one before (accept length of k steps = 1 + r + r^2 + ... + r^k).
    acceptance_rate: float = Field(default=0.7, gt=0, lt=1)


class Setup(_Strict):
    engine: Literal["sglang", "vllm"] = "sglang"
    gpu: str | GpuFacts
    gpu_count: int = Field(default=1, ge=1)
    tp: int = Field(default=1, ge=1)
    model: ModelFacts
    drafter: DrafterFacts | None = None


class PassCosts(_Strict):
    """The per-pass constants public facts do not give: :data:`DEFAULT_COSTS`, fitted on the corpus."""

    layer_launch_us: float = Field(ge=0)  # per layer per forward pass (kernel gaps under CUDA graphs)
    moe_layer_launch_us: float = Field(ge=0)  # extra per MoE layer (routing, grouped GEMMs)
    allreduce_latency_us: float = Field(ge=0)  # per all-reduce under TP (NVLink)
    pcie_allreduce_latency_us: float = Field(ge=0)
    spec_pass_ms: float = Field(ge=0)  # the fixed cost of speculation per pass
    spec_pass_tp_ms: float = Field(ge=0)  # and per doubling of TP
    draft_step_ms: float = Field(ge=0)  # per draft step beyond its weight read
    draft_step_tp_ms: float = Field(ge=0)  # per draft step per doubling of TP (its collectives)
    verify_token_ms: float = Field(ge=0)  # per verified token beyond the first, per request
    batch_scale: float = Field(ge=0)  # draft and verify overheads grow by 1 + this x (batch - 1)
    per_request_ms: float = Field(ge=0)  # per running request per pass (host and per-sequence kernels)
    moe_draft_token_spread: float = Field(ge=0, le=1)  # a draft token's new experts, as a share of a request's
    tree_branch_ms: float = Field(ge=0)  # per draft step per branch beyond the first (topk > 1)
    tree_bookkeeping_ms: float = Field(ge=0)  # per pass with a tree (masks, bookkeeping)
    bandwidth_efficiency: float = Field(gt=0, le=1)
    compute_efficiency: float = Field(gt=0, le=1)


DEFAULT_COSTS = PassCosts(
    layer_launch_us=48.2,
    moe_layer_launch_us=103.4,
    allreduce_latency_us=1.63,
    pcie_allreduce_latency_us=25.0,
    spec_pass_ms=1.44,
    spec_pass_tp_ms=1.11,
    draft_step_ms=0.311,
    draft_step_tp_ms=0.823,
    verify_token_ms=0.0031,
    batch_scale=0.027,
    per_request_ms=0.05,  # fixed, not fitted: held out, fitting it neither helped nor hurt (issue 53)
    moe_draft_token_spread=0.0832,
    tree_branch_ms=0.006,
    tree_bookkeeping_ms=3.66,
    bandwidth_efficiency=0.85,
    compute_efficiency=0.38,
)


# ---------------------------------------------------------------------------------------------
# Reading a setup


def load_setup(path: Path) -> Setup:
    """Read and validate ``SETUP.yaml``; config paths inside it are relative to its folder.

    Raises:
        SetupError: the file is missing, not YAML, or a field is wrong (named in the message).
    """
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise SetupError(f"{path}: cannot read: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise SetupError(f"{path}: not valid YAML: {str(exc).splitlines()[0]}") from None
    if isinstance(data, dict) and isinstance(data.get("setup"), dict):
        data = data["setup"]  # a replay file of benchmarks/spec_setups: the setup is one section
    if not isinstance(data, dict):
        raise SetupError(f"{path}: expected a mapping at the top level")
    try:
        setup = Setup.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        raise SetupError(f"{path}: {'.'.join(str(p) for p in err['loc'])}: {err['msg']}") from None
    try:
        return resolve_setup(setup, path.parent)
    except ValueError as exc:
        raise SetupError(f"{path}: {exc}") from None


def resolve_setup(setup: Setup, base: Path) -> Setup:
    """The setup with config paths read, the GPU looked up and every value checked.

    Raises:
        ValueError: an unknown GPU, an unreadable config, a bad TP, an unknown dtype or algorithm.
    """
    if isinstance(setup.gpu, str) and _known_gpu(setup.gpu) is None:
        raise ValueError(f"gpu: unknown GPU {setup.gpu!r}; known: {sorted(KNOWN_GPUS)} (or give its numbers)")
    if setup.tp > setup.gpu_count:
        raise ValueError(f"tp: {setup.tp} exceeds gpu_count {setup.gpu_count}")
    if setup.model.dtype.lower() not in BYTES_PER_PARAM:
        raise ValueError(f"model.dtype: unknown {setup.model.dtype!r}; known: {sorted(BYTES_PER_PARAM)}")
    config = _read_config(setup.model.config, base, "model.config")
    _require(ConfigFacts.of(config), "model.config")
    model = setup.model.model_copy(update={"config": config})
    drafter = setup.drafter
    if drafter is not None:
        if drafter.algorithm.upper() not in ALGORITHMS:
            raise ValueError(f"drafter.algorithm: unknown {drafter.algorithm!r}; known: {list(ALGORITHMS)}")
        draft = _read_config(drafter.config, base, "drafter.config") if drafter.config is not None else None
        drafter = drafter.model_copy(update={"algorithm": drafter.algorithm.upper(), "config": draft})
    return setup.model_copy(update={"model": model, "drafter": drafter})


def _known_gpu(name: str) -> GpuFacts | None:
    wanted = name.lower().removeprefix("nvidia ").removeprefix("geforce ").replace("-", " ")
    for key, facts in KNOWN_GPUS.items():
        if wanted in (key.lower(), facts.name.lower()) or wanted.startswith(key.lower() + " "):
            return facts
    return None


def _read_config(value: dict[str, Any] | str | None, base: Path, where: str) -> dict[str, Any]:
    if isinstance(value, dict):
        return value
    path = base / str(value)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ValueError(f"{where}: cannot read {path}: {exc.strerror}") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{where}: {path} is not JSON: {exc.msg} (line {exc.lineno})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{where}: {path} is not a JSON object")
    return data


def _require(facts: ConfigFacts, where: str) -> None:
    if facts.hidden_size <= 0 or facts.num_layers <= 0 or facts.vocab_size <= 0:
        raise ValueError(f"{where}: needs hidden_size, num_hidden_layers and vocab_size")


# ---------------------------------------------------------------------------------------------
# A model's sizes from its config.json


class ConfigFacts(_Strict):
    """What the twin needs from a Hugging Face config.json (text part; MoE and hybrid fields too)."""

    architectures: list[str]
    hidden_size: int
    num_layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab_size: int
    tied: bool
    experts: int
    experts_per_token: int
    moe_intermediate: int
    shared_intermediate: int
    dense_layers: int  # layers with a dense MLP in an MoE model
    full_attention_layers: int
    mtp_layers: int
    linear_state_elements: int  # one linear-attention layer's recurrent state (heads x key x value dims)
    max_context: int
    eos_token_id: int

    @classmethod
    def of(cls, config: dict[str, Any]) -> ConfigFacts:
        text = config.get("text_config") if isinstance(config.get("text_config"), dict) else None
        c = {**config, **(text or {})}
        hidden = int(c.get("hidden_size", 0))
        layers = int(c.get("num_hidden_layers", 0))
        heads = int(c.get("num_attention_heads", 1) or 1)
        experts = int(c.get("n_routed_experts") or c.get("num_experts") or c.get("num_local_experts") or 0)
        shared = int(c.get("shared_expert_intermediate_size") or 0)
        moe_inter = int(c.get("moe_intermediate_size") or c.get("intermediate_size") or 0)
        if not shared and c.get("n_shared_experts"):
            shared = int(c["n_shared_experts"]) * moe_inter
        dense = int(c.get("first_k_dense_replace") or 0) + len(c.get("mlp_only_layers") or [])
        types = c.get("layer_types")
        full = sum(1 for t in types if t == "full_attention") if isinstance(types, list) and types else layers
        eos = c.get("eos_token_id", 2)
        return cls(
            architectures=list(c.get("architectures") or ["ForCausalLM"]),
            hidden_size=hidden,
            num_layers=layers,
            heads=heads,
            kv_heads=int(c.get("num_key_value_heads") or heads),
            head_dim=int(c.get("head_dim") or (hidden // heads if heads else 0)),
            intermediate=int(c.get("intermediate_size") or 4 * hidden),
            vocab_size=int(c.get("vocab_size", 0)),
            tied=bool(c.get("tie_word_embeddings", False)),
            experts=experts,
            experts_per_token=int(c.get("num_experts_per_tok") or 0) if experts else 0,
            moe_intermediate=moe_inter if experts else 0,
            shared_intermediate=shared if experts else 0,
            dense_layers=dense if experts else layers,
            full_attention_layers=max(1, full),
            mtp_layers=int(c.get("num_nextn_predict_layers") or c.get("mtp_num_hidden_layers") or 0),
            linear_state_elements=int(c.get("linear_num_value_heads") or heads)
            * int(c.get("linear_key_head_dim") or c.get("head_dim") or 128)
            * int(c.get("linear_value_head_dim") or c.get("head_dim") or 128),
            max_context=int(c.get("max_position_embeddings") or 32768),
            eos_token_id=int(eos[0] if isinstance(eos, list) else eos),
        )

    @property
    def hybrid(self) -> bool:
        return self.full_attention_layers < self.num_layers

    def attention_params(self) -> float:
        q_o = 2 * self.hidden_size * self.heads * self.head_dim
        k_v = 2 * self.hidden_size * self.kv_heads * self.head_dim
        return float(q_o + k_v)

    def dense_mlp_params(self) -> float:
        return 3.0 * self.hidden_size * self.intermediate

    def expert_params(self) -> float:
        """One routed expert's parameters."""
        return 3.0 * self.hidden_size * self.moe_intermediate

    def layer_params(self, moe: bool) -> tuple[float, float]:
        """(parameters of one layer, of which routed experts)."""
        if not moe:
            return self.attention_params() + self.dense_mlp_params(), 0.0
        experts = self.experts * self.expert_params()
        shared = 3.0 * self.hidden_size * self.shared_intermediate
        return self.attention_params() + shared + experts + self.hidden_size * self.experts, experts

    def sizes(self) -> tuple[float, float, float]:
        """(all parameters, routed-expert parameters, parameters one token uses), lm_head included."""
        moe_layers = self.num_layers - self.dense_layers if self.experts else 0
        dense_total, _ = self.layer_params(False)
        moe_total, experts = self.layer_params(True) if moe_layers else (0.0, 0.0)
        head = self.vocab_size * self.hidden_size * (1 if self.tied else 2)
        total = self.dense_layers * dense_total + moe_layers * moe_total + head
        routed = moe_layers * experts
        active = (
            total - routed + routed * self.experts_per_token / max(self.experts, 1) - self.vocab_size * self.hidden_size
        )
        return total, routed, active


# ---------------------------------------------------------------------------------------------
# The builder


def gpu_facts(setup: Setup) -> GpuFacts:
    if isinstance(setup.gpu, GpuFacts):
        return setup.gpu
    facts = _known_gpu(setup.gpu)
    assert facts is not None  # resolve_setup checked it
    return facts


def profile_from_setup(setup: Setup, costs: PassCosts = DEFAULT_COSTS, *, name: str = "setup") -> TwinProfile:
    """A profile of ``setup`` (already resolved by :func:`load_setup`/:func:`resolve_setup`)."""
    gpu = gpu_facts(setup)
    assert isinstance(setup.model.config, dict)
    facts = ConfigFacts.of(setup.model.config)
    per_param = BYTES_PER_PARAM[setup.model.dtype.lower()]
    fp8 = setup.model.dtype.lower() in ("fp8", "float8_e4m3fn") and gpu.fp8_tflops is not None
    flops = (gpu.fp8_tflops if fp8 and gpu.fp8_tflops else gpu.bf16_tflops) * 1e12  # int4 computes in bf16
    gpus = GpuSpec(
        count=setup.gpu_count,
        name=gpu.name,
        memory_total_bytes=int(gpu.memory_gb * GIB),  # a datasheet's GB of GPU memory are GiB (nvidia-smi)
        idle_used_bytes=0,
        runtime_reserved_bytes=int((0.6 + 0.15 * math.log2(setup.gpu_count)) * GIB),
        bandwidth_bytes_per_s=int(gpu.bandwidth_gb_s * 1e9),
        bandwidth_efficiency=costs.bandwidth_efficiency,
        memory_bus_width_bits=4096 if gpu.nvlink else 384,
        memory_max_clock_mhz=2000,
        compute_flops=flops,
        compute_efficiency=costs.compute_efficiency,
    )
    interconnect = InterconnectSpec(
        name="NVLink" if gpu.nvlink else "PCIe",
        allreduce_latency_us=costs.allreduce_latency_us if gpu.nvlink else costs.pcie_allreduce_latency_us,
        allreduce_bandwidth_bytes_per_s=200e9 if gpu.nvlink else 12e9,
        allreduces_per_layer=2,
    )
    model = model_spec(facts, setup, per_param, costs)
    moe_layers = facts.num_layers - facts.dense_layers if facts.experts else 0
    fixed_ms = (facts.num_layers * costs.layer_launch_us + moe_layers * costs.moe_layer_launch_us) * 1e-3
    step_ms = draft_step_ms(costs, setup.tp)
    if model.drafters and model.drafters[0].algorithm != "DFLASH":
        model = model.model_copy(update={"drafters": [model.drafters[0].model_copy(update={"step_ms": step_ms})]})
    if setup.drafter is not None and setup.drafter.algorithm == "DFLASH" and setup.drafter.config:
        model = model.model_copy(update={"drafters": [dflash_drafter_spec(setup.drafter, costs, setup.tp)]})
    builtin = _builtin()
    return TwinProfile(
        name=name,
        simulated=f"SIMULATION: built from public facts (passmodel/setup.py) for {facts.architectures[0]} "
        f"on {setup.gpu_count}x {gpu.name}; uncalibrated until fitted to measured points.",
        gpus=gpus,
        interconnect=interconnect,
        model=model,
        prompts=builtin.prompts,
        tree=TreeSpec(
            miss_factor_per_doubling=builtin.tree.miss_factor_per_doubling,
            bookkeeping_ms=costs.tree_bookkeeping_ms,
            draft_step_per_extra_branch_ms=costs.tree_branch_ms,
        ),
        overheads=OverheadSpec(
            fixed_pass_ms=fixed_ms,
            per_request_pass_ms=costs.per_request_ms,
            batch_scale=costs.batch_scale,
            verify_token_ms=costs.verify_token_ms,
            draft_step_ms=step_ms,
            no_cuda_graph_pass_ms=0.1 * facts.num_layers,
            attention_backend_pass_ms={"flashinfer": 0.0, "fa3": 0.0, "triton": 0.3},
            prefill_fixed_ms=10.0,
            spec_pass_ms=costs.spec_pass_ms + costs.spec_pass_tp_ms * math.log2(setup.tp),
        ),
        memory=MemorySpec(
            activation_base_bytes=GIB,
            activation_per_prefill_token_bytes=65536,
            graph_base_bytes=GIB // 4,
            graph_bytes_per_token=2 << 20,
            default_chunked_prefill_size=8192 if gpu.memory_gb >= 60 else 4096,
            auto_fraction_margin_bytes=GIB,
            default_attention_backend="flashinfer",
            mamba_slots_per_request={"no_buffer": 3, "extra_buffer": 5, "extra_buffer_lazy": 4},
        ),
        timing=TimingSpec(load_seconds=1.0, noise_rel=0.015),
    )


def acceptance_table(rate: float, length: int = 16) -> dict[str, list[float]]:
    """The same geometric acceptance for every prompt category: position i accepted with rate^i."""
    probs = [round(rate ** (i + 1), 6) for i in range(length)]
    return {c: probs for c in CATEGORIES}


def model_spec(facts: ConfigFacts, setup: Setup, per_param: float, costs: PassCosts = DEFAULT_COSTS) -> ModelSpec:
    total, routed, active = facts.sizes()
    embed = facts.vocab_size * facts.hidden_size
    kv = facts.full_attention_layers * facts.kv_heads * facts.head_dim * 2 * 2
    # Linear-attention state per request: a value x key state per head in fp32, per linear layer.
    linear = facts.num_layers - facts.full_attention_layers
    state = linear * facts.linear_state_elements * 4 if facts.hybrid else 0
    rate = setup.drafter.acceptance_rate if setup.drafter is not None else 0.7
    algorithm = setup.drafter.algorithm if setup.drafter is not None else None
    layer, layer_experts = facts.layer_params(facts.experts > 0)
    mtp = None
    if algorithm in ("NEXTN", "MTP") or (
        algorithm in ("EAGLE", "EAGLE3") and setup.drafter and not setup.drafter.config
    ):
        head = layer + 2 * facts.hidden_size * facts.hidden_size
        touched = layer - layer_experts + layer_experts * facts.experts_per_token / max(facts.experts, 1)
        mtp = MtpSpec(
            head_bytes=int(head * per_param),
            step_read_bytes=int((touched + 2 * facts.hidden_size**2) * per_param + embed * 2),
            kv_bytes_per_token=facts.kv_heads * facts.head_dim * 4,
            acceptance=acceptance_table(rate),
        )
    separate = setup.drafter is not None and setup.drafter.config and setup.drafter.algorithm != "DFLASH"
    drafters = [drafter_spec(setup.drafter)] if setup.drafter is not None and separate else []
    return ModelSpec(
        name=facts.architectures[0],
        architectures=facts.architectures,
        dtype="bfloat16" if per_param >= 2 else "float8_e4m3fn" if per_param >= 1 else "int4",
        hybrid=facts.hybrid,
        num_layers=facts.num_layers,
        full_attention_layers=facts.full_attention_layers,
        hidden_size=facts.hidden_size,
        weight_bytes=int(total * per_param),
        decode_read_bytes=int((active - embed) * per_param + embed * 2),
        active_params=active,
        max_context_length=facts.max_context,
        kv_bytes_per_token=kv,
        kv_heads=facts.kv_heads,
        mamba_state_bytes_per_request=state,
        mamba_state_bytes_per_draft_token=state,
        eos_token_id=facts.eos_token_id,
        mtp=mtp,
        drafters=drafters,
        moe_expert_bytes=int(routed * per_param),
        moe_experts=facts.experts,
        moe_experts_per_token=facts.experts_per_token,
        moe_draft_token_spread=costs.moe_draft_token_spread,
    )


def drafter_spec(drafter: DrafterFacts, path: str = "drafter") -> DrafterSpec:
    """A separate EAGLE/EAGLE3 draft model from its config.json: it reads its layer(s), the fc that
    joins the target's features, and its own lm_head (a draft vocabulary where it has one) per step.

    Raises:
        ValueError: the drafter is not a separate EAGLE/EAGLE3 model with a config.
    """
    if drafter.algorithm not in ("EAGLE", "EAGLE3") or not isinstance(drafter.config, dict):
        raise ValueError(
            f"drafter.algorithm: the twin builds only EAGLE/EAGLE3 drafters from a config, not {drafter.algorithm}"
        )
    draft = ConfigFacts.of(drafter.config)
    total, _, _ = draft.sizes()
    head = draft.vocab_size * draft.hidden_size
    own_head = int(drafter.config.get("draft_vocab_size") or draft.vocab_size) * draft.hidden_size
    read = (total - head * (1 if draft.tied else 2) + own_head + 3 * draft.hidden_size**2) * 2
    return DrafterSpec(
        path=path,
        algorithm=drafter.algorithm,
        weight_bytes=int(total * 2),
        kv_bytes_per_token=draft.num_layers * draft.kv_heads * draft.head_dim * 4,
        kv_heads=draft.kv_heads,
        step_read_bytes=int(read),
        acceptance=acceptance_table(drafter.acceptance_rate),
    )


# ---------------------------------------------------------------------------------------------
# DFlash drafters, and what the generated family shares with a setup


def draft_step_ms(costs: PassCosts, tp: int) -> float:
    """One draft step's cost beyond its weight read at TP ``tp``: launches and host work, and its
    collectives per doubling of TP."""
    return costs.draft_step_ms + costs.draft_step_tp_ms * math.log2(tp)


def dflash_drafter_spec(drafter: DrafterFacts, costs: PassCosts, tp: int, path: str = "drafter") -> DrafterSpec:
    """A DFlash block drafter from its config.json: per drafted block it reads its own layers (it
    shares the target's embeddings and lm_head), costs its layers' launches plus one draft step, and
    each drafted token costs what a verified one does. No table of the corpus has a DFlash row, so
    these follow from :data:`DEFAULT_COSTS` and are not fitted.

    Raises:
        ValueError: the drafter is not DFLASH or has no config.
    """
    if drafter.algorithm != "DFLASH" or not isinstance(drafter.config, dict):
        raise ValueError(
            f"drafter.algorithm: a DFlash drafter needs algorithm DFLASH and a config, not {drafter.algorithm}"
        )
    draft = ConfigFacts.of(drafter.config)
    layer, _ = draft.layer_params(False)
    weight = (
        draft.num_layers * layer + 2 * draft.hidden_size**2
    ) * 2  # its layers and the fc joining the target's features
    return DrafterSpec(
        path=path,
        algorithm="DFLASH",
        weight_bytes=int(weight),
        kv_bytes_per_token=draft.num_layers * draft.kv_heads * draft.head_dim * 4,
        kv_heads=draft.kv_heads,
        default_block_size=int(drafter.config.get("block_size") or 16),
        block_fixed_ms=draft.num_layers * costs.layer_launch_us * 1e-3 + draft_step_ms(costs, tp),
        per_token_ms=costs.verify_token_ms,
        acceptance=acceptance_table(drafter.acceptance_rate, 15),
    )


def model_sizes(setup: Setup) -> ModelSpec:
    """The target's sizes (weights, KV, state, MTP head, an EAGLE drafter) without building a profile:
    what a caller needs to pick a TP and a context before it builds."""
    assert isinstance(setup.model.config, dict)
    return model_spec(ConfigFacts.of(setup.model.config), setup, BYTES_PER_PARAM[setup.model.dtype.lower()])


@cache
def _builtin() -> TwinProfile:
    """The built-in profile, read once: a setup borrows its prompt classifier and tree miss factor."""
    return load_profile()
