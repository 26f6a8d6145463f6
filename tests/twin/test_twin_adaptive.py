"""Adaptive speculative decoding in the twin, as SGLang 0.5.23 has it: launch rules with its
exception types and messages, CUDA graphs per step tier, and the run-time EMA step choice."""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest

from autotune_twin import memory
from autotune_twin.launch import LaunchError, resolve_launch
from autotune_twin.sglang.flags import parse_args
from passmodel import physics
from passmodel.adaptive import DEFAULT_CONFIG, StepController, load_config
from passmodel.config import LaunchConfig
from passmodel.profile import TwinProfile, load_profile

CODE = "Implement a function in Python that merges two sorted lists; write a pytest unit test for it."
REPETITIVE = "Count from 1 to 200, writing the numbers in digits separated by commas. Do not add any other text."
CHAT = "My partner and I have nine days in late September for a trip to Portugal. Could you suggest an itinerary?"
MATH = "Solve the equation 2^(2x+1) - 9 * 2^x + 4 = 0 for real x. Show each step."
MEMORY = ["--mem-fraction-static", "0.88", "--context-length", "131072", "--max-running-requests", "16"]
ADAPTIVE = ["--speculative-algorithm", "NEXTN", "--speculative-adaptive"]


@pytest.fixture(scope="module")
def profile() -> TwinProfile:
    return load_profile()


def launch(profile: TwinProfile, *flags: str) -> LaunchConfig:
    args, _ = parse_args(["--model-path", "Qwen/Qwen3.6-27B", "--tp-size", "2", *MEMORY, *flags])
    return resolve_launch(args, profile)


def static(steps: int) -> list[str]:
    return ["--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(steps), "--speculative-eagle-topk", "1",
            "--speculative-num-draft-tokens", str(steps + 1)]  # fmt: skip


def config_file(tmp_path: Path, content: object) -> str:
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(content) if not isinstance(content, str) else content)
    return str(path)


def test_adaptive_alone_starts_at_the_middle_candidate_with_topk_one(profile: TwinProfile) -> None:
    spec = launch(profile, *ADAPTIVE).spec
    assert spec.adaptive == DEFAULT_CONFIG and DEFAULT_CONFIG.candidate_steps == (0, 1, 3, 5, 7)
    assert (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == (3, 1, 4)
    # steps alone is no partial set under adaptive (topk becomes 1 first); draft tokens follow steps
    spec = launch(profile, *ADAPTIVE, "--speculative-num-steps", "5", "--speculative-num-draft-tokens", "9").spec
    assert (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens) == (5, 1, 6)


def test_a_start_step_outside_the_candidates_is_sglangs_value_error(profile: TwinProfile) -> None:
    with pytest.raises(LaunchError) as err:
        launch(profile, *ADAPTIVE, "--speculative-num-steps", "4")
    assert err.value.exc_type == "ValueError"
    assert err.value.message == (
        "--speculative-num-steps=4 is not in the adaptive config candidate_steps [0, 1, 3, 5, 7]. "
        "Pass one of those values."
    )


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "z-lab/Qwen3.6-27B-DFlash"],
         "speculative_algorithm=DFLASH (only EAGLE/EAGLE3 are supported)"),
        (["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "2",
          "--speculative-num-draft-tokens", "6"], "speculative_eagle_topk=2 (only topk=1 is supported)"),
    ],
)  # fmt: skip
def test_unsupported_settings_fall_back_to_static_steps_with_a_warning(
    profile: TwinProfile, flags: list[str], reason: str
) -> None:
    cfg = launch(profile, *flags, "--speculative-adaptive")
    assert cfg.spec.adaptive is None and cfg.spec.enabled
    assert f"speculative_adaptive disabled: {reason}. Falling back to static speculative params." in " ".join(cfg.notes)


@pytest.mark.parametrize(
    ("content", "exc_type", "message"),
    [
        (None, "FileNotFoundError", "No such file or directory"),
        ("{not json", "json.decoder.JSONDecodeError", "Expecting property name"),
        ({"strategy": "ema"}, "ValueError", "must contain at least one integer-string BS key"),
        ({"1": {"candidate_steps": [1, -2]}}, "ValueError", "BS 1: candidate_steps must be a list of non-negative"),
    ],
)
def test_config_errors_are_sglangs(
    profile: TwinProfile, tmp_path: Path, content: object, exc_type: str, message: str
) -> None:
    path = str(tmp_path / "missing.json") if content is None else config_file(tmp_path, content)
    with pytest.raises(LaunchError) as err:
        launch(profile, *ADAPTIVE, "--speculative-adaptive-config", path)
    assert err.value.exc_type == exc_type and message in err.value.message


def test_config_candidates_are_the_union_of_its_slots(profile: TwinProfile, tmp_path: Path) -> None:
    path = config_file(tmp_path, {"1": {"candidate_steps": [2, 4, 6]}, "16": {"candidate_steps": [1, 2]}})
    assert load_config(path).candidate_steps == (1, 2, 4, 6)
    assert launch(profile, *ADAPTIVE, "--speculative-adaptive-config", path).spec.num_steps == 4  # the middle one


