"""``autotune export STUDY --format points``: a real study on the twin (real processes, HTTP and
SQLite), its measured trials exported as calibration points, and the twin's ``calibrate`` fitting a
profile to them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from passmodel.calibrate import load_points
from passmodel.profile import load_profile
from tests.test_study_twin import run, small_space
from tests.twin.processes import twin

pytestmark = [pytest.mark.twin, pytest.mark.slow]

STUDY = "points"
CONCURRENCY = 2


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short study of the twin space at two users: its two baselines, an adaptive one (a switch in
    the points) and one sampled launch."""
    cwd = tmp_path_factory.mktemp("points")
    space = small_space(cwd, study=STUDY, objective={"metric": "decode_tok_s", "concurrency": CONCURRENCY})
    data = yaml.safe_load(space.read_text())
    data["measurement"].update(concurrency=CONCURRENCY, prompts_per_round=CONCURRENCY)
    adaptive = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3, "speculative-adaptive": True}
    data["baselines"].append({"name": "adaptive", "flags": adaptive})
    space.write_text(yaml.safe_dump(data))
    run("study", str(space), "--trials", "4", "--seed", "3", "--confirm-top", "0", cwd=cwd)
    return cwd


def test_every_measured_trial_is_a_point_the_twin_calibrates_on(study: Path) -> None:
    exported = run("export", STUDY, "--format", "points", cwd=study)
    assert exported.stderr == ""  # prompt_tokens recorded: no point without its input length
    points = [json.loads(line) for line in exported.stdout.splitlines()]
    trials = json.loads(run("show", STUDY, "--json", cwd=study).stdout)["trials"]
    launched = [t for t in trials if t["outcome"] == "ok" and t["decision"]["kind"] == "launch"]
    assert len(launched) >= 2 and len(points) == len(launched)
    for point, trial in zip(points, launched, strict=True):
        metrics = trial["metrics"]
        assert point["tok_s"] == metrics["output_tok_s"]["value"]
        assert point["accept_length"] == metrics["accept_length"]["value"]
        assert point["concurrency"] == CONCURRENCY
        assert point["input_len"] > 0 and point["output_len"] > 0
        assert metrics["prompt_tokens"]["n"] == metrics["completion_tokens"]["n"]
        spec = {name: value for name, value in trial["flags"].items() if name.startswith("speculative-")}
        assert spec and point["flags"] == spec
    assert any(point["flags"].get("speculative-adaptive") is True for point in points)
    path = study / "points.jsonl"
    run("export", STUDY, "--format", "points", "-o", str(path), cwd=study)
    assert [p.model_dump(exclude_none=True) for _, p in load_points(path)] == points
    fitted = study / "fitted.yaml"
    done = twin("calibrate", "qwen3.6-27b-2xa6000", str(path), "-o", str(fitted), timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["points"] == len(points)
    assert load_profile(fitted).model.name == "Qwen/Qwen3.6-27B"


def test_help_names_the_points_format() -> None:
    page = " ".join(run("export", "--help", cwd=Path.cwd()).stdout.split())
    assert "points (every measured trial as calibration points for `python -m autotune_twin calibrate`" in page


@pytest.mark.parametrize(
    ("option", "named"),
    [
        (["--trial", "0"], "--trial"),
        (["--concurrency", "2"], "--concurrency"),
        (["--schedule"], "--schedule"),
        (["--schedule-config", "a.json"], "--schedule-config"),
        (["--port", "8000"], "--host/--port"),
    ],
)
def test_points_refuse_options_they_would_not_use(study: Path, option: list[str], named: str) -> None:
    done = run("export", STUDY, "--format", "points", *option, cwd=study, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        f"Error: --format points exports every measured trial at every level: leave out {named}"
    ]


def test_a_study_without_a_measured_trial_has_no_points(tmp_path: Path) -> None:
    memory = {"mem-fraction-static": {"type": "float", "low": 0.40, "high": 0.50, "step": 0.05}}
    space = small_space(tmp_path, study="unmeasured", baselines=[], tuned=memory)  # known not to fit: no launch
    run("study", str(space), "--total-trials", "2", "--seed", "1", cwd=tmp_path)
    done = run("export", "unmeasured", "--format", "points", cwd=tmp_path, check=False)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines() == [
        "Error: study 'unmeasured' has no measured trial with an output rate to export as points"
    ]
