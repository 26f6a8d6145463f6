"""End to end through the real CLI, the real twin process over HTTP, and a real SQLite file."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import optuna
import pytest
import yaml

from autotune.profile import load_profile
from autotune.server import find_free_port
from tests.conftest import ROOT, TWIN_SPACE, autotune_cmd

pytestmark = [pytest.mark.twin, pytest.mark.slow]


# A guard against a hang, not a speed target: the demo study takes about 5 minutes alone and took over 10
# beside five other test workers and a benchmark run (its measurements repeat while the machine is noisy).
HANG_GUARD_S = 1500


def run(*args: str, cwd: Path, check: bool = True) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(autotune_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=HANG_GUARD_S)
    if check and proc.returncode != 0:
        raise AssertionError(f"autotune {' '.join(args)} exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
    return proc


def small_space(tmp_path: Path, **changes: object) -> Path:
    """The twin space with a quick measurement and the given top-level changes."""
    data = yaml.safe_load(TWIN_SPACE.read_text())
    data["measurement"].update(
        {"warmup_requests": 0, "prompts_per_round": 1, "max_tokens": 24, "min_rounds": 2, "max_rounds": 2}
    )
    data.update(changes)
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- readme-commands -->")[1].split("<!-- /readme-commands -->")[0]
    return [line for line in block.splitlines() if line.startswith(("python3", ".venv/"))]


def test_readme_starts_with_the_two_commands_ci_runs() -> None:
    install_and_demo, tests = readme_commands()
    assert "pip install -e ." in install_and_demo
    assert "autotune study search_spaces/qwen3.6-27b-2xa6000-twin.yaml" in install_and_demo
    assert tests.endswith("python -m pytest")
    assert "readme-commands" in (ROOT / ".ci" / "run").read_text()


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README demo study, run exactly as README says (in a scratch folder)."""
    cwd = tmp_path_factory.mktemp("demo")
    command = readme_commands()[0].split("&& .venv/bin/autotune ")[1].split()
    assert command[0] == "study"
    command[1] = str(ROOT / command[1])
    proc = run(*command, cwd=cwd)
    assert "simulated" in proc.stdout.lower()
    assert "stopped: 10 launches done" in proc.stdout
    return cwd