def test_every_step_tier_captures_its_own_cuda_graphs(profile: TwinProfile) -> None:
    fixed = launch(profile, *static(3), "--cuda-graph-max-bs-decode", "16")
    tiered = launch(profile, *ADAPTIVE, "--cuda-graph-max-bs-decode", "16")
    _, fixed_graphs = memory.needed_headroom_bytes(profile, fixed)
    _, tiered_graphs = memory.needed_headroom_bytes(profile, tiered)
    # tiers 0, 1, 3 up to batch 16 plus tiers 5 and 7 for the batches of slot 1 (1-4), each with its base
    mem = profile.memory
    expected = 5 * mem.graph_base_bytes + mem.graph_bytes_per_token * (16 * 1 + 16 * 2 + 16 * 4 + 4 * 6 + 4 * 8)
    assert tiered_graphs == pytest.approx(expected) and tiered_graphs > 2 * fixed_graphs
    # so a fraction that fits the static config can die capturing the adaptive tiers
    def outcome(flags: list[str], fraction: float) -> str:
        return memory.memory_outcome(profile, launch(profile, *flags, "--mem-fraction-static", str(fraction)))

    highest_static = next(f / 100 for f in range(95, 60, -1) if outcome(static(3), f / 100) == "ok")
    assert outcome(ADAPTIVE, highest_static) == "too_high"


def test_the_controller_climbs_on_high_acceptance_and_stays_low_on_low() -> None:
    climbing, settled = StepController(DEFAULT_CONFIG, 3), StepController(DEFAULT_CONFIG, 3)
    for _ in range(30):
        climbing.observe(1, [climbing.steps_for(1)])  # every draft accepted
        settled.observe(1, [1])
    assert climbing.steps_for(1) == 7
    assert settled.steps_for(1) == 3  # one accepted draft: not below tier 1's threshold, not above 2.5
    dropping = StepController(DEFAULT_CONFIG, 3)
    for _ in range(30):
        dropping.observe(1, [0])
    assert dropping.steps_for(1) == 1
    # a batch of 8 uses its own slot: tiers 0, 1, 3; no accepted drafts take it to 0, then it probes 1
    big = StepController(DEFAULT_CONFIG, 3)
    seen = set()
    for _ in range(40):
        big.observe(8, [0] * 8)
        seen.add(big.steps_for(8))
    assert {0, 1} <= seen and big.steps_for(1) == 3


def mix_rate(profile: TwinProfile, flags: list[str], texts: list[str], tokens: int = 400) -> float:
    cfg = launch(profile, *flags)
    return statistics.fmean(
        physics.simulate_stream(profile, cfg, text, tokens, random.Random(seed)).decode_tok_s
        for text in texts
        for seed in range(4)
    )


def test_adaptive_against_the_best_static_depth_gains_a_little_or_loses(profile: TwinProfile, tmp_path: Path) -> None:
    """SGLang's default tiers lose a few percent to the best static depth (warm-up at 3 steps, and the
    rise threshold keeps code at 3 where 5 is best); a finer, quicker config gains on a mixed suite."""
    mix = [CODE, REPETITIVE, CHAT, MATH]
    best_static = max(mix_rate(profile, static(steps), mix) for steps in range(1, 8))
    default = mix_rate(profile, ADAPTIVE, mix)
    quick = config_file(tmp_path, {"1": {"candidate_steps": [2, 3, 4, 5, 6, 7], "up_hysteresis": -0.8,
                                         "warmup_batches": 2, "update_interval": 2}})  # fmt: skip
    tuned = mix_rate(profile, [*ADAPTIVE, "--speculative-adaptive-config", quick], mix)
    assert -0.06 < default / best_static - 1 < -0.005
    assert 0.005 < tuned / best_static - 1 < 0.05
    code_best = max(mix_rate(profile, static(steps), [CODE]) for steps in range(1, 8))
    assert mix_rate(profile, ADAPTIVE, [CODE]) < code_best


def test_a_batch_is_padded_to_its_captured_graph_size_before_it_picks_a_slot(tmp_path: Path) -> None:
    """SGLang 0.5.23 routes a batch by the CUDA-graph size it is padded to: 5 users run in the graph
    of 8, so slot 8's tier; without graphs the batch's own size routes."""
    config = load_config(config_file(tmp_path, {"1": {"candidate_steps": [5]}, "2": {"candidate_steps": [3]},
                                                "8": {"candidate_steps": [1]}}))  # fmt: skip
    padded = StepController(config, 5, [1, 2, 4, 8, 12, 16])
    assert [padded.steps_for(b) for b in (1, 2, 3, 4, 5, 8, 9, 40)] == [5, 3, 3, 3, 1, 1, 1, 1]
    unpadded = StepController(config, 5)
    assert [unpadded.steps_for(b) for b in (1, 2, 5, 7, 8)] == [5, 3, 3, 3, 1]
