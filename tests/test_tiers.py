"""A plain test run tells the truth: a selected test whose tier is missing stops the run with one line
naming the command that provides it, never a green run with the test skipped (tests/tiers.py).

Each case runs pytest as a process on a small test file of its own, with the tiers plugin loaded.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

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
               "--rootdir", str(ROOT), "-q", "-p", "no:cacheprovider", str(test), *args]  # fmt: skip
    base = {k: v for k, v in os.environ.items() if not k.startswith("AUTOTUNE_")}
    return subprocess.run(command, cwd=ROOT, env={**base, **env}, capture_output=True, text=True, timeout=120)


def test_a_missing_browser_stops_the_run_with_the_command_that_installs_it(tmp_path: Path) -> None:
    # Only the interpreter's own folder on PATH: no chromium, no chromedriver.
    proc = run_pytest(tmp_path, NEEDS_BROWSER, env={"PATH": str(Path(sys.executable).parent)})
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "the browser tests need chromium, chromedriver: apt-get install -y chromium chromium-driver" in proc.stdout
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
