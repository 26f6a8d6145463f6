"""The twin's pure model: calibration to the seed deployment, acceptance, memory, launch rules."""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from autotune_twin import memory
from autotune_twin.launch import LaunchError, resolve_launch
from autotune_twin.sglang.flags import parse_args
from passmodel import physics
from passmodel.config import LaunchConfig, default_cuda_graph_max_bs
from passmodel.profile import ProfileError, TwinProfile, load_profile
from passmodel.setup import DEFAULT_COSTS, draft_step_ms

CODE = (
    "Implement insertion for a red-black tree in Python. I need a `RedBlackTree` class with an "
    "`insert(key, value)` method that keeps all the red-black invariants."
)
REPETITIVE = "Count from 1 to 200, writing the numbers in digits separated by commas. Do not add any other text."
CHAT = (
    "My partner and I have nine days in late September for a trip to Portugal. We like walking and "
    "food markets. Could you suggest an itinerary?"
)
MATH = "Solve the equation 2^(2x+1) - 9 * 2^x + 4 = 0 for real x. Show each step."
HAND_FOUND_MEMORY = (
    "--mem-fraction-static 0.88 --context-length 131072 --max-running-requests 16 --mamba-full-memory-ratio 0.5"
).split()
DRAFTER = "z-lab/Qwen3.6-27B-DFlash"


@pytest.fixture(scope="module")
def profile() -> TwinProfile:
    return load_profile()


def launch(profile: TwinProfile, *flags: str) -> LaunchConfig:
    args, _ = parse_args(["--model-path", "Qwen/Qwen3.6-27B", "--tp-size", "2", *flags])
    return resolve_launch(args, profile)


def nextn(steps: int, topk: int, draft: int) -> list[str]:
    return (
        f"--speculative-algorithm NEXTN --speculative-num-steps {steps} --speculative-eagle-topk {topk} "
        f"--speculative-num-draft-tokens {draft}"
    ).split()


def dflash(block: int) -> list[str]:
    return (
        f"--speculative-algorithm DFLASH --speculative-draft-model-path {DRAFTER} "
        f"--speculative-num-draft-tokens {block}"
    ).split()


def measured(profile: TwinProfile, cfg: LaunchConfig, text: str, tokens: int = 12_000) -> physics.StreamEstimate:
    """What a concurrency-1 client would measure over a long completion (noise averaged out)."""
    return physics.simulate_stream(profile, cfg, text, tokens, random.Random(7))


def expected_tok_s(profile: TwinProfile, cfg: LaunchConfig, text: str) -> float:
    """Noise-free single-stream decode rate: mean accept length / pass time."""
    prompt = physics.classify_prompt(profile, text)
    accept = physics.expected_accept_length(physics.acceptance_probs(profile, cfg, prompt))
    return accept / physics.decode_pass_seconds(profile, cfg, [prompt.prompt_tokens + 256])


# -- calibration ---------------------------------------------------------------------------------


def test_cautious_config_on_code(profile: TwinProfile) -> None:
    result = measured(profile, launch(profile, *nextn(1, 1, 2)), CODE)
    assert 35.0 <= result.decode_tok_s <= 40.0
    assert 1.65 <= result.accept_length <= 1.85


def test_hand_found_config_on_code(profile: TwinProfile) -> None:
    result = measured(profile, launch(profile, *nextn(3, 1, 4), *HAND_FOUND_MEMORY), CODE)
    assert 47.0 <= result.decode_tok_s <= 57.0
    assert 3.0 <= result.accept_length <= 3.5


def test_the_seed_profile_speculates_at_the_default_costs_of_its_tp(profile: TwinProfile) -> None:
    """The seed fixes only totals: the pass's launches, the fixed cost of speculation, the draft step and
    the tree and batch costs are what a profile built from public facts gets for 64 layers at TP 2; verify
    per token is the one constant fitted to the seed."""
    costs = DEFAULT_COSTS
    assert profile.overheads.spec_pass_ms == pytest.approx(costs.spec_pass_ms + costs.spec_pass_tp_ms, abs=0.005)
    assert profile.overheads.draft_step_ms == pytest.approx(draft_step_ms(costs, 2), abs=0.005)
    assert profile.overheads.batch_scale == pytest.approx(costs.batch_scale)
    assert profile.overheads.fixed_pass_ms == pytest.approx(64 * costs.layer_launch_us * 1e-3, abs=0.005)
    assert profile.overheads.per_request_pass_ms == pytest.approx(costs.per_request_ms)
    assert profile.tree.bookkeeping_ms == pytest.approx(costs.tree_bookkeeping_ms)
    assert profile.tree.draft_step_per_extra_branch_ms == pytest.approx(costs.tree_branch_ms)


