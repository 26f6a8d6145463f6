"""One study weighing two engines (SGLang and vLLM personalities of the twin) on the same suite."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from autotune.errors import SpaceError
from autotune.space import load_space
from tests.conftest import SPACES, autotune_cmd

pytestmark = [pytest.mark.twin, pytest.mark.slow]
ENGINES_TWIN = SPACES / "qwen3.6-27b-2xa6000-engines-twin.yaml"
NAME = "qwen3.6-27b-2xa6000-engines-twin"


def test_engine_specific_flags_are_conditional_and_checked_per_engine() -> None:
    space = load_space(ENGINES_TWIN)
    assert space.engine_names() == ["sglang", "vllm"]
    assert "mem-fraction-static" in space.flags_for("sglang") and "mem-fraction-static" not in space.flags_for("vllm")
    assert "gpu-memory-utilization" in space.flags_for("vllm")
    # draft tokens hang on topk, which hangs on the engine: SGLang's alone
    assert "speculative-num-draft-tokens" not in space.flags_for("vllm")
    engine, flags = space.split_engine({"engine": "vllm", "num-speculative-tokens": 2})
    assert engine == "vllm" and flags["tensor-parallel-size"] == 2 and "engine" not in flags


def test_engines_need_the_engine_choice(tmp_path: Path) -> None:
    data = yaml.safe_load(ENGINES_TWIN.read_text())
    del data["tuned"]["engine"]
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(SpaceError) as info:
        load_space(path)
    assert info.value.field == "tuned.engine"


def test_engine_choice_study_compares_the_best_of_each(tmp_path: Path) -> None:
    proc = subprocess.run(
        autotune_cmd("study", str(ENGINES_TWIN), "--trials", "4", "--seed", "1", "--confirm-top", "0"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "best of each engine" in proc.stdout
    data = json.loads(
        subprocess.run(
            autotune_cmd("show", NAME, "--json"), cwd=tmp_path, check=True, capture_output=True, text=True
        ).stdout
    )
    by_baseline = {t["baseline"]: t for t in data["trials"] if t["baseline"]}
    assert by_baseline["sglang-hand-found"]["engine"] == "sglang"
    assert by_baseline["vllm-mtp-3"]["engine"] == "vllm"
    for trial in by_baseline.values():
        assert trial["outcome"] == "ok" and trial["metrics"]["decode_tok_s"]["unit"] == "tok/s"
    vllm = by_baseline["vllm-mtp-3"]
    script = subprocess.run(
        autotune_cmd("export", NAME, "--trial", str(vllm["number"]), "--format", "sh"),
        cwd=tmp_path,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert "--personality vllm serve Qwen/Qwen3.6-27B" in script and "--speculative-config" in script
