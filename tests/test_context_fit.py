"""Issue 54: the pool in the engine's own units. Each engine's memory figures parse into the records
(fixtures of our own making, one per format), the pool's tokens are fitted per study across the
fraction, the state ratio and the KV dtype (:mod:`autotune.study.pool_tokens`), and a context the
fitted pool cannot hold is never launched (rule ``context-fit``), on a twin study that tunes it."""

from __future__ import annotations

import json
import os
import random
import subprocess
from pathlib import Path
from typing import Any

import optuna
import pytest
import yaml

from autotune.decision import Skip
from autotune.engines.llamacpp import LlamaCppEngine
from autotune.engines.sglang import SGLangEngine
from autotune.engines.vllm import VLLMEngine
from autotune.feasibility import FeasibilityModel, MemoryLesson
from autotune.kv_layout import KvLayout, kv_layout_of
from autotune.space import load_space
from autotune.study import StudyView, make_sampler
from autotune.study.history import History
from autotune.study.pool_tokens import most_room, pool_points, tokens_at, too_small
from autotune.study.rules.context_fit import ContextFit
from autotune.testing.records import trial_record
from benchmarks.nights import LandscapeLauncher, make_runner
from benchmarks.problems import load_problem
from tests.conftest import TWIN_SPACE, autotune_cmd

FIXTURES = Path(__file__).parent / "fixtures" / "pool_figures"
GIB = 2**30
SGLANG = SGLangEngine()
RULES = SGLANG.memory_rules
assert RULES is not None


def read(name: str) -> str:
    return (FIXTURES / name).read_text()


def test_sglang_figures_of_a_served_hybrid_launch_and_of_a_pool_death() -> None:
    served = SGLANG.memory_facts(read("sglang_hybrid_served.log"))
    assert served is not None and served.kv_tokens == 70144 and served.state_slots == 96
    assert served.kv_pool_bytes is not None and abs(served.kv_pool_bytes - 2.14 * GIB) < 1e-6 * GIB
    shortfall = SGLANG.pool_shortfall(read("sglang_pool_death.log"))
    assert shortfall is not None
    assert (shortfall.fraction, shortfall.pool_tokens, shortfall.needed_tokens) == (0.93, 119646, 131072)


def test_vllm_figures_of_a_pool_death_in_either_release_and_of_a_served_launch() -> None:
    vllm = VLLMEngine()
    v1 = vllm.pool_shortfall(read("vllm_v1_pool_death.log"))
    assert v1 is not None and v1.fraction is None  # not printed: the plan's flag says it
    assert (v1.pool_tokens, v1.needed_tokens) == (51104, 131072)
    assert v1.needed_bytes == 8 * GIB and v1.pool_bytes is not None and abs(v1.pool_bytes - 3.12 * GIB) < 1
    assert v1.cell_bytes == 8 * GIB / 131072
    v0 = vllm.pool_shortfall(read("vllm_v0_pool_death.log"))
    assert v0 is not None and (v0.pool_tokens, v0.needed_tokens, v0.needed_bytes) == (40960, 65536, None)
    served = vllm.memory_facts(read("vllm_served.log"))
    assert served is not None and served.kv_tokens == 204800 and served.max_concurrency == 3.12
    assert vllm.pool_shortfall(read("vllm_served.log")) is None


def test_llamacpp_figures_of_a_kv_cache_it_could_not_allocate() -> None:
    engine = LlamaCppEngine()
    shortfall = engine.pool_shortfall(read("llamacpp_kv_death.log"))
    assert shortfall is not None and shortfall.needed_bytes == 32768 * 2**20
    # an allocation that failed for something else (compute buffers) is no KV figure
    assert engine.pool_shortfall(read("llamacpp_kv_death.log").replace("kv cache", "compute")) is None


HYBRID = {"tp-size": 2, "speculative-algorithm": "NEXTN", "speculative-num-steps": 1, "speculative-eagle-topk": 1,
          "speculative-num-draft-tokens": 2}  # fmt: skip