def test_hand_found_config_on_repetitive_text_reaches_the_remembered_70(profile: TwinProfile) -> None:
    result = measured(profile, launch(profile, *nextn(3, 1, 4), *HAND_FOUND_MEMORY), REPETITIVE)
    assert 64.0 <= result.decode_tok_s <= 72.0


def test_no_speculative_decoding(profile: TwinProfile) -> None:
    result = measured(profile, launch(profile), CODE, tokens=3000)
    assert 22.0 <= result.decode_tok_s <= 25.0
    assert result.accept_length == pytest.approx(1.0, abs=0.01)


def test_acceptance_by_category(profile: TwinProfile) -> None:
    cfg = launch(profile, *nextn(3, 1, 4))

    def accept(text: str) -> float:
        probs = physics.acceptance_probs(profile, cfg, physics.classify_prompt(profile, text))
        return physics.expected_accept_length(probs)

    assert accept(REPETITIVE) > accept(CODE) > accept(CHAT)
    assert accept(CODE) > accept(MATH) > accept(CHAT)


def test_long_prompts_accept_a_little_less(profile: TwinProfile) -> None:
    cfg = launch(profile, *nextn(3, 1, 4))
    short = physics.classify_prompt(profile, CODE)
    long = physics.classify_prompt(profile, CODE + " filler" * 2000)
    assert long.long and not short.long and long.category == "code"
    short_accept = physics.expected_accept_length(physics.acceptance_probs(profile, cfg, short))
    long_accept = physics.expected_accept_length(physics.acceptance_probs(profile, cfg, long))
    assert 0.85 * short_accept < long_accept < short_accept


def test_drawn_accept_lengths_average_to_the_expectation(profile: TwinProfile) -> None:
    cfg = launch(profile, *nextn(4, 1, 5))
    probs = physics.acceptance_probs(profile, cfg, physics.classify_prompt(profile, CODE))
    rng = random.Random(3)
    draws = [physics.draw_accept_length(probs, rng) for _ in range(20_000)]
    assert set(draws) == {1, 2, 3, 4, 5}
    assert sum(draws) / len(draws) == pytest.approx(physics.expected_accept_length(probs), abs=0.03)


def test_optimum_steps_is_inside_the_range(profile: TwinProfile) -> None:
    rates = {s: expected_tok_s(profile, launch(profile, *nextn(s, 1, s + 1)), CODE) for s in range(1, 9)}
    best = max(rates, key=rates.__getitem__)
    assert 3 <= best <= 5
    assert rates[8] < rates[best] and rates[1] < rates[best]


def test_wider_trees_cost_more_than_they_gain_at_concurrency_one(profile: TwinProfile) -> None:
    chain = max(expected_tok_s(profile, launch(profile, *nextn(s, 1, s + 1)), CODE) for s in range(1, 9))
    hand = expected_tok_s(profile, launch(profile, *nextn(3, 1, 4)), CODE)
    for steps, topk, draft in [(3, 2, 6), (3, 4, 8), (4, 2, 8), (2, 4, 8)]:
        cfg = launch(profile, *nextn(steps, topk, draft))
        tree = expected_tok_s(profile, cfg, CODE)
        assert 0.65 * hand < tree < chain
        chain_accept = physics.expected_accept_length(
            physics.acceptance_probs(
                profile, launch(profile, *nextn(steps, 1, steps + 1)), physics.classify_prompt(profile, CODE)
            )
        )
        tree_accept = physics.expected_accept_length(
            physics.acceptance_probs(profile, cfg, physics.classify_prompt(profile, CODE))
        )
        assert tree_accept > chain_accept


def test_dflash_best_block_beats_mtp_best_somewhat(profile: TwinProfile) -> None:
    mtp_best = max(expected_tok_s(profile, launch(profile, *nextn(s, 1, s + 1)), CODE) for s in range(1, 9))
    rates = {b: expected_tok_s(profile, launch(profile, *dflash(b)), CODE) for b in range(4, 17)}
    best = max(rates, key=rates.__getitem__)
    assert 4 < best < 16
    assert mtp_best < rates[best] < 1.2 * mtp_best
    result = measured(profile, launch(profile, *dflash(best)), CODE)
    assert 5.0 <= result.accept_length <= 6.0


