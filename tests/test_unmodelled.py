"""Effects no model knows, on a landscape's truth (benchmarks/unmodelled.py, search_efficiency --unmodelled):
each moves the built-in profile's landscape as described, and off changes nothing."""

from __future__ import annotations

import json
import statistics
import zlib
from pathlib import Path
from typing import Any

import pytest

from benchmarks import search_efficiency as bench
from benchmarks.problems import Problem, add_unmodelled, load_problem
from benchmarks.unmodelled import SPEC_SHARE, Unmodelled
from tests.conftest import TWIN_SPACE

PROFILE = "qwen3.6-27b-2xa6000"


@pytest.fixture(scope="module")
def problem() -> Problem:
    return load_problem(PROFILE, TWIN_SPACE, noise_rel=0.0)


def chain(problem: Problem, steps: int, **extra: Any) -> dict[str, Any]:
    return {**problem.space.fixed, "speculative-algorithm": "NEXTN", "speculative-num-steps": steps,
            "speculative-eagle-topk": 1, "speculative-num-draft-tokens": steps + 1, **extra}  # fmt: skip


def tree(problem: Problem, steps: int, tokens: int) -> dict[str, Any]:
    return {**chain(problem, steps), "speculative-eagle-topk": 2, "speculative-num-draft-tokens": tokens}


def answers(problem: Problem, effects: Unmodelled | None, configs: list[dict[str, Any]]) -> list[tuple[float, float]]:
    """(true tok/s, accept length) of each configuration, noise-free, under ``effects``."""
    problem.unmodelled = effects
    try:
        landscape = problem.landscape(0)
        out = []
        for flags in configs:
            evaluation = landscape.evaluate(flags)
            assert evaluation.tok_s is not None and evaluation.accept_length is not None, evaluation.message
            out.append((evaluation.tok_s, evaluation.accept_length))
        return out
    finally:
        problem.unmodelled = None


def ratios(problem: Problem, effects: Unmodelled, configs: list[dict[str, Any]]) -> list[float]:
    """Each configuration's rate with ``effects`` over its rate without."""
    on, off = answers(problem, effects, configs), answers(problem, None, configs)
    return [a[0] / b[0] for a, b in zip(on, off, strict=True)]


def test_neutral_effects_leave_the_landscape_unchanged(problem: Problem) -> None:
    configs = [dict(problem.space.fixed), *(chain(problem, s) for s in range(1, 7)), tree(problem, 3, 6)]
    assert answers(problem, Unmodelled(seed=4), configs) == answers(problem, None, configs)
    assert ratios(problem, Unmodelled.draw(4), configs) != [1.0] * len(configs)  # a drawn member's do move it


def test_the_deviation_is_a_few_percent_shared_by_draft_tokens_and_kernel(problem: Problem) -> None:
    grouped = Unmodelled(seed=11, tokens_sd=0.02, kernel_sd=0.015)
    configs = [chain(problem, s, **{"attention-backend": backend}) for s in range(1, 6)
               for backend in ("flashinfer", "triton")]  # fmt: skip
    moved = ratios(problem, grouped, configs)
    assert all(0.9 < r < 1.1 for r in moved) and len({round(r, 9) for r in moved}) > 2
    # the kernel's term is one factor for every draft-token count: its ratio between kernels is constant
    between = [moved[i + 1] / moved[i] for i in range(0, len(moved), 2)]
    assert max(between) - min(between) < 1e-9 and abs(between[0] - 1) > 1e-6
    # a memory-only flag is the same configuration to the decode rate
    memory = [chain(problem, 3), chain(problem, 3, **{"mem-fraction-static": 0.8})]
    assert len({round(r, 12) for r in ratios(problem, grouped, memory)}) == 1
    # the configuration's own term splits configurations of one draft-token count and kernel
    own = Unmodelled(seed=11, config_sd=0.01)
    same_tokens = [chain(problem, 3), tree(problem, 2, 4)]  # both verify 4 tokens a pass
    first, second = ratios(problem, own, same_tokens)
    assert first != second


def test_a_host_side_ceiling_makes_a_flat_top(problem: Problem) -> None:
    configs = [dict(problem.space.fixed), *(chain(problem, s) for s in range(1, 7))]
    off = [rate for rate, _ in answers(problem, None, configs)]
    ceiling = 50.0  # below the deep chains' 52-55 tok/s, above the shallow ones
    on = [rate for rate, _ in answers(problem, Unmodelled(seed=2, ceiling_tok_s=ceiling), configs)]
    assert max(on) == ceiling and sum(rate == ceiling for rate in on) >= 3  # several tie at the top
    assert [a for a, b in zip(on, off, strict=True) if b < ceiling] == [b for b in off if b < ceiling]
    assert Unmodelled(seed=2, ceiling_ratio=1.5).with_ceiling(40.0).ceiling_tok_s == pytest.approx(60.0)
    assert Unmodelled(seed=2).with_ceiling(40.0).ceiling_tok_s is None
    assert Unmodelled(seed=2, ceiling_ratio=1.5).with_ceiling(0.0).ceiling_tok_s is None  # defaults did not start


