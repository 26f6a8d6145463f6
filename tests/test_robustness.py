"""Overnight robustness on real processes: injected faults, SIGKILL and resume, Ctrl-C, busy ports,
secrets. The twin injects faults on demand (--twin-fault / a fault schedule)."""

from __future__ import annotations

import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import optuna
import pytest
import sqlalchemy.exc
import yaml

from autotune.engines.sglang import SGLangEngine
from autotune.measure.suites import load_suite
from autotune.outcomes import OutcomeKind
from autotune.space import load_space
from autotune.study import preflight
from autotune.study.attrs import trial_record
from autotune.trial import TrialSetup, run_trial
from tests.conftest import TWIN_SPACE, autotune_cmd, load_benchmark

# live processes whose environment holds a marker (the test's scratch path): the soak's own scan
processes_with = load_benchmark("soak").processes_with

pytestmark = [pytest.mark.twin, pytest.mark.slow]
STUDY = "robust"


def quick_space(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load(TWIN_SPACE.read_text())
    data["study"] = STUDY
    data["baselines"] = []
    data["measurement"].update(
        {
            "warmup_requests": 1,
            "prompts_per_round": 1,
            "max_tokens": 24,
            "min_rounds": 2,
            "max_rounds": 2,
            "request_timeout_s": 3,
        }
    )
    data["launch"] = {"timeout_s": 20, "stop_timeout_s": 2}
    data.update(changes)
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def load(tmp_path: Path) -> optuna.Study:
    return optuna.load_study(study_name=STUDY, storage=f"sqlite:///{tmp_path}/studies/{STUDY}.db")


def trials_so_far(tmp_path: Path) -> list[optuna.trial.FrozenTrial]:
    """The study's trials, or none while the tuner has not created it yet."""
    if not (tmp_path / "studies" / f"{STUDY}.db").exists():
        return []
    try:
        return load(tmp_path).trials
    except (KeyError, sqlalchemy.exc.IntegrityError, sqlalchemy.exc.OperationalError):
        return []  # the tuner is creating the study's tables right now


def interruptible() -> None:
    """In the child: Ctrl-C as at a terminal. A test run started in the background by a shell (``&``,
    CI runners) inherits SIGINT ignored, and Python then leaves it ignored in the tuner too."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def wait_until(condition, timeout: float = 60.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError("condition not reached in time")


def test_every_fault_kind_is_classified_recorded_and_followed(tmp_path: Path) -> None:
    schedule = tmp_path / "faults.json"
    schedule.write_text(
        json.dumps(["none", "exit-on-start", "never-ready", "die-mid-measurement", "hang-mid-measurement", "none"])
    )
    # Baselines run first, in order, so launch n meets schedule entry n; the last one SGLang refuses
    # (a value its argparse rejects, which autotune cannot know before launching).
    baselines = [
        {"name": f"b{i}", "flags": {"speculative-num-steps": steps}} for i, steps in enumerate([3, 1, 2, 4, 5])
    ]
    baselines.append({"name": "rejected", "flags": {"speculative-num-steps": 2, "attention-backend": "no-such"}})
    space = quick_space(
        tmp_path,
        env={"AUTOTUNE_TWIN_FAULT_SCHEDULE": str(schedule)},
        fixed={"tp-size": 2, "context-length": 131072, "speculative-algorithm": "NEXTN", "speculative-eagle-topk": 1},
        tuned={"speculative-num-steps": {"type": "int", "low": 1, "high": 5}},
        baselines=baselines,
        launch={"timeout_s": 6, "stop_timeout_s": 2},
    )
    proc = subprocess.run(
        autotune_cmd("study", str(space), "--trials", "9", "--seed", "3", "--confirm-top", "0"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    trials = load(tmp_path).trials
    kinds = [t.user_attrs.get("outcome") for t in trials]
    assert kinds[:6] == ["ok", "crashed", "launch-timeout", "crashed", "measurement-failed", "invalid-config"]
    states = [t.state.name for t in trials[:6]]
    # The first launch served, so a server that then dies or never becomes ready is told to the
    # sampler as the configuration's fault; a measurement that fails stays a failed trial.
    assert states == ["COMPLETE", "COMPLETE", "COMPLETE", "COMPLETE", "FAIL", "COMPLETE"]
    for trial in trials[1:4]:
        assert trial.constraints["config"] > 0
        assert "counted against this configuration" in trial.user_attrs["reason"]
    assert "NCCL error" in trials[1].user_attrs["reason"]
    assert "Segmentation fault" in trials[3].user_attrs["reason"]
    assert "timed out" in trials[4].user_attrs["reason"]
    assert trials[5].constraints["config"] > 0
    for trial in trials[:5]:
        log = tmp_path / "studies" / STUDY / "logs" / f"trial-{trial.number:04d}.log"
        assert log.read_text(), f"trial {trial.number} kept no log"
    # the study went on after the faults and still found the fastest measured config
    measured = [t for t in trials if t.user_attrs.get("outcome") == "ok"]
    assert len(measured) >= 3
    best = load(tmp_path).best_trial
    assert best.value == max(t.value for t in measured if t.value is not None)
    assert processes_with(str(schedule)) == []


def test_sigkill_mid_trial_then_resume(tmp_path: Path) -> None:
    # Two feasible baselines first: the first is measured, the second is still running when killed.
    hand_found = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3, "speculative-eagle-topk": 1,
                  "mem-fraction-static": 0.88}
    space = quick_space(
        tmp_path,
        env={"AUTOTUNE_TEST_MARK": str(tmp_path)},
        measurement={
            **yaml.safe_load(TWIN_SPACE.read_text())["measurement"],
            "warmup_requests": 0,
            "prompts_per_round": 1,
            "max_tokens": 400,  # the second trial serves long enough to be killed on a loaded machine
            "ignore_eos": True,
            "min_rounds": 2,
            "max_rounds": 2,
        },
        baselines=[
            {"name": "first", "flags": hand_found},
            {"name": "second", "flags": {**hand_found, "speculative-num-steps": 4}},
        ],
    )
    output = tmp_path / "tuner.out"
    with output.open("w") as sink:
        tuner = subprocess.Popen(
            autotune_cmd("study", str(space), "--trials", "5", "--seed", "4", "--confirm-top", "0"),
            cwd=tmp_path,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    records = tmp_path / "studies" / STUDY / "servers"
    seen: list[list[str]] = []
    serving: list[dict[str, object]] = []

    def second_trial_serving() -> bool:
        if len(list(records.glob("server-*.json"))) != 1:
            return False  # and the database is not read before the tuner has made it
        states = [t.state.name for t in trials_so_far(tmp_path)]
        if not seen or seen[-1] != states:
            seen.append(states)
        if states != ["COMPLETE", "RUNNING"]:
            return False
        # the server's record is read after the database: on a loaded machine the read took long enough
        # for the trial to end and its record to go before the test looked again
        try:
            serving.append(json.loads(next(records.glob("server-*.json")).read_text()))
        except (StopIteration, OSError, ValueError):
            return False
        return True

    try:
        # one trial measured, the next one's server up (generous for a loaded machine: the condition is
        # what the test waits on; a tuner that ends first fails at once, with what it printed)
        wait_until(lambda: second_trial_serving() or tuner.poll() is not None, timeout=600)
        assert tuner.poll() is None, f"trial states seen {seen}; the tuner printed:\n{output.read_text()}"
        orphan = serving[-1]["pid"]
        before = {t.number: t.value for t in load(tmp_path).trials if t.state.name == "COMPLETE"}
        os.kill(tuner.pid, signal.SIGKILL)
        tuner.wait(timeout=10)
        assert processes_with(str(tmp_path)) == [orphan] or orphan in processes_with(str(tmp_path))
    finally:
        if tuner.poll() is None:
            tuner.kill()
            tuner.wait(timeout=10)
    proc = subprocess.run(
        autotune_cmd("study", str(space), "--trials", "2", "--seed", "5", "--confirm-top", "0"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "killed 1 orphaned server(s), marked 1 stale trial(s) failed" in proc.stdout
    assert processes_with(str(tmp_path)) == []
    trials = load(tmp_path).trials
    stale = [t for t in trials if t.state.name == "FAIL"]
    assert len(stale) == 1 and stale[0].user_attrs["outcome"] == "interrupted"
    after = {t.number: t.value for t in trials if t.state.name == "COMPLETE"}
    assert all(after[n] == v for n, v in before.items())  # nothing measured was lost
    # the interrupted baseline is measured once more, on resume
    assert stale[0].user_attrs["baseline"] == "second"
    again = [t for t in trials if t.user_attrs.get("baseline") == "second" and t.state.name == "COMPLETE"]
    assert len(again) == 1 and again[0].params == stale[0].params and again[0].number > stale[0].number
    keys = [
        t.user_attrs["config_key"]
        for t in trials
        if t.user_attrs.get("outcome") == "ok" and trial_record(t).reused_from is None
    ]
    assert len(keys) == len(set(keys))  # no measured config measured twice


def test_ctrl_c_stops_the_server_and_marks_the_trial(tmp_path: Path) -> None:
    # A first trial far longer than any load can make the wait below (a 4000-token answer per round, 5
    # rounds), and more trials than could ever finish: the signal always lands inside a trial, however
    # slow the machine. (Under load, 5 quick trials used to finish before the signal came.)
    measurement = {**yaml.safe_load(TWIN_SPACE.read_text())["measurement"], "warmup_requests": 0,
                   "prompts_per_round": 1, "max_tokens": 4000, "ignore_eos": True, "min_rounds": 5, "max_rounds": 5,
                   "request_timeout_s": 600}  # fmt: skip
    space = quick_space(tmp_path, env={"AUTOTUNE_TEST_MARK": str(tmp_path)}, measurement=measurement,
                        launch={"timeout_s": 300, "stop_timeout_s": 5})  # fmt: skip
    tuner = subprocess.Popen(
        autotune_cmd("study", str(space), "--trials", "50", "--confirm-top", "0"),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=interruptible,
    )
    records = tmp_path / "studies" / STUDY / "servers"
    try:
        # readiness: the first trial's server record exists (written before its spawn returns)
        wait_until(lambda: len(list(records.glob("server-*.json"))) == 1, timeout=300)
        tuner.send_signal(signal.SIGINT)
        out, err = tuner.communicate(timeout=300)  # generous: stopping is TERM, 5 s grace, KILL
    finally:
        if tuner.poll() is None:  # never leave a tuner (and its pipes) behind a failed test
            tuner.kill()
            tuner.communicate()
    assert tuner.returncode == 130, out + err
    assert "stopped: interrupted" in out and "Traceback" not in err
    assert processes_with(str(tmp_path)) == []
    last = load(tmp_path).trials[-1]
    assert last.state.name == "FAIL" and last.user_attrs["outcome"] == "interrupted"


def test_a_port_taken_meanwhile_is_retried_on_another(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    space = load_space(quick_space(tmp_path))
    checked = preflight(space, read_gpus=False)
    plan = SGLangEngine().normalise(
        {**space.fixed, "speculative-algorithm": "NEXTN", "speculative-num-steps": 2, "speculative-eagle-topk": 1}
    )
    import autotune.trial as trial_module

    real = trial_module.find_free_port
    setup = TrialSetup(
        launcher=checked.engines["sglang"].launcher,
        model=space.model,
        env={},
        suite=load_suite(space.suite_path()),
        measure=space.measure_settings(),
        launch_timeout_s=20,
        stop_timeout_s=2,
        records_dir=tmp_path / "rec",
    )
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        first = taken.getsockname()[1]
        ports = iter([first])  # the first launch gets the taken port
        monkeypatch.setattr(trial_module, "find_free_port", lambda host: next(ports, None) or real(host))
        outcome = run_trial(SGLangEngine(), setup, plan, log_path=tmp_path / "t.log")
    assert outcome.kind is OutcomeKind.OK
    assert int(outcome.argv[outcome.argv.index("--port") + 1]) != first


def test_secret_values_stay_out_of_db_artifacts_and_profiles(tmp_path: Path) -> None:
    secret = "hf_SeCrEtVaLuE123"
    feasible = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3, "speculative-eagle-topk": 1,
                "mem-fraction-static": 0.88}
    space = quick_space(tmp_path, env={"HF_TOKEN": secret}, baselines=[{"name": "known", "flags": feasible}])
    subprocess.run(
        autotune_cmd("study", str(space), "--trials", "1", "--confirm-top", "0"),
        cwd=tmp_path, check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    db = tmp_path / "studies" / f"{STUDY}.db"
    with sqlite3.connect(db) as conn:
        dump = "\n".join(conn.iterdump())
    assert secret not in dump and "HF_TOKEN" in dump
    for path in (tmp_path / "studies" / STUDY).rglob("*"):
        if path.is_file():
            assert secret.encode() not in path.read_bytes(), path
    for fmt in ("yaml", "sh", "systemd"):
        out = subprocess.run(
            autotune_cmd("export", STUDY, "--format", fmt), cwd=tmp_path, check=True, capture_output=True, text=True
        ).stdout
        assert secret not in out and "HF_TOKEN" in out


@pytest.mark.slow
def test_a_short_soak_with_faults_and_kills_loses_nothing(tmp_path: Path) -> None:
    """benchmarks/soak.py, short: 12 trials, random twin faults, the tuner SIGKILLed twice and restarted."""
    soak = Path(__file__).resolve().parent.parent / "benchmarks" / "soak.py"
    proc = subprocess.run(
        [sys.executable, str(soak), "--trials", "12", "--kills", "2", "--fault-rate", "0.2", "--busy-chance", "0.05",
         "--lock-chance", "0.05", "--keep", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=1800,
    )
    assert proc.returncode == 0 and "soak: PASS" in proc.stdout, proc.stdout + proc.stderr
    assert "measured trials lost or changed by a kill: 0" in proc.stdout
    assert "server processes left: 0" in proc.stdout
