"""The contract every engine keeps, run for each name :func:`get_engine` knows (in the spirit of
Optuna's ``optuna/testing/pytest_storages.py``). What differs per engine is data, declared in
``tests/engines/cases.py``; engine-specific behaviour stays in each engine's own test file.

1. valid flags: read from the recorded ``--help`` through a launcher process;
2. flags round-trip: plan -> argv -> the flags back -> the same plan and argv;
3. equivalent spellings normalise to one ``config_key``, different values to different ones;
4. readiness: ``GET /health`` of a real local HTTP server, 503 while loading, then 200;
5. failure classification of recorded logs, and a deadline;
6. figures: start-up memory and the server's own throughput and acceptance of recorded windows, of
   each form of line the engine's releases print, and of a refusal for want of pool memory.
"""

from __future__ import annotations

import http.server
import socket
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from autotune.engines import engine_names, get_engine
from autotune.engines.base import Engine, FlagSet, scalar
from autotune.errors import FlagError, UserError
from autotune.outcomes import OutcomeKind
from autotune.space import FlagValue
from tests.engines.cases import CASES, FIXTURES, EngineCase

GIB = 2**30
NAMES = engine_names()


@pytest.fixture(params=NAMES)
def case(request: pytest.FixtureRequest) -> EngineCase:
    name: str = request.param
    if name not in CASES:
        pytest.fail(f"engine {name!r} declares no contract case in tests/engines/cases.py")
    return CASES[name]


def fake_launcher(tmp_path: Path, case: EngineCase) -> list[str]:
    """A launcher process that prints the recorded ``--help`` when asked the way the engine asks."""
    script = tmp_path / "launcher.py"
    script.write_text(
        "import sys\n"
        f"if sys.argv[-1] == {case.help_argument!r}:\n"
        f"    sys.stdout.write(open({str(FIXTURES / case.help_file)!r}).read())\n"
        "    sys.exit(0)\n"
        "sys.exit('unexpected arguments: ' + ' '.join(sys.argv[1:]))\n"
    )
    return [sys.executable, str(script), *case.launcher_tail]


@pytest.fixture
def engine_and_flags(case: EngineCase, tmp_path: Path) -> tuple[Engine, FlagSet, list[str]]:
    engine = get_engine(case.name)
    launcher = fake_launcher(tmp_path, case)
    return engine, engine.read_flag_set(launcher), launcher


def test_every_engine_has_a_case_and_unknown_names_are_listed() -> None:
    assert set(NAMES) == set(CASES)
    with pytest.raises(UserError, match="known engines: " + ", ".join(NAMES)):
        get_engine("no-such-engine")


# ---------------------------------------------------------------- 1. valid flags


def test_the_flags_an_engine_declares_for_the_study_are_flags_its_launcher_accepts(
    case: EngineCase, engine_and_flags: tuple[Engine, FlagSet, list[str]]
) -> None:
    """What the study reads through the engine (its draft spelling, its schedule's flags, the memory
    flag of the race's verdict) is spelled as the engine's own --help spells it."""
    engine, flags, _ = engine_and_flags
    declared = set(engine.speculation.flags()) if engine.speculation is not None else set()
    if engine.schedule_form is not None:
        declared |= engine.schedule_form.per_tier | {engine.schedule_form.running_flag or ""}
    declared |= {engine.verdict_memory_flag or ""}
    declared.discard("")
    assert declared or engine.speculation is None
    engine.check_flags(sorted(declared | set(case.valid)), flags)  # beside a valid config: flags that go in pairs


def test_valid_flags_come_from_the_recorded_help(
    case: EngineCase, engine_and_flags: tuple[Engine, FlagSet, list[str]]
) -> None:
    engine, flags, _ = engine_and_flags
    engine.check_flags(list(case.valid), flags)  # every flag of the valid config exists
    assert case.added_by_argv <= flags.switches | flags.flags
    with pytest.raises(FlagError, match="unknown flag --no-such-flag-anywhere"):
        engine.check_flags([*case.valid, "no-such-flag-anywhere"], flags)
    for reserved in engine.reserved_flags:
        with pytest.raises(FlagError):
            engine.check_flags([*case.valid, reserved], flags)