FREE, WEIGHTS = 21.87 * GIB, 14.26 * GIB


def death(number: int, *, fraction: float, pool: int, context: int, **flags: Any) -> Any:
    launched = SGLANG.normalise({**HYBRID, "mem-fraction-static": fraction, "context-length": context, **flags})
    lesson = MemoryLesson(flags=launched.flags, trial=number, side="too-low", weights_bytes=WEIGHTS,
                          server_free_bytes=FREE, pool_tokens=pool, pool_fraction=fraction,
                          needed_tokens=context)  # fmt: skip
    return trial_record(number, outcome="infeasible-memory-low", engine="sglang", flags=launched.flags,
                        config_key=launched.config_key, memory=lesson)  # fmt: skip


def test_the_pool_grows_with_the_fraction_and_the_kv_share_and_halves_per_token_in_fp8() -> None:
    # the twin's pool: (f x free - weights) / (1 + r) over the cell; at 0.93 and r 0.5 it held 119646
    cell = (0.93 * FREE - WEIGHTS) / 1.5 / 119646
    points = pool_points([death(0, fraction=0.93, pool=119646, context=131072,
                                **{"mamba-full-memory-ratio": 0.5})], RULES, "sglang", budget_bytes=FREE)  # fmt: skip
    cases = ((0.96, 0.5, "auto", 1), (0.93, 0.3, "auto", 1), (0.95, 0.8, "fp8_e4m3", 0.5))
    for fraction, ratio, dtype, bytes_per in cases:
        flags = {**points[0].flags, "mamba-full-memory-ratio": ratio, "kv-cache-dtype": dtype, "context-length": 65536}
        estimate = tokens_at(points, RULES, flags, fraction)
        truth = (fraction * FREE - WEIGHTS) / (1 + ratio) / (cell * bytes_per)
        assert estimate is not None and abs(estimate.tokens - truth) < 1 and estimate.trials == (0,)
    # another tensor-parallel size or drafter: the death does not speak
    assert tokens_at(points, RULES, {**points[0].flags, "tp-size": 4}, 0.93) is None


def _models() -> dict[str, FeasibilityModel]:
    return {"sglang": FeasibilityModel(RULES, free_bytes=FREE, weight_bytes=WEIGHTS * 2, total_bytes=24 * GIB)}


def _hybrid_space() -> Any:
    space = load_space(TWIN_SPACE)
    tuned = dict(space.tuned)
    tuned["context-length"] = tuned["speculative-eagle-topk"].model_validate(
        {"type": "categorical", "choices": [65536, 131072, 196608, 262144]}
    )
    tuned["mem-fraction-static"] = tuned["mem-fraction-static"].model_validate(
        {"type": "float", "low": 0.85, "high": 0.96, "step": 0.01}
    )
    fixed = {k: v for k, v in space.fixed.items() if k != "context-length"}
    return space.model_copy(update={"tuned": tuned, "fixed": fixed})


