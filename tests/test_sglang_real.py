"""Real SGLang 0.5.23 on this CPU, launched by autotune through its CLI (issue 33, item 1).

The server runs from the conformance venv (``scripts/conformance-env.sh``, found through
``AUTOTUNE_CONFORMANCE_PYTHON``) on its pure-PyTorch paths, with the import shim of
``tests/sglang_cpu/`` standing in for the GPU kernel library, on a tiny random-weight Qwen2 that
``tests/sglang_cpu/make_model.py`` writes. The venv is provided before the run (:mod:`tests.tiers`,
tier ``conformance``), so the real tests are never skipped for want of it.

Each real launch takes about 25 s on 2 cores, so the tests share launches: one study holds a served
config, a memory failure and a refused flag combination; one interrupted study serves ``bench --url``
before its Ctrl-C. The logs these runs wrote are kept in ``tests/fixtures/sglang_real_logs/`` and
scored by the classifier without any server (the first tests here).
"""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
import yaml

from autotune.engines.sglang import SGLangEngine
from autotune.outcomes import OutcomeKind
from autotune.server import ServerProcess
from tests.conftest import ROOT, SPACES, autotune_cmd
from tests.tiers import executable_of

SPACE = SPACES / "sglang-cpu.yaml"
SHIM = ROOT / "tests" / "sglang_cpu"
LOGS = Path(__file__).parent / "fixtures" / "sglang_real_logs"
engine = SGLangEngine()

# What each recorded log must be classified as: (kind, a phrase of the reason); None: no failure.
CASES: dict[str, tuple[OutcomeKind, str] | None] = {
    "served.log": None,
    "memory_fraction_too_low.log": (OutcomeKind.MEMORY_TOO_LOW, "Loaded weights leave no GPU memory for the KV cache"),
    "kv_pool_holds_no_request.log": (OutcomeKind.MEMORY_TOO_LOW, "max_running_requests was reduced from"),
    "chunked_prefill_not_page_multiple.log": (
        OutcomeKind.INVALID_CONFIG,
        "chunked_prefill_size must be divisible by page_size",
    ),
    "port_in_use.log": (OutcomeKind.PORT_IN_USE, "address already in use"),
    "interrupted.log": None,
}


# ---------------------------------------------------------------- the recorded logs, no server


def recorded(name: str) -> str:
    return (LOGS / name).read_text(encoding="utf-8")


def test_every_recorded_log_is_there() -> None:
    assert sorted(p.name for p in LOGS.glob("*.log")) == sorted(CASES)


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_classifier_reads_each_real_log_right(name: str) -> None:
    expected = CASES[name]
    found = engine.failure_in(recorded(name))
    if expected is None:
        assert found is None, found
        return
    assert found is not None, name
    assert found.kind is expected[0], found
    assert expected[1] in found.reason, found


def test_memory_figures_of_a_real_cpu_launch() -> None:
    facts = engine.memory_facts(recorded("served.log"))
    assert facts is not None
    # On a CPU "avail mem" is host RAM: several GB free before the weights, about as much after the pools.
    assert facts.free_at_start_bytes is not None and facts.free_at_start_bytes > 2**30
    assert facts.avail_after_pools_bytes is not None and facts.avail_after_pools_bytes > 2**30
    assert facts.kv_tokens == 32768
    assert facts.kv_pool_bytes is not None and facts.kv_pool_bytes > 0
    assert facts.graph_bytes is None and facts.graph_batch is None  # no CUDA graphs on a CPU
    # the failed launch logged its free memory before it failed sizing the pools
    low = engine.memory_facts(recorded("memory_fraction_too_low.log"))
    assert low is None or low.kv_tokens is None


def test_decode_figures_of_a_real_cpu_launch() -> None:
    figures = engine.log_figures(recorded("served.log"))
    rates = figures.gen_tok_s[""]
    assert rates and all(rate > 0 for rate in rates)
    assert figures.accept_lengths == []  # no speculation on this path


def test_a_busy_server_that_refuses_the_flush_is_still_measured() -> None:
    """SGLang answers /flush_cache 400 while requests run (http_server.py's flush_cache): bench --url
    on a server others use goes on without the reset; any other error still stops it."""

    async def reset(status: int) -> None:
        transport = httpx.MockTransport(lambda request: httpx.Response(status, text="Flush cache failed.\n"))
        async with httpx.AsyncClient(transport=transport) as client:
            await engine.reset_stats(client, "http://s")

    asyncio.run(reset(400))
    asyncio.run(reset(200))
    with pytest.raises(httpx.HTTPStatusError):
        asyncio.run(reset(500))


