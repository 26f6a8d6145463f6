"""``autotune --help`` answers at once: typer's plain help (no Rich help panels, which import
Rich's Markdown, Pygments and tracebacks: ~0.3 s), and none of the study's heavy imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

COMMANDS = ["study", "show", "export", "confirm", "check", "bench", "gpus", "dashboard", "report"]
# Runs every help request in one interpreter and reports what they imported.
PROBE = """
import json, sys
from autotune.cli import main
out = {}
for argv in [[]] + [[c] for c in sys.argv[1:]]:
    sys.argv = ["autotune", *argv, "--help"]
    try:
        main()
    except SystemExit as exc:
        out[" ".join(argv)] = exc.code
print("\\nEXITS " + json.dumps(out))
print("MODULES " + json.dumps(sorted(sys.modules)))
"""
HEAVY = ["typer.rich_utils", "rich.markdown", "pygments", "optuna", "sqlalchemy", "httpx", "autotune.study"]


@pytest.mark.slow
def test_help_of_every_command_is_plain_and_imports_nothing_heavy() -> None:
    proc = subprocess.run([sys.executable, "-c", PROBE, *COMMANDS], capture_output=True, text=True, check=True)
    lines = proc.stdout.splitlines()
    exits = json.loads(next(line for line in lines if line.startswith("EXITS "))[6:])
    modules = json.loads(next(line for line in lines if line.startswith("MODULES "))[8:])
    assert exits == {"": 0, **{c: 0 for c in COMMANDS}}
    assert proc.stdout.count("Usage: autotune") == 1 + len(COMMANDS)
    assert "pip install 'autotune[dashboard]'" in proc.stdout  # no Rich markup escapes left in plain help
    assert "╭" not in proc.stdout  # no Rich panels
    loaded = [m for m in modules if any(m == h or m.startswith(h + ".") for h in HEAVY)]
    assert loaded == []
    assert proc.stderr == ""


ENTRY_PROBE = """
import sys
from autotune.entry import main
sys.argv = ["autotune", *sys.argv[1:]]
main()
"""


def test_the_console_script_prints_the_cli_s_own_help() -> None:
    """pyproject's entry point, autotune.entry:main, is the CLI: it prints the same page and exits 0."""
    env, argv = {**os.environ, "COLUMNS": "100"}, ["show", "--help"]
    script = subprocess.run([sys.executable, "-c", ENTRY_PROBE, *argv], capture_output=True, text=True, env=env)
    live = subprocess.run([sys.executable, "-c", PROBE_LIVE, *argv], capture_output=True, text=True, env=env)
    assert script.returncode == 0, script.stderr
    assert "Usage: autotune" in script.stdout
    assert script.stdout == live.stdout


PROBE_LIVE = """
import sys
from autotune.cli import main
sys.argv = ["autotune", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
"""
