"""Secret launch flags (``--api-key``) are sent by the client and stored nowhere; a failure that
repeats identically on every launch stops the study with one line instead of failing all night."""

from __future__ import annotations

import contextlib
import json
import sqlite3
import subprocess
from pathlib import Path

import pytest
import yaml

from autotune.profile import Profile, render
from autotune.records import TrialRecord
from autotune.secrets import auth_headers, is_secret_flag, redact_flags, secret_env_name
from autotune.stopping import RepeatedFailure
from autotune.testing.records import trial_record
from tests.conftest import TWIN_SPACE, autotune_cmd

STUDY = "secret"
KEY = "sk-Very$ecret'Key\"42"  # quotes and a dollar: shell and JSON escaping must not leak it either


def quick_space(tmp_path: Path, **changes: object) -> Path:
    data = yaml.safe_load(TWIN_SPACE.read_text())
    data["study"] = STUDY
    data["measurement"].update(
        {"warmup_requests": 0, "prompts_per_round": 1, "max_tokens": 16, "min_rounds": 2, "max_rounds": 2}
    )
    data["launch"] = {"timeout_s": 60, "stop_timeout_s": 5}
    data.update(changes)
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_secret_flag_names() -> None:
    assert all(is_secret_flag(f) for f in ("api-key", "--admin-api-key", "ssl-keyfile-password", "hf-token"))
    assert not any(is_secret_flag(f) for f in ("max-total-tokens", "tokenizer-path", "api-key-file", "tp-size"))
    assert secret_env_name("--admin-api-key") == "AUTOTUNE_ADMIN_API_KEY"
    assert redact_flags({"api-key": KEY, "tp-size": 2}) == {"api-key": "***", "tp-size": 2}
    assert auth_headers({"api-key": KEY}) == {"Authorization": f"Bearer {KEY}"}
    assert auth_headers({"tp-size": 2}) == {}


def study_watched_while_servers_run(tmp_path: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    """Run the study, reading every file under its studies folder over and over while it runs: the
    key must be in none of them at any moment (a server's record and its log are written while the
    server runs, and the twin, as SGLang does, logs its arguments). Some reads must fall while a
    server runs (its record is there), or the check proved nothing."""
    out, err = tmp_path / "study.out", tmp_path / "study.err"
    with out.open("w") as stdout, err.open("w") as stderr:
        study = subprocess.Popen(argv, cwd=tmp_path, stdout=stdout, stderr=stderr, text=True)
        reads_while_serving = 0
        try:
            while study.poll() is None:
                serving = list((tmp_path / "studies").rglob("server-*.json"))
                for path in (tmp_path / "studies").rglob("*"):
                    with contextlib.suppress(OSError):  # a file may go between listing and reading
                        assert b"Very$ecret" not in path.read_bytes(), path
                reads_while_serving += bool(serving) and all(path.exists() for path in serving)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    study.wait(timeout=0.05)
        finally:
            if study.poll() is None:
                study.kill()
            study.wait()
    assert reads_while_serving, "no read fell while a server ran"
    return subprocess.CompletedProcess(argv, study.returncode, out.read_text(), err.read_text())


@pytest.mark.twin
@pytest.mark.slow
def test_a_study_with_an_api_key_measures_and_stores_no_key(tmp_path: Path) -> None:
    feasible = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3, "speculative-eagle-topk": 1,
                "mem-fraction-static": 0.88}  # fmt: skip
    data = yaml.safe_load(TWIN_SPACE.read_text())
    space = quick_space(
        tmp_path, fixed={**data["fixed"], "api-key": KEY}, baselines=[{"name": "known", "flags": feasible}]
    )
    proc = study_watched_while_servers_run(tmp_path, autotune_cmd("study", str(space), "--trials", "2", "--seed", "1"))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert KEY not in proc.stdout + proc.stderr
    db = tmp_path / "studies" / f"{STUDY}.db"
    with sqlite3.connect(db) as conn:
        dump = "\n".join(conn.iterdump())
        outcomes = [row[0] for row in conn.execute(
            "SELECT value_json FROM trial_user_attributes WHERE key = 'outcome' ORDER BY trial_id")]  # fmt: skip
    assert json.loads(outcomes[0]) == "ok", outcomes  # the key reached the server: it measured
    for needle in (KEY, json.dumps(KEY)[1:-1], "Very$ecret"):
        assert needle not in dump
    assert "api-key" in dump  # the flag is named, its value is not
    for path in (tmp_path / "studies").rglob("*"):
        if path.is_file():
            assert b"Very$ecret" not in path.read_bytes(), path
    for fmt in ("yaml", "sh", "systemd"):
        out = subprocess.run(autotune_cmd("export", STUDY, "--format", fmt), cwd=tmp_path, check=True,
                             capture_output=True, text=True).stdout  # fmt: skip
        assert "Very$ecret" not in out and "AUTOTUNE_API_KEY" in out, out
    for args in (["show", STUDY], ["show", STUDY, "--json"]):
        out = subprocess.run(autotune_cmd(*args), cwd=tmp_path, check=True, capture_output=True, text=True).stdout
        assert "Very$ecret" not in out