# ---------------------------------------------------------------- a real SGLang


def real(test: Callable[..., None]) -> Callable[..., None]:
    """A test on a real SGLang server: slow; its venv is installed before the run (:mod:`tests.tiers`)."""
    return pytest.mark.slow(pytest.mark.real_engine(pytest.mark.tier("conformance")(test)))


@pytest.fixture(scope="module")
def sglang_python() -> str:
    return executable_of("conformance")


@pytest.fixture(scope="module")
def model(sglang_python: str, tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("qwen2-tiny")
    subprocess.run([sglang_python, str(SHIM / "make_model.py"), str(folder)], check=True, capture_output=True,
                   timeout=300)  # fmt: skip
    return folder


def cpu_space(folder: Path, python: str, model: Path, **changes: object) -> Path:
    """The shipped CPU space with its placeholders filled in, the shim on the server's PYTHONPATH,
    and the given top-level changes."""
    text = SPACE.read_text()
    text = text.replace("${AUTOTUNE_SGLANG_PYTHON}", python).replace("${AUTOTUNE_SGLANG_MODEL}", str(model))
    data = yaml.safe_load(text)
    data["env"]["PYTHONPATH"] = str(SHIM)
    data.update(changes)
    path = folder / "space.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def cli(cwd: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(autotune_cmd(*args), cwd=cwd, capture_output=True, text=True, timeout=timeout)


SERVED = {"mem-fraction-static": 0.3, "max-total-tokens": 32768, "max-running-requests": 8}


@pytest.fixture(scope="module")
def study(sglang_python: str, model: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, object]]:
    """One short real study, three launches: the config that served, a fraction that leaves the KV
    pool nothing, and a prefill chunk SGLang refuses for its page size."""
    cwd = tmp_path_factory.mktemp("study")
    # The failures first: nothing learned yet, so the memory rule cannot predict and skip them.
    # On a CPU the starved fraction fails only while host RAM holds still: a neighbour freeing ~30 MB
    # during the weight load covers the shortfall, so its pool is also capped at one token, which
    # SGLang refuses for holding no request.
    baselines = [
        {"name": "too-little-memory", "flags": {**SERVED, "mem-fraction-static": 0.0001, "max-total-tokens": 1}},
        {"name": "refused", "flags": {**SERVED, "chunked-prefill-size": 1024, "page-size": 48}},
        {"name": "served", "flags": SERVED},
    ]
    shipped = yaml.safe_load(SPACE.read_text())
    tuned = shipped["tuned"]
    tuned["mem-fraction-static"] = {"type": "float", "low": 0.0001, "high": 0.5}  # room for the starved baseline
    tuned["max-total-tokens"]["choices"].insert(0, 1)
    # Answers of 128 tokens, not the space's 32: a 32-token answer lasts 0.2 s on this CPU, and a loaded
    # machine that stalls SGLang's HTTP process that long flushes it in one burst no client can time.
    measurement = {**shipped["measurement"], "max_tokens": 128}
    space = cpu_space(cwd, sglang_python, model, study="sglang-real", baselines=baselines, tuned=tuned,
                      measurement=measurement)  # fmt: skip
    proc = cli(cwd, "study", str(space), "--trials", "3", "--seed", "0", "--confirm-top", "0", timeout=900)
    assert proc.returncode == 0, f"autotune study exited {proc.returncode}\n{proc.stdout}\n{proc.stderr}"
    shown = cli(cwd, "show", "sglang-real", "--json")
    assert shown.returncode == 0, shown.stderr
    return cwd, json.loads(shown.stdout)


def by_baseline(data: dict[str, object]) -> dict[str, dict[str, object]]:
    trials = data["trials"]
    assert isinstance(trials, list)
    return {t["baseline"]: t for t in trials if t["baseline"]}