def test_a_context_no_allowed_fraction_holds_is_skipped_and_a_knob_that_frees_memory_is_not() -> None:
    # the first death, 119646 tokens at 0.93 against 131072 (r 0.5), and one at 0.95 on the same line
    at_95 = round(119646 * (0.95 * FREE - WEIGHTS) / (0.93 * FREE - WEIGHTS))
    history = History([death(0, fraction=0.93, pool=119646, context=131072, **{"mamba-full-memory-ratio": 0.5}),
                       death(1, fraction=0.95, pool=at_95, context=196608, **{"mamba-full-memory-ratio": 0.5})],
                      number=2)  # fmt: skip
    rule = ContextFit(_hybrid_space(), {"sglang": SGLANG}, _models())

    def decide(**flags: Any) -> Any:
        return rule.decide(SGLANG.normalise({**HYBRID, "mamba-full-memory-ratio": 0.5, **flags}), history)

    skip = decide(**{"context-length": 262144, "mem-fraction-static": 0.96})
    assert isinstance(skip, Skip) and skip.rule == "context-fit"
    assert skip.outcome.value == "predicted-infeasible-memory-low"
    assert "no fraction the space allows holds it" in skip.reason and skip.trials == [0, 1]
    assert "mem-fraction-static 0.96, mamba-full-memory-ratio 0.3" in skip.reason
    at_low = decide(**{"context-length": 131072, "mem-fraction-static": 0.90})
    assert isinstance(at_low, Skip) and "no fraction" not in at_low.reason  # 0.96 would hold it
    # differing from a death only in a knob that frees memory: not predicted dead
    assert decide(**{"context-length": 65536, "mem-fraction-static": 0.93}) is None  # smaller context
    assert decide(**{"context-length": 131072, "mem-fraction-static": 0.93, "kv-cache-dtype": "fp8_e4m3"}) is None
    assert decide(**{"context-length": 131072, "mem-fraction-static": 0.93, "mamba-full-memory-ratio": 0.3}) is None
    assert decide(**{"context-length": 131072, "mem-fraction-static": 0.96}) is None  # a larger fraction
    assert decide(**{"context-length": 131072, "mem-fraction-static": 0.93, "max-running-requests": 4}) is not None


def _context_night(tmp_path: Path, rules_off: tuple[str, ...] = ()) -> Any:
    data = yaml.safe_load(TWIN_SPACE.read_text())
    del data["fixed"]["context-length"]
    data["tuned"]["context-length"] = {"type": "categorical", "choices": [65536, 131072, 196608, 262144]}
    # on these 2x 48 GB, one request of 262144 tokens needs more than 0.84 and a ratio of 0.8 leave the KV
    data["tuned"]["mem-fraction-static"] = {"type": "float", "low": 0.80, "high": 0.84, "step": 0.01}
    data["tuned"]["mamba-full-memory-ratio"] = {"type": "float", "low": 0.8, "high": 1.0, "step": 0.1}
    data["baselines"] = []
    tmp_path.mkdir(exist_ok=True)
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    problem = load_problem("qwen3.6-27b-2xa6000", space)
    launcher = LandscapeLauncher(problem, problem.landscape(0), random.Random(0))
    # the benchmark's runner names its study "bench"; stored where `autotune show bench` finds it
    (tmp_path / "studies").mkdir()
    stored = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/studies/bench.db")
    storage = stored if not rules_off else optuna.storages.InMemoryStorage()
    runner = make_runner(problem, tmp_path, sampler=make_sampler("tpe", 0), launcher=launcher,
                               storage=storage, rules_off=rules_off)  # fmt: skip
    runner.run(trials=20, timeout_s=None)
    return runner.space, StudyView(runner.study).records()


def unfit_launches(space: Any, records: Any, *, proposed: bool = False) -> list[int]:
    """Launches (``proposed``: proposals, launched or not) whose context the pools of the launches before
    them said no allowed fraction holds."""
    unfit = []
    for record in records:
        if record.decision is None or not record.flags:
            continue
        if not proposed and (record.decision.kind != "launch" or record.reused_from is not None):
            continue
        earlier = [r for r in records if r.number < record.number]
        points = pool_points(earlier, RULES, "sglang", budget_bytes=None)
        room = most_room(space, RULES, record.flags)
        estimate = tokens_at(points, RULES, room, float(room["mem-fraction-static"]))
        if estimate is not None and too_small(estimate, int(record.flags["context-length"])):
            unfit.append(record.number)
    return unfit


