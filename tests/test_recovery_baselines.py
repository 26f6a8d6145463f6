"""Issue 54: the baselines are measured the least estimated memory need first, so the first launch's
figures reach the memory rules before the hungriest baseline (the engine's defaults at the model's
maximum context), which they may then skip, named as any skipped proposal; a drafter's logged weights do
not speak for a plan without it."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import optuna

from autotune.decision import Skip
from autotune.engines.sglang import SGLangEngine
from autotune.feasibility import FeasibilityModel, MemoryLesson
from autotune.kv_layout import kv_layout_of
from autotune.report.summary import summarise
from autotune.space import load_space
from autotune.study import StudyView, attrs, make_sampler
from autotune.study.history import History
from autotune.study.recovery import enqueue_baselines
from autotune.study.rules.context_fit import ContextFit
from autotune.testing.records import trial_record
from benchmarks.family import space_naming_configs
from benchmarks.family_tight import tight_context_members
from benchmarks.nights import LandscapeLauncher, make_runner
from benchmarks.problems import problem_of
from tests.conftest import TWIN_SPACE

GIB = 2**30
SGLANG = SGLangEngine()
RULES = SGLANG.memory_rules
assert RULES is not None


def _queued(study: optuna.Study) -> list[str | None]:
    return [attrs.trial_record(t).baseline for t in study.get_trials(deepcopy=False)]


def test_the_baselines_are_queued_the_least_memory_need_first(tmp_path: Path) -> None:
    # a tight-context member lists the defaults at the model's maximum context first, the mildest draft at a
    # quarter of it second
    member = tight_context_members(1, 430)[0]
    space = space_naming_configs(member, tmp_path / "configs")
    assert [b.name for b in space.baselines] == ["defaults", "cautious"]
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/order.db")
    study = optuna.create_study(storage=storage, study_name="order")
    assert enqueue_baselines(study, space) == ["cautious", "defaults"]
    assert _queued(study) == ["cautious", "defaults"]
    # nothing estimable (no config.json named nor found): the space's order
    unnamed = space.model_copy(update={"config_json": None, "model": str(tmp_path / "absent")})
    plain = optuna.create_study(storage=storage, study_name="plain")
    assert enqueue_baselines(plain, unnamed) == ["defaults", "cautious"]


def test_a_drafter_s_logged_weights_do_not_speak_for_a_plan_without_it() -> None:
    # a 27B fp8 hybrid on two 24 GB GPUs (13.5 GB of weights per GPU by its files), 23 GiB free; a launch
    # with a drafter logged 2.5 GiB more per GPU. The defaults (no drafter, the engine's fraction, ratio 0.5)
    # at 196608 tokens: by the files' weights the whole memory holds about 227784 tokens (16 full-attention
    # layers of 2 KV heads x 256 per GPU), by the drafter launch's about 173171
    config = {"text_config": {"num_hidden_layers": 64, "num_attention_heads": 24, "num_key_value_heads": 4,
                              "head_dim": 256, "hidden_size": 5120, "full_attention_interval": 4}}  # fmt: skip
    free = 23 * GIB
    models = {"sglang": FeasibilityModel(RULES, free_bytes=free, weight_bytes=27e9, total_bytes=24 * GIB)}
    rule = ContextFit(load_space(TWIN_SPACE), {"sglang": SGLANG}, models, layout=kv_layout_of(config))
    drafted = SGLANG.normalise({"tp-size": 2, "speculative-algorithm": "NEXTN", "speculative-num-steps": 1,
                                "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 2,
                                "context-length": 65536, "mem-fraction-static": 0.9})  # fmt: skip
    lesson = MemoryLesson(flags=drafted.flags, trial=0, served=True, weights_bytes=13.5e9 + 2.5 * GIB,
                          server_free_bytes=free)  # fmt: skip
    served = trial_record(0, engine="sglang", flags=drafted.flags, config_key=drafted.config_key, memory=lesson)
    models["sglang"].learn(lesson)  # as the study's memory model learns every launch
    defaults = SGLANG.normalise({"tp-size": 2, "context-length": 196608, "mamba-full-memory-ratio": 0.5})
    assert rule.decide(defaults, History([served], number=1)) is None
    # a launch alike in what loads weights speaks with its own logged weights
    alike = lesson.model_copy(update={"flags": defaults.flags})
    logged = trial_record(0, engine="sglang", flags=defaults.flags, config_key=defaults.config_key, memory=alike)
    skip = rule.decide(defaults, History([logged], number=1))
    assert isinstance(skip, Skip) and "even at 1 the pool would hold about 173171 (" in skip.reason


def _night(tmp_path: Path, seed: int, trials: int) -> Any:
    member = tight_context_members(1, seed)[0]
    space = space_naming_configs(member, tmp_path / "configs")
    problem = problem_of(member.profile, space)
    launcher = LandscapeLauncher(problem, problem.landscape(seed), random.Random(seed))
    (tmp_path / "studies").mkdir()
    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path}/studies/bench.db")
    runner = make_runner(problem, tmp_path, sampler=make_sampler("tpe", seed), launcher=launcher, storage=storage)
    runner.enqueue_baselines()
    runner.run(trials=trials, timeout_s=None)
    return runner


def test_the_defaults_at_the_maximum_context_are_skipped_by_the_first_baseline_s_figures(tmp_path: Path) -> None:
    # tight-context member 430 (4x RTX 4090, hybrid 80B fp8, weights 77 % of each GPU): before any launch the
    # model's files say the whole memory holds one request of 262144 tokens; the engine's own free memory and
    # weights, which the cautious baseline logged, say it does not, whatever fraction the engine picks
    runner = _night(tmp_path, 430, 3)
    records = StudyView(runner.study).records()
    first, second = records[0], records[1]
    assert (first.baseline, second.baseline) == ("cautious", "defaults")
    assert first.decision is not None and first.decision.kind == "launch"
    assert isinstance(second.decision, Skip) and second.decision.rule == "context-fit"
    assert second.outcome == "predicted-infeasible-memory-low"
    assert "the engine picks --mem-fraction-static, and even at 1 the pool would hold about" in (second.reason or "")
    # the report still names the skipped baseline, with what was decided of it
    named = {b.name: b.outcome for b in summarise(StudyView(runner.study)).baselines}
    assert named["defaults"] == "predicted-infeasible-memory-low" and "cautious" in named
