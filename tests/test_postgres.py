"""Several workers on one study through a real PostgreSQL server (Debian's package, started here)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.errors import StorageError
from autotune.server import find_free_port
from autotune.study import StudyPaths
from autotune.study.attrs import trial_record
from autotune.study.storage import exclusive, open_storage, optimize_riding_out
from tests.conftest import TWIN_SPACE, autotune_cmd
from tests.tiers import pg_bin

pytestmark = [pytest.mark.twin, pytest.mark.slow, pytest.mark.tier("postgres")]
STUDY = "shared"


# The running server of this module's fixture, so a test can stop and restart it (an outage).
SERVER: dict[str, list[str]] = {}


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    bindir = pg_bin()
    assert bindir is not None  # the postgres tier was checked before the run
    as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    data = Path(tempfile.mkdtemp(prefix="autotune-pg-"))
    if as_postgres:
        shutil.chown(data, "postgres")
    port = find_free_port()
    subprocess.run([*as_postgres, str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"],
                   check=True, capture_output=True)
    SERVER["pg_ctl"] = [*as_postgres, str(bindir / "pg_ctl"), "-D", str(data), "-l", str(data / "log"), "-w", "-o",
                        f"-p {port} -k {data} -c listen_addresses=127.0.0.1 -c max_connections=200"]
    subprocess.run([*SERVER["pg_ctl"], "start"], check=True, capture_output=True)
    try:
        subprocess.run([*as_postgres, str(bindir / "createdb"), "-h", "127.0.0.1", "-p", str(port), "-U", "postgres",
                        "autotune"], check=True, capture_output=True)
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/autotune"
    finally:
        subprocess.run([*as_postgres, str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"],
                       capture_output=True)
        shutil.rmtree(data, ignore_errors=True)


def space_file(tmp_path: Path, name: str) -> Path:
    data = yaml.safe_load(TWIN_SPACE.read_text())
    data["study"] = name
    # topk 1: draft tokens are steps + 1, so many sampled candidates share an effective config
    data["fixed"].update({"speculative-algorithm": "NEXTN", "speculative-eagle-topk": 1, "mem-fraction-static": 0.88})
    data["tuned"] = {"speculative-num-steps": {"type": "int", "low": 1, "high": 4},
                     "speculative-num-draft-tokens": {"type": "int", "low": 2, "high": 9}}
    data["baselines"] = [{"name": "hand-found", "flags": {"speculative-num-steps": 3}}]
    data["measurement"].update({"warmup_requests": 0, "prompts_per_round": 1, "max_tokens": 32, "min_rounds": 2,
                                "max_rounds": 2})
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def load_trials(url: str, name: str) -> list[optuna.trial.FrozenTrial]:
    storage = optuna.storages.RDBStorage(url)
    try:
        return optuna.load_study(study_name=name, storage=storage).trials
    finally:
        storage.remove_session()
        storage.engine.dispose()


def worker(space: Path, url: str, cwd: Path, *extra: str) -> subprocess.Popen[str]:
    return subprocess.Popen(autotune_cmd("study", str(space), "--storage", url, "--confirm-top", "0", *extra), cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)


def test_two_workers_share_one_study(postgres: str, tmp_path: Path) -> None:
    space = space_file(tmp_path, STUDY)
    hosts = [tmp_path / "host-a", tmp_path / "host-b"]  # separate folders, as on two machines
    for host in hosts:
        host.mkdir()
    workers = [worker(space, postgres, host, "--total-trials", "8", "--seed", str(i)) for i, host in enumerate(hosts)]
    outputs = [w.communicate(timeout=600)[0] for w in workers]
    assert [w.returncode for w in workers] == [0, 0], outputs
    trials = load_trials(postgres, STUDY)
    finished = [t for t in trials if t.state.name in ("COMPLETE", "FAIL")]
    assert 8 <= len(finished) <= 9  # each worker checks the total after its own trial
    assert sum(1 for t in trials if t.user_attrs.get("baseline") == "hand-found") == 1
    measured = [t.user_attrs["config_key"] for t in trials
                if t.user_attrs.get("outcome") == "ok" and trial_record(t).reused_from is None]
    assert len(measured) == len(set(measured)), "an effective config was measured twice"
    assert {t.user_attrs["worker_pid"] for t in trials} == {w.pid for w in workers}
    data = json.loads(subprocess.run(autotune_cmd("show", STUDY, "--storage", postgres, "--json"), cwd=tmp_path,
                                     check=True, capture_output=True, text=True).stdout)
    assert data["best_trial"] is not None


def test_a_dead_worker_has_its_trial_failed_by_heartbeat_and_retried(postgres: str, tmp_path: Path) -> None:
    name = "shared-kill"
    space = space_file(tmp_path, name)
    data = yaml.safe_load(space.read_text())
    data["measurement"]["max_tokens"] = 200  # long enough to be killed mid-trial
    space.write_text(yaml.safe_dump(data))
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    doomed = worker(space, postgres, tmp_path / "a", "--total-trials", "6", "--heartbeat", "1", "--seed", "1")
    records = tmp_path / "a" / "studies" / name / "servers"
    deadline = time.monotonic() + 600  # a bound for a loaded machine; the wait is on the server record
    while not list(records.glob("server-*.json")):
        assert time.monotonic() < deadline and doomed.poll() is None, "the first worker never launched"
        time.sleep(0.1)
    orphan = json.loads(next(records.glob("server-*.json")).read_text())["pid"]
    os.killpg(doomed.pid, signal.SIGKILL)  # the worker dies mid-trial (its server survives it)
    doomed.communicate()
    try:
        survivor = worker(space, postgres, tmp_path / "b", "--total-trials", "6", "--heartbeat", "1", "--seed", "2")
        output = survivor.communicate(timeout=600)[0]
        assert survivor.returncode == 0, output
    finally:
        try:
            os.killpg(orphan, signal.SIGKILL)  # on another host the orphan would be that host's to reap
        except ProcessLookupError:
            pass
    trials = load_trials(postgres, name)
    stale = [t for t in trials if t.user_attrs.get("worker_pid") == doomed.pid]
    assert len(stale) == 1 and stale[0].state.name == "FAIL"
    retries = [t for t in trials if t.system_attrs.get("failed_trial") == stale[0].number]
    assert len(retries) == 1 and retries[0].params == stale[0].params and retries[0].state.name == "COMPLETE"
    assert sum(1 for t in trials if t.state.name in ("COMPLETE", "FAIL")) >= 6


def test_a_database_server_that_goes_away_mid_study_is_waited_for(postgres: str, tmp_path: Path) -> None:
    name = "outage"
    space = space_file(tmp_path, name)
    data = yaml.safe_load(space.read_text())
    data["measurement"]["max_tokens"] = 200  # a trial long enough to lose the server in the middle of it
    space.write_text(yaml.safe_dump(data))
    (tmp_path / "host").mkdir()
    tuner = worker(space, postgres, tmp_path / "host", "--total-trials", "4", "--heartbeat", "1", "--seed", "3")
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(tuner.stdout or []), daemon=True)
    reader.start()
    records = tmp_path / "host" / "studies" / name / "servers"
    try:
        deadline = time.monotonic() + 600  # a bound for a loaded machine; the wait is on the condition
        while not (list(records.glob("server-*.json")) and any(t.state.name == "COMPLETE" for t in
                                                              load_trials(postgres, name))):  # fmt: skip
            assert time.monotonic() < deadline and tuner.poll() is None, "no trial measured, or none running"
            time.sleep(0.2)
        subprocess.run([*SERVER["pg_ctl"], "-m", "fast", "stop"], check=True, capture_output=True)
        try:
            deadline = time.monotonic() + 300
            while not any("storage unreachable" in line for line in lines):  # the tuner noticed (heartbeat)
                assert time.monotonic() < deadline and tuner.poll() is None, "".join(lines)
                time.sleep(0.2)
        finally:
            subprocess.run([*SERVER["pg_ctl"], "start"], check=True, capture_output=True)
        code = tuner.wait(timeout=600)
    finally:  # a failed wait above leaves no tuner running and no pipe open for a later test to meet
        if tuner.poll() is None:
            os.killpg(tuner.pid, signal.SIGKILL)
            tuner.wait()
        reader.join(timeout=10)
        if tuner.stdout is not None:
            tuner.stdout.close()
    output = "".join(lines)
    assert code == 0, output
    assert "Traceback" not in output and not any(line.startswith("Error:") for line in lines), output
    assert "storage unreachable" in output  # one line said so, then the study went on
    trials = load_trials(postgres, name)
    finished = [t for t in trials if t.state.name in ("COMPLETE", "FAIL")]
    assert len(finished) >= 4 and all(t.state.name != "RUNNING" for t in trials)
    # the trial in flight when the server went away kept its measurement
    assert sum(1 for t in trials if t.user_attrs.get("outcome") == "ok") >= 3, [t.user_attrs.get("outcome")
                                                                                for t in trials]  # fmt: skip


def test_the_study_lock_rides_out_a_database_server_that_goes_away(
    postgres: str, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    storage = open_storage(postgres)
    paths = StudyPaths(tmp_path, "lock-outage")
    with exclusive(storage, paths):  # held while the server goes away and comes back: released without an error
        subprocess.run([*SERVER["pg_ctl"], "-m", "fast", "stop"], check=True, capture_output=True)
        subprocess.run([*SERVER["pg_ctl"], "start"], check=True, capture_output=True)
    subprocess.run([*SERVER["pg_ctl"], "-m", "fast", "stop"], check=True, capture_output=True)
    taken = threading.Event()

    def take() -> None:
        with exclusive(storage, paths):
            taken.set()

    taker = threading.Thread(target=take, daemon=True)
    said = ""
    try:
        taker.start()
        deadline = time.monotonic() + 120
        while "storage unreachable" not in said:  # waiting for the lock, it met the outage and said so
            assert time.monotonic() < deadline and taker.is_alive(), said
            said += capfd.readouterr().err
            time.sleep(0.1)
        assert not taken.is_set()
    finally:
        subprocess.run([*SERVER["pg_ctl"], "start"], check=True, capture_output=True)
    taker.join(timeout=120)
    storage.engine.dispose()
    assert taken.is_set()  # taken once the server was back (the lock held across the outage was not left taken)
    assert said.count("\n") == 1, said


def test_a_trial_started_while_the_database_server_is_away_waits_for_it(
    postgres: str, capfd: pytest.CaptureFixture[str]
) -> None:
    # With heartbeats on, each trial of study.optimize first asks the database for stale trials (the
    # failure CI met: a trial answered without a launch, the next one started during the outage).
    storage = open_storage(postgres, heartbeat_s=1)
    study = optuna.create_study(study_name="stale-check-outage", storage=storage)
    subprocess.run([*SERVER["pg_ctl"], "-m", "fast", "stop"], check=True, capture_output=True)
    errors: list[BaseException] = []

    def two_trials() -> None:
        try:
            optimize_riding_out(study, storage, lambda trial: 1.0, n_trials=2)
        except BaseException as exc:  # reported by the assertion below
            errors.append(exc)

    runner = threading.Thread(target=two_trials, daemon=True)
    said = ""
    try:
        runner.start()
        deadline = time.monotonic() + 120
        while "storage unreachable" not in said:  # the trial met the outage, said so and waits
            frame = sys._current_frames().get(runner.ident or 0)  # where it waits, should it never say so
            assert time.monotonic() < deadline and runner.is_alive(), (said, errors, traceback.format_stack(frame))
            said += capfd.readouterr().err
            time.sleep(0.1)
    finally:
        subprocess.run([*SERVER["pg_ctl"], "start"], check=True, capture_output=True)
    runner.join(timeout=120)
    storage.engine.dispose()
    assert not errors and not runner.is_alive(), errors
    assert [t.state.name for t in load_trials(postgres, "stale-check-outage")] == ["COMPLETE", "COMPLETE"]


def test_a_server_that_accepts_but_never_answers_is_an_error_not_a_hang() -> None:
    # a port that takes connections and says nothing: a half-down server, or its port taken by another program
    silent = socket.create_server(("127.0.0.1", 0))
    port = silent.getsockname()[1]
    outcome: list[BaseException | None] = []

    def open_it() -> None:
        try:
            open_storage(f"postgresql+psycopg://tuner@127.0.0.1:{port}/autotune")
            outcome.append(None)
        except BaseException as exc:  # judged below
            outcome.append(exc)

    opener = threading.Thread(target=open_it, daemon=True)
    opener.start()
    opener.join(timeout=300)  # a bound for a loaded machine; the connection attempt gives up after seconds
    silent.close()
    assert not opener.is_alive(), "the connection attempt still waits"
    assert len(outcome) == 1 and isinstance(outcome[0], StorageError), outcome
    assert f"127.0.0.1:{port}" in str(outcome[0])
