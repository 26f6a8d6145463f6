"""Server lifecycle on real processes: group kill, readiness, exits, deadlines, orphans."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from autotune.engines import get_engine
from autotune.errors import StorageError
from autotune.outcomes import OutcomeKind
from autotune.server import ServerProcess, ServerState, find_free_port, process_start_ticks, reap_orphans
from autotune.trial import _lost_its_port
from tests.conftest import ROOT

# A "server" that starts a grandchild, ignores SIGTERM, and announces readiness with a file.
STUBBORN = textwrap.dedent(
    """
    import signal, subprocess, sys, time, pathlib
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    pathlib.Path(sys.argv[1]).write_text(str(child.pid))
    time.sleep(600)
    """
)


def alive(pid: int) -> bool:
    # A zombie still answers kill(0): look at its state instead.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def wait_for(condition, timeout: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return False


def test_stop_kills_the_whole_group_even_if_sigterm_is_ignored(tmp_path: Path) -> None:
    marker = tmp_path / "ready"
    server = ServerProcess(
        [sys.executable, "-c", STUBBORN, str(marker)], env={}, log_path=tmp_path / "s.log", records_dir=tmp_path / "rec"
    )
    with server:
        result = server.wait_ready(marker.exists, timeout_s=20)
        assert result.ready and server.state is ServerState.READY
        grandchild = int(marker.read_text())
        assert list((tmp_path / "rec").glob("server-*.json"))  # record written while running
        started = time.monotonic()
        server.stop(grace_s=0.5)
        assert time.monotonic() - started < 10
    assert server.state is ServerState.STOPPED
    assert server.pid is not None and not alive(server.pid)
    assert wait_for(lambda: not alive(grandchild))
    assert not list((tmp_path / "rec").glob("server-*.json"))


def test_an_interruption_between_the_spawn_and_its_record_leaves_no_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Ctrl-C landing inside start(), before `with` owns the server: its __exit__ never runs.
    import autotune.server as server_module

    spawned: list[int] = []

    def interrupted(pid: int) -> int | None:
        monkeypatch.undo()  # once: stop() reads start times too
        spawned.append(pid)
        raise KeyboardInterrupt

    server = ServerProcess([sys.executable, "-c", "import time; time.sleep(600)"], env={},
                           log_path=tmp_path / "s.log", records_dir=tmp_path / "rec")  # fmt: skip
    monkeypatch.setattr(server_module, "process_start_ticks", interrupted)
    try:
        with pytest.raises(KeyboardInterrupt), server:
            pytest.fail("the server was owned")
        assert spawned == [server.pid] and not alive(spawned[0])
        assert server.state is ServerState.STOPPED and not list((tmp_path / "rec").glob("server-*.json"))
    finally:
        for pid in spawned:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def test_exit_during_startup_is_reported_with_its_code(tmp_path: Path) -> None:
    server = ServerProcess(
        [sys.executable, "-c", "print('boom'); raise SystemExit(3)"],
        env={},
        log_path=tmp_path / "s.log",
        records_dir=tmp_path / "rec",
    )
    with server:
        result = server.wait_ready(lambda: False, timeout_s=30)
    assert not result.ready and result.exit_code == 3 and not result.timed_out
    assert "boom" in (tmp_path / "s.log").read_text()


def test_a_server_whose_log_says_it_lost_its_port_is_not_waited_for(tmp_path: Path) -> None:
    # Real SGLang 0.5.23 logs uvicorn's "address already in use" and then hangs in its shutdown
    # (tests/fixtures/sglang_real_logs/port_in_use.log): the launch ends there, not at the deadline.
    logged = (ROOT / "tests" / "fixtures" / "sglang_real_logs" / "port_in_use.log").read_text()
    script = f"import sys, time; sys.stdout.write({logged!r}); sys.stdout.flush(); time.sleep(600)"
    log = tmp_path / "s.log"
    engine = get_engine("sglang")
    server = ServerProcess([sys.executable, "-c", script], env={}, log_path=log, records_dir=tmp_path / "rec")
    with server:
        result = server.wait_ready(lambda: False, timeout_s=600, failed=lambda: _lost_its_port(engine, log))
    assert not result.ready and not result.timed_out and result.exit_code is None
    failure = engine.classify_failure(exit_code=None, log_text=log.read_text(), timed_out=False)
    assert failure.kind is OutcomeKind.PORT_IN_USE


def test_a_healthy_start_is_not_taken_for_a_lost_port(tmp_path: Path) -> None:
    served = ROOT / "tests" / "fixtures" / "sglang_real_logs" / "served.log"
    assert not _lost_its_port(get_engine("sglang"), served)


def test_a_child_that_left_the_process_group_is_stopped_too(tmp_path: Path) -> None:
    # a server's worker in a session of its own (start_new_session) is out of reach of the group kill
    script = ("import subprocess, sys, time; child = subprocess.Popen([sys.executable, '-c', 'import time; "
              "time.sleep(600)'], start_new_session=True); print(child.pid, flush=True); time.sleep(600)")
    log = tmp_path / "s.log"
    server = ServerProcess([sys.executable, "-c", script], env={}, log_path=log, records_dir=tmp_path / "rec")
    with server:
        assert server.wait_ready(lambda: log.read_text().strip().isdigit(), timeout_s=30).ready
        child = int(log.read_text())
        assert process_start_ticks(child) is not None
    deadline = time.monotonic() + 10  # SIGKILL is delivered, not awaited
    while process_start_ticks(child) is not None and not _zombie(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert process_start_ticks(child) is None or _zombie(child), "the child that left the group still runs"


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def test_deadline_without_sleeping_through_it(tmp_path: Path) -> None:
    ticks = iter(range(0, 10_000, 50))  # each clock read advances 50 s
    server = ServerProcess(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        env={},
        log_path=tmp_path / "s.log",
        records_dir=tmp_path / "rec",
        clock=lambda: float(next(ticks)),
    )
    with server:
        result = server.wait_ready(lambda: False, timeout_s=120, poll_s=0.01)
    assert result.timed_out and not result.ready and result.exit_code is None


def test_environment_is_passed(tmp_path: Path) -> None:
    out = tmp_path / "env.txt"
    code = f"import os, pathlib; pathlib.Path({str(out)!r}).write_text(os.environ['CUDA_VISIBLE_DEVICES'])"
    server = ServerProcess(
        [sys.executable, "-c", code],
        env={"CUDA_VISIBLE_DEVICES": "0,1"},
        log_path=tmp_path / "s.log",
        records_dir=tmp_path / "rec",
    )
    with server:
        server.wait_ready(lambda: False, timeout_s=30)
    assert out.read_text() == "0,1"


def test_orphans_of_a_dead_tuner_are_found_and_killed(tmp_path: Path) -> None:
    records = tmp_path / "rec"
    # A tuner that starts a server and dies without stopping it (like kill -9).
    tuner = textwrap.dedent(
        f"""
        import os, sys
        from pathlib import Path
        from autotune.server import ServerProcess
        s = ServerProcess([sys.executable, "-c", "import time; time.sleep(600)", "--api-key", "k-orphan"],
                          env={{}}, log_path=Path({str(tmp_path / "s.log")!r}), records_dir=Path({str(records)!r}),
                          secrets=["k-orphan"])
        s.start()
        print(s.pid, flush=True)
        os._exit(0)
        """
    )
    out = subprocess.run([sys.executable, "-c", tuner], capture_output=True, text=True, check=True)
    orphan = int(out.stdout.strip())
    assert alive(orphan)
    # Its record names no key: the orphan is found by its pid and start time, never by its command line.
    (left,) = records.glob("server-*.json")
    assert json.loads(left.read_text())["argv"][-2:] == ["--api-key", "***"]
    # A stale record whose pid now belongs to another process must not be acted on.
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        (records / f"server-{bystander.pid}.json").write_text(
            json.dumps(
                {
                    "pid": bystander.pid,
                    "start_ticks": (process_start_ticks(bystander.pid) or 0) + 1,
                    "owner_pid": 999_999_999,
                    "owner_start_ticks": 1,
                    "argv": ["x"],
                    "log_path": "x",
                    "started_at": "2026-01-01T00:00:00Z",
                }
            )
        )
        killed = reap_orphans(records)
        assert [r.pid for r in killed] == [orphan]
        assert wait_for(lambda: not alive(orphan))
        assert bystander.poll() is None
        assert not list(records.glob("server-*.json"))
    finally:
        bystander.kill()
        bystander.wait()


def test_records_of_a_live_tuner_are_left_alone(tmp_path: Path) -> None:
    server = ServerProcess(
        [sys.executable, "-c", "import time; time.sleep(600)"],
        env={},
        log_path=tmp_path / "s.log",
        records_dir=tmp_path / "rec",
    )
    with server:
        assert reap_orphans(tmp_path / "rec") == []  # the owner (this process) is alive
        assert server.poll() is None
        assert list((tmp_path / "rec").glob("server-*.json"))


def test_the_record_holds_no_secret_flag_value(tmp_path: Path) -> None:
    argv = [sys.executable, "-c", "import time; time.sleep(600)", "--api-key", "k-123", "--ssl-keyfile-password=pw-456"]
    server = ServerProcess(argv, env={}, log_path=tmp_path / "s.log", records_dir=tmp_path / "rec")
    with server:
        (record,) = (tmp_path / "rec").glob("server-*.json")
        text = record.read_text()
        cmdline = Path("/proc") / record.stem.removeprefix("server-") / "cmdline"
        # the record is written before the child has exec'd: its cmdline is empty (or the parent's) until then
        assert server.wait_ready(lambda: b"k-123" in cmdline.read_bytes(), timeout_s=30).ready
        running = cmdline.read_bytes().split(b"\0")
    assert json.loads(text)["argv"][-3:] == ["--api-key", "***", "--ssl-keyfile-password=***"]
    assert "k-123" not in text and "pw-456" not in text
    assert b"k-123" in running and b"--ssl-keyfile-password=pw-456" in running  # the server itself gets the key


# A "server" that prints its key as servers do (SGLang logs its server_args): as written, in a repr
# and in JSON, then once split across two writes, each sent before the next is written.
LEAKY = textwrap.dedent(
    """
    import json, pathlib, sys, time
    key, log = sys.argv[1], pathlib.Path(sys.argv[2])
    print(f"server_args=ServerArgs(api_key={key!r}, port=1)", flush=True)
    print(f"key {key} and {json.dumps({'api_key': key})}", flush=True)
    sys.stdout.write("split: " + key[:5])
    sys.stdout.flush()
    while b"split: " not in log.read_bytes():  # the relay has written what came before the half key
        time.sleep(0.01)
    print(key[5:] + " done", flush=True)
    print("ready", flush=True)
    time.sleep(600)
    """
)


def test_a_server_given_secrets_logs_none_of_them_while_it_runs(tmp_path: Path) -> None:
    key = "sk-Very$ecret'Key\"42"
    log = tmp_path / "s.log"
    server = ServerProcess([sys.executable, "-c", LEAKY, key, str(log)], env={}, log_path=log,
                           records_dir=tmp_path / "rec", secrets=[key])  # fmt: skip
    with server:
        assert server.wait_ready(lambda: b"ready" in log.read_bytes(), timeout_s=30).ready
        for path in tmp_path.rglob("*"):  # the log and the record, while the server runs
            assert not path.is_file() or b"Very$ecret" not in path.read_bytes(), path
    lines = log.read_text().splitlines()
    assert lines[:4] == ["server_args=ServerArgs(api_key='***', port=1)", 'key *** and {"api_key": "***"}',
                         "split: *** done", "ready"]  # fmt: skip


def test_free_port_is_bindable() -> None:
    import socket

    port = find_free_port()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))


def test_a_log_that_cannot_be_written_is_one_line_and_nothing_is_started(tmp_path: Path) -> None:
    taken = tmp_path / "artifacts"
    taken.write_text("a file where the log folder should be (a shared mount gone wrong)")
    marker = tmp_path / "started"
    server = ServerProcess([sys.executable, "-c", f"open({str(marker)!r}, 'w')"], env={},
                           log_path=taken / "logs" / "s.log", records_dir=tmp_path / "rec")  # fmt: skip
    with pytest.raises(StorageError) as failed:
        server.start()
    assert failed.value.message.startswith(f"cannot write the server's log {taken / 'logs' / 's.log'}: ")
    assert "\n" not in failed.value.message
    assert server.pid is None and not marker.exists()