def test_dflash_needs_more_memory(profile: TwinProfile) -> None:
    mtp = launch(profile, *nextn(3, 1, 4), "--context-length", "131072")
    dfl = launch(profile, *dflash(10), "--context-length", "131072")
    extra = physics.weight_bytes_per_gpu(profile, dfl) - physics.weight_bytes_per_gpu(profile, mtp)
    assert 1.5e9 <= extra <= 2.0e9

    def lowest_fitting(cfg_flags: list[str]) -> float:
        for percent in range(50, 100):
            cfg = launch(profile, *cfg_flags, "--context-length", "131072", "--mem-fraction-static", str(percent / 100))
            if memory.memory_outcome(profile, cfg) == "ok":
                return percent / 100
        raise AssertionError("never fits")

    assert lowest_fitting(dflash(10)) > lowest_fitting(nextn(3, 1, 4))


def test_batching_shares_the_weight_read(profile: TwinProfile) -> None:
    cfg = launch(profile, *nextn(3, 1, 4))
    one = physics.decode_pass_seconds(profile, cfg, [500])
    eight = physics.decode_pass_seconds(profile, cfg, [500] * 8)
    assert one < eight < 2 * one  # 8x the tokens for much less than 8x the time


def test_prefill_grows_with_prompt_length(profile: TwinProfile) -> None:
    cfg = launch(profile, *nextn(3, 1, 4))
    assert physics.prefill_seconds(profile, cfg, 100) < physics.prefill_seconds(profile, cfg, 20_000)


# -- prompts ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "category"),
    [
        (CODE, "code"),
        ("Refactor the class below.\n```python\nclass A:\n    pass\n```", "code"),
        (REPETITIVE, "repetitive"),
        ("Repeat the following sentence exactly 30 times, one per line.", "repetitive"),
        (MATH, "math"),
        ("I roll two fair dice repeatedly until a total of 8 appears. What is the probability?", "math"),
        ("Compute the integral of x^2 * e^(-3x) from 0 to infinity, then check it with the Gamma function.", "math"),
        (CHAT, "chat"),
    ],
)
def test_prompt_category_from_text(profile: TwinProfile, text: str, category: str) -> None:
    assert physics.classify_prompt(profile, text).category == category


def test_prompt_tokens_are_characters_over_four(profile: TwinProfile) -> None:
    assert physics.prompt_tokens(profile, "x" * 400) == 100


def test_natural_completion_length_is_fixed_per_prompt(profile: TwinProfile) -> None:
    lengths = {physics.natural_completion_tokens(profile, f"prompt {i}") for i in range(50)}
    assert len(lengths) > 10
    assert all(48 <= n <= 1024 for n in lengths)
    # fixed across processes too (not Python's salted hash): a twin process and the landscape agree
    code = (
        "from passmodel import physics, profile; print(physics.natural_completion_tokens(profile.load_profile(), {!r}))"
    )
    for hash_seed in ("1", "2"):
        other = subprocess.run(
            [sys.executable, "-c", code.format(CODE)],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
        )
        assert int(other.stdout) == physics.natural_completion_tokens(profile, CODE)


# -- memory ------------------------------------------------------------------------------------------

RANK = {"too_low": 0, "ok": 1, "too_high": 2}


@pytest.mark.parametrize(
    "flags",
    [
        nextn(3, 1, 4)
        + ["--context-length", "131072", "--max-running-requests", "16", "--mamba-full-memory-ratio", "0.5"],
        nextn(1, 1, 2),
        nextn(5, 1, 6) + ["--context-length", "131072", "--cuda-graph-max-bs-decode", "48"],
        nextn(3, 4, 13) + ["--context-length", "131072", "--mamba-full-memory-ratio", "1.0"],
        nextn(2, 1, 3) + ["--context-length", "65536", "--max-mamba-cache-size", "40"],
        dflash(12) + ["--context-length", "131072"],
        ["--context-length", "131072", "--kv-cache-dtype", "fp8_e4m3"],
    ],
)
def test_memory_feasibility_is_monotone_in_mem_fraction(profile: TwinProfile, flags: list[str]) -> None:
    outcomes = []
    for step in range(0, 100):
        fraction = round(0.50 + step * 0.005, 3)
        cfg = launch(profile, *flags, "--mem-fraction-static", str(fraction))
        outcomes.append(memory.memory_outcome(profile, cfg))
    ranks = [RANK[o] for o in outcomes]
    assert ranks == sorted(ranks), outcomes
    assert "ok" in outcomes and outcomes[0] == "too_low"


