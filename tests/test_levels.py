"""Load levels: a space's ``objective.levels`` gives a winner per concurrency.

The study runner runs through its front door on SQLite with a stand-in engine (no processes): a
landscape where deep drafts win for one user and lose for sixteen, measured by the real statistics
(``measure.client.summarise``) at every level of each launch. ``show`` and ``export`` run as the CLI.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import optuna
import pytest
import yaml
from typer.testing import CliRunner

from autotune.cli import app
from autotune.engines.base import LaunchPlan
from autotune.errors import SpaceError
from autotune.measure.client import Measurement, RequestRecord, summarise
from autotune.measure.protocol import EarlyStop, MeasureSettings
from autotune.outcomes import OutcomeKind
from autotune.space import load_space, parse_space
from autotune.study import StudyPaths, StudyRunner, StudyView, make_sampler
from autotune.study.levels import front, level_best
from autotune.study.race import FinalistsRace, race_finalists
from autotune.testing import study_runner
from autotune.trial import TrialOutcome
from tests.conftest import twin_gpus

ROOT = Path(__file__).resolve().parent.parent
LEVELS_SPACE = ROOT / "search_spaces" / "qwen3.6-27b-2xa6000-levels-twin.yaml"
ITL_LIMIT = 0.06


def per_user_speed(steps: int, concurrency: int) -> float:
    """Deeper drafts accept more per pass but verify more tokens per user: a cost that grows with load."""
    accept = 1 + 0.7 * steps
    pass_ms = 30 + 2 * steps + 3 * steps * concurrency
    return accept / pass_ms * 1000


def measured_at(speed: float, concurrency: int) -> Measurement:
    records = [
        RequestRecord(prompt_id=f"p{i}", category="coding", round=i, prompt_tokens=10, completion_tokens=48,
                      ttft_s=0.1, e2e_s=48 / speed, decode_tok_s=speed, itl_s=[1 / speed] * 47, accept_length=2.0,
                      finish_reason="length")  # fmt: skip
        for i in range(2)
    ]
    settings = MeasureSettings(concurrency=concurrency)
    return summarise(records, [speed, speed * 1.001], settings, stop_reason="test", duration_s=1.0,
                     round_output_tok_s=[speed * concurrency] * 2)  # fmt: skip


class LevelsEngine:
    """Stands in for launching the twin: every level of the space measured on one 'launch'."""

    def __init__(self, levels: list[int]) -> None:
        self.levels = levels
        self.launches = 0

    def __call__(
        self, plan: LaunchPlan, log_path: Path, phase: object, early_stop: EarlyStop | None = None
    ) -> TrialOutcome:
        self.launches += 1
        steps = int(plan.flags.get("speculative-num-steps", 1))
        return TrialOutcome(
            kind=OutcomeKind.OK, plan=plan, argv=["server"], objective_concurrency=self.levels[0],
            measurements=[measured_at(per_user_speed(steps, c), c) for c in self.levels],
        )  # fmt: skip


def _space(tmp_path: Path) -> Path:
    data = yaml.safe_load(LEVELS_SPACE.read_text())
    data["slo"] = {"p95_itl_s": ITL_LIMIT}
    path = tmp_path / "levels.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def _runner(tmp_path: Path, *, sqlite: bool = False, seed: int = 3) -> tuple[StudyRunner, LevelsEngine]:
    """The runner on the levels space (ITL limit tightened), in memory or on SQLite where the CLI reads it."""
    space = load_space(_space(tmp_path))
    engine = LevelsEngine(space.objective_levels())
    runner = study_runner(space, tmp_path, inventory=twin_gpus(), launcher=engine, sampler=make_sampler("random", seed))
    if not sqlite:
        return runner, engine
    paths = StudyPaths(tmp_path / "studies", "levels")
    paths.studies_dir.mkdir()
    storage = optuna.storages.RDBStorage(paths.default_storage)
    runner = StudyRunner(runner.checked, name="levels", storage=storage, paths=paths, launcher=engine,
                         sampler=make_sampler("random", seed))  # fmt: skip
    return runner, engine


def test_levels_must_be_measured_and_hold_the_primary(tmp_path: Path) -> None:
    data = yaml.safe_load(LEVELS_SPACE.read_text())
    space = parse_space(data, path=LEVELS_SPACE)
    assert space.objective_levels() == [1, 4, 16]
    data["objective"]["concurrency"] = 4
    assert parse_space(data, path=LEVELS_SPACE).objective_levels() == [4, 1, 16]
    data["objective"]["levels"] = [1, 4, 32]
    with pytest.raises(SpaceError) as unmeasured:
        parse_space(data, path=LEVELS_SPACE)
    assert unmeasured.value.field == "objective.levels"
    assert "32 is not one of the measured levels" in str(unmeasured.value)
    data["objective"]["levels"] = [1, 16]
    with pytest.raises(SpaceError) as no_primary:
        parse_space(data, path=LEVELS_SPACE)
    assert no_primary.value.field == "objective.levels" and "primary level" in str(no_primary.value)
    plain = load_space(ROOT / "search_spaces" / "qwen3.6-27b-2xa6000-twin.yaml")
    assert plain.objective_levels() == [1] and plain.objective.levels is None


def test_a_levels_study_optimises_every_level_and_names_a_winner_per_level(tmp_path: Path) -> None:
    runner, engine = _runner(tmp_path)
    runner.enqueue_baselines()
    runner.run(trials=16, timeout_s=None)
    assert len(runner.study.directions) == 3
    for trial in runner.study.get_trials(states=(optuna.trial.TrialState.COMPLETE,)):
        record = StudyView(runner.study).record(trial.number)
        assert record is not None
        if record.outcome != "ok" or record.reused_from is not None:
            continue
        steps = int(record.flags["speculative-num-steps"])
        for value, level in zip(trial.values, [1, 4, 16], strict=True):
            broken = 1 / per_user_speed(steps, level) > ITL_LIMIT
            # A level that breaks the SLO scores 0 there, and only there.
            assert value == (0.0 if broken else pytest.approx(per_user_speed(steps, level), rel=1e-3))
            assert record.measurement.levels[level].slo_broken == (["p95_itl_s"] if broken else [])
        # Infeasible as a whole only when every level breaks the limit.
        all_broken = all(1 / per_user_speed(steps, c) > ITL_LIMIT for c in (1, 4, 16))
        assert (trial.constraints["slo_p95_itl_s"] > 0) == all_broken

    view = StudyView(runner.study)
    levels = view.load_levels()
    assert levels is not None and [w.concurrency for w in levels.winners] == [1, 4, 16]
    steps_of = {w.concurrency: int(view.record(w.trial).flags["speculative-num-steps"])  # type: ignore[union-attr]
                for w in levels.winners}  # fmt: skip
    measured_steps = {int(r.flags["speculative-num-steps"]) for r in view.records() if r.outcome == "ok"}
    kept_at_16 = [s for s in measured_steps if 1 / per_user_speed(s, 16) <= ITL_LIMIT]
    assert steps_of[1] == max(measured_steps) and steps_of[16] == max(kept_at_16, key=lambda s: per_user_speed(s, 16))
    assert steps_of[1] != steps_of[16], "the landscape prefers deep drafts for one user, shallow ones for sixteen"
    winner16 = levels.winners[2]
    assert winner16.per_user_tok_s == pytest.approx(per_user_speed(steps_of[16], 16), rel=1e-3)
    assert winner16.per_gpu_tok_s == pytest.approx(winner16.per_user_tok_s * 16 / 2, rel=1e-3)
    assert view.importance().values, "importance is computed for the primary level"

    on_front = [p for p in levels.front if p.on_front]
    assert on_front and not any(p.slo_broken for p in on_front)
    for p in levels.front:  # nothing on the front is beaten on both axes by a point that keeps the SLO
        beaten = any(q.per_user_tok_s > p.per_user_tok_s and q.per_gpu_tok_s > p.per_gpu_tok_s
                     for q in levels.front if not q.slo_broken)  # fmt: skip
        assert not (p.on_front and beaten)


@pytest.mark.slow
def test_export_writes_each_levels_winner_and_show_prints_them(tmp_path: Path) -> None:
    runner, _ = _runner(tmp_path, sqlite=True)
    runner.enqueue_baselines()
    runner.run(trials=8, timeout_s=None)
    view = StudyView(runner.study)
    winner = level_best(view.records(), 16, metric="decode_tok_s")
    assert winner is not None
    cli = CliRunner()
    studies = str(tmp_path / "studies")
    exported = cli.invoke(app, ["export", "levels", "--concurrency", "16", "--studies-dir", studies])
    assert exported.exit_code == 0, exported.output
    profile = yaml.safe_load(exported.stdout)
    assert profile["trial"] == winner.number and profile["measure"]["concurrency"] == 16
    assert profile["metrics"]["decode_tok_s"]["value"] == pytest.approx(winner.metric_value("decode_tok_s"))
    assert profile["flags"] == winner.flags

    unknown = cli.invoke(app, ["export", "levels", "--concurrency", "8", "--studies-dir", studies])
    assert unknown.exit_code == 2 and "--concurrency 8" in unknown.output and "[1, 4, 16]" in unknown.output

    shown = cli.invoke(app, ["show", "levels", "--studies-dir", studies])
    assert shown.exit_code == 0, shown.output
    assert "best per load level" in shown.output and "front: tok/s per user vs tok/s per GPU" in shown.output
    assert f"#{winner.number}" in shown.output
    as_json = cli.invoke(app, ["show", "levels", "--json", "--studies-dir", studies])
    payload = __import__("json").loads(as_json.stdout)
    assert [w["trial"] for w in payload["load_levels"]["winners"]][2] == winner.number


@pytest.mark.slow
def test_points_are_every_launch_at_every_level_relaunches_included(tmp_path: Path) -> None:
    runner, engine = _runner(tmp_path, sqlite=True)
    runner.enqueue_baselines()
    runner.run(trials=4, timeout_s=None)
    race_finalists(runner, FinalistsRace(top=2, launches=1))
    records = [r for r in StudyView(runner.study).records() if r.served]
    assert len(records) == engine.launches and any(r.confirm_of is not None for r in records)
    exported = CliRunner().invoke(
        app, ["export", "levels", "--format", "points", "--studies-dir", str(tmp_path / "studies")]
    )
    assert exported.exit_code == 0, exported.output
    points = [json.loads(line) for line in exported.stdout.splitlines()]
    expected = [(r, c) for r in records for c in [1, 4, 16]]
    assert len(points) == len(expected)
    for point, (record, concurrency) in zip(points, expected, strict=True):
        level = record.measurement.levels[concurrency]
        assert point["concurrency"] == concurrency and point["tok_s"] == level.metric_value("output_tok_s")
        assert (point["input_len"], point["output_len"], point["accept_length"]) == (10, 48, 2.0)
        assert point["flags"]["speculative-num-steps"] == record.flags["speculative-num-steps"]


def test_confirmation_keeps_working_for_the_primary_level(tmp_path: Path) -> None:
    runner, engine = _runner(tmp_path)
    runner.enqueue_baselines()
    runner.run(trials=8, timeout_s=None)
    before = engine.launches
    result = race_finalists(runner, FinalistsRace(top=2, launches=1))
    assert result is not None and engine.launches > before
    levels = StudyView(runner.study).load_levels()
    assert levels is not None
    primary = levels.winners[0]
    assert primary.trial == result.best and primary.confirmed_launches == 1  # the one fresh launch
    assert all(w.confirmed_launches is None for w in levels.winners[1:])


def test_the_front_ignores_points_that_break_the_slo() -> None:
    from autotune.records import LevelRecord, MetricRecord, TrialRecord
    from autotune.testing.records import trial_record

    def trial(number: int, user: float, aggregate: float, broken: bool) -> TrialRecord:
        level = LevelRecord(concurrency=4, slo_broken=["p95_itl_s"] if broken else [], metrics={
            "decode_tok_s": MetricRecord(value=user), "output_tok_s": MetricRecord(value=aggregate)})  # fmt: skip
        return trial_record(number, levels={4: level})

    points = front([trial(0, 50, 100, False), trial(1, 40, 90, False), trial(2, 60, 200, True),
                    trial(3, 30, 150, False)], gpus=2)  # fmt: skip
    assert [p.on_front for p in points] == [True, False, False, True]
    assert math.isclose(points[3].per_gpu_tok_s, 75.0)
