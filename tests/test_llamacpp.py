"""The llama.cpp engine: unit tests on recorded llama-server text, and a real llama-server.

The recorded text in ``tests/fixtures/llamacpp/`` comes from llama.cpp as vendored in
llama-cpp-python 0.3.36 (``scripts/build-llama-server.sh``). The tests marked ``real_engine``
drive that llama-server (found through ``AUTOTUNE_LLAMA_SERVER``) on tiny models that
``scripts/make-test-models.py`` writes; without the variable they are skipped, except under CI
(``CI`` set), where they fail, so CI never skips them silently.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import yaml

from autotune.engines.base import InvalidConfig, LaunchPlan, StreamChunk
from autotune.engines.llamacpp import (
    LlamaCppEngine,
    RequestLog,
    RequestTimings,
    parse_help_entries,
    parse_llamacpp_help,
    parse_request_logs,
)
from autotune.errors import FlagError
from autotune.measure.protocol import MeasureSettings
from autotune.measure.suites import Prompt, Suite, load_suite
from autotune.outcomes import OutcomeKind
from autotune.server import ServerProcess, find_free_port
from autotune.space import FlagValue
from autotune.trial import LogWindow, TrialSetup, measure_with_server_stats, run_trial
from tests.conftest import SPACES, autotune_cmd

FIXTURES = Path(__file__).parent / "fixtures" / "llamacpp"
HELP = (FIXTURES / "llama-server-0.3.36-help.txt").read_text()
SPACE = SPACES / "llamacpp-cpu.yaml"
engine = LlamaCppEngine()
DRAFT = {"spec-draft-model": "/m/draft.gguf", "spec-type": "draft-simple"}


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


# ---------------------------------------------------------------- flags from --help


def test_help_entries_give_every_name_of_an_option() -> None:
    flags = parse_llamacpp_help(HELP)
    for name in ("spec-draft-n-max", "spec-draft-p-min", "spec-type", "ctx-size", "parallel", "batch-size",
                 "ubatch-size", "metrics", "threads", "model", "host", "port"):  # fmt: skip
        assert name in flags.flags, name
    # short and alternative spellings: "-md,   --model-draft" and "--spec-draft-model, -md, --model-draft FNAME"
    assert {"md", "model-draft", "spec-draft-model", "c", "np", "ub", "draft-p-min"} <= flags.flags
    assert {"metrics", "kv-unified", "no-kv-unified", "kvu", "no-kvu"} <= flags.switches
    assert "spec-draft-n-max" not in flags.switches and "spec-type" not in flags.switches
    assert "help" not in flags.switches


def test_removed_flags_are_not_valid_and_point_to_their_replacement() -> None:
    flags = parse_llamacpp_help(HELP)
    assert "draft-max" not in flags.flags and "draft-min" not in flags.flags
    with pytest.raises(FlagError, match="unknown flag --draft-max") as info:
        engine.check_flags(["draft-max"], flags)
    assert info.value.hint == "it was renamed to --spec-draft-n-max"
    with pytest.raises(FlagError) as info:
        engine.check_flags(["spec-draft-n-mx"], flags)
    assert info.value.hint == "did you mean --spec-draft-n-max?"
    for reserved in ("model", "m", "port", "host"):
        with pytest.raises(FlagError, match="set by autotune itself"):
            engine.check_flags([reserved], flags)


def test_only_invocations_count_and_long_invocations_wrap() -> None:
    text = (
        "----- common params -----\n\n"
        "-x,    --example N                      see also --not-a-flag (default: 1)\n"
        "                                        --also-not-a-flag is only mentioned\n"
        "--a-very-long-option-name, -avlon, --alias-of-it FNAME\n"
        "                                        description on the next line\n"
        "--toggle, --no-toggle                   a switch and its negation\n"
    )
    entries = parse_help_entries(text)
    assert [e.names for e in entries] == [
        ["x", "example"],
        ["a-very-long-option-name", "avlon", "alias-of-it"],
        ["toggle", "no-toggle"],
    ]
    flags = parse_llamacpp_help(text)
    assert "not-a-flag" not in flags.flags and "also-not-a-flag" not in flags.flags
    assert flags.switches == {"toggle", "no-toggle"}


def test_aliases_read_from_help_become_canonical_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("autotune.engines.llamacpp.run_help", lambda argv, env=None: HELP)
    fresh = LlamaCppEngine()
    fresh.read_flag_set(["llama-server"])
    assert fresh.canonical("ctkd") == "spec-draft-type-k"
    assert fresh.canonical("no-kvu") == "no-kv-unified"
    assert fresh.canonical("ngl") == "gpu-layers"


# ---------------------------------------------------------------- launch rules and argv


def test_aliases_are_written_with_their_long_name_and_measured_once() -> None:
    short = engine.normalise({"md": "/m/draft.gguf", "spec-type": "draft-simple", "c": 2048, "np": 1})
    long = engine.normalise({"spec-draft-model": "/m/draft.gguf", "spec-type": "draft-simple", "ctx-size": 2048,
                             "parallel": 1})  # fmt: skip
    assert short.flags == long.flags
    assert short.config_key == long.config_key
    assert "--md is written --spec-draft-model" in short.notes
    with pytest.raises(InvalidConfig, match="given twice"):
        engine.normalise({"c": 1024, "ctx-size": 2048})


def test_a_draft_model_needs_a_speculative_type_and_the_other_way_round() -> None:
    with pytest.raises(InvalidConfig, match="add --spec-type draft-simple"):
        engine.normalise({"spec-draft-model": "/m/draft.gguf", "spec-draft-n-max": 4})
    with pytest.raises(InvalidConfig, match="needs a draft model"):
        engine.normalise({"spec-type": "draft-simple"})
    # why: llama-server logs the error and then serves, without speculating
    served = fixture("draft_simple_without_model.log")
    assert "draft-simple requires a draft context" in served and "listening on" in served
    plan = engine.normalise({**DRAFT, "spec-draft-n-max": 4})
    assert plan.flags == {**DRAFT, "spec-draft-n-max": 4}


def test_no_speculation_drops_the_draft_settings() -> None:
    a = engine.normalise({"spec-draft-model": "/m/draft.gguf", "spec-type": "none", "spec-draft-n-max": 4})
    b = engine.normalise({"spec-draft-model": "/m/draft.gguf", "spec-type": "none", "spec-draft-p-min": 0.4})
    assert a.flags == b.flags == {"spec-type": "none"}
    assert a.config_key == b.config_key
    assert a.notes == ["--spec-type none speculates nothing: dropped --spec-draft-model, --spec-draft-n-max"]


def test_micro_batch_is_at_most_the_batch() -> None:
    plan = engine.normalise({"batch-size": 256, "ubatch-size": 512})
    assert plan.flags == {"batch-size": 256, "ubatch-size": 256}
    assert plan.notes == ["--ubatch-size 512 is above the batch size: becomes 256"]
    assert engine.normalise({"ubatch-size": 4096}).flags == {"ubatch-size": 2048}  # default batch 2048
    assert engine.normalise({"batch-size": 512, "ubatch-size": 128}).notes == []


def test_argv_uses_long_names_model_host_port_and_metrics() -> None:
    plan = engine.normalise({"md": "/m/draft.gguf", "spec-type": "draft-simple", "t": 1, "kv-unified": True,
                             "no-warmup": False})  # fmt: skip
    argv = engine.build_argv(["/opt/llama-server"], model="/m/target.gguf", plan=plan, host="127.0.0.1", port=8123)
    assert argv == [
        "/opt/llama-server", "--model", "/m/target.gguf", "--host", "127.0.0.1", "--port", "8123",
        "--spec-draft-model", "/m/draft.gguf", "--spec-type", "draft-simple", "--threads", "1", "--kv-unified",
        "--metrics",
    ]  # fmt: skip
    with_metrics = engine.normalise({"metrics": True})
    assert engine.build_argv(["s"], model="m", plan=with_metrics, host="h", port=1).count("--metrics") == 1


# ---------------------------------------------------------------- failures on recorded logs


def test_an_unknown_crash_carries_its_last_line() -> None:
    crash = engine.classify_failure(exit_code=-11, log_text="line one\nSegmentation fault\n", timed_out=False)
    assert crash.kind is OutcomeKind.CRASHED and crash.reason == "exit code -11: Segmentation fault"


# ---------------------------------------------------------------- protocol, on recorded responses


def replay(routes: dict[str, httpx.Response | list[httpx.Response]]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        answer = routes[request.url.path]
        return answer.pop(0) if isinstance(answer, list) else answer

    return httpx.MockTransport(handler)


def test_effective_config_from_props_and_slots() -> None:
    transport = replay(
        {
            "/props": httpx.Response(200, text=fixture("props.json")),
            "/slots": httpx.Response(200, text=fixture("slots.json")),
        }
    )
    with httpx.Client(transport=transport) as client:
        effective = engine.effective_config(client, "http://s", engine.normalise(DRAFT))
    assert effective.version == "b0-unknown"
    assert effective.values["parallel"] == 1
    assert effective.values["speculative"] is True
    assert effective.values["ctx-size-per-slot"] == 4096


def test_stream_counts_tokens_and_reads_timings() -> None:
    transport = replay({"/completion": httpx.Response(200, text=fixture("completion_stream.txt"))})
    prompt = Prompt(id="p", category="coding", prompt="Write a function in Python that", max_tokens=16)

    async def collect() -> list[StreamChunk]:
        async with httpx.AsyncClient(transport=transport) as client:
            stream = engine.stream_generate(client, "http://s", prompt, max_tokens=16, ignore_eos=True)
            return [chunk async for chunk in stream]

    chunks = asyncio.run(collect())
    counts = [c.completion_tokens for c in chunks]
    assert counts == list(range(1, 17)) + [16]
    last = chunks[-1]
    assert last.finished and last.finish_reason == "length" and last.prompt_tokens == 7
    # 16 tokens, 12 drafted and accepted: 15 decoded in 3 target steps
    assert last.accept_length == pytest.approx(5.0)
    assert not any(c.accept_length for c in chunks[:-1])


def test_accept_length_is_tokens_per_target_step() -> None:
    timings = RequestTimings(predicted_n=101, draft_n=120, draft_n_accepted=60)
    assert timings.accept_length == pytest.approx(100 / 40)
    assert timings.draft_acceptance == pytest.approx(0.5)
    assert RequestTimings(predicted_n=10).accept_length is None


# ---------------------------------------------------------------- a real llama-server


def real(test: Callable[..., None]) -> Callable[..., None]:
    """A test on a real llama-server: slow; the server is built before the run (:mod:`tests.tiers`)."""
    return pytest.mark.slow(pytest.mark.real_engine(pytest.mark.tier("llama-server")(test)))


def cpu_space(tmp_path: Path, binary: str, models: Path, **changes: object) -> Path:
    """The shipped CPU space with its placeholders filled in and the given top-level changes."""
    text = SPACE.read_text()
    text = text.replace("${AUTOTUNE_LLAMA_SERVER}", binary).replace("${AUTOTUNE_LLAMA_MODELS}", str(models))
    data = yaml.safe_load(text)
    data.update(changes)
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def study(server_binary: str, models: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """A short real study: the no-draft baseline, three draft lengths, then sampled trials; its best raced
    against every baseline on fresh, interleaved launches (one measurement each, at different moments,
    is what load moves: on a loaded CI run the no-draft trial measured fastest)."""
    cwd = tmp_path_factory.mktemp("study")
    draft = {"spec-type": "draft-simple", "spec-draft-p-min": 0.0}
    baselines = [
        {"name": "no-draft", "flags": {"spec-type": "none"}},
        {"name": "n-max-2", "flags": {**draft, "spec-draft-n-max": 2}},
        {"name": "n-max-6", "flags": {**draft, "spec-draft-n-max": 6}},
        {"name": "n-max-14", "flags": {**draft, "spec-draft-n-max": 14}},
    ]
    # Longer launches than the shipped space's: on a loaded CI host one request's rate swings 2-3x within
    # a second, and 2-3 requests of 64 tokens a launch left the race unable to separate a draft 1.6x faster.
    measurement = {**yaml.safe_load(SPACE.read_text())["measurement"], "max_tokens": 192, "min_rounds": 3}
    space = cpu_space(cwd, server_binary, models, study="llamacpp-real", baselines=baselines, measurement=measurement)
    proc = subprocess.run(
        autotune_cmd("study", str(space), "--trials", "8", "--seed", "3", "--sampler", "random", "--confirm-top", "1",
                     "--confirm-launches", "3"),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert proc.returncode == 0, f"autotune study exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    shown = subprocess.run(
        autotune_cmd("show", "llamacpp-real", "--json"), cwd=cwd, capture_output=True, text=True, check=True
    )
    return cwd, json.loads(shown.stdout)


def draft_acceptance(cwd: Path, trial: int) -> float:
    """Accepted / drafted tokens over a trial, from llama-server's own log lines."""
    log = (cwd / "studies" / "llamacpp-real" / "logs" / f"trial-{trial:04d}.log").read_text(errors="replace")
    requests = [r for r in parse_request_logs(log) if r.draft_generated]
    assert requests, f"trial {trial} logged no draft acceptance"
    return sum(r.draft_accepted or 0 for r in requests) / sum(r.draft_generated or 0 for r in requests)