def test_hand_found_memory_fits_and_caps_running_requests(profile: TwinProfile) -> None:
    cfg = launch(profile, *nextn(3, 1, 4), *HAND_FOUND_MEMORY)
    plan = memory.plan_memory(profile, cfg)
    memory.check_headroom(profile, plan)
    assert plan.max_total_num_tokens >= 131072
    assert 1 <= plan.max_running_requests < 16  # silently capped by the mamba state cache


def test_a_gpu_keeps_a_whole_kv_head_when_tp_exceeds_the_heads(profile: TwinProfile) -> None:
    """SGLang and vLLM give each GPU max(1, heads // tp) KV heads: past TP = heads a token's KV stops
    shrinking per GPU, so the pool holds fewer tokens than an even split would."""
    cfg = launch(profile, "--context-length", "32768", "--mem-fraction-static", "0.88")  # TP 2

    def with_heads(heads: int) -> TwinProfile:
        return profile.model_copy(update={"model": profile.model.model_copy(update={"kv_heads": heads})})

    assert physics.kv_cell_bytes(with_heads(2), cfg) == physics.kv_cell_bytes(profile, cfg)
    assert physics.kv_cell_bytes(with_heads(1), cfg) == 2 * physics.kv_cell_bytes(profile, cfg)
    split, whole = memory.plan_memory(profile, cfg), memory.plan_memory(with_heads(1), cfg)
    assert whole.max_total_num_tokens < 0.55 * split.max_total_num_tokens


def test_too_low_fraction_fails_with_an_sglang_message(profile: TwinProfile) -> None:
    for fraction in ("0.55", "0.6", "0.68"):
        cfg = launch(profile, *nextn(3, 1, 4), "--context-length", "131072", "--mem-fraction-static", fraction)
        with pytest.raises(memory.MemoryFailure) as failure:
            memory.plan_memory(profile, cfg)
        assert failure.value.kind == "too_low"
        assert any(
            needle in failure.value.message
            for needle in (
                "Loaded weights leave no GPU memory for the KV cache",
                "Not enough memory. Please try to increase --mem-fraction-static",
                "Not enough GPU memory for hybrid (mamba/linear-attention) state cache",
                "Hybrid (mamba/linear-attention) state cache is too small to serve any requests",
            )
        )


def test_too_high_boundary_depends_on_graph_batch_and_draft_tokens(profile: TwinProfile) -> None:
    common = ["--context-length", "131072", "--mem-fraction-static", "0.95"]
    big = launch(profile, *nextn(5, 1, 6), *common, "--cuda-graph-max-bs-decode", "48")
    small = launch(profile, *nextn(1, 1, 2), *common, "--cuda-graph-max-bs-decode", "4")
    assert memory.memory_outcome(profile, big) == "too_high"
    assert memory.memory_outcome(profile, small) == "ok"


def test_automatic_fraction_fits_the_defaults(profile: TwinProfile) -> None:
    cfg = launch(profile, *nextn(1, 1, 2))
    assert cfg.mem_fraction_static is None
    plan = memory.plan_memory(profile, cfg)
    memory.check_headroom(profile, plan)
    assert 0.85 <= plan.mem_fraction_static <= 0.93


# -- launch rules -------------------------------------------------------------------------------------


STEPS, TOPK, DRAFT = "--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens"


@pytest.mark.parametrize(
    "flags",
    [  # arg_groups/speculative_hook.py:1160-1163
        [TOPK, "1"],
        [TOPK, "4"],
        [DRAFT, "4"],
        [TOPK, "1", DRAFT, "4"],
    ],
)
def test_partial_speculative_set_is_a_bare_assertion(profile: TwinProfile, flags: list[str]) -> None:
    with pytest.raises(LaunchError) as err:
        launch(profile, "--speculative-algorithm", "NEXTN", *flags)
    assert err.value.exc_type == "AssertionError" and err.value.message == ""


