"""Memory feasibility: the analytic pool rule, boundaries learned from failures, and what is not
generalised; then on the twin, a learned boundary saves a launch."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml
from optuna.trial import FrozenTrial

from autotune.engines.sglang import SGLangEngine
from autotune.engines.vllm import VLLMEngine
from autotune.feasibility import FeasibilityModel, FractionWindow, MemoryLesson, model_weight_bytes
from autotune.gpu import GpuInventory, check_idle, roofline, wait_for
from autotune.headroom_figures import headroom_use
from autotune_twin import memory
from autotune_twin.launch import resolve_launch
from autotune_twin.sglang.flags import parse_args
from passmodel.profile import load_profile
from tests.conftest import TWIN_SPACE, autotune_cmd

GIB = 2**30
RULES = SGLangEngine.memory_rules
VLLM_RULES = VLLMEngine.memory_rules
BASE = {
    "tp-size": 2,
    "speculative-algorithm": "NEXTN",
    "speculative-num-steps": 3,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 4,
    "cuda-graph-max-bs-decode": 16,
    "max-running-requests": 16,
}


def model(**kwargs: float) -> FeasibilityModel:
    return FeasibilityModel(RULES, free_bytes=kwargs.get("free", 47 * GIB), weight_bytes=kwargs.get("weights", 54e9))


def test_pool_rule_predicts_certain_failures_only() -> None:
    m = model()
    assert not m.predict({**BASE, "mem-fraction-static": 0.5}).feasible  # 23.5 GiB < 25.1 GiB of weights
    low = m.predict({**BASE, "mem-fraction-static": 0.5})
    assert low.side == "too-low" and "leaves nothing" in (low.reason or "")
    assert m.predict({**BASE, "mem-fraction-static": 0.6}).feasible
    assert m.predict(BASE).feasible  # fraction unset: SGLang picks it, nothing to predict


def test_weights_logged_by_the_server_replace_the_estimate() -> None:
    m = model()
    m.observe_weights(29 * GIB, flags=BASE)
    assert not m.predict({**BASE, "mem-fraction-static": 0.6}).feasible
    # logged at TP 2, so TP 4 holds half as much per GPU
    assert m.predict({**BASE, "tp-size": 4, "mem-fraction-static": 0.4}).feasible
    assert not m.predict({**BASE, "tp-size": 1, "mem-fraction-static": 0.95}).feasible


def test_the_free_memory_a_server_logged_replaces_nvmls() -> None:
    # NVML shows 47 GiB free; the server, after its own CUDA context, saw 46 GiB (and once 45.8)
    m = model(weights=2 * 25.5 * GIB)
    flags = {**BASE, "mem-fraction-static": 0.55}  # 0.55 x 47 = 25.85 GiB > 25.5; 0.55 x 46 = 25.3 GiB < 25.5
    assert m.predict(flags).feasible
    m.observe_server_free(46 * GIB)
    m.observe_server_free(45.8 * GIB)  # the largest reading counts: never infeasible on a low one
    assert m.start_free_bytes == 46 * GIB
    low = m.predict(flags)
    assert not low.feasible and low.side == "too-low" and "of 46.0 GiB free leaves nothing" in (low.reason or "")


def test_too_high_failure_generalises_to_larger_fractions_and_graph_demands() -> None:
    m = model()
    m.observe({**BASE, "mem-fraction-static": 0.95}, "too-high", trial=3)
    bigger = m.predict({**BASE, "mem-fraction-static": 0.96, "cuda-graph-max-bs-decode": 32})
    assert not bigger.feasible and bigger.side == "too-high" and "trial 3" in (bigger.reason or "")
    # a different mamba ratio does not change the headroom side
    assert not m.predict({**BASE, "mem-fraction-static": 0.95, "mamba-full-memory-ratio": 0.3}).feasible
    assert m.predict({**BASE, "mem-fraction-static": 0.94}).feasible  # less fraction: more headroom
    assert m.predict({**BASE, "mem-fraction-static": 0.96, "cuda-graph-max-bs-decode": 8}).feasible  # smaller graphs
    assert m.predict({**BASE, "mem-fraction-static": 0.96, "chunked-prefill-size": 8192}).feasible  # not comparable


def test_too_low_failure_generalises_to_smaller_fractions_and_larger_demands() -> None:
    m = model()
    m.observe({**BASE, "mem-fraction-static": 0.70, "mamba-full-memory-ratio": 0.5}, "too-low", trial=1)
    assert not m.predict(
        {**BASE, "mem-fraction-static": 0.68, "mamba-full-memory-ratio": 0.5, "max-running-requests": 32}
    ).feasible
    # graph batch does not touch the pool
    assert not m.predict(
        {**BASE, "mem-fraction-static": 0.70, "mamba-full-memory-ratio": 0.5, "cuda-graph-max-bs-decode": 48}
    ).feasible
    assert m.predict({**BASE, "mem-fraction-static": 0.72, "mamba-full-memory-ratio": 0.5}).feasible
    # the mamba split is not monotone: another ratio is another question
    assert m.predict({**BASE, "mem-fraction-static": 0.65, "mamba-full-memory-ratio": 0.9}).feasible


def test_a_too_low_failure_speaks_for_other_values_until_a_served_launch_refutes_it() -> None:
    m = model()
    failed = {**BASE, "mem-fraction-static": 0.80, "attention-backend": "fa3", "chunked-prefill-size": 8192}
    m.observe(failed, "too-low", trial=4)
    # another backend, fewer draft tokens, fewer requests, another prefill chunk: presumed to fail too
    other = {**failed, "mem-fraction-static": 0.75, "attention-backend": "triton", "speculative-num-draft-tokens": 2,
             "max-running-requests": 4, "chunked-prefill-size": 2048}  # fmt: skip
    low = m.predict(other)
    assert not low.feasible and low.side == "too-low" and "presuming attention-backend" in (low.reason or "")
    assert m.predict({**other, "tp-size": 4}).feasible  # a larger TP holds less per GPU
    assert m.predict({**other, "mem-fraction-static": 0.81}).feasible
    no_drafter = {k: v for k, v in other.items() if not k.startswith("speculative-")}
    assert m.predict(no_drafter).feasible  # flags set on one side only
    # a launch with the fa3 backend served at 0.78: the backend does move the boundary
    m.learn(MemoryLesson(flags={**failed, "mem-fraction-static": 0.78, "attention-backend": "triton"}, trial=5,
                         served=True))  # fmt: skip
    assert m.relevant["too-low"] == {"attention-backend"}
    assert m.predict(other).feasible
    assert not m.predict({**other, "attention-backend": "fa3"}).feasible


def test_a_failure_after_a_served_launch_that_refutes_its_presumption_speaks_only_for_its_own_values() -> None:
    m = model()
    m.learn(MemoryLesson(flags={**BASE, "mem-fraction-static": 0.7, "attention-backend": "triton"}, trial=1,
                         served=True))  # fmt: skip
    m.observe({**BASE, "mem-fraction-static": 0.75, "attention-backend": "fa3"}, "too-low", trial=2)
    assert m.relevant["too-low"] == {"attention-backend"}
    assert m.predict({**BASE, "mem-fraction-static": 0.72, "attention-backend": "triton"}).feasible
    assert not m.predict({**BASE, "mem-fraction-static": 0.72, "attention-backend": "fa3"}).feasible


def test_a_too_low_failure_speaks_only_for_a_kv_dtype_no_smaller() -> None:
    m = model()
    failed = {**BASE, "mem-fraction-static": 0.85, "kv-cache-dtype": "auto"}
    m.observe(failed, "too-low", trial=3)
    # fp8 halves the pool a token needs: a failure at the model's dtype never speaks for it
    assert m.predict({**failed, "mem-fraction-static": 0.80, "kv-cache-dtype": "fp8_e4m3"}).feasible
    assert m.predict({**failed, "mem-fraction-static": 0.80, "kv-cache-dtype": "fp4_e2m1"}).feasible
    # bf16 is as large as auto: presumed to fail like any other demand
    assert not m.predict({**failed, "mem-fraction-static": 0.80, "kv-cache-dtype": "bf16"}).feasible
    assert m.relevant["too-low"] == set()
    # a failure at fp8 speaks for the larger auto, at a fraction no higher
    small = model()
    small.observe({**failed, "kv-cache-dtype": "fp8_e5m2"}, "too-low", trial=4)
    assert not small.predict({**failed, "mem-fraction-static": 0.80}).feasible
    assert small.predict({**failed, "mem-fraction-static": 0.90}).feasible
    # a value the rules do not know is presumed not to matter, as before
    unknown = small.predict({**failed, "mem-fraction-static": 0.80, "kv-cache-dtype": "int4"})
    assert not unknown.feasible and "presuming kv-cache-dtype" in (unknown.reason or "")
    # the headroom holds no KV cache: a too-high failure still speaks for another dtype
    high = model()
    high.observe({**failed, "mem-fraction-static": 0.92}, "too-high", trial=5)
    assert not high.predict({**failed, "mem-fraction-static": 0.94, "kv-cache-dtype": "fp8_e4m3"}).feasible
    # an unset dtype is the engine's auto: spoken for like a given one, either way round
    at_fp8 = model()
    at_fp8.observe({**failed, "mem-fraction-static": 0.92, "kv-cache-dtype": "fp8_e4m3"}, "too-high", trial=6)
    unset = {k: v for k, v in failed.items() if k != "kv-cache-dtype"}
    predicted = at_fp8.predict({**unset, "mem-fraction-static": 0.94})
    assert not predicted.feasible and "presuming kv-cache-dtype" in (predicted.reason or "")


def served(m: FeasibilityModel, flags: dict[str, object], *, runtime_gib: float, graph_gib: float) -> None:
    """A launch that served: its graphs as logged, its run-time memory from the NVML peak."""
    free, fraction = 46.5 * GIB, float(flags["mem-fraction-static"])  # type: ignore[arg-type]
    m.observe_graph(graph_gib * GIB, flags=flags)  # type: ignore[arg-type]
    m.observe_headroom(
        headroom_use(
            flags,  # type: ignore[arg-type]
            server_free_bytes=free,
            avail_after_pools_bytes=(1 - fraction) * free,
            graph_bytes=graph_gib * GIB,
            free_at_peak_bytes=(1 - fraction) * free - graph_gib * GIB - runtime_gib * GIB,
            trial=7,
        )
    )


def test_a_served_launch_bounds_the_headroom_of_later_candidates() -> None:
    m = model()
    # 0.12 x 46.5 GiB of headroom; graphs of 16 x 4 tokens took 0.5 GiB, the rest 1.6 GiB
    served(m, {**BASE, "mem-fraction-static": 0.88}, runtime_gib=1.6, graph_gib=0.5)
    assert m.headroom_uses[0].runtime_bytes == pytest.approx(1.6 * GIB)
    # 0.03 x 46.5 = 1.40 GiB cannot hold 1.6 GiB plus graphs no smaller than 0.5 GiB
    high = m.predict({**BASE, "mem-fraction-static": 0.97})
    assert not high.feasible and high.side == "too-high" and "trial 7 used 1.60 GiB" in (high.reason or "")
    # 0.96 leaves 1.86 GiB: larger graphs (more tokens) need at least the logged 0.5 GiB, so no
    assert not m.predict({**BASE, "mem-fraction-static": 0.96, "cuda-graph-max-bs-decode": 32}).feasible
    # far fewer graph tokens: the logged graphs shrink by at most the per-token bound, to 0.125 GiB
    assert m.graph_bytes_at_least(16.0) == pytest.approx(0.5 * GIB - (0.5 * GIB / 64) * 48)
    assert m.predict({**BASE, "mem-fraction-static": 0.96, "cuda-graph-max-bs-decode": 4}).feasible
    assert m.predict({**BASE, "mem-fraction-static": 0.95}).feasible  # 2.33 GiB hold 1.6 + 0.5
    # an activation flag set on one side only is not comparable
    assert m.predict({**BASE, "mem-fraction-static": 0.97, "chunked-prefill-size": 8192}).feasible
    served_flags = {**BASE, "mem-fraction-static": 0.88, "chunked-prefill-size": 4096}
    other = model()
    served(other, served_flags, runtime_gib=1.6, graph_gib=0.5)
    assert not other.predict({**served_flags, "mem-fraction-static": 0.97, "chunked-prefill-size": 8192}).feasible
    assert other.predict({**served_flags, "mem-fraction-static": 0.97, "chunked-prefill-size": 1024}).feasible
    assert other.predict({**served_flags, "mem-fraction-static": 0.97, "attention-backend": "triton"}).feasible


def test_a_headroom_death_s_printed_shortfall_speaks_for_smaller_graphs_it_cannot_free_enough_for() -> None:
    m = model()
    # a served launch at 0.88: graphs of 16 x 4 tokens took 0.5 GiB, so at most 8 MiB a token
    served(m, {**BASE, "mem-fraction-static": 0.88}, runtime_gib=1.6, graph_gib=0.5)
    died = {**BASE, "mem-fraction-static": 0.95}
    m.learn(MemoryLesson(flags=died, trial=9, side="too-high", headroom_shortfall_bytes=400 * 2**20))
    assert m.failures[0].shortfall_bytes == 400 * 2**20
    # 4 x 4 tokens free at most 48 x 8 = 384 MiB of the 400 it lacked (the served bound alone says it fits)
    smaller = m.predict({**died, "cuda-graph-max-bs-decode": 4})
    assert not smaller.feasible and smaller.side == "too-high" and "trial 9" in (smaller.reason or "")
    assert m.predict({**died, "cuda-graph-max-bs-decode": 2}).feasible  # 56 tokens may free 448 MiB
    assert m.predict({**died, "mem-fraction-static": 0.94}).feasible  # 0.01 of 47 GiB adds 481 MiB
    deeper = model()
    served(deeper, {**BASE, "mem-fraction-static": 0.88}, runtime_gib=1.6, graph_gib=0.5)
    deeper.learn(MemoryLesson(flags=died, trial=9, side="too-high", headroom_shortfall_bytes=600 * 2**20))
    assert not deeper.predict({**died, "mem-fraction-static": 0.94}).feasible  # graphs no smaller, 481 < 600
    # no launch has bounded the graphs' bytes per token: what fewer tokens free is unknown, nothing is said
    blind = model()
    blind.learn(MemoryLesson(flags=died, trial=9, side="too-high", headroom_shortfall_bytes=4 * GIB))
    assert blind.predict({**died, "cuda-graph-max-bs-decode": 15}).feasible
    assert not blind.predict({**died, "mem-fraction-static": 0.94}).feasible


def test_a_plain_headroom_death_speaks_for_a_drafter_at_as_many_graph_tokens() -> None:
    m = model()
    plain = {k: v for k, v in BASE.items() if not k.startswith("speculative-")}
    # graph batch 4 without a drafter: 4 tokens; it lacked at least 600 MiB at 0.96
    died = {**plain, "cuda-graph-max-bs-decode": 4, "mem-fraction-static": 0.96}
    m.learn(MemoryLesson(flags=died, trial=4, side="too-high", headroom_shortfall_bytes=600 * 2**20))
    # a drafter at batch 1 x 4 draft tokens captures as many tokens, and its graphs come on top
    drafter = {**BASE, "cuda-graph-max-bs-decode": 1, "mem-fraction-static": 0.95}  # 0.01 of 47 GiB: 481 MiB
    predicted = m.predict(drafter)
    assert not predicted.feasible and predicted.side == "too-high" and "trial 4" in (predicted.reason or "")
    eagle = {**drafter, "speculative-algorithm": "EAGLE3", "speculative-draft-model-path": "d"}
    assert not m.predict(eagle).feasible
    assert m.predict({**drafter, "mem-fraction-static": 0.94}).feasible  # 962 MiB more headroom than it lacked
    # fewer tokens (batch 1 x 2 draft tokens), and no served launch bounds what they free
    assert m.predict({**drafter, "speculative-num-steps": 1, "speculative-num-draft-tokens": 2}).feasible
    # a drafter's death says nothing of a plan without one: its graphs may be all the drafter's
    other = model()
    other.learn(MemoryLesson(flags={**drafter, "cuda-graph-max-bs-decode": 4}, trial=5, side="too-high",
                             headroom_shortfall_bytes=600 * 2**20))  # fmt: skip
    assert other.predict({**plain, "cuda-graph-max-bs-decode": 16, "mem-fraction-static": 0.95}).feasible


def test_deaths_of_launches_with_the_same_weights_bound_the_fraction_from_both_sides() -> None:
    m = model()
    drafter = {**BASE, "speculative-algorithm": "DFLASH", "speculative-draft-model-path": "d"}
    assert m.fraction_window(drafter) == FractionWindow()
    m.observe({**drafter, "mem-fraction-static": 0.75, "speculative-num-draft-tokens": 16}, "too-low", trial=1)
    m.observe({**drafter, "mem-fraction-static": 0.72, "kv-cache-dtype": "fp8_e4m3"}, "too-low", trial=2)
    m.observe({**drafter, "mem-fraction-static": 0.95, "cuda-graph-max-bs-decode": 4}, "too-high", trial=3)
    m.observe({**drafter, "mem-fraction-static": 0.93}, "too-high", trial=4)
    m.observe({**BASE, "mem-fraction-static": 0.90}, "too-high", trial=5)  # other weights: no bound
    m.observe({**drafter, "tp-size": 4, "mem-fraction-static": 0.80}, "too-low", trial=6)  # other TP size
    assert m.fraction_window(drafter) == FractionWindow(low=0.75, low_trial=1, high=0.93, high_trial=4)
    # fp8 needs half the pool an unset dtype needs: a death with the dtype unset does not bound it
    fp8 = {**drafter, "kv-cache-dtype": "fp8_e4m3"}
    assert m.fraction_window(fp8) == FractionWindow(low=0.72, low_trial=2, high=0.93, high_trial=4)
    window = m.fraction_window(drafter)
    assert window.open(0.8) and not window.open(0.75) and not window.open(0.94)
    assert window.middle(0.7, 0.97, 0.01) == 0.84
    assert FractionWindow(high=0.8).middle(0.7, 0.97, 0.01) == 0.75  # the tuned range closes the other side
    assert FractionWindow(low=0.80, high=0.81).middle(0.7, 0.97, 0.01) is None  # no value of the range inside
    assert FractionWindow(low=0.9, high=0.8).middle(0.7, 0.97, None) is None  # deaths that contradict


def test_vllm_utilization_is_of_the_total_and_must_be_free_at_start() -> None:
    # an 80 GiB GPU on which another process holds 10 GiB; 16 GB of weights
    m = FeasibilityModel(VLLM_RULES, free_bytes=70 * GIB, total_bytes=80 * GIB, weight_bytes=16e9)
    refused = m.predict({"gpu-memory-utilization": 0.9})  # 72 GiB > 70 GiB free
    assert not refused.feasible and refused.side == "too-high"
    assert "asks for 72.0 GiB of the GPU's 80.0 GiB, but only 70.0 GiB are free" in (refused.reason or "")
    fits = m.predict({"gpu-memory-utilization": 0.85})
    assert fits.feasible and fits.pool_bytes == pytest.approx(0.85 * 80 * GIB - 16e9)
    assert not m.predict({}).feasible  # the default 0.92 asks for 73.6 GiB
    tiny = m.predict({"gpu-memory-utilization": 0.15})  # 12 GiB < 14.9 GiB of weights
    assert not tiny.feasible and tiny.side == "too-low" and "of 80.0 GiB total leaves nothing" in (tiny.reason or "")


def test_graphs_beyond_the_most_tokens_seen_grow_along_the_logged_line() -> None:
    m = model()
    base, per_token = 0.2 * GIB, 5 * 2**20
    for tokens in (40, 96, 192):  # batch 8, 24, 48 at 4 draft tokens, each within its request pool
        batch = {"cuda-graph-max-bs-decode": tokens // 4, "max-running-requests": tokens // 4}
        m.observe_graph(base + per_token * tokens, flags={**BASE, **batch})
    assert m.graph_slope() == pytest.approx(per_token)
    at_512 = m.graph_bytes_at_least(512)
    assert base + per_token * 192 < at_512 < base + per_token * 512  # along the line, less a tenth
    assert at_512 == pytest.approx(base + per_token * 192 + 0.9 * per_token * 320)
    # two token counts are a line by definition: no extrapolation; nor when the points do not lie on one
    two = model()
    for tokens in (96, 192):
        batch = {"cuda-graph-max-bs-decode": tokens // 4, "max-running-requests": tokens // 4}
        two.observe_graph(base + per_token * tokens, flags={**BASE, **batch})
    assert two.graph_slope() is None and two.graph_bytes_at_least(512) == base + per_token * 192
    bent = model()
    for tokens, gib in ((40, 0.4), (96, 0.45), (192, 1.5)):
        batch = {"cuda-graph-max-bs-decode": tokens // 4, "max-running-requests": tokens // 4}
        bent.observe_graph(gib * GIB, flags={**BASE, **batch})
    assert bent.graph_slope() is None


def test_graphs_are_captured_only_up_to_the_request_pool() -> None:
    """SGLang captures decode graphs up to req_to_token_pool.size (base_cuda_graph_runner.py:78,101):
    an explicit --cuda-graph-max-bs-decode above --max-running-requests captures max-running-requests."""
    m = model()
    assert m.graph_tokens({**BASE, "cuda-graph-max-bs-decode": 48, "max-running-requests": 16}) == 16 * 4
    assert m.graph_tokens({**BASE, "cuda-graph-max-bs-decode": 8, "max-running-requests": 16}) == 8 * 4
    unset = {k: v for k, v in BASE.items() if k != "max-running-requests"}
    assert m.graph_tokens({**unset, "cuda-graph-max-bs-decode": 48}) == 48 * 4
    # the twin agrees: its graph batch, and so its graph memory, stops at the request pool
    profile = load_profile()
    argv = ["--model-path", "Qwen/Qwen3.6-27B", "--tp-size", "2", "--speculative-algorithm", "NEXTN",
            "--speculative-num-steps", "3", "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "4",
            "--cuda-graph-max-bs-decode", "48"]  # fmt: skip
    capped = resolve_launch(parse_args([*argv, "--max-running-requests", "16"])[0], profile)
    assert capped.cuda_graph_max_bs_decode == 16 and memory.graph_tokens(capped) == 16 * 4


def test_served_launches_without_graph_sizes_predict_nothing() -> None:
    m = FeasibilityModel(VLLM_RULES, free_bytes=79 * GIB, weight_bytes=16e9)
    m.observe_headroom(
        headroom_use(
            {"gpu-memory-utilization": 0.9},
            server_free_bytes=79 * GIB,
            avail_after_pools_bytes=2 * GIB,
            graph_bytes=0.0,
            free_at_peak_bytes=0.0,
        )  # fmt: skip
    )
    assert m.headroom_uses == [] and m.predict({"gpu-memory-utilization": 0.99}).feasible


def test_local_model_weight_bytes(tmp_path: Path) -> None:
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": 123}}))
    assert model_weight_bytes(str(tmp_path)) == 123
    assert model_weight_bytes("Qwen/Qwen3.6-27B") is None


def inventory(gib_used: float, processes: list[int] | None = None) -> GpuInventory:
    used = int(gib_used * GIB)
    return GpuInventory.model_validate(
        {
            "driver_version": "x",
            "gpus": [
                {
                    "index": 0,
                    "name": "g",
                    "uuid": "u",
                    "memory_total_bytes": 48 * GIB,
                    "memory_used_bytes": used,
                    "memory_free_bytes": 48 * GIB - used,
                    "processes": [{"pid": p, "used_memory_bytes": 4 * GIB} for p in processes or []],
                }
            ],
        }
    )


def test_idle_check_and_bounded_wait() -> None:
    start = inventory(0.5)
    assert check_idle(inventory(0.6), start).idle
    busy = check_idle(inventory(0.6, [4242]), start)
    assert not busy.idle and "4242" in busy.reason
    assert "more in use" in check_idle(inventory(5), start).reason
    readings = iter([inventory(5), inventory(5), inventory(0.5)])
    ticks = iter(range(100))
    verdict, waited = wait_for(
        lambda: next(readings),
        lambda inv: check_idle(inv, start),
        timeout_s=60,
        clock=lambda: float(next(ticks)),
        sleep=lambda s: None,
    )
    assert verdict.idle and waited == 3  # one clock tick per reading, the third one idle
    ticks = iter(range(0, 1000, 30))
    verdict, waited = wait_for(
        lambda: inventory(5),
        lambda inv: check_idle(inv, start),
        timeout_s=60,
        clock=lambda: float(next(ticks)),
        sleep=lambda s: None,
    )
    assert not verdict.idle and waited >= 60


def test_roofline_share() -> None:
    r = roofline(
        decode_tok_s=50.0,
        accept_length=3.0,
        weights_bytes_per_gpu=27e9,
        kv_bytes_per_token_per_gpu=None,
        mean_context_tokens=1000,
        bandwidth_bytes_per_s=768e9,
    )
    assert r.ceiling_tok_s == pytest.approx(768e9 / 27e9 * 3)
    assert r.share == pytest.approx(50 / r.ceiling_tok_s)


def fraction_study(tmp_path: Path, data: dict[str, Any], *, low: float) -> list[FrozenTrial]:
    """Run the study ``data`` with only mem-fraction-static tuned (from ``low``) for its baselines, briefly."""
    data["tuned"] = {"mem-fraction-static": {"type": "float", "low": low, "high": 0.97, "step": 0.01}}
    data["fixed"].setdefault("speculative-algorithm", "NEXTN")  # tuned in the twin space, which has a DFLASH branch
    data["measurement"].update(
        {"warmup_requests": 0, "prompts_per_round": 1, "max_tokens": 16, "min_rounds": 2, "max_rounds": 2}
    )
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data))
    # --confirm-top 0: these studies are about what is launched, not about re-measuring finalists
    command = autotune_cmd("study", str(space), "--total-trials", str(len(data["baselines"])), "--confirm-top", "0")
    subprocess.run(command, cwd=tmp_path, check=True, capture_output=True, timeout=300)
    storage = f"sqlite:///{tmp_path}/studies/{data['study']}.db"
    return optuna.load_study(study_name=data["study"], storage=storage).trials


@pytest.mark.twin
def test_a_learned_boundary_saves_a_launch_on_the_twin(tmp_path: Path) -> None:
    data = yaml.safe_load(TWIN_SPACE.read_text())
    data.update(
        study="mem",
        baselines=[
            {"name": "high", "flags": {"mem-fraction-static": 0.96}},
            {"name": "higher", "flags": {"mem-fraction-static": 0.97}},
            {"name": "low", "flags": {"mem-fraction-static": 0.66}},
            {"name": "lower", "flags": {"mem-fraction-static": 0.62}},
        ],
    )
    data["fixed"].update(
        {
            "speculative-num-steps": 3,
            "speculative-eagle-topk": 1,
            "cuda-graph-max-bs-decode": 48,
            "max-running-requests": 48,
            "mamba-full-memory-ratio": 0.9,
        }
    )
    trials = fraction_study(tmp_path, data, low=0.60)
    outcomes = [t.user_attrs["outcome"] for t in trials]
    assert outcomes == [
        "infeasible-memory-high",
        "predicted-infeasible-memory-high",
        "predicted-infeasible-memory-low",
        "predicted-infeasible-memory-low",
    ]
    logs = sorted(p.name for p in (tmp_path / "studies" / "mem" / "logs").glob("trial-*.log"))
    assert logs == ["trial-0000.log"]  # the predicted ones were never launched
    for trial in trials:
        assert trial.state.name == "COMPLETE" and trial.value == 0.0 and trial.constraints["memory"] > 0
    assert "trial 0" in trials[1].user_attrs["reason"]
    # the death's out-of-memory message gave the least it lacked: no more than the twin's true shortfall
    lesson = MemoryLesson.model_validate(trials[0].user_attrs["memory_lesson"])
    argv = ["--model-path", "Qwen/Qwen3.6-27B", "--speculative-num-draft-tokens", "4", "--mem-fraction-static", "0.96",
            *[x for k, v in data["fixed"].items() for x in (f"--{k}", str(v))]]  # fmt: skip
    plan = memory.plan_memory(load_profile(), resolve_launch(parse_args(argv)[0], load_profile()))
    lacked = plan.needed_headroom_bytes - plan.headroom_bytes
    assert lesson.side == "too-high" and 0 < (lesson.headroom_shortfall_bytes or 0) <= lacked
    # the first death sized its pool before its graphs ran out of headroom: by its tokens at 0.96, the
    # pool at 0.66 and 0.62 cannot hold one request of the context (rule context-fit)
    for low in trials[2:]:
        reason = low.user_attrs["reason"]
        assert "the pools of trials 0" in reason and "--context-length 131072" in reason


@pytest.mark.twin
def test_a_served_launch_saves_a_launch_that_would_run_out_of_headroom(tmp_path: Path) -> None:
    """The twin's simulated GPUs show what a serving server holds (NVML's view), so the study learns the
    run-time memory outside the graphs from the first launch and skips a fraction that cannot hold it."""
    data = yaml.safe_load(TWIN_SPACE.read_text())
    # max-running-requests 48: SGLang captures graphs only up to the request pool, so the graph batch is 48
    hand_found = {"speculative-num-steps": 3, "speculative-eagle-topk": 1, "cuda-graph-max-bs-decode": 48,
                  "max-running-requests": 48, "mamba-full-memory-ratio": 0.5}  # fmt: skip
    data.update(
        study="served",
        baselines=[{"name": "served", "flags": {"mem-fraction-static": 0.88}},
                   {"name": "tight", "flags": {"mem-fraction-static": 0.96}}],
    )  # fmt: skip
    data["fixed"].update(hand_found)
    trials = fraction_study(tmp_path, data, low=0.80)
    assert [t.user_attrs["outcome"] for t in trials] == ["ok", "predicted-infeasible-memory-high"]
    assert sorted(p.name for p in (tmp_path / "studies" / "served" / "logs").glob("trial-*.log")) == ["trial-0000.log"]
    # what the twin really needs outside its graphs: activations of the default prefill chunk
    profile = load_profile()
    argv = ["--model-path", "Qwen/Qwen3.6-27B", "--tp-size", "2", "--context-length", "131072",
            "--speculative-algorithm", "NEXTN", "--speculative-num-draft-tokens", "4",
            *[x for k, v in hand_found.items() for x in (f"--{k}", str(v))]]  # fmt: skip
    needed, graphs = memory.needed_headroom_bytes(profile, resolve_launch(parse_args(argv)[0], profile))
    served = trials[0].user_attrs
    assert served["memory_runtime_gib"] == pytest.approx((needed - graphs) / GIB, abs=0.03)
    assert served["memory_graph_batch"] == 48 and served["gpu_peak_used_gib"] > served["memory_weights_gib"]
    assert "trial 0 used" in trials[1].user_attrs["reason"] and trials[1].constraints["memory"] > 0
    # and the twin agrees: that fraction dies of memory when launched
    tight = resolve_launch(parse_args([*argv, "--mem-fraction-static", "0.96"])[0], profile)
    assert memory.memory_outcome(profile, tight) == "too_high"


def test_roofline_counts_a_gguf_file_and_its_draft_model(tmp_path: Path) -> None:
    from autotune.engines import get_engine
    from autotune.gpu import roofline

    target, draft = tmp_path / "target.gguf", tmp_path / "draft.gguf"
    target.write_bytes(b"\0" * 4000)
    draft.write_bytes(b"\0" * 500)
    assert model_weight_bytes(str(target)) == 4000
    engine = get_engine("llamacpp")
    plan = engine.normalise({"spec-type": "draft-simple", "spec-draft-model": str(draft), "spec-draft-n-max": 4})
    reads = engine.draft_reads(plan.flags)
    assert reads is not None and reads.model == str(draft) and reads.passes_per_verify == 4
    assert engine.draft_reads(engine.normalise({"spec-type": "none"}).flags) is None
    with_draft = roofline(decode_tok_s=100.0, accept_length=2.0, weights_bytes_per_gpu=4000.0,
                          kv_bytes_per_token_per_gpu=None, mean_context_tokens=10, bandwidth_bytes_per_s=1e6,
                          draft_bytes_per_pass=500.0 * 4)  # fmt: skip
    assert with_draft.bytes_per_pass == 6000.0 and with_draft.ceiling_tok_s == pytest.approx(1e6 / 6000.0 * 2.0)


def test_a_served_launch_vouches_for_configs_demanding_no_more_at_its_fraction() -> None:
    m = model()
    served = {**BASE, "mem-fraction-static": 0.88, "attention-backend": "fa3", "kv-cache-dtype": "auto"}
    assert m.covers(served, served)
    assert m.covers(served, {**served, "speculative-num-draft-tokens": 2, "speculative-num-steps": 1})
    assert m.covers(served, {**served, "kv-cache-dtype": "fp8_e4m3"})  # a smaller KV dtype
    default_dtype = {k: v for k, v in served.items() if k != "kv-cache-dtype"}  # unset is the engine's auto
    assert m.covers(default_dtype, {**served, "kv-cache-dtype": "fp8_e4m3"})
    assert not m.covers({**served, "kv-cache-dtype": "fp8_e4m3"}, default_dtype)
    assert m.covers(served, {**served, "tp-size": 4})  # more GPUs hold less each
    assert m.covers(served, {**served, "attention-backend": "triton"})  # presumed alike, as failures presume
    engine_chosen = {k: v for k, v in served.items() if k != "attention-backend"}
    assert m.covers(engine_chosen, served)  # the engine's own choice of backend is one more backend
    assert not m.covers(engine_chosen, {**served, "speculative-num-draft-tokens": 8})
    assert not m.covers(served, {**served, "speculative-num-draft-tokens": 8})
    assert not m.covers(served, {**served, "tp-size": 1})
    assert not m.covers(served, {**served, "mem-fraction-static": 0.90})  # less headroom
    assert not m.covers(served, {**served, "mem-fraction-static": 0.86})  # less pool
    assert not m.covers(served, {**served, "speculative-draft-model-path": "other"})  # other weights load
    assert not m.covers(served, {**served, "speculative-algorithm": "EAGLE3"})
    assert not m.covers(served, {**served, "enable-dp-attention": True})  # set on one side only
    # once a failure beside a served launch showed the backend to move a boundary, it is no longer presumed
    m.observe_served(served)
    m.observe({**served, "attention-backend": "triton"}, "too-low", trial=9)
    assert m.relevant["too-low"] == {"attention-backend"}
    assert not m.covers(served, {**served, "attention-backend": "triton"})


def test_excess_counts_the_demands_beyond_a_served_launch_alike_in_everything_else() -> None:
    m = model()
    served = {**BASE, "mem-fraction-static": 0.88, "attention-backend": "fa3"}
    assert m.excess(served, served) == 0
    assert m.excess(served, {**served, "speculative-num-draft-tokens": 8}) == 1
    assert m.excess(served, {**served, "speculative-num-draft-tokens": 8, "tp-size": 1}) == 2
    assert m.excess(served, {**served, "speculative-draft-model-path": "other"}) is None  # other weights
    assert m.excess(served, {**served, "mem-fraction-static": 0.8}) is None  # another sizing
    fp8 = {**served, "kv-cache-dtype": "fp8_e4m3"}
    assert m.excess(fp8, {**fp8, "kv-cache-dtype": "auto"}) is None  # twice the pool per token: not alike
    assert m.excess({**served, "kv-cache-dtype": "auto"}, {**fp8, "speculative-num-draft-tokens": 8}) == 1


def test_a_failure_at_the_engines_own_fraction_speaks_for_launches_that_get_the_same_one() -> None:
    # SGLang computes its default fraction from the GPU, the TP size, the drafter and the headroom
    # demands: two launches alike in those and leaving the fraction unset get the same fraction.
    m = model(weights=40e9)
    failed = {"tp-size": 1, "kv-cache-dtype": "fp8_e4m3", "attention-backend": "triton"}
    m.observe(failed, "too-low", trial=5)
    auto_cache = {"tp-size": 1, "attention-backend": "fa3"}  # unset dtype: auto, twice fp8's pool per token
    prediction = m.predict(auto_cache)
    assert not prediction.feasible and prediction.side == "too-low"
    assert "the engine's own mem-fraction-static" in (prediction.reason or "")
    assert "presuming attention-backend do not matter" in (prediction.reason or "")
    assert m.predict({**auto_cache, "tp-size": 2}).feasible  # another TP size: another default
    assert m.predict({**auto_cache, "cuda-graph-max-bs-decode": 8}).feasible  # another reserve for graphs
    assert m.predict({**auto_cache, "mem-fraction-static": 0.95}).feasible  # a fraction of its own
    vllm = FeasibilityModel(VLLM_RULES, free_bytes=47 * GIB, weight_bytes=20e9, total_bytes=48 * GIB)
    assert vllm._same_default_fraction({}, {}) is False  # vLLM's default is a number: compared as one


def test_a_state_cache_death_speaks_by_the_flags_that_size_the_state_only() -> None:
    ratio, draft = "mamba-full-memory-ratio", "speculative-num-draft-tokens"
    m = model()
    died = {**BASE, "speculative-num-steps": 2, "speculative-eagle-topk": 8, draft: 28, "mem-fraction-static": 0.80}
    m.observe({**died, ratio: 0.5}, "too-low", trial=24, state_short=True)
    # more draft tokens with fewer tree branches, another backend, graph batch and context: no more room per request
    alike = {**died, "speculative-num-steps": 3, "speculative-eagle-topk": 4, draft: 49, "context-length": 4096,
             "attention-backend": "triton", "cuda-graph-max-bs-decode": 4, "mem-fraction-static": 0.79}  # fmt: skip
    alike[ratio] = 0.3
    predicted = m.predict(alike)
    assert not predicted.feasible and "trial 24's hybrid state cache ran short" in (predicted.reason or "")
    assert m.predict({**alike, ratio: 0.7}).feasible  # a larger ratio gives the state more of the pool
    assert m.predict({**alike, draft: 20}).feasible  # fewer draft tokens need less intermediate state
    assert m.predict({**alike, "mem-fraction-static": 0.85}).feasible  # a larger fraction
    assert m.predict({**alike, "max-running-requests": 4}).feasible  # fewer running requests
    assert m.predict({**alike, "speculative-algorithm": "EAGLE3"}).feasible  # other weights
    # a pool death whose message does not name the state compares every pool demand, as before
    kv = model()
    kv.observe({**died, ratio: 0.5}, "too-low", trial=3)
    assert kv.predict(alike).feasible


def test_whether_the_state_cache_ran_short_is_read_from_a_death_s_message_and_stored(tmp_path: Path) -> None:
    from autotune.outcomes import OutcomeKind
    from autotune.space import load_space
    from autotune.study import attrs
    from autotune.study.memory import lesson_of
    from autotune.testing import simulated_outcome

    reasons = {
        "RuntimeError: Hybrid (mamba/linear-attention) state cache is too small to serve any requests. "
        "max_mamba_cache_size=4, mamba_ratio=5, resulting max_num_reqs=0.": True,
        "RuntimeError: Not enough GPU memory for hybrid (mamba/linear-attention) state cache. Computed "
        "max_mamba_cache_size=0 (total_rest_memory=1.20 GB, mamba_cache_per_req=150.00 MB).": True,
        "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. Current value: "
        "mem_fraction_static=0.8": False,
    }
    engine, space = SGLangEngine(), load_space(TWIN_SPACE)
    study = optuna.create_study(storage=f"sqlite:///{tmp_path / 'lessons.db'}")  # attrs as stored
    launched = engine.normalise({**BASE, "mem-fraction-static": 0.8})
    for reason, state in reasons.items():
        outcome = simulated_outcome(space, launched, kind=OutcomeKind.MEMORY_TOO_LOW, reason=reason)
        trial = study.ask()
        lesson = lesson_of(outcome, trial=trial.number, inventory=GpuInventory(driver_version="x", gpus=[]),
                           engine=engine)  # fmt: skip
        attrs.TrialStory(trial).learned(lesson)
        stored = attrs.trial_record(study.get_trials()[trial.number]).lessons.memory
        assert stored is not None and stored.state_short is state, reason


def test_a_twin_night_launches_no_state_cache_an_earlier_death_says_is_smaller(tmp_path: Path) -> None:
    # Other-case member 344 (2x RTX 5090, hybrid 67B int4, EAGLE3): its state cache holds the intermediate
    # state of every draft token; each death at another tree width or ratio spoke for none after it.
    import random

    from autotune.study import StudyView, make_sampler
    from benchmarks.family import members, space_naming_configs
    from benchmarks.nights import LandscapeLauncher, make_runner
    from benchmarks.problems import problem_of

    member = members(1, 344)[0]
    problem = problem_of(member.profile, space_naming_configs(member, tmp_path / "configs"))
    launcher = LandscapeLauncher(problem, problem.landscape(344), random.Random(344))
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/night.db")
    runner = make_runner(problem, tmp_path, sampler=make_sampler("tpe", 344), launcher=launcher, storage=storage)
    runner.enqueue_baselines()
    runner.run(trials=30, timeout_s=None)
    ratio, draft, fraction = "mamba-full-memory-ratio", "speculative-num-draft-tokens", "mem-fraction-static"
    deaths: list[dict[str, Any]] = []
    spoken_for = []
    for record in StudyView(runner.study).records():
        if record.outcome != "infeasible-memory-low" or "state cache" not in (record.reason or ""):
            continue
        flags = record.flags
        if any(
            d.get(draft, 0) <= flags.get(draft, 0) and d[fraction] >= flags[fraction]
            and d.get(ratio, 0.9) >= flags.get(ratio, 0.9)
            and d.get("max-running-requests") == flags.get("max-running-requests")
            for d in deaths
        ):  # fmt: skip
            spoken_for.append(record.number)
        deaths.append(flags)
    assert len(deaths) >= 2 and spoken_for == []
