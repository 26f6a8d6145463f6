"""The twin's vLLM personality as a process: flag set, stages of failure, readiness, endpoints,
streaming, metrics and the periodic log lines, read back through the vLLM engine's own parsers."""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from autotune.engines.base import LaunchPlan, counter_totals, parse_help_flags
from autotune.engines.vllm import VLLMEngine
from autotune.engines.vllm_logs import parse_engine_line, parse_spec_line
from autotune.measure.suites import Prompt
from autotune.outcomes import OutcomeKind
from autotune_twin.vllm.flags import help_text
from passmodel.profile import load_profile
from tests.twin.processes import REPO, Server, serving, start_twin, twin, wait_for

pytestmark = [pytest.mark.twin, pytest.mark.slow]

REAL_HELP = REPO / "tests" / "fixtures" / "vllm-0.33.0-serve-help.txt"
SERVE = ["--personality", "vllm", "serve", "Qwen/Qwen3.6-27B", "-tp", "2"]
BATCH = ["--max-num-seqs", "8", "--max-num-batched-tokens", "2048"]
MTP3 = ["--speculative-config", '{"method": "mtp", "num_speculative_tokens": 3}']
CODE_PROMPT = "Implement an LRU cache in Python without using functools.lru_cache or OrderedDict."
TWIN_OPTIONS = {
    "twin-drift", "twin-fault", "twin-fault-after", "twin-load-seconds", "twin-log-interval", "twin-profile",
    "twin-seed",
}  # fmt: skip
engine = VLLMEngine()


def start(tmp_path: Path, *argv: str) -> Server:
    return start_twin(tmp_path, *argv, "--host", "127.0.0.1", name="vllm-twin")


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    flags = [*MTP3, *BATCH, "--max-model-len", "32k", "--per-request-spec-decode-metrics", "summary"]
    timing = ["--twin-load-seconds", "0.3", "--twin-log-interval", "0.2"]
    with serving(tmp_path_factory.mktemp("vllm-twin"), *SERVE, *flags, *timing, "--host", "127.0.0.1") as running:
        yield running


# ---------------------------------------------------------------- command line


