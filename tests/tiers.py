"""What the selected tests need beyond the package, provided by the test run itself.

A test marked ``@pytest.mark.tier(NAME)`` (or ``browser``) needs that tier: system packages
(PostgreSQL, Chromium and its driver, the C++ toolchain that builds llama-server), or a real engine or
real weights that the repo's own script builds or fetches once into a cache outside the clone. Once
the selected tests are known:

- missing system packages are installed with apt when the run can (root, apt-get on PATH), with
  apt's progress on stderr; otherwise the run stops with one line naming the command that installs
  them;
- a script tier that is not cached yet starts building in the background, and the tests that need it
  are ordered last, so everything else runs meanwhile; its first test waits for it, and a failed build
  fails its tests with one line naming the script.

A selected test is never skipped for want of its tier. Deselect a tier with ``-m "not slow"`` (or
``-m "not real_engine"``).

Under pytest-xdist the controller provides (it sees the workers' selection through
``pytest_xdist_node_collection_finished``); the workers order their tests by which tiers were cached
when the run started, and read a tier's path from its script's cache (or wait for the build).
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
STATE_ENV = "AUTOTUNE_TIERS_STATE"  # the run's folder: what the workers need, each build's output
READY_ENV = "AUTOTUNE_TIERS_READY"  # the script tiers cached when the run started (the same order everywhere)
BUILD_WAIT_S = 45 * 60
APT_ENV = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}


@dataclass(frozen=True)
class Package:
    """A Debian package a tier needs, and how the run sees that it is there."""

    name: str
    present: Callable[[], bool]


def pg_bin() -> Path | None:
    """Debian's PostgreSQL binaries (newest version installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def _tool(name: str) -> Callable[[], bool]:
    return lambda: shutil.which(name) is not None


@dataclass(frozen=True)
class Tier:
    """A tier: a path the tests read from ``env`` (made by ``script``), and the Debian ``packages`` it
    needs (a script tier only to build, so only when its cache is empty)."""

    env: str | None = None
    script: tuple[str, ...] = ()
    cold: str = ""
    packages: tuple[Package, ...] = ()
    python: tuple[str, ...] = ()  # modules apt cannot give (the test extra's): named in the stop line

    def cached(self) -> str | None:
        """The script's cached answer (its ``--cached`` mode), None when it has to build."""
        done = subprocess.run([*self.script, "--cached"], cwd=ROOT, capture_output=True, text=True, check=False)
        lines = done.stdout.strip().splitlines()
        return lines[-1] if done.returncode == 0 and lines else None


TIERS: dict[str, Tier] = {
    "llama-server": Tier(
        env="AUTOTUNE_LLAMA_SERVER",
        script=("scripts/build-llama-server.sh", "--jobs", str(os.cpu_count() or 1)),
        cold="builds llama.cpp's server: about 10 minutes on 2 cores",
        packages=(Package("cmake", _tool("cmake")), Package("g++", _tool("c++"))),
    ),
    "conformance": Tier(
        env="AUTOTUNE_CONFORMANCE_PYTHON",
        script=("scripts/conformance-env.sh",),
        cold="installs the real SGLang 0.5.23 and vLLM 0.34.0 (CPU): 4-7 minutes, 4 GB",
    ),
    "weights": Tier(
        env="AUTOTUNE_WEIGHTS_DIR",
        script=("scripts/fetch-weights.sh",),
        cold="fetches Qwen2.5-Coder 1.5B and 0.5B (GGUF, 1.6 GB): about a minute",
    ),
    "browser": Tier(
        packages=(Package("chromium", _tool("chromium")), Package("chromium-driver", _tool("chromedriver"))),
        python=("selenium",),
    ),
    "postgres": Tier(packages=(Package("postgresql", lambda: pg_bin() is not None),)),
}


# ---------------------------------------------------------------- which tiers, in which order


def needed(items: list[pytest.Item]) -> list[str]:
    """The tiers the selected tests need."""
    names = {str(arg) for item in items for mark in item.iter_markers("tier") for arg in mark.args}
    names |= {"browser" for item in items if item.get_closest_marker("browser") is not None}
    unknown = names - TIERS.keys()
    if unknown:
        raise pytest.UsageError(f"unknown tier {sorted(unknown)}; known: {sorted(TIERS)}")
    return sorted(names)


