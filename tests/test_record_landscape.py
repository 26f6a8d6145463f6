"""The landscape recorder's grid: every combination, conditions applied, engine-equal configs once;
a bad grid is one clear error. (Recording itself launches a real engine: see docs/benchmarks.md.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, SPACES, load_benchmark

from autotune.engines import get_engine
from autotune.space import load_space

record = load_benchmark("record_landscape")
CPU_SPACE = SPACES / "llamacpp-cpu.yaml"
ENV = {"AUTOTUNE_LLAMA_SERVER": "/bin/true", "AUTOTUNE_LLAMA_MODELS": "/tmp/models"}


@pytest.fixture
def space(monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    return load_space(CPU_SPACE)


GRID = ["spec-type=none,draft-simple", "spec-draft-n-max=4,12", "spec-draft-p-min=0.0,0.6", "ctx-size=1024",
        "parallel=1,2", "batch-size=512", "ubatch-size=64"]  # fmt: skip


def test_conditional_flags_are_dropped_where_their_condition_fails(space) -> None:  # type: ignore[no-untyped-def]
    grid = record.parse_grid(GRID, space)
    configs = record.grid_configs(grid, get_engine("llamacpp"), space.fixed_for("llamacpp"))
    # no draft: one config per parallel (n-max and p-min dropped); with a draft: 2 x 2 of them each
    assert len(configs) == 2 + 2 * 2 * 2
    assert all(("spec-draft-n-max" in c) == (c["spec-type"] == "draft-simple") for c in configs)
    assert len({json.dumps(c, sort_keys=True) for c in configs}) == len(configs)


@pytest.mark.parametrize(
    ("items", "message"),
    [
        (GRID[:-1], "missing: ubatch-size"),
        ([*GRID, "threads=2"], "not a tuned flag"),
        ([*GRID[:-1], "ubatch-size=7"], "outside the space's range"),
        ([*GRID[:-1], "ubatch-size"], "expected NAME=V1,V2"),
    ],
)
def test_a_bad_grid_is_one_clear_error(space, items: list[str], message: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(record.RecordError, match=message):
        record.parse_grid(items, space)


def test_the_script_exits_2_naming_the_bad_grid(tmp_path: Path) -> None:
    args = [a for item in GRID[:-1] for a in ("--grid", item)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "record_landscape.py"), str(CPU_SPACE), "--name", "x", *args,
         "--out", str(tmp_path / "x.json")],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **ENV}, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: --grid needed for every tuned flag; missing: ubatch-size"]


def test_the_recorded_landscapes_hold_every_launch_of_a_full_grid() -> None:
    recorded = load_benchmark("recorded")
    for path in sorted((ROOT / "benchmarks" / "landscapes").glob("*.json")):
        landscape = recorded.load_recorded(path)
        assert len(landscape.configs) >= 40  # the floor for a recorded grid
        assert all(len(c.launches) >= 3 for c in landscape.configs), path
        rounds = {launch.round for c in landscape.configs for launch in c.launches}
        assert rounds == set(range(len(rounds)))  # whole passes over the grid, each config once per pass
        assert all(sorted(launch.round for launch in c.launches) == sorted(rounds) for c in landscape.configs)
        assert landscape.best.mean is not None


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--fixed", "threads"], "error: --fixed 'threads': expected NAME=VALUE"),
        (["--measure", "max_rounds=many"], "error: --measure max_rounds: Input should be a valid integer"),
    ],
)
def test_bad_overrides_exit_2_with_one_line(tmp_path: Path, extra: list[str], message: str) -> None:
    args = [a for item in GRID for a in ("--grid", item)]
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "record_landscape.py"), str(CPU_SPACE), "--name", "x", *args,
         *extra, "--out", str(tmp_path / "x.json")],
        capture_output=True, text=True, env={"PATH": "/usr/bin:/bin", **ENV}, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(message), proc.stderr
