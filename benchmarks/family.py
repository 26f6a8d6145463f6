"""A family of twin landscapes: from a seed, a GPU set, a model, its drafters and a search space.

For judging a search on landscapes nobody tuned it on (issue 14). :func:`member` draws one
deployment: 1-8 GPUs from 24 GB consumer cards to 141 GB HBM parts (``passmodel.setup``'s
datasheets, PCIe or NVLink), a dense, hybrid (linear attention) or MoE model of 1B-250B parameters in
bf16, fp8 or int4 (a drawn ``config.json``) whose weights fit at the smallest tensor-parallel size
offered (else the draw is repeated), its MTP heads and/or a separate EAGLE3 or DFlash drafter (their
configs), and a context length that leaves memory roomy or tight. Those facts become the profile
through :func:`passmodel.setup.profile_from_setup`, the path a user's ``SETUP.yaml`` takes, with
each pass cost drawn around ``DEFAULT_COSTS`` (``COST_SPREAD``); acceptance curves of different
shapes, the tree's miss factor, the attention backends' costs and memory reservations are drawn on
top. The result is a validated :class:`TwinProfile` and a matching :class:`SearchSpace` with only the
engine's defaults and a cautious launch as baselines. The numbers are plausible, not calibrated: a
family member is a simulation, as the twin is.

Each member is also one of four cases (issue 32), drawn from the seed apart from the rest, so a
``base`` member is what it was before the cases existed:

- ``wide-trees``: an EAGLE3 head or MTP with trees up to 8 wide and up to 64 draft tokens, a
  verify cost per token that makes a wide tree best part-filled while a narrow one peaks full, so
  the best draft-token count depends on the width under the token ceiling;
- ``flat-top``: drafting whose last steps about pay for themselves and backends that differ
  little, so many configurations lie within the launch-to-launch noise of the best;
- ``huge``: a model of 300B-1T parameters on 8 data-centre GPUs, whose TP of 4-8 puts
  collectives into every pass and draft step (the builder's TP terms).

The twin's launch-to-launch spread (``timing.launch_sd``, 4 %) is in every profile; the search
benchmark applies it with ``--launch-sd``.
"""

from __future__ import annotations

import json
import math
import random
from functools import cache
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from autotune.space import Baseline, SearchSpace
from benchmarks.family_configs import ModelKind, acceptance_curves, dflash_config, eagle_config, target_config
from passmodel.physics import checkpoint_bytes, kv_share_per_gpu
from passmodel.profile import (
    GpuSpec,
    MemorySpec,
    ModelSpec,
    PromptsSpec,
    TimingSpec,
    TwinProfile,
    load_profile,
)
from passmodel.setup import (
    DEFAULT_COSTS,
    KNOWN_GPUS,
    DrafterFacts,
    GpuFacts,
    ModelFacts,
    PassCosts,
    Setup,
    dflash_drafter_spec,
    model_sizes,
    profile_from_setup,
)

GIB = 1 << 30
Drafting = Literal["mtp", "eagle3", "dflash", "mtp+dflash", "eagle3+dflash"]
Tightness = Literal["roomy", "medium", "tight"]
Case = Literal["base", "wide-trees", "flat-top", "huge"]
CASE_WEIGHTS: dict[Case, float] = {"base": 0.4, "wide-trees": 0.2, "flat-top": 0.2, "huge": 0.2}
LAUNCH_SD = 0.04  # the twin's default spread between launches, as a real H200 showed it


# How every member's space is measured: one stream's decode rate on the built-in mixed suite.
MEASURED_AS: dict[str, Any] = {
    "measurement": {
        "suite": "builtin:mixed",
        "warmup_requests": 1,
        "prompts_per_round": 4,
        "max_tokens": 256,
        "concurrency": 1,
        "min_rounds": 2,
        "max_rounds": 4,
    },
    "objective": "decode_tok_s",
    "launch": {"timeout_s": 60},
}