@pytest.mark.parametrize("flags", [[STEPS, "3"], [STEPS, "3", DRAFT, "4"]])
def test_steps_without_topk_compare_none_with_int(profile: TwinProfile, flags: list[str]) -> None:
    """arg_groups/speculative_hook.py:1274: the unset topk reaches ``topk > 1``."""
    with pytest.raises(LaunchError) as err:
        launch(profile, "--speculative-algorithm", "NEXTN", *flags)
    assert err.value.exc_type == "TypeError"
    assert err.value.message == "'>' not supported between instances of 'NoneType' and 'int'"


def test_steps_and_topk_without_draft_tokens_pass(profile: TwinProfile) -> None:
    tree = launch(profile, "--speculative-algorithm", "NEXTN", STEPS, "3", TOPK, "2").spec
    assert (tree.num_steps, tree.eagle_topk) == (3, 2) and tree.num_draft_tokens is not None
    chain = launch(profile, "--speculative-algorithm", "NEXTN", STEPS, "3", TOPK, "1").spec
    assert chain.num_draft_tokens == 4


def test_speculative_defaults_and_topk_one_rewrite(profile: TwinProfile) -> None:
    default = launch(profile, "--speculative-algorithm", "NEXTN").spec
    assert (default.num_steps, default.eagle_topk, default.num_draft_tokens) == (3, 1, 4)
    rewritten = launch(profile, *nextn(2, 1, 7))
    assert rewritten.spec.num_draft_tokens == 3
    assert any("adjusted" in note for note in rewritten.notes)
    assert launch(profile, *nextn(2, 4, 7)).spec.num_draft_tokens == 7
    assert launch(profile, "--speculative-algorithm", "EAGLE", *nextn(3, 1, 4)[2:]).spec.kind == "mtp"
    assert launch(profile).max_running_requests is None
    assert launch(profile, *nextn(3, 1, 4)).max_running_requests == 48


def test_dflash_rules(profile: TwinProfile) -> None:
    with pytest.raises(LaunchError, match="draft-model-path"):
        launch(profile, "--speculative-algorithm", "DFLASH")
    with pytest.raises(LaunchError, match="must equal"):
        launch(profile, *dflash(8), "--speculative-dflash-block-size", "10")
    spec = launch(profile, *dflash(8), "--speculative-num-steps", "3", "--speculative-eagle-topk", "2").spec
    assert (spec.num_steps, spec.eagle_topk, spec.num_draft_tokens, spec.dflash_block_size) == (1, 1, 8, 8)
    default_block = launch(profile, "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", DRAFTER)
    assert default_block.spec.num_draft_tokens == 16


