"""Outputs must not change: a twin study where one launch's drafter breaks greedy text (the twin's
``diverge`` fault) marks that trial diverged and never names it best; the others agree 100 %."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import TWIN_SPACE, autotune_cmd

pytestmark = [pytest.mark.twin, pytest.mark.slow]


def test_a_diverging_drafter_is_marked_diverged_and_never_best(tmp_path: Path) -> None:
    data = yaml.safe_load(TWIN_SPACE.read_text())
    data["measurement"].update(
        {"warmup_requests": 0, "prompts_per_round": 1, "max_tokens": 24, "min_rounds": 2, "max_rounds": 2}
    )
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data))
    schedule = tmp_path / "faults.json"
    # Launch 1 (the cautious baseline) becomes the reference; launch 2 (hand-found, the fastest
    # baseline) gets a drafter that departs from greedy text after a few tokens.
    schedule.write_text(json.dumps(["none", "diverge"]))
    env = {**os.environ, "AUTOTUNE_TWIN_FAULT_SCHEDULE": str(schedule)}
    study = ["study", str(space), "--trials", "3", "--seed", "3", "--confirm-top", "0"]
    subprocess.run(autotune_cmd(*study), cwd=tmp_path, env=env, check=True, capture_output=True, timeout=600)
    shown = subprocess.run(autotune_cmd("show", data["study"], "--json"), cwd=tmp_path, check=True,
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    payload = json.loads(shown.stdout)
    trials = {t["number"]: t for t in payload["trials"]}
    diverged = trials[1]
    assert diverged["baseline"] == "hand-found"
    assert diverged["outcome"] == "diverged" and not diverged["feasible"] and diverged["value"] == 0
    assert diverged["agreement"]["reference_trial"] == 0 and diverged["agreement"]["share"] < 0.5
    assert "differs from the reference (trial 0)" in diverged["reason"]
    assert diverged["metrics"]["decode_tok_s"]["value"] > 0  # measured, and fast, but wrong
    assert payload["best_trial"] != 1
    served = [t for t in trials.values() if t["outcome"] == "ok"]
    assert served and all(t["agreement"]["share"] == 1.0 for t in served)
    assert trials[0]["agreement"]["reference_trial"] == 0  # the first baseline is the reference
    detail = subprocess.run(autotune_cmd("show", data["study"], "--trial", "1"), cwd=tmp_path, check=True,
                            capture_output=True, text=True, timeout=120)  # fmt: skip
    assert "diverged" in detail.stdout and "departs at character" in " ".join(detail.stdout.split())