@real
def test_study_finds_a_draft_config_faster_than_no_draft(study: tuple[Path, dict[str, object]]) -> None:
    cwd, data = study
    trials = data["trials"]
    assert isinstance(trials, list) and len(trials) >= 8
    searched = [t for t in trials if t["confirm_of"] is None]
    assert len(searched) == 8
    measured = [t for t in searched if t["outcome"] == "ok"]
    assert len(measured) >= 6, [(t["number"], t["outcome"], t.get("reason")) for t in searched]
    by_baseline = {t["baseline"]: t for t in searched if t["baseline"]}
    # Judged by the race, where every finalist is launched in each round (a load that comes and goes
    # falls on all of them), not by the single first measurements.
    race = data["confirmation"]
    assert isinstance(race, dict)
    means = {f["trial"]: f["mean"] for f in race["finalists"]}
    leader = next(t for t in trials if t["number"] == race["leader"])
    no_draft = means[by_baseline["no-draft"]["number"]]
    assert leader["flags"]["spec-type"] == "draft-simple"
    assert means[leader["number"]] > no_draft, f"leader {means[leader['number']]:.1f} tok/s vs no draft {no_draft:.1f}"
    assert leader["metrics"]["decode_tok_s"]["unit"] == "tok/s"
    # Every rate recorded passed the integrity checks: no request was dropped, none failed them.
    assert all(t["dropped_requests"] == [] for t in trials if t["outcome"] == "ok")
    assert not [t for t in trials if t["outcome"] == "measurement-failed"], trials
    assert leader["metrics"]["accept_length"]["value"] > 1.5, leader["metrics"]
    assert by_baseline["no-draft"]["effective"]["speculative"] is False
    assert leader["effective"]["speculative"] is True


