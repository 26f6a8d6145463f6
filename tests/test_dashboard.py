"""``autotune dashboard``: a real twin study, the real command as a process, its JSON API and a real browser."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import optuna
import pytest

from autotune.server import find_free_port
from autotune.study.attrs import trial_record
from tests.browser import chromium, screenshot, wait_for_text
from tests.conftest import TWIN_SPACE, autotune_cmd

pytestmark = [pytest.mark.twin, pytest.mark.slow]

STUDY = "qwen3.6-27b-2xa6000-twin"


@pytest.fixture(scope="module")
def study_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A short twin study (two baselines and two sampled trials), run through the real CLI."""
    cwd = tmp_path_factory.mktemp("dashboard")
    proc = subprocess.run(
        autotune_cmd("study", str(TWIN_SPACE), "--trials", "4", "--seed", "1", "--confirm-top", "0"),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return cwd


def load(study_dir: Path) -> optuna.Study:
    return optuna.load_study(study_name=STUDY, storage=f"sqlite:///{study_dir}/studies/{STUDY}.db")


@dataclass
class Running:
    base_url: str
    study_url: str
    output: Path


@pytest.fixture(scope="module")
def dashboard(study_dir: Path) -> Iterator[Running]:
    """``autotune dashboard STUDY --port N`` as a user starts it; ready when its API answers."""
    port = find_free_port()
    output = study_dir / "dashboard.out"
    with output.open("w") as out:
        proc = subprocess.Popen(
            autotune_cmd("dashboard", STUDY, "--port", str(port)), cwd=study_dir, stdout=out, stderr=subprocess.STDOUT,
            preexec_fn=interruptible,  # Ctrl-C as at a terminal, even when the tests run in the background
        )
    base_url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 300  # readiness is the API answering; the bound is for a loaded machine
        while True:
            assert proc.poll() is None, f"the dashboard exited early:\n{output.read_text()}"
            try:
                if httpx.get(f"{base_url}/api/meta", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, f"the dashboard never answered:\n{output.read_text()}"
            time.sleep(0.2)
        printed = output.read_text()
        study_url = next(w for w in printed.split() if w.startswith(f"{base_url}/dashboard/studies/"))
        yield Running(base_url=base_url, study_url=study_url, output=output)
    finally:
        proc.send_signal(signal.SIGINT)  # Ctrl-C, as a user stops it
        try:
            code = proc.wait(timeout=120)  # serve_forever polls every 0.5 s: 120 s only matters under heavy load
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            raise AssertionError("the dashboard did not stop on Ctrl-C") from None
    assert code == 0, output.read_text()


def interruptible() -> None:
    """A test run started in the background (``&``, CI) inherits SIGINT ignored; a user's terminal does not."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def best_ok_trial(study: optuna.Study) -> optuna.trial.FrozenTrial:
    ok = [t for t in study.trials if t.user_attrs.get("outcome") == "ok" and trial_record(t).reused_from is None]
    assert ok, "the study measured nothing"
    return max(ok, key=lambda t: t.value or 0.0)


def test_prints_the_study_url_bound_to_loopback(dashboard: Running, study_dir: Path) -> None:
    printed = dashboard.output.read_text()
    study_id = load(study_dir)._study_id
    assert dashboard.study_url == f"{dashboard.base_url}/dashboard/studies/{study_id}"
    assert "Ctrl-C stops it" in printed and "Traceback" not in printed
    assert dashboard.base_url.startswith("http://127.0.0.1:")


def test_api_lists_the_study_and_each_trials_artifacts(dashboard: Running, study_dir: Path) -> None:
    studies = httpx.get(f"{dashboard.base_url}/api/studies", timeout=10).json()["study_summaries"]
    summary = next(s for s in studies if s["study_name"] == STUDY)
    detail = httpx.get(f"{dashboard.base_url}/api/studies/{summary['study_id']}", timeout=10).json()
    study = load(study_dir)
    assert len(detail["trials"]) == len(study.trials) == 4
    for trial, stored in zip(detail["trials"], study.trials, strict=True):
        attrs = {a["key"]: a["value"] for a in trial["user_attrs"]}
        assert attrs["outcome"] == stored.user_attrs["outcome"]
        names = {a["filename"] for a in trial["artifacts"]}
        if stored.user_attrs["outcome"] == "ok" and trial_record(stored).reused_from is None:
            number = f"{stored.number:04d}"
            assert names == {f"trial-{number}.log", f"trial-{number}.measurement.json"}
            assert float(attrs["decode_tok_s [tok/s]"]) == pytest.approx(
                stored.user_attrs["metrics"]["decode_tok_s"]["value"], abs=1e-3
            )
    # one artifact, fetched as the dashboard's download link does
    best = best_ok_trial(study)
    trial = next(t for t in detail["trials"] if t["number"] == best.number)
    measurement = next(a for a in trial["artifacts"] if a["filename"].endswith(".measurement.json"))
    response = httpx.get(
        f"{dashboard.base_url}/artifacts/{summary['study_id']}/{trial['trial_id']}/{measurement['artifact_id']}",
        timeout=10,
    )
    assert response.status_code == 200 and response.headers["content-type"].startswith("application/json")
    measured = json.loads(response.text)
    assert measured[0]["metrics"][0]["name"] == "decode_tok_s"
    assert measured[0]["categories"] and measured[0]["requests"]


@pytest.mark.browser
def test_a_person_sees_the_study_a_trial_and_its_log(dashboard: Running, study_dir: Path) -> None:
    study = load(study_dir)
    best = best_ok_trial(study)
    number = f"{best.number:04d}"
    with chromium() as browser:
        browser.get(dashboard.study_url)
        text = wait_for_text(browser, f"{STUDY} (id=", "History", "Hyperparameter Importance", "Study User Attributes")
        assert "suite_ref builtin:coding" in text
        screenshot(browser, "dashboard-study.png")

        browser.get(f"{dashboard.study_url}/trials?numbers={best.number}")
        text = wait_for_text(
            browser, f"Trial {best.number} (trial_id=", "User Attributes", "Artifacts", f"trial-{number}.log"
        )
        screenshot(browser, "dashboard-trial.png")
        assert f"trial-{number}.measurement.json" in text
        assert "decode_tok_s [tok/s]" in text and "outcome ok" in text
        assert "speculative-num-steps" in text  # the sampled flags, as parameters

        log = next(
            a
            for a in optuna.artifacts.get_all_artifact_meta(best, storage=study._storage)
            if a.filename.endswith(".log")
        )
        browser.get(f"{dashboard.base_url}/artifacts/{study._study_id}/{best._trial_id}/{log.artifact_id}")
        text = wait_for_text(browser, "autotune SGLang twin", "KV Cache is allocated")
        screenshot(browser, "dashboard-artifact.png")


def test_port_in_use_is_a_one_line_error(study_dir: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        proc = subprocess.run(
            autotune_cmd("dashboard", STUDY, "--port", str(port)),
            cwd=study_dir,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert proc.returncode == 2
    assert f"cannot listen on 127.0.0.1:{port}" in proc.stderr and "--port" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_without_optuna_dashboard_it_says_how_to_get_it(study_dir: Path) -> None:
    # The installed package hidden from the import system, as on a machine without the extra.
    code = (
        "import sys; sys.modules['optuna_dashboard'] = None; "
        "from autotune.cli import main; sys.argv = ['autotune', 'dashboard', %r]; main()" % STUDY
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=study_dir, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "optuna-dashboard is not installed" in proc.stderr
    assert "pip install 'autotune[dashboard]'" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_unknown_study_exits_2(tmp_path: Path) -> None:
    proc = subprocess.run(autotune_cmd("dashboard", "nope"), cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "no study named 'nope'" in proc.stderr