def test_draft_steps_turn_dearer_past_a_depth(problem: Problem) -> None:
    effects = Unmodelled(seed=3, deep_from=2, deep_cost=0.05)
    moved = ratios(problem, effects, [dict(problem.space.fixed), *(chain(problem, s) for s in range(1, 7))])
    assert moved[:3] == [1.0, 1.0, 1.0]  # no draft, one step, two steps
    assert moved[3:] == pytest.approx([1 / (1 + 0.05 * extra) for extra in (1, 2, 3, 4)])


def test_an_acceptance_cliff_past_a_knee_moves_the_best_depth_shallower(problem: Problem) -> None:
    configs = [chain(problem, s) for s in range(1, 7)]
    off = answers(problem, None, configs)
    cliff = Unmodelled(seed=5, accept_knee=2, accept_boost=0.1, accept_decay=0.7)
    on = answers(problem, cliff, configs)
    for steps, (before, after) in enumerate(zip(off, on, strict=True), start=1):
        assert after[1] - 1 == pytest.approx((before[1] - 1) * 1.1 * 0.7 ** max(0, steps - 2))
        assert after[0] / before[0] == pytest.approx(after[1] / before[1])  # a pass costs the same
    best = max(range(6), key=lambda i: off[i][0]) + 1
    shallower = max(range(6), key=lambda i: on[i][0]) + 1
    assert best >= 4 and shallower <= 3


def test_speculation_s_costs_are_off_per_drafter_and_shape(problem: Problem) -> None:
    effects = Unmodelled(seed=6, spec_cost={"mtp/chain": 2.0, "mtp/tree": 0.5})
    plain, deep, wide = ratios(problem, effects, [dict(problem.space.fixed), chain(problem, 3), tree(problem, 3, 6)])
    assert plain == 1.0
    assert deep == pytest.approx(1 / (1 + SPEC_SHARE))
    assert wide == pytest.approx(1 / (1 - SPEC_SHARE / 2))


def test_each_member_draws_its_own_effects() -> None:
    drawn = [Unmodelled.draw(seed) for seed in range(200)]
    assert Unmodelled.draw(7) == drawn[7] and drawn[7] != drawn[8]
    ceilings = [d.ceiling_ratio for d in drawn if d.ceiling_ratio is not None]
    assert 0.3 < len(ceilings) / len(drawn) < 0.5 and all(1.2 <= r <= 2.0 for r in ceilings)
    factors = [f for d in drawn for f in d.spec_cost.values()]
    assert 0.5 <= min(factors) < 0.6 and 1.8 < max(factors) <= 2.0
    assert all(2 <= d.deep_from <= 5 and 0.02 <= d.deep_cost <= 0.08 for d in drawn)
    assert statistics.fmean(d.accept_boost for d in drawn) == pytest.approx(0.02, abs=0.02)


def test_the_problem_s_ceiling_is_set_from_its_defaults(problem: Problem) -> None:
    fresh = load_problem(PROFILE, TWIN_SPACE, noise_rel=0.0)
    seed = next(s for s in range(100) if Unmodelled.draw(s).ceiling_ratio is not None)
    effects = add_unmodelled(fresh, seed)
    plain = fresh.landscape(0).evaluate(dict(fresh.space.fixed)).tok_s
    assert effects.ceiling_ratio is not None and effects.ceiling_tok_s is not None and plain is not None
    assert effects.ceiling_tok_s == pytest.approx(effects.ceiling_ratio * plain)


def test_the_cli_turns_the_effects_on_for_a_twin_profile_and_refuses_a_recording(tmp_path: Path) -> None:
    common = ["--twin-profile", PROFILE, "--space", str(TWIN_SPACE), "--seeds", "1", "--budget", "3",
              "--methods", "random"]  # fmt: skip
    assert bench.main([*common, "--json", str(tmp_path / "off.json")]) == 0
    assert bench.main([*common, "--unmodelled", "--json", str(tmp_path / "on.json")]) == 0
    off, on = (json.loads((tmp_path / f"{name}.json").read_text()) for name in ("off", "on"))
    assert "unmodelled" not in off
    assert on["unmodelled"]["seed"] == zlib.crc32(PROFILE.encode())
    assert on["optimum"]["tok_s"] != off["optimum"]["tok_s"]
    with pytest.raises(SystemExit) as refused:
        bench.main(["--recorded", str(tmp_path / "any.json"), "--unmodelled"])
    assert refused.value.code == 2