@real
def test_acceptance_falls_as_draft_length_grows(study: tuple[Path, dict[str, object]]) -> None:
    cwd, data = study
    trials = {t["baseline"]: t for t in data["trials"] if t["baseline"]}  # type: ignore[union-attr]
    rates = [draft_acceptance(cwd, trials[name]["number"]) for name in ("n-max-2", "n-max-6", "n-max-14")]
    assert rates[0] > rates[1] > rates[2], rates
    assert rates[0] > 0.6  # the draft is a real predictor of the target


async def _complete(client: httpx.AsyncClient, base_url: str, prompt: str, n: int) -> str:
    body = {"prompt": prompt, "n_predict": n, "temperature": 0, "ignore_eos": True, "cache_prompt": False}
    response = await client.post(f"{base_url}/completion", json=body, timeout=120)
    response.raise_for_status()
    content: str = response.json()["content"]
    return content


@contextmanager
def llama_server(
    binary: str, models: Path, folder: Path, flags: dict[str, FlagValue], name: str
) -> Iterator[tuple[str, Path]]:
    """A real llama-server with the given flags (one thread, one slot), stopped on exit."""
    plan = engine.normalise({"threads": 1, "threads-batch": 1, "parallel": 1, **flags})
    port = find_free_port()
    argv = engine.build_argv([binary], model=str(models / "target.gguf"), plan=plan, host="127.0.0.1", port=port)
    log = folder / f"{name}.log"
    base_url = f"http://127.0.0.1:{port}"
    with ServerProcess(argv, env={}, log_path=log, records_dir=folder / "records") as server:
        with httpx.Client() as client:
            ready = server.wait_ready(lambda: engine.is_ready(client, base_url), timeout_s=60)
        assert ready.ready, log.read_text(errors="replace")
        yield base_url, log