def test_a_twin_study_tuning_the_context_never_launches_one_the_fitted_pool_cannot_hold(tmp_path: Path) -> None:
    space, records = _context_night(tmp_path)
    assert unfit_launches(space, records) == []
    # nor proposed, once learned: the sampler draws among the contexts still possible (PossibleContexts)
    assert unfit_launches(space, records, proposed=True) == []
    learned = pool_points(records, RULES, "sglang", budget_bytes=None)
    room = most_room(space, RULES, {**records[-1].flags, "context-length": 262144})
    at_most = tokens_at(learned, RULES, room, float(room["mem-fraction-static"]))
    assert at_most is not None and too_small(at_most, 262144)  # there was something to learn
    # show says which contexts cannot fit and from which launches; show --trial N of a death, its pool
    def show(*args: str) -> str:
        command = autotune_cmd("show", "bench", *args, "--studies-dir", str(tmp_path / "studies"))
        env = {**os.environ, "COLUMNS": "250"}
        return subprocess.run(command, check=True, capture_output=True, text=True, env=env).stdout

    shown = show()
    assert "--context-length 262144: cannot fit, at most about" in shown and "never launched" in shown
    assert "--context-length 65536: fits" in shown
    death = next(r for r in records if r.outcome == "infeasible-memory-low" and r.lessons.memory.needed_tokens)
    detail = show("--trial", str(death.number))
    lesson = death.lessons.memory
    assert f"held {lesson.pool_tokens} tokens at mem-fraction-static" in detail
    assert f"one request needed {lesson.needed_tokens}, {lesson.needed_tokens - lesson.pool_tokens} short" in detail
    # without the rule the same night launches such contexts
    space, records = _context_night(tmp_path / "off", rules_off=("context-fit",))
    assert unfit_launches(space, records) != []
    assert len(unfit_launches(space, records, proposed=True)) > len(unfit_launches(space, records))


# Of our own making, shaped like a hybrid (linear + full attention) 27B's config: 64 layers, every fourth
# one full attention, 4 KV heads of 256.
HYBRID_CONFIG = {"architectures": ["Qwen3_5ForConditionalGeneration"],
                 "text_config": {"num_hidden_layers": 64, "num_attention_heads": 24, "num_key_value_heads": 4,
                                 "head_dim": 256, "hidden_size": 5120, "full_attention_interval": 4}}  # fmt: skip
