"""Replaying searches on a recorded real landscape (benchmarks/replay.py, search_efficiency --recorded)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from autotune.measure.protocol import MeasureSettings
from benchmarks import replay
from benchmarks import search_efficiency as bench
from benchmarks.nights import run_recorded_grid_once
from benchmarks.recorded import GridFlag, Machine, RecordedConfig, RecordedLandscape, RecordedLaunch
from benchmarks.runs import Run, Step


def _launch(round_: int, value: float | None, outcome: str = "ok") -> RecordedLaunch:
    return RecordedLaunch(round=round_, outcome=outcome, value=value, rounds=3, launch_s=20.0, measure_s=30.0,
                          stop_s=2.0, started_at="2026-11-30T12:00:00")  # fmt: skip


def _landscape(tmp_path: Path) -> Path:
    """A llama-server grid: no draft, or a draft model at n-max 2/4/8 with flash-attn on/off; n-max 8
    with flash-attn off is the best; flash-attn on with drafting is slow; one config died once."""
    configs = [RecordedConfig(flags={"spec-type": "none", "flash-attn": fa},
                              launches=[_launch(r, 100.0 + r) for r in range(3)]) for fa in ("on", "off")]  # fmt: skip
    for n_max in (2, 4, 8):
        for fa in ("on", "off"):
            base = 60.0 if fa == "on" else 100.0 + 20 * n_max
            launches = [_launch(r, base * (1 + 0.01 * (r - 1))) for r in range(3)]
            if (n_max, fa) == (4, "on"):
                launches[1] = _launch(1, None, outcome="crashed")
            configs.append(RecordedConfig(flags={"spec-type": "draft-simple", "spec-draft-n-max": n_max,
                                                 "flash-attn": fa}, launches=launches))  # fmt: skip
    recorded = RecordedLandscape(
        name="test-grid", recorded_at="2026-11-30", machine=Machine(hardware="test CPU", cores=2),
        engine="llamacpp", engine_version="b0000", model="target.gguf", draft_model="draft.gguf",
        space="search_spaces/llamacpp-cpu.yaml", fixed={"spec-draft-model": "draft.gguf"},
        grid=[GridFlag(name="spec-type", values=["none", "draft-simple"]),
              GridFlag(name="spec-draft-n-max", values=[2, 4, 8], when="spec-type == draft-simple"),
              GridFlag(name="flash-attn", values=["on", "off"])],
        objective="decode_tok_s", measurement=MeasureSettings(), configs=configs,
    )  # fmt: skip
    path = tmp_path / "grid.json"
    path.write_text(recorded.model_dump_json())
    return path


def test_the_optimum_is_the_best_mean_and_a_config_that_died_is_worth_nothing(tmp_path: Path) -> None:
    problem = replay.load_problem(_landscape(tmp_path))
    assert len(problem.launches) == 8
    assert problem.optimum == pytest.approx(260.0)
    died = problem.key({"spec-draft-model": "draft.gguf", "spec-type": "draft-simple", "spec-draft-n-max": 4,
                        "flash-attn": "on"})  # fmt: skip
    assert died is not None and problem.true[died] == 0.0


def test_a_replayed_launch_is_one_of_the_recorded_launches_of_its_config(tmp_path: Path) -> None:
    problem = replay.load_problem(_landscape(tmp_path))
    launcher = replay.RecordedLauncher(problem, random.Random(1))
    plan = problem.engine.normalise({"spec-draft-model": "draft.gguf", "spec-type": "draft-simple",
                                     "spec-draft-n-max": 8, "flash-attn": "off"})  # fmt: skip
    values = {launcher(plan, tmp_path / "log", lambda *_: None).objective for _ in range(20)}
    assert values == {260.0 * 0.99, 260.0, 260.0 * 1.01}


def test_the_benchmark_replays_autotune_and_random_search(tmp_path: Path) -> None:
    report = bench.recorded_benchmark(_landscape(tmp_path), seeds=3, budget=8)
    assert report["configs"] == 8 and report["budget"] == 8
    for name in ("autotune (TPE)", "random search"):
        runs = report["methods"][name]["runs"]
        assert len(runs) == 3 and all(r["launches"] <= 8 for r in runs)
        # The best-so-far is a config whose recorded mean is known: the gap is measured against it.
        assert all(0.0 <= r["final_gap"] <= 1.0 for r in runs)
    # The study's answer is its confirmed best: finalists launched again after the budget, outside it.
    study = report["methods"]["autotune (TPE)"]["runs"]
    assert all(r["confirm_launches"] > 0 and 0.0 <= r["confirmed_gap"] <= 1.0 for r in study)
    assert all(r["confirmed_gap"] is None for r in report["methods"]["random search"]["runs"])


def test_the_reference_launches_every_configuration_of_the_grid_once(tmp_path: Path) -> None:
    problem = replay.load_problem(_landscape(tmp_path))
    run = run_recorded_grid_once(problem, seed=2)
    keys = [step.flags["key"] for step in run.steps if step.flags]
    assert sorted(keys) == sorted(problem.launches) and len(run.steps) == 8
    summary = run.summary(problem.optimum, 1)
    assert summary["launches_to_find_2pct"] is not None and summary["launches_to_2pct"] is not None
    assert summary["launches_to_find_2pct"] <= summary["launches_to_2pct"]


def test_found_is_the_first_launch_within_2_percent_and_crowned_waits_for_its_mean_to_lead() -> None:
    steps = [Step(launched=True, outcome="ok", measured=99.0, true=95.0, flags={"a": 1}),
             Step(launched=True, outcome="ok", measured=92.0, true=100.0, flags={"a": 2}),
             Step(launched=True, outcome="ok", measured=50.0, true=50.0, flags={"a": 3}),
             Step(launched=True, outcome="ok", measured=108.0, true=100.0, flags={"a": 2})]  # fmt: skip
    summary = Run(method="hand-built", seed=0, steps=steps).summary(100.0, 1)
    # the optimum was launched second, measured low, and led only once its mean (100) beat 99
    assert summary["launches_to_find_2pct"] == 2 and summary["launches_to_2pct"] == 4
