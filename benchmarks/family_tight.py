"""The family's tight members (issue 46): weights and an EAGLE3 drafter that take 90-97 % of each GPU.

A tight member is drawn apart from :func:`benchmarks.family.member` (its own seeds' streams, so no
other member changes): one GPU set at its only tensor-parallel size, a context that one request's KV
fills at a high explicit ``mem-fraction-static``, and a space where the fraction and the CUDA-graph
batch are optional (the engine's own sizing when unset). :func:`issue_46_member` is the landscape
issue 46 reported, built from the published configs in ``benchmarks/spec_setups``. The drawing of
GPUs, configs, costs and memory is :mod:`benchmarks.family`'s.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from autotune.space import Baseline, SearchSpace
from benchmarks.family import (
    GIB,
    GPUS,
    MAX_DRAWS,
    MEASURED_AS,
    Drafting,
    GpuKind,
    Member,
    _built,
    _gpu_spec,
    _log_uniform,
    _memory,
    _setup,
    public_facts,
)
from benchmarks.family_configs import ModelKind, eagle_config, target_config
from passmodel.physics import checkpoint_bytes
from passmodel.profile import DrafterSpec, TwinProfile
from passmodel.setup import BYTES_PER_PARAM, KNOWN_GPUS, Setup, load_setup

ISSUE_46_SETUP = Path(__file__).parent / "spec_setups" / "angelslim-163-qwen3-30b-a3b.yaml"


TIGHT_FRACTIONS = [round(0.90 + 0.01 * i, 2) for i in range(9)]  # the optional --mem-fraction-static, 0.90-0.98
TIGHT_GRAPH_BATCHES = [1, 2, 4, 8, 16, 32]


def tight_member(seed: int) -> Member:
    """The tight member of ``seed`` (its own draws: no other member changes): one GPU set at its only
    tensor-parallel size, a MoE or dense model whose weights and EAGLE3 drafter take 90-97 % of each GPU,
    a drafter from a third to three times the usual size, a context that one request's KV fills at a
    high explicit fraction with a small CUDA-graph batch, and a space where the fraction and the graph
    batch are optional (the engine's own when unset).

    Raises:
        ValueError: no draw in ``MAX_DRAWS`` left room for one request (does not happen for the catalog).
    """
    rng = random.Random(f"autotune-family-tight-{seed}")
    for _ in range(MAX_DRAWS):
        gpu = rng.choice([g for g in GPUS if g.memory_bytes <= 80 * GIB])
        count = rng.choice([c for c in (1, 2, 4) if c <= gpu.max_count])
        drawn = _tight(rng, seed, gpu=gpu, count=count, kind=rng.choice(["moe", "moe", "dense"]),
                       dtype=rng.choice(["bfloat16", "bfloat16", "float8_e4m3fn"]),
                       weight_share=rng.uniform(0.90, 0.97), drafter_scale=_log_uniform(rng, 1 / 3, 3.0))  # fmt: skip
        if drawn is not None:
            return drawn
    raise ValueError(f"tight family seed {seed}: no draw left room for one request in {MAX_DRAWS} draws")


def tight_members(count: int, first_seed: int = 0) -> list[Member]:
    return [tight_member(seed) for seed in range(first_seed, first_seed + count)]


def issue_46_member() -> Member:
    """The landscape issue 46 reported: Qwen3-30B-A3B in bf16 on two RTX 5090 (TP 2, no NVLink), with
    a separate EAGLE3 drafter (the public configs of ``benchmarks/spec_setups/angelslim-163-qwen3-30b-a3b.yaml``),
    context 8192, steps 1-8, topk 1/2/4, an optional fraction and graph batch."""
    rng = random.Random("autotune-family-issue-46")
    gpu = next(g for g in GPUS if g.name == "NVIDIA GeForce RTX 5090")
    published = load_setup(ISSUE_46_SETUP)
    setup = published.model_copy(update={"gpu": gpu.facts, "gpu_count": 2, "tp": 2})
    drawn = _tight(rng, 46, gpu=gpu, count=2, kind="moe", dtype="bfloat16", weight_share=0.0, drafter_scale=1.0,
                   setup=setup, context=8192, running=False)  # fmt: skip
    assert drawn is not None, "the issue's landscape leaves room for one request"
    return drawn


def _tight(
    rng: random.Random,
    seed: int,
    *,
    gpu: GpuKind,
    count: int,
    kind: ModelKind,
    dtype: str,
    weight_share: float,
    drafter_scale: float,
    setup: Setup | None = None,
    context: int | None = None,
    running: bool | None = None,
) -> Member | None:
    """A tight member: the target's weights take ``weight_share`` of each GPU, its EAGLE3 drafter is
    ``drafter_scale`` times the size its config gives (``setup``: a known model's facts instead of
    drawn ones). None when no fraction of 0.90-0.98 leaves room for one request of at least 4096
    tokens besides a 1-wide graph."""
    from benchmarks.landscape import Landscape  # here: the landscape module reads profiles, not families

    gpus = _gpu_spec(rng, gpu, count)
    if setup is None:
        params = weight_share * gpu.memory_bytes * count / BYTES_PER_PARAM[dtype]
        config = target_config(rng, kind, params, mtp=False)
        setup = _setup(gpu, count, config, dtype, eagle_config(rng, config)).model_copy(update={"tp": count})
    memory = _memory(rng, gpu).model_copy(update={"activation_base_bytes": int(rng.uniform(0.1, 0.3) * GIB)})
    profile = _built(
        rng,
        setup,
        gpu,
        gpus,
        name=f"family-tight-{seed}",
        seed=seed,
        dflash=None,
        memory=memory,
        simulated="SIMULATION: a generated tight-memory landscape of the search benchmark's family "
        f"(benchmarks/family_tight.py, tight seed {seed}): drawn facts built by passmodel.setup, costs drawn "
        "around its DEFAULT_COSTS; plausible, uncalibrated numbers.",
    )
    model = profile.model
    eagle = model.drafters[0]
    read = int((eagle.step_read_bytes or 0) * drafter_scale)
    drafter = eagle.model_copy(
        update={"weight_bytes": int(eagle.weight_bytes * drafter_scale), "step_read_bytes": read}
    )
    model = model.model_copy(update={"drafters": [drafter]})
    profile = profile.model_copy(update={"model": model})
    free = gpus.memory_total_bytes - gpus.idle_used_bytes - gpus.runtime_reserved_bytes
    weights = (model.weight_bytes + drafter.weight_bytes) / count
    if weights >= 0.985 * free:
        return None  # not even the top fraction holds the weights
    landscape = Landscape(profile, ["Write a haiku."], model_path=model.name, noise_rel=0.0)
    mildest = {"tp-size": count, "speculative-algorithm": "EAGLE3", "speculative-draft-model-path": drafter.path,
               "speculative-num-steps": 1, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 2,
               "cuda-graph-max-bs-decode": 1}  # fmt: skip
    room = None
    for fraction in reversed(TIGHT_FRACTIONS):  # the highest fraction whose headroom holds a 1-wide graph
        probe = landscape.evaluate({**mildest, "context-length": 4096, "mem-fraction-static": fraction})
        if probe.feasible and probe.kv_tokens is not None:
            room = probe.kv_tokens
            break
    if room is None or room < 4096:
        return None
    if context is None:
        context = int(room * rng.uniform(0.5, 0.9)) // 1024 * 1024
        if context < 4096:
            return None
        if not landscape.evaluate({**mildest, "context-length": context, "mem-fraction-static": fraction}).feasible:
            return None  # a longer context's prefill activations no longer fit the headroom
    space = _tight_space(rng, profile, tp=count, context=context, drafter=drafter, running=running)
    summary = (
        f"tight: {count}x {gpu.name.removeprefix('NVIDIA ').removeprefix('GeForce ')}"
        f"{' NVLink' if gpu.facts.nvlink and count > 1 else ''}, {kind} "
        f"{model.weight_bytes / BYTES_PER_PARAM[setup.model.dtype] / 1e9:.0f}B {setup.model.dtype}, "
        f"weights {weights / gpus.memory_total_bytes:.0%} of each GPU with a {drafter.weight_bytes / 1e9:.1f} GB "
        f"EAGLE3 drafter, TP {count} (context {context})"
    )
    return Member(seed=seed, summary=summary, case="base", kind=kind, drafting="eagle3", tightness="tight",
                  profile=profile, space=space, facts=public_facts(profile, setup))  # fmt: skip


def _tight_space(
    rng: random.Random, profile: TwinProfile, *, tp: int, context: int, drafter: DrafterSpec, running: bool | None
) -> SearchSpace:
    """Steps 1-8, topk 1/2/4, draft tokens, an optional fraction (0.90-0.98) and graph batch; some
    members (``running``: given) also an optional cap on running requests."""
    tuned: dict[str, object] = {
        "speculative-algorithm": {"type": "categorical", "choices": [False, "EAGLE3"]},
        "speculative-draft-model-path": {"type": "categorical", "choices": [drafter.path],
                                         "when": "speculative-algorithm == EAGLE3"},
        "speculative-num-steps": {"type": "int", "low": 1, "high": 8, "when": "speculative-algorithm == EAGLE3"},
        "speculative-eagle-topk": {"type": "categorical", "choices": [1, 2, 4],
                                   "when": "speculative-algorithm == EAGLE3"},
        "speculative-num-draft-tokens": {"type": "int", "low": 2, "high": 16, "when": "speculative-eagle-topk > 1"},
        "mem-fraction-static": {"type": "categorical", "choices": [False, *TIGHT_FRACTIONS]},
        "cuda-graph-max-bs-decode": {"type": "categorical", "choices": [False, *TIGHT_GRAPH_BATCHES]},
    }  # fmt: skip
    if running if running is not None else rng.random() < 0.5:
        tuned["max-running-requests"] = {"type": "categorical", "choices": [False, 1, 4, 16]}
    cautious = {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": drafter.path,
                "speculative-num-steps": 1, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 2}  # fmt: skip
    return _twin_space(profile, fixed={"context-length": context, "tp-size": tp}, tuned=tuned, baselines=[
        Baseline(name="defaults", note="SGLang's defaults (no speculative decoding)", flags={}),
        Baseline(name="cautious", note="the drafter at its mildest, the engine's own memory sizing", flags=cautious),
    ])  # fmt: skip


def _twin_space(
    profile: TwinProfile, *, fixed: dict[str, Any], tuned: dict[str, Any], baselines: list[Baseline]
) -> SearchSpace:
    """A tight member's space on the twin serving ``profile``: its GPUs, weights and measurement."""
    return SearchSpace.model_validate(
        {
            "version": 1,
            "study": profile.name,
            "engine": "sglang",
            "launcher": ["{python}", "-m", "autotune_twin", "--twin-profile", f"{profile.name}.yaml"],
            "model": profile.model.name,
            "gpus": {"devices": list(range(profile.gpus.count)), "model_bytes": float(checkpoint_bytes(profile.model))},
            "fixed": fixed,
            "tuned": tuned,
            "baselines": baselines,
            **MEASURED_AS,
        }
    )


# Issue 54: members that tune the context length (from the model's maximum downwards) beside the fraction
# and, on hybrid models, the state ratio; consumer and data-centre GPUs, hybrid and dense models.
CONTEXT_GPUS = ("RTX 3090", "RTX 4090", "RTX 5090", "L40S", "A100", "H100")
CONTEXT_FRACTIONS = [round(0.85 + 0.01 * i, 2) for i in range(12)]  # 0.85-0.96
CONTEXT_RATIOS = [0.3, 0.5, 0.7, 0.9]


def tight_context_member(seed: int) -> Member:
    """The tight-context member of ``seed`` (its own draws): a hybrid or dense model whose weights take
    55-85 % of each of 1-4 GPUs, its MTP heads (hybrid) or an EAGLE3 drafter (dense), and a space that
    tunes the context among the model's maximum and its halves down to a quarter, of which the largest
    cannot hold one request at any offered fraction and the smallest can.

    Raises:
        ValueError: no draw in ``MAX_DRAWS`` gave such contexts (does not happen for the catalog).
    """
    rng = random.Random(f"autotune-family-tight-context-{seed}")
    for _ in range(MAX_DRAWS):
        chosen = KNOWN_GPUS[rng.choice(CONTEXT_GPUS)]
        gpu = next(g for g in GPUS if g.facts == chosen)
        count = rng.choice([c for c in (1, 2, 4) if c <= gpu.max_count])
        kind: ModelKind = rng.choice(["hybrid", "hybrid", "dense"])
        dtype = rng.choice(["bfloat16", "float8_e4m3fn"])
        drawn = _tight_context(rng, seed, gpu=gpu, count=count, kind=kind, dtype=dtype,
                               weight_share=rng.uniform(0.55, 0.85))  # fmt: skip
        if drawn is not None:
            return drawn
    raise ValueError(f"tight-context family seed {seed}: no draw gave contexts on both sides in {MAX_DRAWS} draws")


def tight_context_members(count: int, first_seed: int = 0) -> list[Member]:
    return [tight_context_member(seed) for seed in range(first_seed, first_seed + count)]


def _tight_context(
    rng: random.Random, seed: int, *, gpu: GpuKind, count: int, kind: ModelKind, dtype: str, weight_share: float
) -> Member | None:
    """A tight-context member, or None where the drawn contexts do not straddle what the pool holds."""
    from benchmarks.landscape import Landscape  # here: the landscape module reads profiles, not families

    gpus = _gpu_spec(rng, gpu, count)
    params = weight_share * gpu.memory_bytes * count / BYTES_PER_PARAM[dtype]
    config = target_config(rng, kind, params, mtp=kind == "hybrid")
    config["max_position_embeddings"] = rng.choice([131072, 262144, 524288])
    eagle = eagle_config(rng, config) if kind == "dense" else None
    setup = _setup(gpu, count, config, dtype, eagle).model_copy(update={"tp": count})
    simulated = (
        "SIMULATION: a generated tight-context landscape of the search benchmark's family (benchmarks/family_tight.py, "
        f"tight-context seed {seed}): drawn facts built by passmodel.setup, costs drawn around its DEFAULT_COSTS; "
        "plausible, uncalibrated numbers."
    )
    profile = _built(rng, setup, gpu, gpus, name=f"family-tight-context-{seed}", seed=seed, dflash=None,
                     simulated=simulated)  # fmt: skip
    model = profile.model
    top = model.max_context_length
    contexts = [top, top // 2, top // 4]
    landscape = Landscape(profile, ["Write a haiku."], model_path=model.name, noise_rel=0.0)
    drafted = ({"speculative-algorithm": "NEXTN"} if kind == "hybrid" else
               {"speculative-algorithm": "EAGLE3", "speculative-draft-model-path": model.drafters[0].path})  # fmt: skip
    mildest = {"tp-size": count, **drafted, "speculative-num-steps": 1, "speculative-eagle-topk": 1,
               "speculative-num-draft-tokens": 2, "cuda-graph-max-bs-decode": 1, "max-running-requests": 1}  # fmt: skip
    if kind == "hybrid":
        mildest["mamba-full-memory-ratio"] = CONTEXT_RATIOS[0]

    def fits(context: int) -> bool:
        return any(
            landscape.evaluate({**mildest, "context-length": context, "mem-fraction-static": f}).feasible
            for f in CONTEXT_FRACTIONS
        )

    if fits(contexts[0]) or not fits(contexts[-1]):
        return None
    space = _tight_context_space(profile, tp=count, contexts=contexts, drafted=drafted, hybrid=kind == "hybrid")
    weights = model.weight_bytes / count
    summary = (
        f"tight context: {count}x {gpu.name.removeprefix('NVIDIA ').removeprefix('GeForce ')}, {kind} "
        f"{model.weight_bytes / BYTES_PER_PARAM[setup.model.dtype] / 1e9:.0f}B {setup.model.dtype}, weights "
        f"{weights / gpus.memory_total_bytes:.0%} of each GPU, TP {count}, contexts {', '.join(map(str, contexts))}"
    )
    drafting: Drafting = "mtp" if kind == "hybrid" else "eagle3"
    return Member(seed=seed, summary=summary, case="base", kind=kind, drafting=drafting, tightness="tight",
                  profile=profile, space=space, facts=public_facts(profile, setup))  # fmt: skip


def _tight_context_space(
    profile: TwinProfile, *, tp: int, contexts: list[int], drafted: dict[str, object], hybrid: bool
) -> SearchSpace:
    """The context, the fraction 0.85-0.96, steps 1-4 (topk 1), the running requests and graph batch, and on
    a hybrid model the state ratio; baselines: the engine's defaults at the model's maximum context (as a
    new user launches first) and the mildest draft at a quarter of it."""
    algorithm = str(drafted["speculative-algorithm"])
    tuned: dict[str, object] = {
        "speculative-algorithm": {"type": "categorical", "choices": [False, algorithm]},
        "speculative-num-steps": {"type": "int", "low": 1, "high": 4, "when": f"speculative-algorithm == {algorithm}"},
        "speculative-eagle-topk": {"type": "categorical", "choices": [1],
                                   "when": f"speculative-algorithm == {algorithm}"},
        "context-length": {"type": "categorical", "choices": contexts},
        "mem-fraction-static": {"type": "categorical", "choices": CONTEXT_FRACTIONS},
        "max-running-requests": {"type": "categorical", "choices": [1, 4, 16]},
        "cuda-graph-max-bs-decode": {"type": "categorical", "choices": [1, 4, 16]},
    }  # fmt: skip
    if "speculative-draft-model-path" in drafted:
        path = drafted["speculative-draft-model-path"]
        tuned["speculative-draft-model-path"] = {"type": "categorical", "choices": [path],
                                                 "when": f"speculative-algorithm == {algorithm}"}  # fmt: skip
    if hybrid:
        tuned["mamba-full-memory-ratio"] = {"type": "categorical", "choices": CONTEXT_RATIOS}
    cautious = {**drafted, "speculative-num-steps": 1, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 2,
                "context-length": contexts[-1], "mem-fraction-static": 0.9}  # fmt: skip
    return _twin_space(profile, fixed={"tp-size": tp}, tuned=tuned, baselines=[
        Baseline(name="defaults", note="SGLang's defaults at the model's maximum context",
                 flags={"context-length": contexts[0]}),
        Baseline(name="cautious", note="the mildest draft at a quarter of the maximum context", flags=cautious),
    ])  # fmt: skip
