"""The twin as a landscape (benchmarks/landscape.py) and the search-efficiency benchmark on it.

The landscape is the twin's own launch rules and physics called directly, so the checks against the
twin are light: the decode rate agrees with the physics' stream simulation and with a real twin
process, memory failures agree with the physics and with what the engine reads from the process.
Then the benchmark runs end to end at a small size, and the product's study loop keeps launches that
die of memory rare on the built-in space widened to mem-fraction-static 0.97.
"""

from __future__ import annotations

import json
import random
import statistics
from pathlib import Path

import pytest
import yaml

from autotune.engines.base import LaunchPlan
from autotune.outcomes import OutcomeKind
from autotune.space import Condition, load_space
from autotune.study import make_sampler
from autotune_twin import memory
from autotune_twin.launch import resolve_launch
from autotune_twin.sglang.flags import parse_args
from benchmarks import search_efficiency as bench
from benchmarks.axes import GridAxis, grid, grid_size
from benchmarks.family import member, space_naming_configs
from benchmarks.grid_tools import tier_stage, tiered_candidates
from benchmarks.landscape import Landscape, MeasureShape, Prompt
from benchmarks.nights import make_runner, outcome_of, run_study
from benchmarks.problems import add_unmodelled, load_problem, problem_of, solve
from benchmarks.stream import perf_key
from passmodel import physics
from passmodel.profile import builtin_profiles, load_profile
from tests.conftest import SPACES, TWIN_SPACE

CODE = (
    "Implement insertion for a red-black tree in Python. I need a `RedBlackTree` class with an "
    "`insert(key, value)` method that keeps all the red-black invariants."
)
MODEL = "Qwen/Qwen3.6-27B"
NEXTN = {"tp-size": 2, "speculative-algorithm": "NEXTN", "context-length": 131072}
HAND_FOUND = {
    **NEXTN,
    "speculative-num-steps": 3,
    "speculative-eagle-topk": 1,
    "speculative-num-draft-tokens": 4,
    "mem-fraction-static": 0.88,
    "max-running-requests": 16,
    "mamba-full-memory-ratio": 0.5,
}


@pytest.fixture(scope="module")
def a6000() -> Landscape:
    return Landscape(load_profile(), [Prompt(CODE, 12_000)], model_path=MODEL, noise_rel=0.0,
                     measure=MeasureShape(ignore_eos=True))  # fmt: skip


def config(flags: dict[str, object]):  # type: ignore[no-untyped-def]
    args, _ = parse_args(["--model-path", MODEL, *[x for k, v in flags.items() for x in (f"--{k}", str(v))]])
    return resolve_launch(args, load_profile())


# -- the landscape is the twin -------------------------------------------------------------------


@pytest.mark.parametrize(
    "flags",
    [
        {**NEXTN, "speculative-num-steps": 1, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 2},
        HAND_FOUND,
        {**NEXTN, "speculative-num-steps": 3, "speculative-eagle-topk": 4, "speculative-num-draft-tokens": 8},
        {"tp-size": 2, "context-length": 131072, "speculative-algorithm": "DFLASH",
         "speculative-draft-model-path": "z-lab/Qwen3.6-27B-DFlash", "speculative-num-draft-tokens": 10},
        {"tp-size": 2},
    ],
)  # fmt: skip
def test_decode_rate_agrees_with_the_physics_stream(a6000: Landscape, flags: dict[str, object]) -> None:
    result = a6000.evaluate(flags)  # type: ignore[arg-type]
    stream = physics.simulate_stream(load_profile(), config(flags), CODE, 12_000, random.Random(7))
    assert result.feasible and result.true_tok_s is not None and result.accept_length is not None
    assert result.true_tok_s == pytest.approx(stream.decode_tok_s, rel=0.03)
    assert result.accept_length == pytest.approx(stream.accept_length, rel=0.03)