# ---------------------------------------------------------------- 2. round trip


def flags_back(argv: list[str], flags: FlagSet) -> tuple[dict[str, FlagValue | None], list[str]]:
    """Read a command line back as the launcher's argparse would: ``--name value`` or a switch;
    anything else is positional. Fails on a name the launcher does not know."""
    back: dict[str, FlagValue | None] = {}
    positional: list[str] = []
    index = 0
    while index < len(argv):
        token = argv[index]
        if not token.startswith("--"):
            positional.append(token)
            index += 1
            continue
        name = token[2:]
        assert name in flags.flags, f"--{name} is not a flag of the recorded launcher"
        assert name not in back, f"--{name} given twice"
        if name in flags.switches:
            back[name] = True
            index += 1
        else:
            assert index + 1 < len(argv) and not argv[index + 1].startswith("--"), f"--{name} has no value"
            back[name] = scalar(argv[index + 1])  # as a search space would hold it
            index += 2
    return back, positional


def test_flags_round_trip_through_the_command_line(
    case: EngineCase, engine_and_flags: tuple[Engine, FlagSet, list[str]]
) -> None:
    engine, flags, launcher = engine_and_flags
    plan = engine.normalise(case.valid)
    argv = engine.build_argv(launcher, model="org/model", plan=plan, host="127.0.0.1", port=18123)
    assert argv[: len(launcher)] == launcher
    back, positional = flags_back(argv[len(launcher) :], flags)
    model = back.pop("model-path", None) or back.pop("model", None) or (positional.pop(0) if positional else None)
    assert (model, back.pop("host"), back.pop("port"), positional) == ("org/model", "127.0.0.1", 18123, [])
    assert case.added_by_argv <= set(back)
    again = engine.normalise({k: v for k, v in back.items() if k not in case.added_by_argv})
    assert again.flags == plan.flags and again.config_key == plan.config_key
    assert engine.build_argv(launcher, model="org/model", plan=again, host="127.0.0.1", port=18123) == argv


# ---------------------------------------------------------------- 3. one key per effective config


def test_equivalent_configs_share_a_key_and_different_ones_do_not(case: EngineCase) -> None:
    engine = get_engine(case.name)
    for one, other in case.equivalent:
        assert engine.normalise(one).config_key == engine.normalise(other).config_key, (one, other)
    first, second = case.different
    assert engine.normalise(first).config_key != engine.normalise(second).config_key


# ---------------------------------------------------------------- 4. readiness


class _Health(http.server.BaseHTTPRequestHandler):
    answers: list[int] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's spelling)
        status = self.answers.pop(0) if self.path == "/health" and self.answers else 404
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:  # noqa: A002
        return None


@pytest.fixture
def loading_server() -> Iterator[str]:
    """A local server whose /health answers 503 twice (loading), then 200."""
    _Health.answers = [503, 503, 200]
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def test_readiness_waits_for_health_200(case: EngineCase, loading_server: str) -> None:
    engine = get_engine(case.name)
    with httpx.Client() as client:
        assert [engine.is_ready(client, loading_server) for _ in range(3)] == [False, False, True]
        assert engine.is_ready(client, f"http://127.0.0.1:{free_port()}") is False  # nothing listens


# ---------------------------------------------------------------- 5. failures


def test_recorded_failures_are_classified(case: EngineCase) -> None:
    engine = get_engine(case.name)
    for log in case.failures:
        text = (FIXTURES / log.file).read_text()
        failure = engine.classify_failure(exit_code=log.exit_code, log_text=text, timed_out=False)
        assert (failure.kind, log.reason in failure.reason) == (log.kind, True), (log.file, failure.reason)
        named = engine.failure_in(text)
        assert named is not None and named.kind is log.kind, log.file