DENSE_CONFIG = {"num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8, "hidden_size": 4096}


def test_the_kv_bytes_per_token_of_a_config() -> None:
    hybrid = kv_layout_of(HYBRID_CONFIG)
    assert hybrid is not None and hybrid.hybrid and hybrid.full_attention_layers == 16
    assert hybrid.bytes_per_token(element_bytes=2, tp=2) == 2 * 16 * 2 * 256 * 2  # K and V, 2 heads per GPU
    assert hybrid.bytes_per_token(element_bytes=2, tp=8) == 2 * 16 * 1 * 256 * 2  # a head is never split
    dense = kv_layout_of(DENSE_CONFIG)
    assert dense is not None and not dense.hybrid and dense.bytes_per_token(element_bytes=1, tp=1) == 2 * 32 * 8 * 128
    layered = {**DENSE_CONFIG, "layer_types": ["linear_attention"] * 3 + ["full_attention"]}
    assert kv_layout_of(layered) == KvLayout(full_attention_layers=1, kv_heads=8, head_dim=128, hybrid=True)
    assert kv_layout_of({**DENSE_CONFIG, "kv_lora_rank": 512}) is None  # latent KV: not counted
    assert kv_layout_of({**DENSE_CONFIG, "layer_types": ["sliding_attention"]}) is None


def test_before_any_launch_the_config_rules_out_a_context_no_allowed_fraction_holds() -> None:
    # a 27B fp8 hybrid on two 24 GB GPUs: 13.5 GB of weights per GPU, 23 GiB free
    models = {"sglang": FeasibilityModel(RULES, free_bytes=23 * GIB, weight_bytes=27e9, total_bytes=24 * GIB)}
    layout = kv_layout_of(HYBRID_CONFIG)
    rule = ContextFit(_hybrid_space(), {"sglang": SGLANG}, models, layout=layout)
    empty = History([], number=0)

    def decide(**flags: Any) -> Any:
        return rule.decide(SGLANG.normalise({**HYBRID, "mamba-full-memory-ratio": 0.5, **flags}), empty)

    skip = decide(**{"context-length": 262144, "mem-fraction-static": 0.96})
    assert isinstance(skip, Skip) and "no fraction the space allows holds it" in skip.reason
    assert "before any launch stated its pool, by the model's config.json" in skip.reason and skip.trials == []
    assert decide(**{"context-length": 65536, "mem-fraction-static": 0.90}) is None
    # the engine's defaults (it picks the fraction): skipped only where even the whole memory would not hold it
    engines_pick = decide(**{"context-length": 262144})
    assert isinstance(engines_pick, Skip) and engines_pick.rule == "context-fit"
    said = "the engine picks --mem-fraction-static, and even at 1 the pool would hold about 227784 ("
    assert said in engines_pick.reason  # (23 GiB - 13.5 GB) / 1.5 over 2 x 16 x 2 x 256 x 2 bytes
    assert decide(**{"context-length": 196608}) is None
    assert ContextFit(_hybrid_space(), {"sglang": SGLANG}, models).decide(
        SGLANG.normalise({**HYBRID, "context-length": 262144, "mem-fraction-static": 0.96}), empty
    ) is None  # without the config nothing is known before a launch


def test_tight_context_members_tune_contexts_on_both_sides_of_what_the_pool_holds() -> None:
    from benchmarks.family_tight import tight_context_member

    members = [tight_context_member(seed) for seed in range(6)]
    assert {m.kind for m in members} == {"hybrid", "dense"}
    assert {m.profile.gpus.memory_total_bytes <= 32 * GIB for m in members} == {True, False}  # consumer, data centre
    for member in members:
        contexts = member.space.tuned["context-length"].choices  # type: ignore[union-attr]
        assert contexts[0] == member.profile.model.max_context_length and len(contexts) == 3
        assert ("mamba-full-memory-ratio" in member.space.tuned) == (member.kind == "hybrid")
    assert tight_context_member(3) == members[3]  # the same seed, the same member


def test_a_members_space_states_the_weights_its_checkpoint_loads() -> None:
    """A checkpoint's safetensors index counts its MTP heads, and the twin loads them with the weights; a
    space stating less made the config.json estimate call tight-context member 3's cautious baseline (0.9,
    a quarter of the context) fit where the twin's pool held 53802 tokens of 65536."""
    from benchmarks.family import member
    from benchmarks.family_tight import tight_context_member
    from benchmarks.landscape import Landscape

    for drawn in (tight_context_member(3), next(m for m in map(member, range(40)) if m.profile.model.mtp)):
        assert drawn.profile.model.mtp is not None
        tp = int(drawn.space.fixed.get("tp-size") or 1)  # type: ignore[arg-type]
        landscape = Landscape(drawn.profile, ["Write a haiku."], model_path=drawn.profile.model.name, noise_rel=0.0)
        launched = landscape.evaluate({"tp-size": tp, "mem-fraction-static": 0.5})
        assert launched.weights_bytes is not None  # logged when the weights loaded, whatever came after
        assert drawn.space.gpus.model_bytes == pytest.approx(launched.weights_bytes * tp, rel=1e-6)


@pytest.mark.parametrize("named", [False, True], ids=["in the model's folder", "named by the space"])
def test_check_says_what_one_request_of_each_context_needs_by_the_config(tmp_path: Path, named: bool) -> None:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(HYBRID_CONFIG))
    data = yaml.safe_load(TWIN_SPACE.read_text())
    del data["fixed"]["context-length"]
    if named:  # a hub name not in the cache: only the space's model_config says the layout
        data["model_config"] = str(model / "config.json")
    else:
        del data["model_config"]
        data["model"] = str(model)
    data["tuned"]["context-length"] = {"type": "categorical", "choices": [65536, 262144]}
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data, sort_keys=False))
    shown = subprocess.run(autotune_cmd("check", str(space), "--json"), check=True, capture_output=True, text=True)
    contexts = json.loads(shown.stdout)["contexts"]
    # 16 full-attention layers x 2 of the 4 KV heads per GPU (TP 2) x 256 x K and V x 2 bytes: 32 KiB a token
    assert [(c["context"], c["bytes_per_gpu"]) for c in contexts] == [(65536, 2 * GIB), (262144, 8 * GIB)]
    printed = subprocess.run(autotune_cmd("check", str(space)), check=True, capture_output=True, text=True).stdout
    assert "one request of --context-length 262144 needs 8.00 GiB of KV per GPU" in printed