def test_failures_agree_with_the_physics_and_carry_sglangs_message(a6000: Landscape) -> None:
    low = a6000.evaluate({**HAND_FOUND, "mem-fraction-static": 0.6})
    high = a6000.evaluate({**HAND_FOUND, "mem-fraction-static": 0.97, "cuda-graph-max-bs-decode": 48})
    partial = a6000.evaluate({**NEXTN, "speculative-num-steps": 3})
    unknown = a6000.evaluate({**HAND_FOUND, "no-such-flag": 1})
    assert (low.outcome, high.outcome) == ("too_low", "too_high")
    for result, flags in (
        (low, {**HAND_FOUND, "mem-fraction-static": 0.6}),
        (high, {**HAND_FOUND, "mem-fraction-static": 0.97, "cuda-graph-max-bs-decode": 48}),
    ):
        assert memory.memory_outcome(load_profile(), config(flags)) == result.outcome
    assert "Please try to increase --mem-fraction-static" in (low.message or "")
    assert "CUDA out of memory" in (high.message or "")
    # steps without topk: real SGLang 0.5.23 fails comparing None (speculative_hook.py:1274)
    assert partial.outcome == "invalid"
    assert partial.message == "TypeError: '>' not supported between instances of 'NoneType' and 'int'"
    assert unknown.outcome == "invalid" and "unrecognized arguments" in (unknown.message or "")
    assert low.weights_bytes is not None and high.kv_pool_bytes is not None  # logged before dying
    assert a6000.evaluate({**HAND_FOUND, "mem-fraction-static": 0.5}).message.startswith(  # type: ignore[union-attr]
        "ValueError: Loaded weights leave no GPU memory"
    )
    assert low.seconds < high.seconds  # a pool failure dies before graph capture


def test_noise_has_the_set_size_and_a_seed() -> None:
    def draws(seed: int) -> list[float]:
        land = Landscape(load_profile(), [CODE], model_path=MODEL, noise_rel=0.02, seed=seed)
        return [land.evaluate(HAND_FOUND).tok_s or 0.0 for _ in range(400)]

    values = draws(1)
    assert values == draws(1) and values != draws(2)
    assert statistics.stdev(values) / statistics.fmean(values) == pytest.approx(0.02, rel=0.2)


def test_memory_only_fields_do_not_change_the_decode_rate(a6000: Landscape) -> None:
    """The performance cache's key blanks fields that only size memory: check that against the physics."""
    rng = random.Random(3)
    prompt = physics.classify_prompt(load_profile(), CODE)
    for _ in range(30):
        flags = {
            **HAND_FOUND,
            "speculative-num-steps": rng.randint(1, 5),
            "mem-fraction-static": rng.choice([0.75, 0.85, 0.9]),
            "max-running-requests": rng.choice([4, 16, 48]),
            "cuda-graph-max-bs-decode": rng.choice([4, 16, 48]),
            "mamba-full-memory-ratio": rng.choice([0.3, 0.9]),
            "chunked-prefill-size": rng.choice([2048, 8192]),
        }
        flags["speculative-num-draft-tokens"] = int(flags["speculative-num-steps"]) + 1
        cfg = config(flags)
        assert perf_key(cfg) != cfg  # the key does blank memory-only fields
        for fn in (lambda c: physics.decode_pass_seconds(load_profile(), c, [300]),
                   lambda c: physics.acceptance_probs(load_profile(), c, prompt)):  # fmt: skip
            assert fn(cfg) == fn(perf_key(cfg))


def test_grid_honours_conditions_and_the_fast_optimum_is_the_exhaustive_one() -> None:
    axes = [
        GridAxis("speculative-num-steps", (1, 3, 5)),
        GridAxis("speculative-eagle-topk", (1, 2)),
        GridAxis("speculative-num-draft-tokens", (4, 8), when=("speculative-eagle-topk", ">", 1)),
        GridAxis("mem-fraction-static", (0.6, 0.72, 0.85, 0.97)),
        GridAxis("mamba-full-memory-ratio", (0.3, 1.0)),
        GridAxis("cuda-graph-max-bs-decode", (8, 48)),
    ]
    assert axes[2].condition == Condition.parse("speculative-eagle-topk > 1")  # the product's own condition
    candidates = list(grid(axes, NEXTN))
    assert len(candidates) == grid_size(axes, NEXTN) == (3 + 3 * 2) * 4 * 2 * 2
    assert all(("speculative-num-draft-tokens" in c) == (c["speculative-eagle-topk"] > 1) for c in candidates)

    def normalise(flags: dict[str, object]) -> dict[str, object]:
        out = dict(flags)
        if out["speculative-eagle-topk"] == 1:
            out["speculative-num-draft-tokens"] = int(out["speculative-num-steps"]) + 1  # type: ignore[call-overload]
        return out

    land = Landscape(load_profile(), [CODE], model_path=MODEL)
    full = land.optimum(axes, NEXTN, normalise=normalise, exhaustive=True)  # type: ignore[arg-type]
    fast = land.optimum(axes, NEXTN, normalise=normalise, exhaustive=False)  # type: ignore[arg-type]
    assert full.exhaustive and not fast.exhaustive
    assert fast.tok_s == full.tok_s and land.true_value(fast.flags) == full.tok_s
    assert full.memory > 0 and full.feasible > 0 and full.within_2pct >= 1