def _tiers_of(item: pytest.Item) -> set[str]:
    return {str(arg) for mark in item.iter_markers("tier") for arg in mark.args}


def _ready_at_start() -> set[str]:
    return set(filter(None, os.environ.get(READY_ENV, "").split(",")))


def _order(items: list[pytest.Item]) -> None:
    """Slow tests first (those marked ``longest``, and the tests sharing a module fixture with one, before
    the rest, so no worker is left with one at the end), then the real engines', then tests waiting for a
    tier still to build; otherwise collection order. Tests sharing a module-scoped fixture stay together
    under xdist (``--dist loadgroup``), so its server or study is made once."""
    ready = _ready_at_start() | {name for name, tier in TIERS.items() if tier.env and os.environ.get(tier.env)}
    scripted = {name for name, tier in TIERS.items() if tier.script}

    def waits(item: pytest.Item) -> bool:
        return bool((_tiers_of(item) & scripted) - ready)

    groups: dict[str, str] = {}
    for item in items:
        fixtures = item._fixtureinfo.name2fixturedefs.values() if isinstance(item, pytest.Function) else []
        if any(d.scope in ("module", "class") for defs in fixtures for d in defs):
            groups[item.nodeid] = item.nodeid.split("::")[0]
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    long_groups = {groups[i.nodeid] for i in items if i.get_closest_marker("longest") and i.nodeid in groups}

    def longest(item: pytest.Item) -> bool:
        return item.get_closest_marker("longest") is not None or groups.get(item.nodeid) in long_groups

    # Real engines last, when the twin tests' workers are done: a real SGLang on a CPU shared with seven
    # busy workers held its stream back and flushed it in one burst the client cannot time.
    items.sort(key=lambda item: (waits(item), item.get_closest_marker("real_engine") is not None,
                                 item.get_closest_marker("slow") is None, not longest(item)))  # fmt: skip


# ---------------------------------------------------------------- providing


def _missing_packages(names: list[str]) -> dict[str, list[Package]]:
    """Each tier's Debian packages that are not there (a script tier's only while it has to build)."""
    missing: dict[str, list[Package]] = {}
    for name in names:
        tier = TIERS[name]
        if tier.script and (os.environ.get(tier.env or "") or name in _ready_at_start()):
            continue  # built already: its toolchain is not needed
        lacking = [p for p in tier.packages if not p.present()]
        if lacking:
            missing[name] = lacking
    return missing