def logged_requests(log: Path, count: int, timeout_s: float = 10.0) -> list[RequestLog]:
    """The finished requests in a server log, once it holds ``count`` (llama.cpp logs from a thread
    of its own, so a line may land just after the response)."""
    deadline = time.monotonic() + timeout_s
    while True:
        found = parse_request_logs(log.read_text(errors="replace"))
        if len(found) >= count or time.monotonic() > deadline:
            return found
        time.sleep(0.05)


def draft_flags(models: Path, n_max: int) -> dict[str, FlagValue]:
    return {"spec-draft-model": str(models / "draft.gguf"), "spec-type": "draft-simple", "spec-draft-n-max": n_max}


@real
def test_greedy_output_is_the_same_with_and_without_the_draft(server_binary: str, models: Path, tmp_path: Path) -> None:
    prompts = ["Write a function in Python that", "Explain how a hash map works", "The quick brown fox"]

    async def outputs(base_url: str) -> list[str]:
        async with httpx.AsyncClient() as client:
            return [await _complete(client, base_url, p, 96) for p in prompts]

    with llama_server(server_binary, models, tmp_path, {"spec-type": "none"}, "plain") as (url, _):
        plain = asyncio.run(outputs(url))
    with llama_server(server_binary, models, tmp_path, draft_flags(models, 6), "draft") as (url, log):
        speculated = asyncio.run(outputs(url))
        logged = logged_requests(log, len(prompts))
    assert len(logged) == len(prompts) and all(r.draft_accepted for r in logged), "the draft was not used"
    assert speculated == plain