@real
def test_a_real_study_measures_and_classifies_real_failures(study: tuple[Path, dict[str, object]]) -> None:
    _, data = study
    trials = by_baseline(data)
    served = trials["served"]
    assert served["outcome"] == "ok", served
    assert served["metrics"]["decode_tok_s"]["value"] > 0
    assert served["engine_version"] == "0.5.23"
    # read back from the real /server_info, not what was sent
    assert served["effective"]["max-running-requests"] == 8
    assert served["effective"]["mem-fraction-static"] == pytest.approx(0.3)
    low = trials["too-little-memory"]
    assert low["outcome"] == OutcomeKind.MEMORY_TOO_LOW.value, low
    starved = ("Loaded weights leave no GPU memory for the KV cache", "max_running_requests was reduced")
    assert any(words in low["reason"] for words in starved), low
    refused = trials["refused"]
    assert refused["outcome"] == OutcomeKind.INVALID_CONFIG.value, refused
    assert "chunked_prefill_size must be divisible by page_size" in refused["reason"]
    assert data["best_trial"] == served["number"]


@real
def test_export_and_bench_of_the_result(study: tuple[Path, dict[str, object]]) -> None:
    cwd, _ = study
    exported = cli(cwd, "export", "sglang-real", "-o", "profile.yaml")
    assert exported.returncode == 0, exported.stderr
    profile = yaml.safe_load((cwd / "profile.yaml").read_text())
    assert profile["flags"]["max-running-requests"] == 8 and profile["flags"]["device"] == "cpu"
    assert profile["env"]["SGLANG_USE_CPU_ENGINE"] == "1"
    script = cli(cwd, "export", "sglang-real", "-f", "sh")
    assert script.returncode == 0 and "sglang.launch_server" in script.stdout and "--device cpu" in script.stdout
    bench = cli(cwd, "bench", "--profile", "profile.yaml", "--json", "--max-rounds", "2", timeout=600)
    # 2 shared cores may show any verdict: exit 0 not slower, 1 slower, 3 cannot tell yet, each with its
    # JSON; anything else (exit 1 with no JSON: the relaunch failed) fails
    why = f"exit {bench.returncode}\n{bench.stdout}\n{bench.stderr}"
    assert bench.returncode in (0, 1, 3) and bench.stdout.strip(), why
    result = json.loads(bench.stdout)
    assert objective(result) > 0, result
    verdict = result["verdict"]  # compared with what the study recorded
    assert verdict is not None, result
    assert bench.returncode == {"not-slower": 0, "slower": 1, "cannot-tell": 3}[verdict["category"]], verdict
    server = result["measurement"]["server"]
    assert server["gen_tok_s"] > 0 and server["generated_tokens"] > 0, server  # its log lines and /metrics


def objective(bench: dict[str, dict[str, object]]) -> float:
    """The objective's value in ``bench --json``'s measurement."""
    measurement = bench["measurement"]
    metrics = measurement["metrics"]
    assert isinstance(metrics, list)
    return float(next(m["value"] for m in metrics if m["name"] == measurement["objective"]))


def descendants(pid: int) -> set[int]:
    """Every live process under ``pid`` (its children, theirs ...), read from /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def in_group(pgid: int) -> list[int]:
    """Live processes of the process group ``pgid``."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] != "Z":
            members.append(int(stat.parent.name))
    return members


def wait_for(condition: Callable[[], object], what: str, timeout_s: float) -> object:
    deadline = time.monotonic() + timeout_s
    while not (value := condition()):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)
    return value