class _Frozen(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GpuKind(_Frozen):
    """A GPU of the catalog: its datasheet (``passmodel.setup.KNOWN_GPUS``), what NVML shows of
    its memory bus, and the most of it one host holds."""

    facts: GpuFacts
    bus_bits: int
    clock_mhz: int
    max_count: int

    @property
    def name(self) -> str:
        return self.facts.name

    @property
    def memory_bytes(self) -> int:
        return int(self.facts.memory_gb * GIB)  # as passmodel.setup reads a datasheet


# Consumer and workstation cards talk over PCIe (the catalog's nvlink: false).
GPUS: tuple[GpuKind, ...] = (
    GpuKind(facts=KNOWN_GPUS["RTX 3090"], bus_bits=384, clock_mhz=9751, max_count=4),
    GpuKind(facts=KNOWN_GPUS["RTX 4090"], bus_bits=384, clock_mhz=10501, max_count=8),
    GpuKind(facts=KNOWN_GPUS["L4"], bus_bits=192, clock_mhz=6251, max_count=8),
    GpuKind(facts=KNOWN_GPUS["RTX 5090"], bus_bits=512, clock_mhz=14001, max_count=4),
    GpuKind(facts=KNOWN_GPUS["A6000"], bus_bits=384, clock_mhz=8001, max_count=8),
    GpuKind(facts=KNOWN_GPUS["L40S"], bus_bits=384, clock_mhz=9001, max_count=8),
    GpuKind(facts=KNOWN_GPUS["A100"], bus_bits=5120, clock_mhz=1593, max_count=8),
    GpuKind(facts=KNOWN_GPUS["H100"], bus_bits=5120, clock_mhz=2619, max_count=8),
    GpuKind(facts=KNOWN_GPUS["H200"], bus_bits=6144, clock_mhz=3201, max_count=8),
)

DTYPES = ("bfloat16", "float8_e4m3fn", "int4")
MAX_DRAWS = 200
# How a checkpoint's config.json states quantised weights (bf16 ones say only torch_dtype).
QUANTIZED: dict[str, dict[str, Any]] = {
    "float8_e4m3fn": {"quantization_config": {"quant_method": "fp8"}},
    "int4": {"quantization_config": {"quant_method": "awq", "bits": 4}},
}
COST_SPREAD = (0.5, 2.0)  # each pass cost of a member: DEFAULT_COSTS's times a log-uniform factor in this range


class PublicFacts(_Frozen):
    """What a user's own files say of a member: the model's ``config.json`` and its dtype, and each
    drafter's ``config.json`` by the path its space launches (a model-guided search reads these)."""

    dtype: str
    model: dict[str, Any]
    drafters: dict[str, dict[str, Any]]

    def write(self, folder: Path) -> tuple[Path, dict[str, Path]]:
        """The configs as files in ``folder``, the model's with its dtype the way a checkpoint states it
        (``torch_dtype``, and a ``quantization_config`` for fp8 and int4 weights): (the model's path,
        each drafter's path by the path the space launches)."""
        folder.mkdir(parents=True, exist_ok=True)
        model = {"torch_dtype": "bfloat16", **QUANTIZED.get(self.dtype, {}), **self.model}
        (folder / "config.json").write_text(json.dumps(model))
        drafters = {}
        for index, (path, config) in enumerate(sorted(self.drafters.items())):
            drafters[path] = folder / f"drafter-{index}.json"
            drafters[path].write_text(json.dumps(config))
        return folder / "config.json", drafters


class Member(_Frozen):
    """One landscape of the family: what was drawn, the twin profile and the space to search."""

    seed: int
    summary: str
    case: Case
    kind: ModelKind
    drafting: Drafting
    tightness: Tightness
    profile: TwinProfile
    space: SearchSpace
    facts: PublicFacts


def member(seed: int) -> Member:
    """The family member of ``seed``; the same seed always gives the same member.

    Raises:
        ValueError: no draw in ``MAX_DRAWS`` fitted its GPUs (does not happen for the catalog above).
    """
    rng = random.Random(f"autotune-family-{seed}")
    cases = random.Random(f"autotune-family-case-{seed}")  # apart, so a base member is as it was
    case: Case = cases.choices(list(CASE_WEIGHTS), weights=list(CASE_WEIGHTS.values()))[0]
    for _ in range(MAX_DRAWS):
        drawn = _draw(rng, seed) if case == "base" else _draw(rng, seed, case=case, cased=cases)
        if drawn is not None:
            return drawn
    raise ValueError(f"family seed {seed}: no model fitted its GPUs in {MAX_DRAWS} draws")


def members(count: int, first_seed: int = 0) -> list[Member]:
    return [member(seed) for seed in range(first_seed, first_seed + count)]


def wide_trees_members(count: int, first_seed: int = 0) -> list[Member]:
    """The first ``count`` members of the wide-trees case at seeds from ``first_seed`` on (chosen by case only)."""
    chosen: list[Member] = []
    seed = first_seed
    while len(chosen) < count:
        if (drawn := member(seed)).case == "wide-trees":
            chosen.append(drawn)
        seed += 1
    return chosen


# ---------------------------------------------------------------------------------------------
# Drawing


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _draw(rng: random.Random, seed: int, *, case: Case = "base", cased: random.Random | None = None) -> Member | None:
    """One draw; a case other than ``base`` draws what makes it so from ``cased``."""
    gpu = rng.choice(GPUS)
    count = rng.choice([c for c in (1, 2, 4, 8) if c <= gpu.max_count])
    kind: ModelKind = rng.choice(["dense", "hybrid", "moe"])
    params = _log_uniform(rng, 1e9, 250e9)
    dtype = rng.choice(DTYPES)
    drafting: Drafting = rng.choice(["mtp", "eagle3", "dflash", "mtp+dflash", "eagle3+dflash"])
    tightness: Tightness = rng.choice(["roomy", "medium", "tight"])
    if cased is not None and case == "huge":
        gpu, count = cased.choice([g for g in GPUS if g.facts.nvlink]), 8
        kind, params = cased.choice(["dense", "moe", "moe"]), _log_uniform(cased, 300e9, 1000e9)
        dtype = cased.choice(["float8_e4m3fn", "int4"])
    if cased is not None and case in ("wide-trees", "flat-top"):
        drafting = cased.choice(["mtp", "eagle3"])
    config = target_config(rng, kind, params, mtp="mtp" in drafting)
    eagle = eagle_config(rng, config) if "eagle3" in drafting else None
    dflash = dflash_config(rng, config) if "dflash" in drafting else None
    setup = _setup(gpu, count, config, dtype, eagle)
    sizes = model_sizes(setup)
    gpus = _gpu_spec(rng, gpu, count)
    free = gpus.memory_total_bytes - gpus.idle_used_bytes - gpus.runtime_reserved_bytes
    drafter_bytes = [d.weight_bytes for d in sizes.drafters]
    if dflash is not None:
        drafter_bytes.append(
            dflash_drafter_spec(DrafterFacts(algorithm="DFLASH", config=dflash), DEFAULT_COSTS, 1).weight_bytes
        )
    extra = max([sizes.mtp.head_bytes if sizes.mtp else 0, *drafter_bytes])
    tps = [tp for tp in (1, 2, 4, 8) if tp <= count and (sizes.weight_bytes + extra) / tp < 0.8 * free]
    if not tps:
        return None  # the weights do not fit these GPUs: draw again
    smallest = tps[0]
    context = _context_length(rng, sizes, tightness, free=free, tp=smallest, extra=extra)
    if context is None:
        return None
    profile = _built(
        rng,
        setup.model_copy(update={"tp": smallest}),
        gpu,
        gpus,
        name=f"family-{seed}",
        seed=seed,
        dflash=dflash,
        simulated="SIMULATION: a generated landscape of the search benchmark's family "
        f"(benchmarks/family.py, seed {seed}): drawn facts built by passmodel.setup, costs drawn "
        "around its DEFAULT_COSTS; plausible, uncalibrated numbers.",
    )
    if cased is not None:
        profile = _cased(cased, case, profile, tp=smallest)
    space = _space(rng, profile, tps=tps, context=context, wide=case == "wide-trees")
    summary = (
        f"{'' if case == 'base' else case + ': '}{count}x {gpu.name.removeprefix('NVIDIA ').removeprefix('GeForce ')}"
        f"{' NVLink' if gpu.facts.nvlink and count > 1 else ''}, {kind} {params / 1e9:.0f}B {dtype}, "
        f"TP>={smallest}, {drafting}, {tightness} (context {context})"
    )
    return Member(
        seed=seed,
        summary=summary,
        case=case,
        kind=kind,
        drafting=drafting,
        tightness=tightness,
        profile=profile,
        space=space,
        facts=public_facts(profile, setup, dflash=dflash),
    )


def space_naming_configs(member: Member, folder: Path) -> SearchSpace:
    """The member's space naming its configs, written in ``folder`` (``model_config``,
    ``draft_model_configs``), as a user's space names the files of a model that is not local."""
    model, drafters = member.facts.write(folder)
    named = {"config_json": str(model), "draft_model_configs": {k: str(v) for k, v in drafters.items()}}
    return member.space.model_copy(update=named)


def public_facts(profile: TwinProfile, setup: Setup, *, dflash: dict[str, Any] | None = None) -> PublicFacts:
    """The configs ``setup`` was built from (``dflash``: a DFlash drafter's, which the setup does not
    hold), each drafter's under the path ``profile`` gives it."""
    assert isinstance(setup.model.config, dict), "a member's config is drawn or written inline"
    configs: dict[str, Any] = {"DFLASH": dflash}
    if setup.drafter is not None:
        configs[setup.drafter.algorithm] = setup.drafter.config
    drafters = {d.path: configs[d.algorithm] for d in profile.model.drafters
                if isinstance(configs.get(d.algorithm), dict)}  # fmt: skip
    return PublicFacts(dtype=setup.model.dtype, model=setup.model.config, drafters=drafters)


def _setup(gpu: GpuKind, count: int, config: dict[str, Any], dtype: str, eagle: dict[str, Any] | None) -> Setup:
    """The facts a user would write in SETUP.yaml for this member (the drawn config.json inline)."""
    mtp = bool(config.get("num_nextn_predict_layers"))
    drafter = (
        DrafterFacts(algorithm="EAGLE3", config=eagle)
        if eagle is not None
        else DrafterFacts(algorithm="NEXTN")
        if mtp
        else None
    )
    return Setup(gpu=gpu.facts, gpu_count=count, tp=1, model=ModelFacts(config=config, dtype=dtype), drafter=drafter)


def _built(
    rng: random.Random,
    setup: Setup,
    gpu: GpuKind,
    gpus: GpuSpec,
    *,
    name: str,
    seed: int,
    simulated: str,
    dflash: dict[str, Any] | None,
    memory: MemorySpec | None = None,
) -> TwinProfile:
    """The member's profile: ``setup`` built with costs drawn around DEFAULT_COSTS, then what public
    facts leave open drawn per member (acceptance curves, tree misses, memory, attention backends)."""
    costs = _costs(name)
    profile = profile_from_setup(setup, costs, name=name)
    model = profile.model
    mtp = model.mtp.model_copy(update={"acceptance": acceptance_curves(rng, 8)}) if model.mtp is not None else None
    drafters = [
        d.model_copy(update={"path": f"family/drafter-{seed}-EAGLE3", "acceptance": acceptance_curves(rng, 8)})
        for d in model.drafters
    ]
    if dflash is not None:
        spec = dflash_drafter_spec(DrafterFacts(algorithm="DFLASH", config=dflash), costs, setup.tp)
        drafters.append(
            spec.model_copy(update={"path": f"family/drafter-{seed}-DFlash", "acceptance": acceptance_curves(rng, 15)})
        )
    model = model.model_copy(update={"name": f"family/model-{seed}", "mtp": mtp, "drafters": drafters})
    backends = {
        "flashinfer": rng.uniform(0, 0.6),
        "fa3": rng.uniform(0, 0.6),
        "triton": rng.uniform(0.1, 1.5),
        "flex_attention": rng.uniform(1, 3),
        "torch_native": rng.uniform(8, 20),
    }
    return profile.model_copy(
        update={
            "simulated": simulated,
            "gpus": gpus.model_copy(
                update={
                    "bandwidth_efficiency": costs.bandwidth_efficiency,
                    "compute_efficiency": costs.compute_efficiency,
                }
            ),
            "model": model,
            "prompts": _prompts(),
            "tree": profile.tree.model_copy(update={"miss_factor_per_doubling": rng.uniform(0.55, 0.8)}),
            "overheads": profile.overheads.model_copy(update={"attention_backend_pass_ms": backends}),
            "memory": memory if memory is not None else _memory(rng, gpu),
            "timing": TimingSpec(load_seconds=1.0, noise_rel=0.015, launch_sd=LAUNCH_SD),
        }
    )


def _costs(name: str) -> PassCosts:
    """Member ``name``'s pass costs: each of DEFAULT_COSTS's times its own factor in ``COST_SPREAD``,
    the efficiencies drawn over what decode kernels reach. Each from its own stream, so a cost added to
    the builder changes no other draw of any member."""

    def draw(field: str) -> random.Random:
        return random.Random(f"{name}-costs-{field}")

    drawn = {
        field: min(value * _log_uniform(draw(field), *COST_SPREAD), _upper_bound(field))
        for field, value in DEFAULT_COSTS.model_dump().items()
        if field not in ("bandwidth_efficiency", "compute_efficiency")
    }
    return PassCosts(
        **drawn,
        bandwidth_efficiency=draw("bandwidth_efficiency").uniform(0.75, 0.92),
        compute_efficiency=draw("compute_efficiency").uniform(0.35, 0.6),
    )


def _upper_bound(field: str) -> float:
    """A pass cost's upper limit where it has one (a share, such as an MoE draft token's spread)."""
    limits = [m.le for m in PassCosts.model_fields[field].metadata if getattr(m, "le", None) is not None]
    return float(min(limits, default=math.inf))


def _cased(rng: random.Random, case: Case, profile: TwinProfile, *, tp: int) -> TwinProfile:
    """A drawn member's costs made into ``case`` (module docstring); ``huge`` is its facts alone."""
    model, over, tree = profile.model, profile.overheads, profile.tree
    if case == "huge":
        return profile
    bandwidth = profile.gpus.bandwidth_bytes_per_s * profile.gpus.bandwidth_efficiency
    pass_s = model.decode_read_bytes / tp / bandwidth + (over.fixed_pass_ms + over.spec_pass_ms) * 1e-3
    if case == "wide-trees":  # widening pays, each verified token costs: a wide tree peaks part-filled
        tree = tree.model_copy(update={"miss_factor_per_doubling": rng.uniform(0.4, 0.55),
                                       "draft_step_per_extra_branch_ms": rng.uniform(0.02, 0.1)})  # fmt: skip
        over = over.model_copy(update={"verify_token_ms": pass_s * 1e3 * rng.uniform(0.01, 0.03)})
        return profile.model_copy(update={"overheads": over, "tree": tree})
    # flat-top: a draft step costs what the k-th position's acceptance gains, so steps k to k + 1 tie
    backends = {**over.attention_backend_pass_ms, **{b: rng.uniform(0, 0.15) for b in ("flashinfer", "fa3", "triton")}}
    over = over.model_copy(update={"attention_backend_pass_ms": backends, "verify_token_ms": rng.uniform(0.01, 0.05)})
    eagle = next((d for d in model.drafters if d.algorithm == "EAGLE3"), None)
    table = eagle.acceptance if eagle is not None else model.mtp.acceptance if model.mtp is not None else None
    if table is None:
        return profile.model_copy(update={"overheads": over})
    probs, k = table["code"], rng.randint(2, 4)
    accepted = 1 + sum(probs[:k])
    if accepted <= k * probs[k]:
        return profile.model_copy(update={"overheads": over})
    step_s = probs[k] * pass_s / (accepted - k * probs[k])
    read = eagle.step_bytes if eagle is not None else model.mtp.step_read_bytes if model.mtp is not None else 0
    step_ms = max(0.05, (step_s - read / tp / bandwidth) * 1e3 - over.verify_token_ms)
    if eagle is not None:
        drafters = [d.model_copy(update={"step_ms": step_ms}) if d is eagle else d for d in model.drafters]
        return profile.model_copy(update={"overheads": over, "model": model.model_copy(update={"drafters": drafters})})
    return profile.model_copy(update={"overheads": over.model_copy(update={"draft_step_ms": step_ms})})


def _gpu_spec(rng: random.Random, gpu: GpuKind, count: int) -> GpuSpec:
    """What the builder does not know of a host: memory a desktop session holds, the runtime's
    reservation, the bus NVML shows (efficiencies are drawn with the costs)."""
    return GpuSpec(
        count=count,
        name=gpu.name,
        memory_total_bytes=gpu.memory_bytes,
        idle_used_bytes=rng.choice([0, 0, 256 << 20, 512 << 20]),
        runtime_reserved_bytes=int((0.6 + 0.15 * math.log2(count) + rng.uniform(0, 0.5)) * GIB),
        bandwidth_bytes_per_s=int(gpu.facts.bandwidth_gb_s * 1e9),
        bandwidth_efficiency=0.85,
        memory_bus_width_bits=gpu.bus_bits,
        memory_max_clock_mhz=gpu.clock_mhz,
        compute_flops=gpu.facts.bf16_tflops * 1e12,
        compute_efficiency=0.5,
    )


def _memory(rng: random.Random, gpu: GpuKind) -> MemorySpec:
    scale = gpu.memory_bytes / (80 * GIB)
    return MemorySpec(
        activation_base_bytes=int(rng.uniform(0.5, 2.5) * GIB * max(scale, 0.4)),
        activation_per_prefill_token_bytes=rng.choice([32768, 65536, 98304, 131072]),
        graph_base_bytes=int(rng.uniform(0.2, 0.5) * GIB),
        graph_bytes_per_token=rng.choice([1, 2, 4, 6]) << 20,
        default_chunked_prefill_size=8192 if gpu.memory_bytes >= 60 * GIB else 4096,
        auto_fraction_margin_bytes=int(rng.uniform(1.0, 2.0) * GIB),
        default_attention_backend="flashinfer",
        mamba_slots_per_request={"no_buffer": 3, "extra_buffer": 5, "extra_buffer_lazy": 4},
    )


@cache
def _prompts() -> PromptsSpec:
    """The prompt classifier of the built-in profile: the suites' prompts fall into the same categories."""
    return load_profile().prompts


def _context_length(
    rng: random.Random, model: ModelSpec, tightness: Tightness, *, free: int, tp: int, extra: int
) -> int | None:
    """A context length whose KV for one request puts the pool boundary of ``mem-fraction-static``
    (at the smallest TP, drafter loaded) low (roomy), in the middle, or near the top (tight)."""
    low, high = {"roomy": (0.35, 0.6), "medium": (0.6, 0.8), "tight": (0.84, 0.92)}[tightness]
    target = rng.uniform(low, high)
    weights = (model.weight_bytes + extra) / tp
    cell = model.kv_bytes_per_token * 1.3 * kv_share_per_gpu(model.kv_heads, tp)  # drafter KV on top
    state = 8 * 5 * model.mamba_state_bytes_per_request / tp  # a few requests' recurrent state
    tokens = (target * free - weights - state) / cell
    context = min(model.max_context_length, int(tokens // 1024) * 1024)
    return context if context >= 4096 else None


# ---------------------------------------------------------------------------------------------
# The space


def _space(
    rng: random.Random, profile: TwinProfile, *, tps: list[int], context: int, wide: bool = False
) -> SearchSpace:
    """The member's space; ``wide``: trees up to 8 wide and 64 draft tokens (the wide-trees case)."""
    model = profile.model
    tuned: dict[str, object] = {}
    fixed: dict[str, object] = {"context-length": context}
    offered = tps[:3]
    if tps[0] > 1 and rng.random() < 0.3:
        offered = [tps[0] // 2, *offered]  # a TP too small for the weights, as a user might list it
    if len(offered) > 1:
        tuned["tp-size"] = {"type": "categorical", "choices": offered}
    else:
        fixed["tp-size"] = offered[0]
    eagle = next((d for d in model.drafters if d.algorithm == "EAGLE3"), None)
    dflash = next((d for d in model.drafters if d.algorithm == "DFLASH"), None)
    stepper = "NEXTN" if model.mtp is not None else "EAGLE3" if eagle is not None else None
    tuned["speculative-algorithm"] = {
        "type": "categorical",
        "choices": [False, *([stepper] if stepper else []), *(["DFLASH"] if dflash else [])],
    }
    drafters = [d for d in (eagle, dflash) if d is not None]
    if drafters:
        # With both drafters a user lists both paths: a path of the other algorithm dies at launch.
        when = (
            f"speculative-algorithm == {drafters[0].algorithm}"
            if len(drafters) == 1
            else "speculative-algorithm != false"
        )
        tuned["speculative-draft-model-path"] = {
            "type": "categorical",
            "choices": [d.path for d in drafters],
            "when": when,
        }
    if dflash is not None:
        tuned["speculative-dflash-block-size"] = {
            "type": "int",
            "low": 2,
            "high": 16,
            "when": "speculative-algorithm == DFLASH",
        }
    if stepper is not None:
        tuned["speculative-num-steps"] = {
            "type": "int",
            "low": 1,
            "high": rng.choice([5, 6, 8]) if not wide else 8,
            "when": f"speculative-algorithm == {stepper}",
        }
        tuned["speculative-eagle-topk"] = {
            "type": "categorical",
            "choices": [1, 2, 4] if not wide else [1, 2, 4, 8],
            "when": f"speculative-algorithm == {stepper}",
        }
        tuned["speculative-num-draft-tokens"] = {
            "type": "int",
            "low": 2,
            "high": 16 if not wide else 64,
            "when": "speculative-eagle-topk > 1",
        }
    tuned["mem-fraction-static"] = {"type": "float", "low": rng.choice([0.5, 0.6, 0.7]), "high": 0.97, "step": 0.01}
    tuned["max-running-requests"] = {"type": "categorical", "choices": [4, 8, 16, 32, 64]}
    tuned["cuda-graph-max-bs-decode"] = {"type": "categorical", "choices": [4, 8, 16, 32, 64, 128]}
    if rng.random() < 0.6:
        tuned["kv-cache-dtype"] = {"type": "categorical", "choices": ["auto", "fp8_e4m3"]}
    if rng.random() < 0.6:
        tuned["attention-backend"] = {"type": "categorical", "choices": ["flashinfer", "fa3", "triton"]}
    if rng.random() < 0.5:
        tuned["chunked-prefill-size"] = {"type": "categorical", "choices": [2048, 4096, 8192, 16384]}
    if model.hybrid and rng.random() < 0.7:
        tuned["mamba-full-memory-ratio"] = {"type": "float", "low": 0.2, "high": 1.0, "step": 0.1}
    smallest = {"tp-size": tps[0]} if "tp-size" in tuned else {}
    cautious = {**smallest, "mem-fraction-static": 0.8}
    if stepper is not None:
        cautious.update(
            {
                "speculative-algorithm": stepper,
                "speculative-num-steps": 1,
                "speculative-eagle-topk": 1,
                "speculative-num-draft-tokens": 2,
            }
        )
        if eagle is not None:
            cautious["speculative-draft-model-path"] = eagle.path
    elif dflash is not None:
        cautious.update({"speculative-algorithm": "DFLASH", "speculative-draft-model-path": dflash.path})
    return SearchSpace.model_validate(
        {
            "version": 1,
            "study": profile.name,
            "engine": "sglang",
            "launcher": ["{python}", "-m", "autotune_twin", "--twin-profile", f"{profile.name}.yaml"],
            "model": model.name,
            "gpus": {"devices": list(range(profile.gpus.count)), "model_bytes": float(checkpoint_bytes(profile.model))},
            "fixed": fixed,
            "tuned": tuned,
            "baselines": [
                Baseline(name="defaults", note="SGLang's defaults (no speculative decoding)", flags=smallest),
                Baseline(
                    name="cautious", note="the drafter at its mildest, a cautious memory fraction", flags=cautious
                ),
            ],
            **MEASURED_AS,
        }
    )