@pytest.mark.slow
def test_an_axis_is_memory_only_on_evidence_from_samples_that_launch(tmp_path: Path) -> None:
    # Two drafters: half the random samples pair EAGLE3 with the DFlash path and launch for no value of
    # the axis varied; num-steps and num-draft-tokens were taken as memory-only on that, and the solve
    # gave 57.48 tok/s where a model night launched EAGLE3 num-steps 4, topk 4, 15 draft tokens at 69.12.
    fam = member(52807)
    assert fam.drafting == "eagle3+dflash"
    problem = problem_of(fam.profile, space_naming_configs(fam, tmp_path))
    add_unmodelled(problem, fam.seed)
    optimum = solve(problem)
    assert not optimum.exhaustive and optimum.tok_s >= 69.12
    assert problem.landscape(0).true_value(optimum.flags) == optimum.tok_s


@pytest.mark.slow
def test_every_shipped_profile_has_a_twin_space_and_an_optimum() -> None:
    for name in builtin_profiles():
        # the profile's own space, else the shipped twin space whose launcher names it
        named = [p for p in sorted(SPACES.glob("*-twin.yaml"))
                 if name in yaml.safe_load(p.read_text()).get("launcher", [])]  # fmt: skip
        space = SPACES / f"{name}-twin.yaml" if (SPACES / f"{name}-twin.yaml").is_file() else next(iter(named), None)
        assert space is not None, f"no search space for profile {name}"
        launcher = yaml.safe_load(space.read_text())["launcher"]
        assert name in launcher or name == "qwen3.6-27b-2xa6000"
        problem = load_problem(name, space)
        optimum = solve(problem)
        assert optimum.tok_s > 0 and problem.landscape(0).true_value(optimum.flags) == optimum.tok_s


# -- against a real twin process (one launch each way) -------------------------------------------


@pytest.mark.twin
@pytest.mark.slow
def test_landscape_agrees_with_a_twin_process(tmp_path: Path) -> None:
    space = load_space(TWIN_SPACE)
    # requests longer than the demo's 48 tokens, so a few of them measure the rate, not their draws
    longer = space.measurement.model_copy(update={"max_tokens": 128})
    problem = problem_of(load_profile("qwen3.6-27b-2xa6000"), space.model_copy(update={"measurement": longer}))
    runner = make_runner(problem, tmp_path, sampler=make_sampler("tpe", 0))  # its launch is the real one
    land = problem.landscape(0)
    kinds = []
    # served; pools too small for the fraction; graphs out of memory (its figures are the study's to read)
    for flags in (HAND_FOUND, {**HAND_FOUND, "mem-fraction-static": 0.6}, {**HAND_FOUND, "mem-fraction-static": 0.98}):
        plan = LaunchPlan(engine="sglang", flags=problem.normalise(flags) or flags)
        real = runner.launch(plan, tmp_path / "trial.log", lambda name, detail: None)
        simulated = outcome_of(problem, plan, land.evaluate(plan.flags))
        assert real.kind == simulated.kind
        kinds.append(real.kind)
        if real.kind is OutcomeKind.OK:
            assert real.objective == pytest.approx(simulated.objective, rel=0.15)  # launch speed (4 % sd), few requests
        assert real.memory is not None and simulated.memory is not None
        assert real.memory.weights_bytes == pytest.approx(simulated.memory.weights_bytes, rel=0.01)
        assert real.memory.oom_shortfall_bytes == simulated.memory.oom_shortfall_bytes
    assert kinds == [OutcomeKind.OK, OutcomeKind.MEMORY_TOO_LOW, OutcomeKind.MEMORY_TOO_HIGH]  # each way compared
    assert real.memory.oom_shortfall_bytes is not None


# -- the benchmark -------------------------------------------------------------------------------