def _entries(text: str) -> dict[str, str]:
    """Long option -> what follows the first option string of its entry ('' for a switch)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        match = re.match(r"^  (--\S.*)$", line)
        if match is None:
            continue
        invocation = re.split(r"\s{2,}", match.group(1), maxsplit=1)[0]
        alternatives = re.split(r", (?=-)", invocation)
        rest = alternatives[0].partition(" ")[2]
        for alternative in alternatives:
            out[alternative.partition(" ")[0]] = rest
    return out


def test_help_all_is_vllm_0_33s_flag_set() -> None:
    real, ours = REAL_HELP.read_text(), help_text("all")
    real_flags, twin_flags = parse_help_flags(real), parse_help_flags(ours)
    assert twin_flags.flags - real_flags.flags == TWIN_OPTIONS
    assert real_flags.flags - twin_flags.flags == set()
    assert twin_flags.switches == real_flags.switches
    real_entries, twin_entries = _entries(real), _entries(ours)
    for name, rest in real_entries.items():
        if rest.startswith("{"):
            assert twin_entries[name] == rest, name  # same argparse choices


def test_help_and_argparse_errors_exit_like_vllm() -> None:
    overview = twin("--personality", "vllm", "serve", "--help")
    assert overview.returncode == 0 and "Config Groups:" in overview.stdout and "--help=all" in overview.stdout
    full = twin("--personality", "vllm", "serve", "--help=all")
    assert full.returncode == 0 and "--gpu-memory-utilization" in full.stdout
    unknown = twin(*SERVE, "--bogus-flag", "1")
    assert unknown.returncode == 2
    assert "vllm: error: unrecognized arguments: --bogus-flag 1" in unknown.stderr
    bad_json = twin(*SERVE, "--speculative-config", "{bad")
    assert bad_json.returncode == 2 and "error: argument --speculative-config/-sc: Value {bad" in bad_json.stderr
    ambiguous = twin(*SERVE, "--max-num", "8")
    assert ambiguous.returncode == 2 and "ambiguous option: --max-num" in ambiguous.stderr
    for result in (unknown, bad_json, ambiguous):
        assert engine.classify_failure(exit_code=2, log_text=result.stderr, timed_out=False).kind is (
            OutcomeKind.INVALID_CONFIG
        )
    assert twin("--personality", "vllm", "chat").returncode == 2
    assert twin("--personality", "tgi").returncode == 2


def test_without_personality_the_sglang_twin_is_unchanged() -> None:
    plain, explicit = twin("--help"), twin("--personality", "sglang", "--help")
    assert plain.returncode == explicit.returncode == 0
    assert plain.stdout == explicit.stdout and "--mem-fraction-static" in plain.stdout


# ---------------------------------------------------------------- stages of failure


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--max-num-seqs", "64", "--max-num-batched-tokens", "32"], "must be greater than or equal to max_num_seqs"),
        ([*MTP3, "--spec-tokens", "2", *BATCH], "are mutually exclusive"),
        (["--speculative-config", '{"method": "mtp"}', *BATCH], "num_speculative_tokens is required"),
        (["--spec-method", "qwen3_next_mtp", "--spec-tokens", "0", *BATCH], "Input should be greater than 0"),
        (["--gpu-memory-utilization", "1.5", *BATCH], "less than or equal to 1"),
        (["--kv-cache-dtype", "fp7", *BATCH], "Invalid kv_cache_dtype"),
        (["--max-model-len", "300k", *BATCH], "greater than the derived max_model_len"),
        # vllm/config/scheduler.py:317-329: without chunked prefill one step must hold a whole request
        (
            ["--disable-chunked-prefill", "--max-model-len", "32768", "--max-num-batched-tokens", "8192"],
            "ValueError: max_num_batched_tokens (8192) is smaller than max_model_len (32768). This effectively "
            "limits the maximum sequence length to max_num_batched_tokens and makes vLLM reject longer sequences. "
            "Please increase max_num_batched_tokens or decrease max_model_len.",
        ),
    ],
)
def test_config_stage_failures_are_invalid_configs(flags: list[str], message: str) -> None:
    result = twin(*SERVE, *flags, "--twin-load-seconds", "0")
    assert result.returncode == 1, result.stderr
    assert message in result.stderr
    assert "Initializing a V1 LLM engine" not in result.stderr  # refused before the engine starts
    failure = engine.classify_failure(exit_code=1, log_text=result.stderr, timed_out=False)
    assert failure.kind is OutcomeKind.INVALID_CONFIG and message in failure.reason


@pytest.mark.parametrize(
    ("flags", "kind", "message"),
    [
        (["--gpu-memory-utilization", "0.99"], OutcomeKind.MEMORY_TOO_HIGH, "less than desired GPU memory utilization"),
        (["--gpu-memory-utilization", "0.55"], OutcomeKind.MEMORY_TOO_LOW, "No available memory for the cache blocks"),
        (["--gpu-memory-utilization", "0.75"], OutcomeKind.MEMORY_TOO_LOW, "To serve at least one request"),
        (["--gpu-memory-utilization", "0.583", "--max-model-len", "auto"], OutcomeKind.MEMORY_TOO_LOW, "auto-fit"),
        (
            ["--gpu-memory-utilization", "0.97", "--max-num-seqs", "256"],
            OutcomeKind.MEMORY_TOO_HIGH,
            "warming up sampler",
        ),
    ],
)
def test_engine_stage_memory_failures_are_classified(flags: list[str], kind: OutcomeKind, message: str) -> None:
    args = [*BATCH, *flags] if "--max-num-seqs" not in flags else ["--max-num-batched-tokens", "2048", *flags]
    result = twin(*SERVE, *args, "--twin-load-seconds", "0.05")
    assert result.returncode == 1, result.stderr
    assert "Initializing a V1 LLM engine" in result.stderr and "EngineCore failed to start." in result.stderr
    assert result.stderr.rstrip().endswith("Engine core initialization failed. See root cause above. "
                                           "Failed core proc(s): {'EngineCore': 1}")  # fmt: skip
    failure = engine.classify_failure(exit_code=1, log_text=result.stderr, timed_out=False)
    assert failure.kind is kind and message in failure.reason


def test_port_refuses_until_ready_then_health_and_sigterm(tmp_path: Path) -> None:
    server = start(tmp_path, *SERVE, *BATCH, "--twin-load-seconds", "1.0")
    try:
        refused = server.wait_health(200)
        assert refused > 0  # connection refused while the engine started, not 503
        log = server.log_text()
        assert "Application startup complete." in log  # logged before the port listened
        assert log.splitlines()[0].endswith("model Qwen/Qwen3.6-27B") and "simulation, not real vLLM" in log
        assert engine.is_ready(httpx.Client(), server.url)
        assert server.stop() == 0  # exits on SIGTERM within stop's 5 s, before a SIGKILL would follow
    finally:
        server.close()


def test_auto_fit_is_read_back_and_disable_log_stats_turns_metrics_off(tmp_path: Path) -> None:
    server = start(
        tmp_path, *SERVE, *BATCH, "--gpu-memory-utilization", "0.6", "--max-model-len", "auto",
        "--disable-log-stats", "--twin-load-seconds", "0.05", "--twin-log-interval", "0.1",
    )  # fmt: skip
    try:
        server.wait_health(200)
        with httpx.Client() as client:
            effective = engine.effective_config(client, server.url, LaunchPlan(engine="vllm", flags={}))
            length = effective.values["max-model-len"]
            assert isinstance(length, int) and length < 262144  # auto-fit shrank it silently
            assert f"reduced from 262144 to {length}" in server.log_text()
            client.post(
                f"{server.url}/v1/completions", json={"prompt": CODE_PROMPT, "max_tokens": 8}
            ).raise_for_status()
            metrics = client.get(f"{server.url}/metrics").text
        assert "vllm:" not in metrics.replace("vLLM", "")
        time.sleep(0.3)  # three log intervals: with --disable-log-stats nothing is printed
        assert "Avg prompt throughput" not in server.log_text()
    finally:
        server.close()


# ---------------------------------------------------------------- a running server


def test_models_version_and_effective_config(server: Server) -> None:
    models = httpx.get(f"{server.url}/v1/models").json()
    assert models["data"][0]["id"] == "Qwen/Qwen3.6-27B" and models["data"][0]["max_model_len"] == 32000
    assert httpx.get(f"{server.url}/version").json() == {"version": "0.33.0"}
    with httpx.Client() as client:
        effective = engine.effective_config(client, server.url, LaunchPlan(engine="vllm", flags={}))
    assert effective.version == "0.33.0"
    assert effective.values["max-model-len"] == 32000 and effective.values["gpu-memory-utilization"] == 0.92
    assert effective.values["enable-prefix-caching"] is True and effective.values["kv-cache-dtype"] == "auto"
    assert isinstance(effective.values["kv-cache-size-tokens"], int)


def _events(response: httpx.Response) -> list[dict[str, object]]:
    out = []
    for line in response.text.splitlines():
        if line.startswith("data: ") and line != "data: [DONE]":
            out.append(json.loads(line[6:]))
    return out


def test_streaming_completion_with_usage_and_spec_metrics(server: Server) -> None:
    before = httpx.get(f"{server.url}/metrics").text
    body = {
        "prompt": CODE_PROMPT,
        "max_tokens": 64,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    events = _events(httpx.post(f"{server.url}/v1/completions", json=body, timeout=30))
    after = httpx.get(f"{server.url}/metrics").text
    steps, final = events[:-1], events[-1]
    counts = [e["usage"]["completion_tokens"] for e in steps]  # type: ignore[index]
    assert counts == sorted(counts) and counts[-1] == 64 and len(steps) < 64  # several tokens per step
    assert steps[-1]["choices"][0]["finish_reason"] == "length"  # type: ignore[index]
    assert final["choices"] == [] and final["usage"]["completion_tokens"] == 64  # type: ignore[index]
    spec = final["metrics"]["speculative_decoding"]  # type: ignore[index]
    assert spec["num_spec_tokens"] == 3 and len(spec["acceptance_histogram"]) == 4
    assert spec["mean_acceptance_length"] == pytest.approx(
        1 + spec["num_accepted_draft_tokens"] / spec["num_spec_steps"]
    )
    # the counters moved by exactly this request: 1 + Δaccepted / Δdrafts is its accept length
    b, a = counter_totals(before), counter_totals(after)
    assert a["vllm:generation_tokens_total"] - b["vllm:generation_tokens_total"] == 64
    drafts = a["vllm:spec_decode_num_drafts_total"] - b["vllm:spec_decode_num_drafts_total"]
    accepted = a["vllm:spec_decode_num_accepted_tokens_total"] - b["vllm:spec_decode_num_accepted_tokens_total"]
    assert drafts == spec["num_spec_steps"] and 1 + accepted / drafts == pytest.approx(spec["mean_acceptance_length"])


def test_engine_streams_and_cross_checks_against_the_twin(server: Server) -> None:
    async def run() -> tuple[list[object], str | None, str | None]:
        async with httpx.AsyncClient(timeout=30) as client:
            before = await engine.scrape_metrics(client, server.url)
            prompt = Prompt(id="code", category="code", prompt=CODE_PROMPT, max_tokens=48)
            chunks = [
                c async for c in engine.stream_generate(client, server.url, prompt, max_tokens=48, ignore_eos=True)
            ]
            return chunks, before, await engine.scrape_metrics(client, server.url)

    mark = len(server.log_text())
    chunks, before, after = asyncio.run(run())
    assert chunks[-1].completion_tokens == 48 and chunks[-1].accept_length is not None  # type: ignore[attr-defined]
    assert 1.0 < chunks[-1].accept_length <= 4.0  # type: ignore[attr-defined]
    wait_for(lambda: "SpecDecoding metrics" in server.log_text()[mark:])
    window = server.log_text()[mark:]
    lines = [p for p in map(parse_engine_line, window.splitlines()) if p is not None]
    assert lines and all(p.engine == 0 for p in lines) and max(p.generation_throughput for p in lines) > 0
    assert all(parse_spec_line(line) for line in window.splitlines() if "SpecDecoding metrics" in line)
    stats = engine.server_stats(log_window=window, metrics_before=before, metrics_after=after)
    assert stats is not None and stats.generated_tokens == 48 and stats.log_lines >= 1
    assert stats.metrics_accept_length == pytest.approx(chunks[-1].accept_length, rel=1e-3)  # type: ignore[attr-defined]


def test_idle_server_prints_no_stats_lines(server: Server) -> None:
    def lines() -> int:
        return server.log_text().count("Avg prompt throughput")

    before = lines()
    body = {"prompt": CODE_PROMPT, "max_tokens": 16, "ignore_eos": True}
    httpx.post(f"{server.url}/v1/completions", json=body, timeout=30).raise_for_status()
    wait_for(lambda: lines() > before)  # a busy interval is logged (so the count below is not trivially 0)
    time.sleep(0.6)  # three intervals: the last busy interval and the one after it are logged
    settled = lines()
    time.sleep(0.6)  # three more intervals, idle
    assert lines() == settled


def test_chat_plain_completion_and_request_errors(server: Server) -> None:
    chat = {
        "messages": [{"role": "user", "content": "Say hello."}],
        "max_tokens": 12,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    events = _events(httpx.post(f"{server.url}/v1/chat/completions", json=chat, timeout=30))
    assert events[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}  # type: ignore[index]
    assert events[-1]["usage"]["completion_tokens"] <= 12  # type: ignore[index]
    plain = httpx.post(f"{server.url}/v1/completions", json={"prompt": "Count from 1 to 20.", "max_tokens": 10}).json()
    assert plain["object"] == "text_completion" and plain["usage"]["completion_tokens"] <= 10
    assert "speculative_decoding" in plain["metrics"]
    too_long = httpx.post(f"{server.url}/v1/completions", json={"prompt": "hi", "max_tokens": 40000})
    assert too_long.status_code == 400 and "'max_tokens' or 'max_completion_tokens' is too large" in too_long.text
    other = httpx.post(f"{server.url}/v1/completions", json={"model": "other", "prompt": "hi"})
    assert other.status_code == 404 and "does not exist" in other.json()["error"]["message"]


def test_metrics_names_and_cache_config_info(server: Server) -> None:
    text = httpx.get(f"{server.url}/metrics").text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    for name in (
        "vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc",
        "vllm:generation_tokens", "vllm:prompt_tokens", "vllm:spec_decode_num_drafts",
        "vllm:spec_decode_num_draft_tokens", "vllm:spec_decode_num_accepted_tokens",
        "vllm:spec_decode_num_accepted_tokens_per_pos", "vllm:cache_config_info",
        "vllm:time_to_first_token_seconds", "vllm:request_time_per_output_token_seconds",
    ):  # fmt: skip
        assert name in families, name
    usage = families["vllm:kv_cache_usage_perc"].samples[0].value
    assert 0.0 <= usage <= 1.0
    positions = {s.labels["position"] for s in families["vllm:spec_decode_num_accepted_tokens_per_pos"].samples}
    assert positions == {"0", "1", "2"}
    info = families["vllm:cache_config_info"].samples[0].labels
    assert info["gpu_memory_utilization"] == "0.92" and info["engine"] == "0" and int(info["num_gpu_blocks"]) > 0


def test_inventory_shows_what_the_serving_twin_asked_for(server: Server) -> None:
    """vLLM fills gpu-memory-utilization x total memory; NVML (the inventory) shows it held by the server."""
    result = twin("--personality", "vllm", "--twin-inventory")
    assert result.returncode == 0, result.stderr
    total = load_profile().gpus.memory_total_bytes
    for gpu in json.loads(result.stdout)["gpus"]:  # tp 2: both GPUs
        held = {p["pid"]: p["used_memory_bytes"] for p in gpu["processes"]}
        assert held.get(server.process.pid) == int(0.92 * total)  # vLLM's default utilization
