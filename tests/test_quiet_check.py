"""The CPU quiet check: speed per window, launches needed to tell configurations apart, the verdict,
and the script itself on this machine's cores (numbers not asserted: the machine may be loaded)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, load_benchmark

quiet = load_benchmark("quiet_check")
SCRIPT = str(ROOT / "benchmarks" / "quiet_check.py")


def test_window_rates_count_work_per_second_and_drop_the_cut_window() -> None:
    # ten pieces of 0.1 s fill the first second, five of 0.2 s the next, one more starts the third
    ends = [0.1 * (i + 1) for i in range(10)] + [1.0 + 0.2 * (i + 1) for i in range(5)] + [2.1]
    samples = [(end, 0.1 if end <= 1.0 or end > 2.0 else 0.2) for end in ends]
    assert quiet.window_rates(samples, 1.0) == pytest.approx([10.0, 5.0])


def test_launches_needed_grow_with_the_square_of_the_noise() -> None:
    assert quiet.launches_needed(0.02, 0.02) == 8  # 2 x 1.96^2 = 7.7
    assert quiet.launches_needed(0.04, 0.02) == 31
    assert quiet.launches_needed(0.005, 0.02) == 1


def _needing(launches: int | None) -> object:
    return quiet.CoreReport(core=0, windows=[], sd_window=None, sd_launch=None, correlation_with_other_cores=None,
                            launches_needed=launches)  # fmt: skip


def test_the_verdict_is_the_noisiest_cores() -> None:
    reports = {"loop": [_needing(2), _needing(40)], "copy": [_needing(3)]}
    assert quiet.verdict(reports, 3, 0.02) == (
        "not quiet enough to judge 2% with 3 launches per configuration: the noisiest core needs 40"
    )
    assert quiet.verdict({"loop": [_needing(3)]}, 3, 0.02).startswith("quiet enough")
    assert quiet.verdict({"loop": [_needing(None)]}, 3, 0.02) == "too few windows to judge: run longer"


def test_the_script_reports_every_core_and_load(tmp_path: Path) -> None:
    core = min(os.sched_getaffinity(0))
    out = tmp_path / "quiet.json"
    proc = subprocess.run(
        [sys.executable, SCRIPT, "--cores", str(core), "--seconds", "3", "--window-s", "0.25", "--launch-s", "0.5",
         "--json", str(out)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "launches per configuration" in proc.stdout.splitlines()[-1]
    reports = json.loads(out.read_text())["reports"]
    assert set(reports) == {"loop", "copy"}
    for rows in reports.values():
        assert [row["core"] for row in rows] == [core]
        # on a loaded host a worker runs in few slices, so few windows hold a piece of its work: two is the
        # least an sd is taken over
        assert len(rows[0]["windows"]) >= 2 and rows[0]["sd_launch"] is not None


def test_a_core_outside_the_affinity_is_one_line_and_exit_2() -> None:
    proc = subprocess.run([sys.executable, SCRIPT, "--cores", "100000"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: --cores 100000: this process may run on cores {sorted(os.sched_getaffinity(0))}"
    ]
