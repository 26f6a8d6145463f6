"""``autotune --help`` answers at once: typer's plain help (no Rich help panels, which import
Rich's Markdown, Pygments and tracebacks: ~0.3 s), and none of the study's heavy imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

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


def test_a_cached_help_page_is_keyed_by_everything_it_depends_on() -> None:
    from autotune.entry import help_key, is_help_request

    key = help_key(["show", "--help"], cli_source=b"cli v1", typer_stamp="typer 1", width=100)
    # click wraps at 80 columns at most: a wider terminal gets the same page
    assert key == help_key(["show", "--help"], cli_source=b"cli v1", typer_stamp="typer 1", width=200)
    for changed in (
        help_key(["show", "--help"], cli_source=b"cli v2", typer_stamp="typer 1", width=100),
        help_key(["show", "--help"], cli_source=b"cli v1", typer_stamp="typer 2", width=100),
        help_key(["show", "--help"], cli_source=b"cli v1", typer_stamp="typer 1", width=60),
        help_key(["study", "--help"], cli_source=b"cli v1", typer_stamp="typer 1", width=100),
    ):
        assert changed != key
    assert is_help_request(["--help"]) and is_help_request(["show", "--help"]) and not is_help_request([])
    assert not is_help_request(["show", "s"]) and not is_help_request(["bench", "--", "--help"])


CACHED_PROBE = """
import sys
from autotune.entry import main
sys.argv = ["autotune", *sys.argv[1:]]
try:
    main()
except SystemExit as exc:
    assert exc.code == 0, exc.code
print("TYPER_IMPORTED", "typer" in sys.modules)
"""


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--help"], ["show", "--help"], ["study", "--help"]])
def test_help_from_the_cache_is_typers_own_page_without_importing_typer(argv: list[str], tmp_path: Path) -> None:
    env = {**os.environ, "AUTOTUNE_CACHE_DIR": str(tmp_path), "COLUMNS": "100"}
    live = subprocess.run([sys.executable, "-c", PROBE_LIVE, *argv], capture_output=True, text=True, env=env)
    first = subprocess.run([sys.executable, "-c", CACHED_PROBE, *argv], capture_output=True, text=True, env=env)
    second = subprocess.run([sys.executable, "-c", CACHED_PROBE, *argv], capture_output=True, text=True, env=env)
    assert first.stderr == second.stderr == ""
    page = live.stdout
    assert "Usage: autotune" in page
    assert first.stdout == page + "TYPER_IMPORTED True\n"  # rendered by typer, then kept
    assert second.stdout == page + "TYPER_IMPORTED False\n"  # answered from the cache alone


PROBE_LIVE = """
import sys
from autotune.cli import main
sys.argv = ["autotune", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
"""
