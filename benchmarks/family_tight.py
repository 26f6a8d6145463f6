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

from autotune.space import Baseline, SearchSpace
from benchmarks.family import (
    GIB,
    GPUS,
    MAX_DRAWS,
    MEASURED_AS,
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
from passmodel.profile import DrafterSpec, TwinProfile
from passmodel.setup import BYTES_PER_PARAM, Setup, load_setup

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
    return SearchSpace.model_validate(
        {
            "version": 1,
            "study": profile.name,
            "engine": "sglang",
            "launcher": ["{python}", "-m", "autotune_twin", "--twin-profile", f"{profile.name}.yaml"],
            "model": profile.model.name,
            "gpus": {"devices": list(range(profile.gpus.count)), "model_bytes": float(profile.model.weight_bytes)},
            "fixed": {"context-length": context, "tp-size": tp},
            "tuned": tuned,
            "baselines": [
                Baseline(name="defaults", note="SGLang's defaults (no speculative decoding)", flags={}),
                Baseline(
                    name="cautious", note="the drafter at its mildest, the engine's own memory sizing", flags=cautious
                ),
            ],  # fmt: skip
            **MEASURED_AS,
        }
    )
