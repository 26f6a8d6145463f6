"""What the selected tests need beyond the package, provided before the first test runs.

A test marked ``@pytest.mark.tier(NAME)`` (or ``browser``) needs that tier. After collection, each
tier a selected test needs is provided once: a real engine or real weights are built or fetched by
the repo's own script (cached outside the clone, so only the first run pays; progress on stderr),
and a system package that is missing stops the run with one line naming the command that installs
it. A selected test is never skipped for want of its tier: a plain ``pytest`` either runs it or
says why it cannot. Deselect a tier with ``-m "not slow"`` (or ``-m "not real_engine"``).
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Tier:
    """A tier: a path the tests read from ``env`` (made by ``script``), or system packages (``missing``)."""

    env: str | None = None
    script: tuple[str, ...] = ()
    cold: str = ""
    missing: Callable[[], list[str]] | None = None
    install: str = ""


def pg_bin() -> Path | None:
    """Debian's PostgreSQL binaries (newest version installed)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"))
    return Path(found[-1]).parent if found else None


def _browser_missing() -> list[str]:
    missing = [name for name in ("chromium", "chromedriver") if shutil.which(name) is None]
    try:
        import selenium  # noqa: F401
    except ImportError:
        missing.append("the selenium package (pip install -e '.[test]')")
    return missing


TIERS: dict[str, Tier] = {
    "llama-server": Tier(
        env="AUTOTUNE_LLAMA_SERVER",
        script=("scripts/build-llama-server.sh", "--jobs", str(os.cpu_count() or 1)),
        cold="builds llama.cpp's server: about 10 minutes on 2 cores",
    ),
    "conformance": Tier(
        env="AUTOTUNE_CONFORMANCE_PYTHON",
        script=("scripts/conformance-env.sh",),
        cold="installs the real SGLang 0.5.23 and vLLM 0.33.0 (CPU): 4-7 minutes, 4 GB",
    ),
    "weights": Tier(
        env="AUTOTUNE_WEIGHTS_DIR",
        script=("scripts/fetch-weights.sh",),
        cold="fetches Qwen2.5-Coder 1.5B and 0.5B (GGUF, 1.6 GB): about a minute",
    ),
    "browser": Tier(missing=_browser_missing, install="apt-get install -y chromium chromium-driver"),
    "postgres": Tier(
        missing=lambda: [] if pg_bin() is not None else ["PostgreSQL"], install="apt-get install -y postgresql"
    ),
}


def path_of(name: str) -> str:
    """The path a provided tier's tests read (its script's answer, or the variable as the user set it)."""
    env = TIERS[name].env
    assert env is not None, f"tier {name} is system packages, not a path"
    return os.environ[env]


def _needed(items: list[pytest.Item]) -> list[str]:
    names = {str(arg) for item in items for mark in item.iter_markers("tier") for arg in mark.args}
    names |= {"browser" for item in items if item.get_closest_marker("browser") is not None}
    unknown = names - TIERS.keys()
    if unknown:
        raise pytest.UsageError(f"unknown tier {sorted(unknown)}; known: {sorted(TIERS)}")
    return sorted(names)


def _provide(config: pytest.Config, name: str, tier: Tier) -> None:
    if tier.missing is not None:
        missing = tier.missing()
        if missing:
            pytest.exit(f"the {name} tests need {', '.join(missing)}: {tier.install} "
                        "(or leave them out: -m 'not slow')", returncode=2)  # fmt: skip
        return
    assert tier.env is not None
    if os.environ.get(tier.env):
        return
    command = " ".join(tier.script)
    capture = config.pluginmanager.getplugin("capturemanager")
    started = time.monotonic()
    with capture.global_and_fixture_disabled():  # the script's progress shows as it runs
        print(f"\n[tests] {tier.env} is unset: running {command} ({tier.cold}; cached after that)",
              file=sys.stderr, flush=True)  # fmt: skip
        done = subprocess.run(list(tier.script), cwd=ROOT, stdout=subprocess.PIPE, text=True, check=False)
        lines = done.stdout.strip().splitlines()
        if done.returncode != 0 or not lines:
            pytest.exit(f"{command} failed (exit {done.returncode}): run it to see why, or set {tier.env}",
                        returncode=2)  # fmt: skip
        os.environ[tier.env] = lines[-1]
        print(f"[tests] {tier.env}={lines[-1]} ({time.monotonic() - started:.0f} s)", file=sys.stderr, flush=True)


def pytest_collection_finish(session: pytest.Session) -> None:
    for name in _needed(session.items):
        _provide(session.config, name, TIERS[name])