def _install(names: list[str]) -> bool:
    """apt-get install, with its progress on stderr; False when this run cannot (not root, no apt)."""
    apt = shutil.which("apt-get")
    if apt is None or os.geteuid() != 0:
        return False
    print(f"\n[tests] installing {' '.join(names)} (apt-get, as root)", file=sys.stderr, flush=True)
    started = time.monotonic()
    for command in ([apt, "update", "-q"], [apt, "install", "-y", "-q", "--no-install-recommends", *names]):
        if subprocess.run(command, stdout=sys.stderr, env=APT_ENV, check=False).returncode != 0:
            return False
    print(f"[tests] installed {' '.join(names)} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)
    return True


def _stop_for(names: list[str]) -> None:
    """Install what a tier's system side lacks; stop the run with one line when this run cannot."""
    missing = _missing_packages(names)
    if missing and _install(sorted({p.name for lacking in missing.values() for p in lacking})):
        missing = _missing_packages(names)
    for name in names:
        python = [f"the {m} package" for m in TIERS[name].python if importlib.util.find_spec(m) is None]
        if name not in missing and not python:
            continue
        what = [p.name for p in missing.get(name, [])]
        fix = f"apt-get install -y {' '.join(what)}" if what else "pip install -e '.[test]'"
        pytest.exit(f"the {name} tests need {', '.join([*what, *python])}: {fix} (or leave them out: -m 'not slow')",
                    returncode=2)  # fmt: skip


class Builds:
    """The script tiers being built in the background of this run: each one's output and exit code
    land in the run's folder, where every worker reads them."""

    def __init__(self, state: Path) -> None:
        self.state = state
        self.running: list[subprocess.Popen[bytes]] = []

    def start(self, name: str, tier: Tier) -> None:
        command = " ".join(tier.script)
        print(f"\n[tests] {tier.env} is unset and nothing is cached: running {command} in the background "
              f"({tier.cold}; cached after that); its tests run last", file=sys.stderr, flush=True)  # fmt: skip
        out = (self.state / f"{name}.out").open("wb")
        proc = subprocess.Popen(list(tier.script), cwd=ROOT, stdout=out, start_new_session=True)
        self.running.append(proc)
        started = time.monotonic()

        def finish() -> None:
            code = proc.wait()
            out.close()
            print(f"\n[tests] {command} done: exit {code} ({time.monotonic() - started:.0f} s)", file=sys.stderr,
                  flush=True)  # fmt: skip
            (self.state / f"{name}.rc.tmp").write_text(str(code))
            (self.state / f"{name}.rc.tmp").rename(self.state / f"{name}.rc")

        threading.Thread(target=finish, name=f"tier-{name}", daemon=True).start()

    def stop(self) -> None:
        """An interrupted run stops its builds (the scripts write their cache only when complete)."""
        for proc in self.running:
            if proc.poll() is None:
                os.killpg(proc.pid, 15)
                proc.wait()


_builds: Builds | None = None
_provided = False


def provide(names: list[str]) -> None:
    """System packages now (installed, or the run stops); script tiers not cached start building."""
    global _provided
    if _provided:
        return
    _provided = True
    _stop_for(names)
    assert _builds is not None
    ready = _ready_at_start()
    for name in names:
        tier = TIERS[name]
        if tier.script and not os.environ.get(tier.env or "") and name not in ready:
            _builds.start(name, tier)


def path_of(name: str) -> str:
    """The path a tier's tests read: the variable as the user set it, the script's cache, or (when it
    is being built in this run) its answer once the build is done."""
    tier = TIERS[name]
    assert tier.env is not None, f"tier {name} is system packages, not a path"
    if os.environ.get(tier.env):
        return os.environ[tier.env]
    state = Path(os.environ[STATE_ENV])
    rc = state / f"{name}.rc"
    deadline = time.monotonic() + BUILD_WAIT_S
    path = tier.cached()
    while path is None and not rc.exists() and time.monotonic() < deadline:
        time.sleep(1)  # the build's exit code file is the readiness signal; nothing to wait on across processes
    command = " ".join(tier.script)
    if path is None:
        code = rc.read_text() if rc.exists() else "still running"
        lines = (state / f"{name}.out").read_text().strip().splitlines() if code == "0" else []
        if not lines:
            pytest.fail(f"{command} failed (exit {code}): run it to see why, or set {tier.env}", pytrace=False)
        path = lines[-1]
    os.environ[tier.env] = path
    return path


def executable_of(name: str) -> str:
    """A tier's path that must be a program (llama-server, the conformance venv's Python): fails the
    test with the variable's name when it is not one."""
    path = path_of(name)
    if not os.access(path, os.X_OK):
        pytest.fail(f"{TIERS[name].env}={path} is not an executable", pytrace=False)
    return path


# ---------------------------------------------------------------- the hooks


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    global _builds
    if _is_worker(config):
        return
    state = Path(tempfile.mkdtemp(prefix="autotune-tiers-"))
    os.environ[STATE_ENV] = str(state)
    os.environ[READY_ENV] = ",".join(name for name, t in TIERS.items() if t.script and t.cached() is not None)
    _builds = Builds(state)


def pytest_unconfigure(config: pytest.Config) -> None:
    if _is_worker(config) or _builds is None:
        return
    _builds.stop()
    shutil.rmtree(_builds.state, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)  # before xdist reads the groups
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _order(items)


@pytest.hookimpl(tryfirst=True)  # the needs are written before xdist tells the controller collection is done
def pytest_collection_finish(session: pytest.Session) -> None:
    names = needed(session.items)
    if _is_worker(session.config):
        worker = session.config.workerinput["workerid"]  # type: ignore[attr-defined]
        (Path(os.environ[STATE_ENV]) / f"needs-{worker}.json").write_text(json.dumps(names))
        return
    if not session.config.option.collectonly:
        provide(names)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: object, ids: list[str]) -> None:
    worker = node.gateway.id  # type: ignore[attr-defined]
    provide(json.loads((Path(os.environ[STATE_ENV]) / f"needs-{worker}.json").read_text()))
