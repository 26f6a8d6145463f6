"""A plain test run tells the truth: a selected test whose tier is missing stops the run with one line
naming the command that provides it, never a green run with the test skipped (tests/tiers.py).

Each case runs pytest as a process on a small test file of its own, with the tiers plugin loaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests import tiers
from tests.conftest import ROOT

NEEDS_BROWSER = '''
import pytest

@pytest.mark.browser
def test_drives_chromium():
    pass
'''

NEEDS_WEIGHTS = '''
import pytest
from tests.tiers import path_of

@pytest.mark.tier("weights")
def test_reads_the_weights():
    assert path_of("weights") == "/given/by/the/user"

def test_needs_nothing():
    pass
'''


def run_pytest(tmp_path: Path, source: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    test = tmp_path / "test_case.py"
    test.write_text(source)
    command = [sys.executable, "-m", "pytest", "-p", "tests.tiers", "-c", str(ROOT / "pyproject.toml"),
               "--rootdir", str(ROOT), "-q", "-p", "no:cacheprovider", "-n", "0", str(test), *args]  # fmt: skip
    base = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    return subprocess.run(command, cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_missing_browser_that_cannot_be_installed_stops_the_run(tmp_path: Path, workers: str) -> None:
    # Only the interpreter's own folder on PATH: no chromium, no chromedriver, and no apt-get to install
    # them with; one process, and xdist's controller with two workers, stop alike.
    proc = run_pytest(tmp_path, NEEDS_BROWSER, "-n", workers, env={"PATH": str(Path(sys.executable).parent)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    wanted = "the browser tests need chromium, chromium-driver: apt-get install -y chromium chromium-driver"
    assert wanted in proc.stdout
    assert "passed" not in proc.stdout and "skipped" not in proc.stdout


def test_a_deselected_tier_is_not_provided_and_the_rest_runs(tmp_path: Path) -> None:
    proc = run_pytest(tmp_path, NEEDS_BROWSER + NEEDS_WEIGHTS.replace("import pytest", ""), "-m", "not browser and "
                      "not tier", env={"PATH": str(Path(sys.executable).parent)})  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed, 2 deselected" in proc.stdout


def test_a_tier_the_user_set_is_used_as_given(tmp_path: Path) -> None:
    proc = run_pytest(tmp_path, NEEDS_WEIGHTS, env={"AUTOTUNE_WEIGHTS_DIR": "/given/by/the/user"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "2 passed" in proc.stdout and "fetch-weights" not in proc.stderr


FAKE_BUILD = """#!/usr/bin/env bash
# A tier's script as tests/tiers.py drives it: --cached answers at once, a build prints its path last.
out="$(dirname "$0")/built"
if [ "${1:-}" = --cached ]; then [ -e "$out" ] && { echo "$out"; exit 0; }; exit 3; fi
[ -e "$(dirname "$0")/fail" ] && { echo "no compiler" >&2; exit 7; }
touch "$out"
echo "$out"
"""


@pytest.fixture
def fake_tier(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A script tier whose build is a small script of ours, provided through the run's own machinery."""
    script = tmp_path / "build.sh"
    script.write_text(FAKE_BUILD)
    script.chmod(0o755)
    state = tmp_path / "state"
    state.mkdir()
    monkeypatch.setitem(tiers.TIERS, "fake", tiers.Tier(env="AUTOTUNE_FAKE_TIER", script=(str(script),), cold="fast"))
    monkeypatch.delenv("AUTOTUNE_FAKE_TIER", raising=False)
    monkeypatch.setenv(tiers.STATE_ENV, str(state))
    monkeypatch.setenv(tiers.READY_ENV, "")
    monkeypatch.setattr(tiers, "_builds", tiers.Builds(state))
    monkeypatch.setattr(tiers, "_provided", False)
    return tmp_path


def test_a_tier_not_cached_is_built_in_the_background_and_its_tests_wait_for_it(fake_tier: Path) -> None:
    assert tiers.TIERS["fake"].cached() is None
    tiers.provide(["fake"])
    assert tiers.path_of("fake") == str(fake_tier / "built")
    assert os.environ["AUTOTUNE_FAKE_TIER"] == str(fake_tier / "built")  # the next test reads it at once
    assert tiers.TIERS["fake"].cached() == str(fake_tier / "built")  # and the next run finds it cached


def test_a_failed_build_fails_its_tests_with_one_line_naming_the_script(fake_tier: Path) -> None:
    (fake_tier / "fail").touch()
    tiers.provide(["fake"])
    with pytest.raises(pytest.fail.Exception, match=r"build.sh failed \(exit 7\): run it to see why, or set "
                       "AUTOTUNE_FAKE_TIER"):  # fmt: skip
        tiers.path_of("fake")