def wait_healthy(client: httpx.Client, base_url: str, proc: subprocess.Popen[bytes], timeout_s: float = 60) -> None:
    """Readiness check: poll /health until 200, failing fast if the process exits."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the exported command exited"
        try:
            if client.get(f"{base_url}/health", timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise AssertionError("exported server never became ready")


def show(cwd: Path) -> dict[str, object]:
    return json.loads(run("show", "qwen3.6-27b-2xa6000-twin", "--json", cwd=cwd).stdout)


@pytest.mark.longest  # the demo study (this module's fixture, so the whole module): about 6 minutes
def test_demo_study_beats_the_cautious_baseline(demo: Path) -> None:
    assert (demo / "studies" / "qwen3.6-27b-2xa6000-twin.db").is_file()
    data = show(demo)
    trials = data["trials"]
    assert isinstance(trials, list)
    searched = [t for t in trials if t["confirm_of"] is None]
    confirmation = data["confirmation"]
    assert isinstance(confirmation, dict)
    # 10 launches searched (re-measurements of a close challenger included), then every finalist
    # measured again on fresh launches (README: "confirmed")
    launched = [t for t in trials if t["decision"] is not None and t["decision"]["kind"] == "launch"]
    race = [t for t in trials if t["number"] > launched[9]["number"]]
    assert race and all(t["decision"]["kind"] == "launch" for t in race)
    assert {t["confirm_of"] for t in race} == {f["trial"] for f in confirmation["finalists"]}
    assert data["best_trial"] == confirmation["best"]
    assert data["simulated"] is True
    by_baseline = {t["baseline"]: t for t in searched if t["baseline"]}
    assert set(by_baseline) == {"cautious", "hand-found"}
    cautious = by_baseline["cautious"]["value"]
    best = next(t for t in trials if t["number"] == data["best_trial"])
    assert best["outcome"] == "ok" and best["feasible"]
    assert best["value"] > cautious
    for t in trials:
        assert t["outcome"] in {"ok", "infeasible-memory-low", "infeasible-memory-high", "invalid-config",
                                "predicted-infeasible-memory-low", "predicted-infeasible-memory-high"}
        if t["outcome"] == "ok":
            assert t["metrics"]["decode_tok_s"]["unit"] == "tok/s"
            assert t["effective"]["speculative-num-draft-tokens"] >= 2
    # every trial's server log is kept
    assert len(list((demo / "studies" / "qwen3.6-27b-2xa6000-twin" / "logs").glob("trial-*.log"))) >= 1


def without_port(argv: list[str]) -> list[str]:
    at = argv.index("--port")
    return argv[:at] + argv[at + 2 :]


def test_demo_confirmation_relaunches_each_finalist_exactly_as_it_ran(demo: Path) -> None:
    trials = {t["number"]: t for t in show_json(demo)["trials"]}
    confirming = [t for t in trials.values() if t["confirm_of"] is not None]
    assert confirming
    for relaunch in confirming:
        finalist = trials[relaunch["confirm_of"]]
        assert relaunch["argv"] and without_port(relaunch["argv"]) == without_port(finalist["argv"])
        assert relaunch["flags"] == finalist["flags"]


def test_demo_show_table(demo: Path) -> None:
    out = run("show", "qwen3.6-27b-2xa6000-twin", cwd=demo).stdout
    assert "decode tok/s" in out and "cautious" in out and "hand-found" in out
    assert "simulated" in out


def test_exported_command_is_runnable(demo: Path, tmp_path: Path) -> None:
    port = find_free_port()
    script = tmp_path / "serve.sh"
    run("export", "qwen3.6-27b-2xa6000-twin", "--format", "sh", "--port", str(port), "-o", str(script), cwd=demo)
    text = script.read_text()
    assert text.startswith("#!/usr/bin/env bash") and "--model-path Qwen/Qwen3.6-27B" in text
    assert "SIMULATED" in text
    proc = subprocess.Popen(
        ["bash", str(script)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    try:
        with httpx.Client() as client:
            wait_healthy(client, f"http://127.0.0.1:{port}", proc)
            info = client.get(f"http://127.0.0.1:{port}/server_info").json()
        best = show(demo)
        best_trial = next(t for t in best["trials"] if t["number"] == best["best_trial"])  # type: ignore[union-attr]
        assert info["speculative_num_steps"] == best_trial["flags"]["speculative-num-steps"]
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)


def test_export_yaml_and_systemd(demo: Path, tmp_path: Path) -> None:
    path = tmp_path / "best.yaml"
    run("export", "qwen3.6-27b-2xa6000-twin", "-o", str(path), cwd=demo)
    profile = load_profile(path)
    assert profile.simulated and profile.metrics["decode_tok_s"].unit == "tok/s"
    unit = run("export", "qwen3.6-27b-2xa6000-twin", "--format", "systemd", cwd=demo).stdout
    assert "Restart=on-failure" in unit and re.search(r"^ExecStart=.*--model-path Qwen/Qwen3.6-27B", unit, re.M)
    assert "Environment=CUDA_VISIBLE_DEVICES=0,1" in unit


def test_resume_keeps_trials_and_does_not_repeat_baselines(demo: Path) -> None:
    before = show(demo)["trials"]
    run("study", str(TWIN_SPACE), "--trials", "1", "--seed", "8", "--confirm-top", "0", cwd=demo)
    data = show(demo)
    trials = data["trials"]
    assert isinstance(trials, list) and isinstance(before, list)
    assert [t["value"] for t in trials[: len(before)]] == [t["value"] for t in before]
    assert [t["decision"]["kind"] for t in trials[len(before) :]].count("launch") == 1  # --trials counts launches
    assert sum(1 for t in trials if t["baseline"] == "cautious" and t["confirm_of"] is None) == 1
    # a study that ran on after its confirmation is no longer confirmed
    assert data["confirmation"] is None


def test_an_unconfirmed_best_says_so_until_autotune_confirm_measures_the_finalists(tmp_path: Path) -> None:
    # a profile the twin takes from the space's env only: the race's launches must run what the study did
    env = {"AUTOTUNE_TWIN_PROFILE": "qwen3.6-27b-2xa6000-compute-bound"}
    space = small_space(tmp_path, study="confirm-me", env=env)
    out = run("study", str(space), "--trials", "4", "--seed", "3", "--confirm-top", "0", cwd=tmp_path).stdout
    assert "UNCONFIRMED" in out
    assert load_profile_from(tmp_path, "confirm-me").confirmed_launches is None
    out = run("confirm", "confirm-me", "--top", "2", "--launches", "2", cwd=tmp_path).stdout
    assert "raced on fresh, interleaved launches" in out and "confirmed over 2 launches" in out
    assert "verdict: " in out
    profile = load_profile_from(tmp_path, "confirm-me")
    assert profile.confirmed_launches == 2 and profile.verdict is not None
    data = json.loads(run("show", "confirm-me", "--json", cwd=tmp_path).stdout)
    best = next(f for f in data["confirmation"]["finalists"] if f["trial"] == data["best_trial"])
    assert profile.metrics["decode_tok_s"].value == pytest.approx(best["mean"])
    assert len(best["values"]) == 2
    logs = sorted((tmp_path / "studies" / "confirm-me" / "logs").glob("*.log"))
    assert len(logs) > 4 and all("profile qwen3.6-27b-2xa6000-compute-bound," in log.read_text() for log in logs)


def load_profile_from(cwd: Path, study: str):  # type: ignore[no-untyped-def]
    path = cwd / f"{study}.yaml"
    run("export", study, "-o", str(path), cwd=cwd)
    return load_profile(path)


def test_check_prints_baseline_argv(tmp_path: Path) -> None:
    data = json.loads(run("check", str(TWIN_SPACE), "--json", cwd=tmp_path).stdout)
    cautious = next(b for b in data["baselines"] if b["name"] == "cautious")
    argv = cautious["argv"]
    # "{python}" became the interpreter running autotune (the venv's python)
    assert Path(argv[0]).parent == Path(sys.executable).parent and Path(argv[0]).name.startswith("python")
    assert argv[1:3] == ["-m", "autotune_twin"]
    assert argv[argv.index("--speculative-num-draft-tokens") + 1] == "2"
    hand = next(b for b in data["baselines"] if b["name"] == "hand-found")["argv"]
    assert hand[hand.index("--mem-fraction-static") + 1] == "0.88"


def test_unknown_flag_fails_before_any_launch(tmp_path: Path) -> None:
    data = yaml.safe_load(TWIN_SPACE.read_text())
    data["fixed"]["mamba-scheduler-strategy"] = "auto"
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    for command in (["check", str(path)], ["study", str(path), "--trials", "1"]):
        proc = run(*command, cwd=tmp_path, check=False)
        assert proc.returncode == 2
        assert "unknown flag --mamba-scheduler-strategy" in proc.stderr
        assert "renamed to --mamba-radix-cache-strategy" in proc.stderr
        assert "Traceback" not in proc.stderr
    assert not (tmp_path / "studies" / "space" / "logs").exists()


def test_memory_failures_are_infeasible_complete_trials(tmp_path: Path) -> None:
    space = small_space(
        tmp_path,
        baselines=[],
        tuned={"mem-fraction-static": {"type": "float", "low": 0.40, "high": 0.50, "step": 0.05}},
    )
    run("study", str(space), "--trials", "2", "--seed", "1", cwd=tmp_path)
    storage = f"sqlite:///{tmp_path}/studies/qwen3.6-27b-2xa6000-twin.db"
    study = optuna.load_study(study_name="qwen3.6-27b-2xa6000-twin", storage=storage)
    for trial in study.trials:
        assert trial.state.name == "COMPLETE" and trial.value == 0.0
        # 0.40-0.50 of 48 GB cannot even hold the weights: known without launching
        assert trial.user_attrs["outcome"] == "predicted-infeasible-memory-low"
        assert trial.constraints["memory"] > 0 and trial.constraints["config"] == 0
        assert "mem-fraction-static" in trial.user_attrs["reason"]
    assert not (tmp_path / "studies" / "qwen3.6-27b-2xa6000-twin" / "logs").exists()  # nothing launched


def test_same_effective_config_is_measured_once(tmp_path: Path) -> None:
    # topk 1 makes draft tokens steps + 1, so every draft value below is one effective config.
    space = small_space(
        tmp_path,
        baselines=[],
        fixed={"tp-size": 2, "speculative-algorithm": "NEXTN", "speculative-eagle-topk": 1, "speculative-num-steps": 2},
        tuned={"speculative-num-draft-tokens": {"type": "int", "low": 3, "high": 9}},
    )
    # --total-trials counts proposals (--trials counts launches: this space has one to give)
    run("study", str(space), "--total-trials", "3", "--seed", "2", "--confirm-top", "0", cwd=tmp_path)
    trials = show_json(tmp_path)["trials"]
    assert [t["decision"]["kind"] for t in trials] == ["launch", "reuse", "reuse"]
    assert [t["decision"].get("trial") for t in trials] == [None, 0, 0]
    assert len({t["value"] for t in trials}) == 1
    logs = list((tmp_path / "studies" / "qwen3.6-27b-2xa6000-twin" / "logs").glob("trial-*.log"))
    assert len(logs) == 1


def show_json(cwd: Path) -> dict[str, list[dict[str, object]]]:
    return json.loads(run("show", "qwen3.6-27b-2xa6000-twin", "--json", cwd=cwd).stdout)


def test_show_and_export_of_unknown_study_exit_2(tmp_path: Path) -> None:
    for command in (["show", "nope"], ["export", "nope"]):
        proc = run(*command, cwd=tmp_path, check=False)
        assert proc.returncode == 2 and "no study named 'nope'" in proc.stderr and "Traceback" not in proc.stderr