def test_a_deadline_without_a_named_failure_is_a_timeout_and_memory_outranks_it(case: EngineCase) -> None:
    engine = get_engine(case.name)
    quiet = engine.classify_failure(exit_code=None, log_text="loading the model ...\n", timed_out=True)
    assert quiet.kind is OutcomeKind.LAUNCH_TIMEOUT
    memory = next(log for log in case.failures if log.kind.is_memory)
    late = engine.classify_failure(exit_code=None, log_text=(FIXTURES / memory.file).read_text(), timed_out=True)
    assert late.kind is memory.kind


def test_a_crash_without_words_still_says_its_exit_code(case: EngineCase) -> None:
    failure = get_engine(case.name).classify_failure(exit_code=-9, log_text="", timed_out=False)
    assert failure.kind is OutcomeKind.CRASHED and failure.reason.startswith("exit code -9")


# ---------------------------------------------------------------- 6. figures


def test_startup_memory_figures(case: EngineCase) -> None:
    engine = get_engine(case.name)
    assert engine.memory_facts("nothing about memory here\n") is None
    if case.startup_log is None:
        return
    facts = engine.memory_facts((FIXTURES / case.startup_log).read_text())
    assert facts is not None and case.memory is not None
    for name, expected in case.memory.items():
        seen = getattr(facts, name)
        scale = GIB if name.endswith("_bytes") else 1
        assert seen == pytest.approx(expected * scale), name


def test_server_stats_of_a_recorded_window(case: EngineCase) -> None:
    engine = get_engine(case.name)
    s = case.stats
    read = [(FIXTURES / f).read_text() if f else None for f in (s.log, s.metrics_before, s.metrics_after)]
    stats = engine.server_stats(log_window=read[0] or "", metrics_before=read[1], metrics_after=read[2])
    assert stats is not None
    assert stats.log_lines == s.log_lines
    for name in ("gen_tok_s", "accept_length", "generated_tokens", "metrics_accept_length"):
        expected = getattr(s, name)
        seen = getattr(stats, name)
        assert (seen is None) == (expected is None) and (expected is None or seen == pytest.approx(expected)), name
    assert engine.server_stats(log_window="nothing\n", metrics_before=None, metrics_after=None) is None


def test_every_form_of_the_periodic_lines_is_read(case: EngineCase) -> None:
    engine = get_engine(case.name)
    for form in case.forms:
        logged = engine.log_figures((FIXTURES / form.file).read_text())
        assert logged.lines == form.log_lines, form.file
        for name, expected in (("total_gen_tok_s", form.gen_tok_s), ("accept_length", form.accept_length)):
            seen = getattr(logged, name)
            assert (seen is None) == (expected is None), (form.file, name, seen)
            assert expected is None or seen == pytest.approx(expected), (form.file, name, seen)


def test_a_pool_memory_refusal_carries_its_figures(case: EngineCase) -> None:
    """Learned as memory (too low), with what the message says: needed against available."""
    engine = get_engine(case.name)
    for refusal in case.shortfalls:
        text = (FIXTURES / refusal.file).read_text()
        failure = engine.classify_failure(exit_code=1, log_text=text, timed_out=False)
        assert failure.kind is OutcomeKind.MEMORY_TOO_LOW, (refusal.file, failure.reason)
        shortfall = engine.pool_shortfall(failure.reason)
        assert shortfall is not None, refusal.file
        for name, expected in refusal.figures.items():
            scale = GIB if name.endswith("_bytes") else 1
            seen = getattr(shortfall, name)
            assert (seen is None) == (expected is None), (refusal.file, name, seen)
            assert expected is None or seen == pytest.approx(expected * scale), (refusal.file, name, seen)
        facts = engine.memory_facts(text)
        kv = facts.kv_pool_bytes if facts is not None else None
        assert kv == pytest.approx(refusal.kv_pool_gib * GIB) if refusal.kv_pool_gib is not None else kv is None