@real
def test_measured_tok_s_agrees_with_llama_server_own(server_binary: str, models: Path, tmp_path: Path) -> None:
    suite = Suite(name="coding", prompts=load_suite("builtin:coding").prompts[:2])
    settings = MeasureSettings(warmup_requests=1, max_tokens=128, ignore_eos=True, min_rounds=2, max_rounds=2)
    configs: list[tuple[dict[str, FlagValue], str]] = [
        ({"spec-type": "none"}, "plain"),
        (draft_flags(models, 6), "draft"),
    ]
    for flags, name in configs:
        with llama_server(server_binary, models, tmp_path, flags, name) as (url, log):
            measurement = asyncio.run(measure_with_server_stats(engine, url, suite, settings, log=LogWindow(log)))
            logged = logged_requests(log, len(measurement.requests))
            # the log's "eval time" rate is the timings' predicted_per_second of the same request
            body = {"prompt": "Hello", "n_predict": 16, "ignore_eos": True, "temperature": 0}
            timings = httpx.post(f"{url}/completion", json=body, timeout=60).json()["timings"]
            last = logged_requests(log, len(logged) + 1)[-1]
            assert last.eval_tok_s == pytest.approx(timings["predicted_per_second"], abs=0.01)
        # one log line per request, in order (warm-up included)
        assert len(logged) == len(measurement.requests)
        ours = [r.decode_tok_s for r in measurement.requests]
        theirs = [r.eval_tok_s for r in logged]
        assert all(x is not None for x in ours)
        mean_ours, mean_theirs = statistics.fmean(ours), statistics.fmean(theirs)  # type: ignore[arg-type]
        assert mean_ours == pytest.approx(mean_theirs, rel=0.03), (name, ours, theirs)
        assert measurement.server is not None and measurement.server.gen_tok_s is not None
        # The rate that counts is llama-server's own timing of each request, never the stream's
        # timing of a flush (a drafting server streams its accepted tokens in bursts), and none is dropped.
        assert all(r.decode_tok_s == r.server_decode_tok_s and r.dropped is None for r in measurement.requests)
        if name == "draft":
            assert measurement.metric("accept_length") is not None
            assert measurement.server.metrics_accept_length is not None


@real
@pytest.mark.parametrize(
    ("flags", "kind", "reason"),
    [
        ({"no-such-flag": 1}, OutcomeKind.INVALID_CONFIG, "invalid argument: --no-such-flag"),
        ({"draft-max": 4}, OutcomeKind.INVALID_CONFIG, "--draft-max"),
        ({"spec-type": "draft-fancy"}, OutcomeKind.INVALID_CONFIG, "unknown speculative type"),
        ({"ctx-size": 16_000_000}, OutcomeKind.MEMORY_TOO_HIGH, "failed to allocate"),
    ],
)
def test_bad_flags_and_impossible_context_are_classified(
    server_binary: str, models: Path, tmp_path: Path, flags: dict[str, FlagValue], kind: OutcomeKind, reason: str
) -> None:
    setup = TrialSetup(
        launcher=[server_binary],
        model=str(models / "target.gguf"),
        env={},
        suite=Suite(name="one", prompts=[Prompt(id="p", category="c", prompt="Hello", max_tokens=8)]),
        measure=MeasureSettings(warmup_requests=0, min_rounds=1, max_rounds=1),
        launch_timeout_s=60,
        stop_timeout_s=10,
        records_dir=tmp_path / "records",
    )
    # past the engine's own rules on purpose: the server itself must refuse these
    plan = LaunchPlan(engine="llamacpp", flags={"threads": 1, **flags})
    outcome = run_trial(engine, setup, plan, log_path=tmp_path / "trial.log")
    assert outcome.kind is kind, outcome.reason
    assert outcome.reason is not None and re.search(re.escape(reason), outcome.reason), outcome.reason
