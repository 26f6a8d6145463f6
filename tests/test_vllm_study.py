"""A vLLM-only study end to end: the real CLI, the twin's vLLM personality over HTTP, real SQLite."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import SPACES, autotune_cmd
from tests.twin.processes import twin

pytestmark = [pytest.mark.twin, pytest.mark.slow]

VLLM_SPACE = SPACES / "qwen3.6-27b-2xa6000-vllm-twin.yaml"
STUDY = "qwen3.6-27b-2xa6000-vllm-twin"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(autotune_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"autotune {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


@pytest.fixture(scope="module")
def study(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Three trials: a configuration that runs, one past vLLM's memory ceiling, one below its floor."""
    cwd = tmp_path_factory.mktemp("vllm-study")
    data = yaml.safe_load(VLLM_SPACE.read_text())
    data["measurement"].update(
        {"warmup_requests": 0, "prompts_per_round": 1, "max_tokens": 24, "min_rounds": 2, "max_rounds": 2}
    )
    data["tuned"]["gpu-memory-utilization"]["low"] = 0.6
    batch = {"max-num-batched-tokens": 2048}
    data["baselines"] = [
        {
            "name": "runs",
            "flags": {"num-speculative-tokens": 3, "gpu-memory-utilization": 0.9, "max-num-seqs": 8, **batch},
        },
        # 0.97 x 48 GiB leaves 0.44 GiB outside vLLM's budget: too little for the sampler warm-up of 64 x (1 + 3)
        {
            "name": "ceiling",
            "flags": {"num-speculative-tokens": 3, "gpu-memory-utilization": 0.97, "max-num-seqs": 64, **batch},
        },
        # 0.65 x 48 GiB minus weights, activations and graphs cannot hold one 131072-token request
        {
            "name": "floor",
            "flags": {"num-speculative-tokens": 1, "gpu-memory-utilization": 0.65, "max-num-seqs": 8, **batch},
        },
    ]
    space = cwd / "space.yaml"
    space.write_text(yaml.safe_dump(data))
    proc = run("study", str(space), "--trials", "3", "--seed", "1", "--confirm-top", "0", cwd=cwd)
    assert "stopped: 3 launches done" in proc.stdout
    return cwd


def test_three_trials_ok_and_both_memory_sides(study: Path) -> None:
    data = json.loads(run("show", STUDY, "--json", cwd=study).stdout)
    assert data["simulated"] is True
    trials = {t["baseline"]: t for t in data["trials"]}
    assert set(trials) == {"runs", "ceiling", "floor"}
    ok = trials["runs"]
    assert ok["outcome"] == "ok" and ok["feasible"] and data["best_trial"] == ok["number"]
    assert ok["metrics"]["decode_tok_s"]["unit"] == "tok/s" and ok["metrics"]["decode_tok_s"]["value"] > 30
    assert 2.0 < ok["metrics"]["accept_length"]["value"] <= 4.0
    assert ok["flags"]["num-speculative-tokens"] == 3 and ok["flags"]["speculative-method"] == "mtp"
    assert ok["effective"]["max-model-len"] == 131072 and ok["effective"]["gpu-memory-utilization"] == 0.9
    assert ok["engine_version"] == "0.34.0"
    assert trials["ceiling"]["outcome"] == "infeasible-memory-high"
    assert "warming up sampler" in trials["ceiling"]["reason"]
    assert trials["floor"]["outcome"] == "infeasible-memory-low"
    assert "To serve at least one request" in trials["floor"]["reason"]
    assert not trials["ceiling"]["feasible"] and not trials["floor"]["feasible"]


def test_server_figures_and_memory_were_recorded(study: Path) -> None:
    logs = study / "studies" / STUDY / "logs"
    measurement = json.loads(next(logs.glob("*.measurement.json")).read_text())[0]
    server = measurement["server"]
    assert server["generated_tokens"] == sum(r["completion_tokens"] for r in measurement["requests"])
    assert server["metrics_accept_length"] is not None and server["metrics_accept_length"] > 1
    started = [
        p.read_text() for p in sorted(logs.glob("trial-*.log")) if "Application startup complete." in p.read_text()
    ]
    assert len(started) == 1 and "Model loading took 25.89 GiB" in started[0]
    assert "'per_request_spec_decode_metrics': 'summary'" in started[0]  # added by the engine for accept lengths


def test_export_builds_one_speculative_config(study: Path) -> None:
    script = run("export", STUDY, "--format", "sh", cwd=study).stdout
    command = next(line for line in script.splitlines() if line.startswith("exec "))
    assert " --personality vllm serve Qwen/Qwen3.6-27B --host " in command
    assert """--speculative-config '{"method":"mtp","num_speculative_tokens":3}'""" in command
    assert "--speculative-method" not in command and "--num-speculative-tokens" not in command
    assert "--max-num-seqs 8 " in command and "--max-num-batched-tokens 2048 " in command


def test_points_carry_the_speculative_config_the_twin_calibrates_on(study: Path) -> None:
    points = [json.loads(line) for line in run("export", STUDY, "--format", "points", cwd=study).stdout.splitlines()]
    ok = next(t for t in json.loads(run("show", STUDY, "--json", cwd=study).stdout)["trials"] if t["outcome"] == "ok")
    assert len(points) == 1  # the two memory failures measured nothing
    point = points[0]
    assert point["flags"] == {"speculative-config": {"method": "mtp", "num_speculative_tokens": 3}}
    assert point["tok_s"] == ok["metrics"]["output_tok_s"]["value"]
    assert point["accept_length"] == ok["metrics"]["accept_length"]["value"]
    assert point["input_len"] > 0 and point["output_len"] > 0 and point["concurrency"] == 1
    path = study / "points.jsonl"
    path.write_text(json.dumps(point) + "\n")
    fitted = study / "fitted.yaml"
    done = twin("calibrate", "qwen3.6-27b-2xa6000", str(path), "-o", str(fitted), timeout=300)
    assert done.returncode == 0 and fitted.is_file(), done.stderr


def test_a_study_on_vllm_0_33_still_runs(tmp_path: Path) -> None:
    """A deployment that has not upgraded: the twin speaks 0.33 (the space's env reaches --help and the
    launches), autotune reads that flag set and runs block verification, which 0.33 has too."""
    data = yaml.safe_load(VLLM_SPACE.read_text())
    data["env"]["AUTOTUNE_TWIN_VLLM_VERSION"] = "0.33.0"
    data["measurement"].update(
        {"warmup_requests": 0, "prompts_per_round": 1, "max_tokens": 24, "min_rounds": 2, "max_rounds": 2}
    )
    flags = {"num-speculative-tokens": 3, "rejection-sample-method": "block", "gpu-memory-utilization": 0.9,
             "max-num-seqs": 8, "max-num-batched-tokens": 2048}  # fmt: skip
    data["baselines"] = [{"name": "block", "flags": flags}]
    space = tmp_path / "space.yaml"
    space.write_text(yaml.safe_dump(data))
    run("study", str(space), "--trials", "1", "--seed", "1", "--confirm-top", "0", cwd=tmp_path)
    [trial] = json.loads(run("show", STUDY, "--json", cwd=tmp_path).stdout)["trials"]
    assert trial["outcome"] == "ok" and trial["engine_version"] == "0.33.0"
    assert trial["flags"]["rejection-sample-method"] == "block"
    assert '"rejection_sample_method":"block"' in " ".join(trial["argv"])
