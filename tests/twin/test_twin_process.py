"""The twin as a process: command line, exit codes, readiness, endpoints, streaming, shutdown."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from autotune_twin import memory
from autotune_twin.launch import resolve_launch
from autotune_twin.sglang.flags import parse_args
from passmodel import physics
from passmodel.profile import load_profile
from tests.twin.processes import Server, free_port, serving, start_twin, twin

pytestmark = [pytest.mark.twin, pytest.mark.slow]

MODEL = ["--model-path", "Qwen/Qwen3.6-27B", "--tp-size", "2"]
NEXTN = (
    "--speculative-algorithm NEXTN --speculative-num-steps 3 --speculative-eagle-topk 1 "
    "--speculative-num-draft-tokens 4"
).split()
TOO_LOW = (
    "Loaded weights leave no GPU memory for the KV cache",
    "Not enough memory. Please try to increase --mem-fraction-static",
    "Not enough GPU memory for hybrid (mamba/linear-attention) state cache",
    "Hybrid (mamba/linear-attention) state cache is too small to serve any requests",
)
CODE_PROMPT = "Implement an LRU cache in Python without using functools.lru_cache or OrderedDict."


def start(tmp_path: Path, *argv: str, host: str | None = None) -> Server:
    return start_twin(tmp_path, *argv, host=host)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    flags = [*NEXTN, "--enable-metrics", "--twin-load-seconds", "0.3", "--decode-log-interval", "5"]
    with serving(tmp_path_factory.mktemp("twin"), *MODEL, *flags) as running:
        yield running


# -- command line -----------------------------------------------------------------------------------


def test_help_lists_sglang_flags() -> None:
    result = twin("--help")
    assert result.returncode == 0
    assert "usage: launch_server.py" in result.stdout
    assert "  --mem-fraction-static MEM_FRACTION_STATIC" in result.stdout
    assert "--mamba-scheduler-strategy" not in result.stdout


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        (["--mamba-scheduler-strategy", "auto"], "unrecognized arguments: --mamba-scheduler-strategy"),
        (["--no-such-flag"], "unrecognized arguments: --no-such-flag"),
        (["--cuda-graph-max-bs", "16"], "ambiguous option: --cuda-graph-max-bs"),
        (["--mamba-radix-cache-strategy", "sometimes"], "argument --mamba-radix-cache-strategy: invalid choice"),
    ],
)
def test_bad_flags_exit_2_like_argparse(flag: list[str], message: str) -> None:
    result = twin(*MODEL, *flag)
    assert result.returncode == 2
    assert "usage: launch_server.py" in result.stderr
    assert f"launch_server.py: error: {message}" in result.stderr


def test_inventory_schema(tmp_path: Path) -> None:
    result = twin("--twin-inventory", host=tmp_path.name)
    assert result.returncode == 0
    inventory = json.loads(result.stdout)
    assert inventory["driver_version"] == "twin (simulated)" and inventory["simulated"] is True
    assert [g["index"] for g in inventory["gpus"]] == [0, 1]
    assert inventory["gpus"][0] == {
        "index": 0,
        "name": "NVIDIA RTX A6000 (simulated)",
        "uuid": "TWIN-GPU-0",
        "memory_total_bytes": 51539607552,
        "memory_used_bytes": 0,
        "memory_free_bytes": 51539607552,
        "memory_bus_width_bits": 384,
        "memory_max_clock_mhz": 8001,
        "bandwidth_bytes_per_s": 768000000000,
        "processes": [],
    }


def inventory_on(host: str) -> dict[str, Any]:
    result = twin("--twin-inventory", host=host)
    assert result.returncode == 0, result.stderr
    return cast(dict[str, Any], json.loads(result.stdout))


def test_inventory_shows_what_a_serving_twin_holds_until_it_stops(tmp_path: Path) -> None:
    host = tmp_path.name
    flags = [*MODEL, *NEXTN, "--context-length", "131072", "--mem-fraction-static", "0.88",
             "--mamba-full-memory-ratio", "0.5", "--cuda-graph-max-bs-decode", "16"]  # fmt: skip
    server = start(tmp_path, *flags, "--twin-load-seconds", "0.2", host=host)
    try:
        server.wait_health(200)
        serving = inventory_on(host)
        other_host = inventory_on(f"{host}-other")
    finally:
        assert server.stop() == 0
    stopped = inventory_on(host)
    profile = load_profile()
    cfg = resolve_launch(parse_args(flags)[0], profile)
    held = memory.held_bytes(profile, memory.plan_memory(profile, cfg), ready=True)
    for index in (0, 1):  # tp-size 2: both GPUs, as NVML would show a real TP server
        gpu = serving["gpus"][index]
        assert gpu["processes"] == [{"pid": server.process.pid, "used_memory_bytes": int(held)}]
        assert gpu["memory_used_bytes"] == profile.gpus.idle_used_bytes + int(held)
        assert gpu["memory_free_bytes"] == gpu["memory_total_bytes"] - gpu["memory_used_bytes"]
        assert stopped["gpus"][index]["processes"] == [] and other_host["gpus"][index]["processes"] == []
        assert stopped["gpus"][index]["memory_used_bytes"] == profile.gpus.idle_used_bytes
    # the server's own log says what it saw: free memory, then what the pools left
    text = server.log_text()
    assert f"Load weight begin. avail mem={memory.free_bytes_at_start(profile) / physics.GIB:.2f} GB" in text


def test_a_killed_twins_memory_is_not_counted(tmp_path: Path) -> None:
    host = tmp_path.name
    server = start(tmp_path, *MODEL, "--twin-load-seconds", "0.1", host=host)
    server.wait_health(200)
    assert inventory_on(host)["gpus"][0]["processes"] != []
    server.process.kill()  # no chance to tidy up: the inventory must notice the pid is gone
    server.process.wait(timeout=5)
    assert inventory_on(host)["gpus"][0]["processes"] == []


def test_partial_speculative_set_dies_with_assertion_error() -> None:
    result = twin(
        *MODEL, "--speculative-algorithm", "NEXTN", "--speculative-eagle-topk", "1", "--twin-load-seconds", "0"
    )
    assert result.returncode == 1
    assert result.stderr.rstrip().splitlines()[-1] == "AssertionError"
    assert "Traceback (most recent call last)" in result.stderr


def test_steps_without_topk_dies_with_type_error() -> None:
    result = twin(
        *MODEL, "--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--twin-load-seconds", "0"
    )
    assert result.returncode == 1
    last = result.stderr.rstrip().splitlines()[-1]
    assert last == "TypeError: '>' not supported between instances of 'NoneType' and 'int'"


@pytest.mark.parametrize(
    ("flags", "last_line"),
    [
        (["--mamba-radix-cache-strategy", "no_buffer"],
         "AssertionError: no_buffer do not support overlap schedule. Try to set disable_overlap_schedule=True."),
        (["--mamba-radix-cache-strategy", "no_buffer", "--disable-overlap-schedule", "--page-size", "16"],
         "AssertionError: no_buffer only supports page_size=1."),
        (["--speculative-algorithm", "NEXTN", "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
          "--speculative-num-draft-tokens", "12", "--mamba-track-interval", "8"], "AssertionError"),
    ],
)  # fmt: skip
def test_mamba_radix_strategy_asserts(flags: list[str], last_line: str) -> None:
    result = twin(*MODEL, *flags, "--twin-load-seconds", "0")
    assert result.returncode == 1
    assert result.stderr.rstrip().splitlines()[-1] == last_line


def test_mtp_algorithm_parses_but_fails_at_launch() -> None:
    result = twin(*MODEL, "--speculative-algorithm", "MTP", "--twin-load-seconds", "0")
    assert result.returncode == 1
    assert result.stderr.rstrip().splitlines()[-1].startswith("ValueError: ")


def test_too_low_fraction_fails_after_loading() -> None:
    result = twin(
        *MODEL, *NEXTN, "--mem-fraction-static", "0.6", "--twin-load-seconds", "0", "--port", str(free_port())
    )
    assert result.returncode == 1
    assert "Load weight end." in result.stderr
    assert any(needle in result.stderr for needle in TOO_LOW), result.stderr
    assert "ready to roll" not in result.stderr


def test_too_high_fraction_fails_capturing_cuda_graphs() -> None:
    flags = (
        "--speculative-algorithm NEXTN --speculative-num-steps 5 --speculative-eagle-topk 1 "
        "--speculative-num-draft-tokens 6 --context-length 131072 --cuda-graph-max-bs-decode 48 "
        "--mem-fraction-static 0.96 --twin-load-seconds 0"
    ).split()
    result = twin(*MODEL, *flags, "--port", str(free_port()))
    assert result.returncode == 1
    capture = result.stderr.index("Capture cuda graph failed")
    assert result.stderr.index("torch.OutOfMemoryError: CUDA out of memory.") > capture


# -- a running server -----------------------------------------------------------------------------------


def test_startup_log(server: Server) -> None:
    lines = server.log_text().splitlines()
    assert "simulation, not real SGLang" in lines[0]
    assert lines[0].startswith("[") and " TP0] " in lines[0]
    text = "\n".join(lines)
    for needle in (
        "Load weight end.",
        "avail mem=",
        "KV Cache is allocated. #tokens:",
        "Mamba Cache is allocated. max_mamba_cache_size:",
        "max_total_num_tokens=",
        "The server is fired up and ready to roll!",
    ):
        assert needle in text


def test_stream_generate(server: Server) -> None:
    body = {"text": CODE_PROMPT, "sampling_params": {"max_new_tokens": 48, "ignore_eos": True}, "stream": True}
    with httpx.Client(timeout=30) as client, client.stream("POST", f"{server.url}/generate", json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    assert len(chunks) > 5
    texts = [c["text"] for c in chunks]
    assert all(later.startswith(earlier) for earlier, later in zip(texts, texts[1:], strict=False))  # cumulative
    counts = [c["meta_info"]["completion_tokens"] for c in chunks]
    assert counts == sorted(counts) and counts[-1] == 48
    assert any(b - a > 1 for a, b in zip(counts, counts[1:], strict=False))  # several tokens per verify pass
    assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
    meta = chunks[-1]["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 48}
    assert meta["prompt_tokens"] == round(len(CODE_PROMPT) / 4)
    for field in ("id", "cached_tokens", "e2e_latency", "spec_verify_ct", "spec_accept_rate"):
        assert field in meta
    assert meta["spec_accept_length"] == pytest.approx(48 / meta["spec_verify_ct"], abs=1e-3)
    assert 1.5 < meta["spec_accept_length"] <= 4.0


def test_generate_without_streaming_and_natural_stop(server: Server) -> None:
    text = "Say hello to person number 7."  # its natural (EOS) length is short: 50 tokens
    assert physics.natural_completion_tokens(load_profile(), text) == 50
    reply = httpx.post(
        f"{server.url}/generate", json={"text": text, "sampling_params": {"max_new_tokens": 2000}}, timeout=60
    ).json()
    meta = reply["meta_info"]
    assert meta["finish_reason"]["type"] == "stop"
    assert meta["completion_tokens"] == 50
    assert reply["text"]


def test_server_info_reports_effective_values(server: Server) -> None:
    info = httpx.get(f"{server.url}/server_info", timeout=5).json()
    assert info["version"] == "0.5.23" and info["twin"] is True
    assert info["model_path"] == "Qwen/Qwen3.6-27B" and info["tp_size"] == 2
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) == (
        3,
        1,
        4,
    )
    assert info["speculative_algorithm"] == "NEXTN"
    assert 0.8 < info["mem_fraction_static"] < 0.95  # the automatic value
    assert 1 <= info["max_running_requests"] <= 48
    assert info["mamba_radix_cache_strategy"] == "extra_buffer"
    assert info["mamba_full_memory_ratio"] == 0.9
    assert info["context_length"] == 262144
    assert info["max_total_num_tokens"] >= info["context_length"]
    assert "avg_spec_accept_length" in info["internal_states"][0]
    assert httpx.get(f"{server.url}/get_server_info", timeout=5).json()["version"] == "0.5.23"
    model = httpx.get(f"{server.url}/model_info", timeout=5).json()
    assert model["architectures"] == ["Qwen3_5ForConditionalGeneration"] and model["is_generation"] is True


def test_flush_cache_resets_lifetime_accept_length(server: Server) -> None:
    httpx.post(
        f"{server.url}/generate", json={"text": CODE_PROMPT, "sampling_params": {"max_new_tokens": 16}}, timeout=30
    )
    assert httpx.get(f"{server.url}/server_info", timeout=5).json()["internal_states"][0]["avg_spec_accept_length"] > 1
    assert httpx.post(f"{server.url}/flush_cache", timeout=5).status_code == 200
    assert httpx.get(f"{server.url}/server_info", timeout=5).json()["internal_states"][0]["avg_spec_accept_length"] == 0


def test_metrics(server: Server) -> None:
    httpx.post(
        f"{server.url}/generate", json={"text": CODE_PROMPT, "sampling_params": {"max_new_tokens": 24}}, timeout=30
    )
    text = httpx.get(f"{server.url}/metrics", timeout=5).text
    for name in (
        "sglang:spec_accept_length{",
        "sglang:spec_accept_rate{",
        "sglang:gen_throughput{",
        "sglang:token_usage{",
        "sglang:mamba_usage{",
        "sglang:num_running_reqs{",
        "sglang:num_queue_reqs{",
        "sglang:generation_tokens_total{",
        "sglang:time_to_first_token_seconds_bucket{",
        "sglang:inter_token_latency_seconds_bucket{",
        "sglang:e2e_request_latency_seconds_count{",
    ):
        assert name in text
    assert "# TYPE sglang:generation_tokens_total counter" in text
    assert "Decode batch, #running-req: 1, #full token:" in server.log_text()
    assert "accept len:" in server.log_text()


def test_chat_completions_stream_with_usage_and_spec_details(server: Server) -> None:
    body = {
        "model": "Qwen/Qwen3.6-27B",
        "messages": [{"role": "user", "content": CODE_PROMPT}],
        "max_tokens": 20,
        "stream": True,
        "stream_options": {"include_usage": True},
        "return_spec_tokens_details": True,
    }
    with (
        httpx.Client(timeout=30) as client,
        client.stream("POST", f"{server.url}/v1/chat/completions", json=body) as response,
    ):
        lines = [line for line in response.iter_lines() if line]
    assert lines[-1] == "data: [DONE]"
    chunks = [json.loads(line[len("data: ") :]) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    content = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert content
    finish = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert len(finish) == 1 and "sglext" in finish[0]
    assert finish[0]["sglext"]["spec_accept_length"] > 1
    usage = chunks[-1]
    assert usage["choices"] == [] and usage["usage"]["completion_tokens"] <= 20


def test_chat_completions_plain(server: Server) -> None:
    body = {"messages": [{"role": "user", "content": "Tell me about Lisbon."}], "max_tokens": 12}
    reply = httpx.post(f"{server.url}/v1/chat/completions", json=body, timeout=30).json()
    assert reply["object"] == "chat.completion"
    assert reply["choices"][0]["message"]["role"] == "assistant"
    assert reply["usage"]["completion_tokens"] <= 12
    assert "sglext" not in reply


# -- lifecycle ----------------------------------------------------------------------------------------


def test_health_is_503_while_loading_and_sigterm_stops_promptly(tmp_path: Path) -> None:
    loading = start(tmp_path, *MODEL, *NEXTN, "--twin-load-seconds", "30")
    try:
        loading.wait_health(503)
        assert httpx.get(f"{loading.url}/server_info", timeout=2).status_code == 503
        # exit 0 within 5 s of SIGTERM (else TimeoutExpired): the 30 s load is not waited out. No tighter
        # bound: a loaded machine moves how long an interpreter takes to exit, not whether it does.
        assert loading.stop(timeout=5) == 0
    finally:
        loading.close()


def test_metrics_is_404_without_enable_metrics_and_sigterm_when_ready(tmp_path: Path) -> None:
    ready = start(tmp_path, *MODEL, "--twin-load-seconds", "0.1", "--skip-server-warmup")
    try:
        ready.wait_health(200)
        assert httpx.get(f"{ready.url}/metrics", timeout=2).status_code == 404
        info = httpx.get(f"{ready.url}/server_info", timeout=2).json()
        assert info["speculative_algorithm"] is None and info["speculative_num_draft_tokens"] is None
        assert ready.stop(timeout=5) == 0  # exits on SIGTERM, before the 5 s a SIGKILL would follow
    finally:
        ready.close()