def test_a_vllm_death_in_gib_sizes_the_pool_at_other_utilizations_and_lengths() -> None:
    vllm = VLLMEngine()
    rules = vllm.memory_rules
    assert rules is not None
    shortfall = vllm.pool_shortfall(read("vllm_v1_pool_death.log"))
    assert shortfall is not None and shortfall.cell_bytes is not None
    flags = {"gpu-memory-utilization": 0.85, "max-model-len": 131072}
    lesson = MemoryLesson(flags=flags, trial=0, side="too-low", pool_tokens=shortfall.pool_tokens,
                          needed_tokens=shortfall.needed_tokens, kv_cell_bytes=shortfall.cell_bytes)  # fmt: skip
    record = trial_record(0, outcome="infeasible-memory-low", engine="vllm", flags=flags, memory=lesson)
    total = 24 * GIB  # vLLM's budget is the utilization of the GPU's total memory
    (point,) = pool_points([record], rules, "vllm", budget_bytes=total)
    estimate = tokens_at([point], rules, {**flags, "max-model-len": 65536}, 0.95)
    assert estimate is not None and estimate.trials == (0,)
    assert abs(estimate.tokens - (51104 + 0.10 * total / shortfall.cell_bytes)) < 1e-6  # 0.10 more of 24 GiB
    # fp8 halves the bytes per token: twice the tokens at one utilization
    fp8 = tokens_at([point], rules, {**flags, "kv-cache-dtype": "fp8"}, 0.85)
    assert fp8 is not None and abs(fp8.tokens - 2 * 51104) < 1e-6


def test_the_kv_bytes_per_token_a_launch_logged_beat_the_config_s_count(tmp_path: Path) -> None:
    # Issue 46's tight member 172 (2 KV heads at TP 4), its space naming a config.json that counts four
    # times the KV heads the engine keeps (a space may name the config of a model that is not local).
    # Counted from that config.json, no drafter launch's pool holds one request of 9216 tokens at any
    # fraction, and the night ended at the proposal cap after 2 launches; the defaults' launch logged
    # the engine's own bytes per token, which say 0.98 does.
    from benchmarks.family import space_naming_configs
    from benchmarks.family_tight import tight_member
    from benchmarks.problems import problem_of

    member = tight_member(172)
    space = space_naming_configs(member, tmp_path / "configs")
    assert space.config_json is not None
    config = json.loads(Path(space.config_json).read_text())
    config["num_key_value_heads"] *= 4
    Path(space.config_json).write_text(json.dumps(config))
    problem = problem_of(member.profile, space)
    launcher = LandscapeLauncher(problem, problem.landscape(172), random.Random(172))
    runner = make_runner(problem, tmp_path, sampler=make_sampler("tpe", 172), launcher=launcher)
    runner.enqueue_baselines()
    runner.run(trials=6, timeout_s=None)
    records = StudyView(runner.study).records()
    assert runner.launched == 6, runner.stop_reason
    served = [r for r in records if r.decision is not None and r.decision.kind == "launch" and r.outcome == "ok"]
    assert any(r.flags.get("speculative-algorithm") == "EAGLE3" for r in served)
    fit_skips = [r.reason or "" for r in records if isinstance(r.decision, Skip) and r.decision.rule == "context-fit"]
    said = "over the KV bytes per token trials 0 logged, fewer than the model's config.json counts"
    assert any(said in reason for reason in fit_skips)
