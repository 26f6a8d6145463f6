"""The measurement protocol against the real twin process over HTTP: stop rule, drift, categories,
the server's own numbers, and ``autotune bench``."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from autotune.engines.sglang import SGLangEngine
from autotune.measure.client import Measurement
from autotune.measure.protocol import EarlyStop, MeasureSettings
from autotune.measure.suites import Suite, load_suite
from autotune.server import ServerProcess, find_free_port
from autotune.trial import LogWindow, measure_with_server_stats
from tests.conftest import autotune_cmd

pytestmark = [pytest.mark.twin, pytest.mark.slow]
HAND_FOUND = [
    "--speculative-algorithm",
    "NEXTN",
    "--speculative-num-steps",
    "3",
    "--speculative-eagle-topk",
    "1",
    "--speculative-num-draft-tokens",
    "4",
    "--mem-fraction-static",
    "0.88",
    "--context-length",
    "131072",
]


class Twin:
    def __init__(self, base_url: str, log: Path) -> None:
        self.base_url = base_url
        self.log = log

    def measure(self, suite: Suite, settings: MeasureSettings) -> Measurement:
        return asyncio.run(
            measure_with_server_stats(SGLangEngine(), self.base_url, suite, settings, log=LogWindow(self.log))
        )


def start_twin(tmp_path: Path, *extra: str) -> Iterator[Twin]:
    port = find_free_port()
    argv = [
        sys.executable,
        "-m",
        "autotune_twin",
        "--model-path",
        "Qwen/Qwen3.6-27B",
        "--tp-size",
        "2",
        "--port",
        str(port),
        "--enable-metrics",
        "--twin-load-seconds",
        "0.2",
        "--twin-seed",  # these tests compare figures within one launch: its draws repeat exactly
        "0",
        *HAND_FOUND,
        *extra,
    ]
    server = ServerProcess(argv, env={}, log_path=tmp_path / "twin.log", records_dir=tmp_path / "rec")
    engine = SGLangEngine()
    with server, httpx.Client() as client:
        assert server.wait_ready(lambda: engine.is_ready(client, f"http://127.0.0.1:{port}"), timeout_s=60).ready
        yield Twin(f"http://127.0.0.1:{port}", tmp_path / "twin.log")


@pytest.fixture(scope="module")
def twin(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Twin]:
    yield from start_twin(tmp_path_factory.mktemp("twin"), "--decode-log-interval", "10")


def suite_of(*ids: str) -> Suite:
    prompts = {p.id: p for name in ("coding", "chat", "repetitive") for p in load_suite(f"builtin:{name}").prompts}
    return Suite(name="picked", prompts=[prompts[i] for i in ids])


def test_stop_rule_reached_on_a_steady_config(twin: Twin) -> None:
    # Acceptance is random per pass, as on a real server: ±5% takes a few hundred passes.
    result = twin.measure(
        suite_of("coding-01", "coding-02"),
        MeasureSettings(warmup_requests=1, max_tokens=200, target_rel_ci=0.05, max_rounds=12),
    )
    assert result.precision_reached and result.stop_reason == "precision ±5% reached"
    assert result.rounds < 12
    # computed over the rounds; whether it is steady is not asserted here: a machine whose load rises
    # during the measurement makes a real drift (CI saw -5 %), and test_measure's fake server pins the rule
    assert result.steadiness is not None
    assert [r.round for r in result.requests[:1]] == [-1]  # the warm-up request is recorded apart ...
    assert result.metric("decode_tok_s").n == result.rounds  # ... and is not in the estimate  # type: ignore[union-attr]


def test_per_category_numbers_follow_the_twin_acceptance(twin: Twin) -> None:
    result = twin.measure(
        suite_of("coding-01", "chat-01", "repetitive-01"),
        MeasureSettings(warmup_requests=0, max_tokens=160, ignore_eos=True, min_rounds=2, max_rounds=2),
    )
    by = {c.category: c for c in result.categories}
    accept = {name: c.accept_length.value for name, c in by.items() if c.accept_length}
    assert accept["repetitive"] > accept["coding"] > accept["chat"]
    assert by["repetitive"].decode_tok_s.value > by["coding"].decode_tok_s.value > by["chat"].decode_tok_s.value


def test_server_and_client_agree_within_3_percent(twin: Twin) -> None:
    result = twin.measure(
        suite_of("coding-03"),
        MeasureSettings(warmup_requests=0, max_tokens=400, ignore_eos=True, min_rounds=2, max_rounds=2),
    )
    server = result.server
    assert server is not None and server.gen_tok_s is not None and server.log_lines >= 4
    client = result.metric("decode_tok_s").value  # type: ignore[union-attr]
    assert abs(server.gen_tok_s - client) / client < 0.03
    assert server.generated_tokens == 800
    assert server.accept_length == pytest.approx(result.metric("accept_length").value, rel=0.05)  # type: ignore[union-attr]


def test_a_hopeless_measurement_stops_after_its_first_round(twin: Twin) -> None:
    settings = MeasureSettings(warmup_requests=0, max_tokens=64, min_rounds=3, max_rounds=4, target_rel_ci=0.001)
    full = twin.measure(suite_of("coding-01"), settings)
    assert full.rounds >= 3 and not full.early_stopped
    # A best far above what this server can plausibly reach (3 sd of a 5 % noise): one round is enough.
    bar = full.value * 1.5
    stopped = twin.measure(
        suite_of("coding-01"), settings.model_copy(update={"early_stop": EarlyStop(bar=bar, noise_rel=0.05)})
    )
    assert stopped.early_stopped and stopped.rounds == 1 and stopped.stop_reason.startswith("early stop")
    # A best within reach (half what this server measured, so a loaded machine slowing the next
    # measurement cannot put it out of reach): measured in full.
    near = twin.measure(
        suite_of("coding-01"),
        settings.model_copy(update={"early_stop": EarlyStop(bar=full.value * 0.5, noise_rel=0.05)}),
    )
    assert not near.early_stopped and near.rounds >= 3


def test_drift_is_flagged_when_the_twin_drifts(tmp_path: Path) -> None:
    for drifting in start_twin(tmp_path, "--twin-drift", "3.0"):
        result = drifting.measure(
            suite_of("coding-01"),
            MeasureSettings(warmup_requests=0, max_tokens=64, min_rounds=6, max_rounds=6, target_rel_ci=0.001),
        )
    assert result.steadiness is not None and not result.steadiness.steady
    assert result.steadiness.drift < -0.03


def test_bench_url_measures_a_running_server(twin: Twin, tmp_path: Path) -> None:
    assert twin.base_url.startswith("http://")
    proc = subprocess.run(
        autotune_cmd(
            "bench",
            "--url",
            twin.base_url.removeprefix("http://"),  # as servers print their address: without a scheme
            "--suite",
            "builtin:repetitive",
            "--max-tokens",
            "48",
            "--warmup",
            "1",
            "--max-rounds",
            "2",
            "--json",
        ),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)["measurement"]
    assert data["warmup_requests"] == 1 and data["rounds"] == 2 and data["max_tokens_cap"] == 48
    assert {c["category"] for c in data["categories"]} == {"repetitive"}


def test_bench_profile_relaunches_and_checks_the_recorded_numbers(tmp_path: Path) -> None:
    from autotune.profile import Profile, ProfileMetric, render_yaml

    profile = Profile(
        study="s",
        trial=0,
        engine="sglang",
        model="Qwen/Qwen3.6-27B",
        launcher=["{python}", "-m", "autotune_twin", "--twin-load-seconds", "0.2", "--twin-seed", "5"],  # same speed
        flags={
            "tp-size": 2,
            "speculative-algorithm": "NEXTN",
            "speculative-num-steps": 3,
            "speculative-eagle-topk": 1,
            "speculative-num-draft-tokens": 4,
        },
        suite="builtin:coding",
        measure=MeasureSettings(warmup_requests=0, prompts_per_round=2, max_tokens=96, min_rounds=4, max_rounds=4),
        metrics={"decode_tok_s": ProfileMetric(value=70.0, unit="tok/s", ci95=1.0)},  # the remembered "70"
    )
    path = tmp_path / "p.yaml"
    path.write_text(render_yaml(profile))
    proc = subprocess.run(
        autotune_cmd("bench", "--profile", str(path), "--workdir", str(tmp_path / "bench"), "--json"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr  # a coding prompt does not give 70 tok/s
    verdict = json.loads(proc.stdout)["verdict"]
    assert verdict["category"] == "slower" and verdict["high"] < -verdict["margin"]
    measured = next(m for m in json.loads(proc.stdout)["measurement"]["metrics"] if m["name"] == "decode_tok_s")
    # The next morning: the figure it measured, recorded as a profile's, checked on a fresh launch.
    honest = profile.model_copy(update={"metrics": {"decode_tok_s": ProfileMetric(
        value=measured["value"], unit="tok/s", ci95=measured["ci95"])}})  # fmt: skip
    path.write_text(render_yaml(honest))
    proc = subprocess.run(
        autotune_cmd("bench", "--profile", str(path), "--workdir", str(tmp_path / "bench"), "--margin", "0.25"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    # not slower by more than 25 %: the twin's launches are alike, its interval the 5 % prior's ±9.8 % and the
    # rounds'; a loaded machine slowed the second launch by a few % (-1.2 %, -12.2 % to +9.7 %), so 12 % flaked
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "not slower than recorded by more than 25%" in proc.stdout, proc.stdout
    path.write_text(render_yaml(profile))
    proc = subprocess.run(
        autotune_cmd("bench", "--profile", str(path), "--workdir", str(tmp_path / "bench")),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and "slower by" in proc.stdout and "(significant, beyond the 3% margin)" in proc.stdout