@pytest.mark.twin
@pytest.mark.slow
def test_exported_script_reads_the_key_from_the_environment(tmp_path: Path) -> None:
    profile = Profile(study="s", trial=0, engine="sglang", model="m", launcher=["python", "-m", "x"],
                      flags={"tp-size": 2, "api-key": "***"})  # fmt: skip
    script = render(profile, "sh")
    assert '--api-key "$AUTOTUNE_API_KEY"' in script
    assert ': "${AUTOTUNE_API_KEY:?' in script
    unit = render(profile, "systemd")
    assert "--api-key ${AUTOTUNE_API_KEY}" in unit and "EnvironmentFile=" in unit
    assert yaml.safe_load(render(profile, "yaml"))["env"] == {"AUTOTUNE_API_KEY": None}
    assert profile.with_secrets({"AUTOTUNE_API_KEY": KEY}).flags["api-key"] == KEY


def record(number: int, outcome: str, reason: str | None = None, state: str = "FAIL") -> TrialRecord:
    return trial_record(number, state=state, outcome=outcome, reason=reason)


def test_repeated_failure_rule() -> None:
    rule = RepeatedFailure(times=3)
    same = [record(i, "measurement-failed", f"401 Unauthorized for url http://127.0.0.1:{4000 + i}/server_info")
            for i in range(3)]  # fmt: skip
    assert rule(same) is not None and "401 Unauthorized" in (rule(same) or "")
    assert rule(same[:2]) is None
    assert rule([same[0], record(1, "ok", state="COMPLETE"), *same[1:]]) is None  # a success in between
    assert rule([same[0], record(1, "crashed", "Segmentation fault"), *same[1:]]) is None  # not identical
    assert rule([*same[:2], record(5, "infeasible-memory-low", "oom", "COMPLETE"), same[2]]) is None
    # once a launch has served, the same failure may be a region of the space: six in a row, not three
    served = record(0, "ok", state="COMPLETE")
    later = [record(i, "crashed", f"OSError: /models/d{i % 1} is not a draft model") for i in range(1, 7)]
    assert rule([served, *later[:5]]) is None
    assert "6 launches in a row" in (rule([served, *later]) or "")


@pytest.mark.twin
@pytest.mark.slow
def test_a_failure_that_repeats_on_every_launch_stops_the_study(tmp_path: Path) -> None:
    schedule = tmp_path / "faults.json"
    schedule.write_text(json.dumps(["exit-on-start"] * 20))
    space = quick_space(tmp_path, env={"AUTOTUNE_TWIN_FAULT_SCHEDULE": str(schedule)}, baselines=[])
    proc = subprocess.run(autotune_cmd("study", str(space), "--trials", "20", "--seed", "2"), cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)  # fmt: skip
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if line.startswith("Error: ")]
    assert len(errors) == 1 and "the same failure in 3 launches in a row" in errors[0], proc.stderr
    launches = int((tmp_path / "faults.json.count").read_text())
    assert launches == 3