def test_benchmark_runs_small_and_reports_numbers(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "result.json"
    assert bench.main(["--twin-profile", "qwen3.6-27b-2xa6000", "--space", str(TWIN_SPACE),
                       "--seeds", "2", "--budget", "12", "--json", str(out)]) == 0  # fmt: skip
    report = json.loads(out.read_text())
    assert set(report["methods"]) == {
        "autotune (TPE)", "random (autotune loop)", "random search", "full grid (fixed order)",
        "tiered grid (8/tier)",
    }  # fmt: skip
    assert report["optimum"]["tok_s"] > 50 and report["gpus"] == 2
    for result in report["methods"].values():
        summary = result["summary"]
        assert len(result["runs"]) == 2 and summary["seeds"] == 2
        for run in result["runs"]:
            assert run["launches"] <= 12 and 0 <= run["final_gap"] < 1 and run["gpu_hours"] > 0
            assert run["launches_to_2pct"] is None or run["launches_to_2pct"] <= run["trials_to_2pct"]
        for key in ("launches_to_2pct", "trials_to_2pct", "gpu_hours_to_2pct"):
            assert set(summary[key]) == {"median", "worst", "reached"}
    assert report["methods"]["full grid (fixed order)"]["summary"]["launches_to_2pct"]["reached"] == 0
    assert report["methods"]["tiered grid (8/tier)"]["runs"][0]["launches"] <= 12
    printed = capsys.readouterr().out
    assert "launches to 2%" in printed and "SIMULATED" in printed


def test_tiered_grid_tunes_server_flags_then_speculative_flags() -> None:
    problem = load_problem("qwen3.6-27b-2xa6000", TWIN_SPACE)
    land = problem.landscape(0)
    steps = tiered_candidates(problem, land, random.Random(0), per_tier=8)
    assert len(steps) <= 16 and all(s.launched for s in steps)
    stage1 = list(tier_stage({**problem.space.fixed, **problem.space.baselines[0].flags},
                                    [a for a in problem.axes if not a.name.startswith("speculative-")],
                                    per_tier=8, cartesian_keys=2))  # fmt: skip
    assert len(stage1) == 8 and all(c["speculative-num-steps"] == 1 for c in stage1)


# -- memory: the product's loop with prediction keeps launches that die of memory rare -----------


@pytest.fixture(scope="module")
def wide_runs(tmp_path_factory: pytest.TempPathFactory) -> list:  # type: ignore[type-arg]
    """The product's study loop, 5 seeds x 40 trials, on the built-in space with fractions up to 0.97,
    its static MTP branch: the calibrated landscape whose memory the prediction is judged on. (Known
    gaps, not judged here: the DFLASH branch's drafters are hub names of unknown size, so its first
    launches there teach by dying; with adaptive speculation, launches at fractions of 0.95 and more
    are predicted to run out of headroom although they would serve.)"""
    data = yaml.safe_load(TWIN_SPACE.read_text())
    data["tuned"]["mem-fraction-static"]["high"] = 0.97
    data["tuned"]["speculative-algorithm"]["choices"] = ["NEXTN"]
    data["tuned"]["speculative-adaptive"]["choices"] = [False]
    # Under load memory sizing can change the rate, so the sampled fractions are launched (at one
    # stream a new config would take a served launch's sizing and hardly ever die).
    data["measurement"]["concurrency"] = 4
    data["objective"] = {"metric": "decode_tok_s", "concurrency": 4}
    space = tmp_path_factory.mktemp("wide") / "wide.yaml"
    space.write_text(yaml.safe_dump(data))
    problem = load_problem("qwen3.6-27b-2xa6000", space)
    solve(problem)
    return [run_study(problem, seed, 40, name="autotune") for seed in range(5)]


def _deaths(run) -> list[int]:  # type: ignore[no-untyped-def]
    return [i for i, s in enumerate(run.steps) if s.launched and s.outcome.startswith("infeasible-memory")]


@pytest.mark.slow
def test_feasibility_predictions_are_learned_from_memory_failures(wide_runs: list) -> None:  # type: ignore[type-arg]
    learned = 0
    for run in wide_runs:
        deaths = _deaths(run)
        predicted = [i for i, s in enumerate(run.steps) if s.outcome.startswith("predicted-infeasible-memory")]
        assert all(not run.steps[i].launched for i in predicted)
        learned += bool(deaths and any(i > deaths[0] for i in predicted))
    assert learned >= 1  # launches skipped because an earlier launch died at the boundary


@pytest.mark.slow
def test_launches_rarely_die_of_memory(wide_runs: list) -> None:  # type: ignore[type-arg]
    rates = [len(_deaths(run)) / max(1, sum(s.launched for s in run.steps)) for run in wide_runs]
    assert statistics.median(rates) <= 0.05, rates


@pytest.mark.slow
def test_what_is_predicted_infeasible_would_have_died(wide_runs: list) -> None:  # type: ignore[type-arg]
    """Too cautious costs throughput: no candidate skipped as infeasible would have started."""
    land = load_problem("qwen3.6-27b-2xa6000", TWIN_SPACE).landscape(0)
    predicted = [s.flags for run in wide_runs for s in run.steps if s.outcome.startswith("predicted-infeasible")]
    assert predicted and all(flags is not None for flags in predicted)
    outcomes = {land.evaluate(flags).outcome for flags in predicted}  # type: ignore[arg-type]
    assert outcomes <= {"too_low", "too_high", "load_oom"}, outcomes