@pytest.mark.parametrize(
    ("flags", "exc_type", "needle"),
    [
        (["--speculative-algorithm", "MTP"], "ValueError", "MTP"),
        (["--context-length", "300000"], "ValueError", "greater than the derived context_length"),
        (
            ["--mamba-radix-cache-strategy", "no_buffer", "--page-size", "16", "--disable-overlap-schedule"],
            "AssertionError",
            "no_buffer only supports page_size=1.",
        ),
        (
            ["--mamba-radix-cache-strategy", "no_buffer"],
            "AssertionError",
            "no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True.",
        ),
        (["--tp-size", "4"], "RuntimeError", "invalid device ordinal"),
        (["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "some/eagle3"], "OSError", "EAGLE3"),
        (["--speculative-algorithm", "EAGLE3"], "ValueError", "needs --speculative-draft-model-path"),
        (["--speculative-algorithm", "NGRAM"], "ValueError", "not simulated"),
    ],
)
def test_launch_failures(profile: TwinProfile, flags: list[str], exc_type: str, needle: str) -> None:
    with pytest.raises(LaunchError) as err:
        launch(profile, *flags)
    assert err.value.exc_type == exc_type
    assert needle in err.value.message


@pytest.mark.parametrize("strategy", ["auto", "extra_buffer"])
def test_extra_buffer_draft_tokens_stay_within_the_track_interval(profile: TwinProfile, strategy: str) -> None:
    """arg_groups/mamba_hook.py:133: a bare assert that draft tokens <= --mamba-track-interval (256)."""
    radix = ["--mamba-radix-cache-strategy", strategy]
    for flags in ([*nextn(2, 256, 300), *radix], [*nextn(3, 4, 12), *radix, "--mamba-track-interval", "8"]):
        with pytest.raises(LaunchError) as err:
            launch(profile, *flags)
        assert err.value.exc_type == "AssertionError" and err.value.message == ""
    assert launch(profile, *nextn(3, 4, 12), *radix, "--mamba-track-interval", "12").spec.num_draft_tokens == 12
    assert launch(profile, *nextn(2, 128, 256), *radix).spec.num_draft_tokens == 256


def test_no_buffer_with_overlap_disabled_launches(profile: TwinProfile) -> None:
    cfg = launch(profile, "--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule")
    assert cfg.mamba_radix_cache_strategy == "no_buffer"


def test_decode_graphs_stop_at_the_request_pool(profile: TwinProfile) -> None:
    """base_cuda_graph_runner.py:78,101: graphs are captured up to req_to_token_pool.size, an explicit
    --cuda-graph-max-bs-decode included."""
    pool = ["--max-running-requests", "16"]
    assert launch(profile, "--cuda-graph-max-bs-decode", "48", *pool).cuda_graph_max_bs_decode == 16
    assert launch(profile, "--cuda-graph-max-bs-decode", "8", *pool).cuda_graph_max_bs_decode == 8
    assert launch(profile, "--cuda-graph-max-bs-decode", "48").cuda_graph_max_bs_decode == 48
    # speculative decoding's default of 48 running requests caps an explicit batch too
    assert launch(profile, *nextn(3, 1, 4), "--cuda-graph-max-bs-decode", "64").cuda_graph_max_bs_decode == 48


@pytest.mark.parametrize(
    ("name", "tp", "expected"),
    [  # arg_groups/memory_hook.py:118-145
        ("qwen3.6-27b-2xa6000", 1, 32),
        ("qwen3.6-27b-2xa6000", 2, 32),
        ("llama3.1-8b-1xh100", 1, 256),
        ("qwen3.6-122b-4xa100", 2, 256),
        ("qwen3.6-122b-4xa100", 4, 512),
    ],
)
def test_default_decode_graph_batch_follows_gpu_memory_and_tp(name: str, tp: int, expected: int) -> None:
    profile = load_profile(name)
    assert default_cuda_graph_max_bs(profile, tp) == expected
    cfg = resolve_launch(parse_args(["--model-path", profile.model.name, "--tp-size", str(tp)])[0], profile)
    assert cfg.cuda_graph_max_bs_decode == expected
    # memory_hook.py:186-192: a default batch is lowered to max_running_requests
    capped = ["--model-path", profile.model.name, "--tp-size", str(tp), "--max-running-requests", "20"]
    assert resolve_launch(parse_args(capped)[0], profile).cuda_graph_max_bs_decode == 20


def test_context_length_spelling_and_radix_strategy(profile: TwinProfile) -> None:
    # SGLang 0.5.23: SI suffixes x1000, IEC suffixes x1024, case-sensitive.
    assert launch(profile, "--context-length", "128Ki").context_length == 131072
    assert launch(profile, "--context-length", "128k").context_length == 128000
    assert launch(profile, "--context-length", "131072").context_length == 131072
    with pytest.raises(SystemExit):
        launch(profile, "--context-length", "128K")
    assert launch(profile).mamba_radix_cache_strategy == "extra_buffer"


def test_deprecated_and_new_cuda_graph_switches(profile: TwinProfile) -> None:
    assert launch(profile, "--disable-cuda-graph").disable_cuda_graph
    assert launch(profile, "--cuda-graph-backend-decode", "disabled").disable_cuda_graph
    assert not launch(profile).disable_cuda_graph


# -- profile ------------------------------------------------------------------------------------------


def test_profile_errors_name_file_and_field(tmp_path: Path) -> None:
    source = Path(load_profile.__code__.co_filename).parent / "profiles" / "qwen3.6-27b-2xa6000.yaml"
    broken = tmp_path / "broken.yaml"
    broken.write_text(source.read_text().replace("  count: 2\n", "  count: 2\n  colour: green\n", 1))
    with pytest.raises(ProfileError) as err:
        load_profile(str(broken))
    assert str(broken) in str(err.value) and "gpus.colour" in str(err.value)
    rising = tmp_path / "rising.yaml"
    rising.write_text(source.read_text().replace("code: [0.80, 0.72,", "code: [0.70, 0.72,", 1))
    with pytest.raises(ProfileError, match="must not increase"):
        load_profile(str(rising))
    with pytest.raises(ProfileError, match="built-in profiles"):
        load_profile("no-such-profile")