def as_from_a_terminal() -> None:
    """In the child before exec: SIGINT as a terminal leaves it. A test run started in the background
    of a non-interactive shell inherits SIGINT ignored, and Python then installs no KeyboardInterrupt
    (autotune rightly ignores Ctrl-C then, as under nohup; two local CI runs hung here so)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.fixture(scope="module")
def interrupted(
    sglang_python: str, model: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, object]]:
    """A study whose server is up: bench --url measures it, then Ctrl-C stops the study."""
    cwd = tmp_path_factory.mktemp("interrupt")
    # a measurement far longer than the tests take (Ctrl-C ends it), so the server is still up while
    # bench --url measures it and when Ctrl-C comes, however loaded the machine: rounds and seconds both
    measurement = {**yaml.safe_load(SPACE.read_text())["measurement"], "max_tokens": 256, "min_rounds": 200,
                   "max_rounds": 400, "max_seconds": 3600}  # fmt: skip
    space = cpu_space(cwd, sglang_python, model, study="sglang-ctrl-c", measurement=measurement,
                      baselines=[{"name": "served", "flags": SERVED}])  # fmt: skip
    proc = subprocess.Popen(autotune_cmd("study", str(space), "--trials", "1", "--confirm-top", "0"), cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=as_from_a_terminal)  # fmt: skip
    servers = cwd / "studies" / "sglang-ctrl-c" / "servers"
    try:
        record_path = wait_for(lambda: next(servers.glob("server-*.json"), None), "the server's record", 60)
        record = json.loads(Path(str(record_path)).read_text())
        argv = record["argv"]
        url = f"http://127.0.0.1:{argv[argv.index('--port') + 1]}"

        def ready() -> bool:
            assert proc.poll() is None, proc.communicate()
            try:
                return httpx.get(f"{url}/health", timeout=5).status_code == 200
            except httpx.HTTPError:
                return False

        wait_for(ready, "the real server to be ready", 240)
        yield {"cwd": cwd, "proc": proc, "url": url, "server_pid": record["pid"], "record": Path(str(record_path))}
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=400)
            except subprocess.TimeoutExpired:  # never leave it (or its pipes) behind for the next test
                proc.kill()
                proc.communicate()


@real
def test_bench_url_measures_a_running_real_server(interrupted: dict[str, object]) -> None:
    cwd = Path(str(interrupted["cwd"]))
    # 64 tokens: a 16-token answer was flushed whole by a real SGLang on a loaded machine
    bench = cli(cwd, "bench", "--url", str(interrupted["url"]), "--max-tokens", "64", "--max-rounds", "2",
                "--warmup", "1", "--suite", "builtin:chat", "--json", timeout=300)  # fmt: skip
    assert bench.returncode == 0, f"{bench.stdout}\n{bench.stderr}"
    result = json.loads(bench.stdout)
    assert objective(result) > 0, result
    # the study was measuring at the same time: SGLang refused to flush its cache, bench went on
    assert result["measurement"]["server"]["generated_tokens"] > 0


@real
def test_ctrl_c_with_a_real_server_up_leaves_no_process(interrupted: dict[str, object]) -> None:
    proc = interrupted["proc"]
    assert isinstance(proc, subprocess.Popen)
    server = int(str(interrupted["server_pid"]))
    family = {server} | descendants(server)
    assert len(family) >= 3, f"SGLang runs a scheduler and a detokenizer beside its HTTP server: {family}"
    proc.send_signal(signal.SIGINT)
    # stopping the real server and writing the study takes seconds (8 s here); the margin is for a
    # loaded machine
    out, err = proc.communicate(timeout=400)
    assert proc.returncode != 0 or "interrupted" in (out + err).lower(), (out, err)
    assert [pid for pid in family if alive(pid)] == []
    assert in_group(server) == []
    assert not Path(str(interrupted["record"])).exists()
    shown = cli(Path(str(interrupted["cwd"])), "show", "sglang-ctrl-c", "--json")
    trials = json.loads(shown.stdout)["trials"]
    assert [t["outcome"] for t in trials] == [OutcomeKind.INTERRUPTED.value], trials


@real
def test_a_real_port_clash_is_named(sglang_python: str, model: Path, tmp_path: Path) -> None:
    space = yaml.safe_load(cpu_space(tmp_path, sglang_python, model).read_text())
    plan = engine.normalise({**space["fixed"], **SERVED})
    log = tmp_path / "server.log"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        argv = engine.build_argv(space["launcher"], model=str(model), plan=plan, host="127.0.0.1",
                                 port=taken.getsockname()[1])  # fmt: skip
        with ServerProcess(argv, env=space["env"], log_path=log, records_dir=tmp_path / "records") as server:
            # SGLang 0.5.23 binds its HTTP port last, after loading everything, and then does not exit:
            # it logs the clash and waits in "Waiting for application shutdown", so the log is the signal.
            wait_for(lambda: engine.failure_in(log.read_text(errors="replace")) or server.poll() is not None,
                     "SGLang to fail on the taken port", 240)  # fmt: skip
            exit_code = server.poll()
            failure = engine.classify_failure(exit_code=exit_code, log_text=log.read_text(errors="replace"),
                                              timed_out=exit_code is None)  # fmt: skip
            group = server.pid
    assert failure.kind is OutcomeKind.PORT_IN_USE, failure
    assert "address already in use" in failure.reason, failure
    assert group is not None and in_group(group) == []
