"""The ``autotune`` console script: help requests answered from a cache, everything else by the CLI.

Importing typer (its bundled click and the pydantic adapters it builds) takes about 0.3 s, longer
than a help request should. A help page is typer's own output, rendered once per version of the
CLI and terminal width into the user's cache folder and printed from there afterwards; any change
to the CLI's source, typer, Python or the width makes a new key, so a stale page is never shown.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import os
import shutil
import sys
from pathlib import Path

CLI_PACKAGE = Path(__file__).with_name("cli")
# click wraps help at the terminal width, but never wider than this.
HELP_MAX_WIDTH = 80


def is_help_request(argv: list[str]) -> bool:
    """``--help`` before any ``--``. (No arguments at all is a usage error that shows help: the CLI's.)"""
    head = argv[: argv.index("--")] if "--" in argv else argv
    return "--help" in head


def help_key(argv: list[str], *, cli_source: bytes, typer_stamp: str, width: int) -> str:
    """What a cached help page depends on: the CLI's source, typer's install, Python, width, argv."""
    digest = hashlib.sha256(cli_source)
    for part in (typer_stamp, sys.version, str(min(width, HELP_MAX_WIDTH)), "\0".join(argv)):
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()[:32]


def _typer_stamp() -> str:
    spec = importlib.util.find_spec("typer")  # finds the package without importing it
    origin = spec.origin if spec is not None else None
    return f"{origin}:{os.stat(origin).st_mtime_ns}" if origin else "none"


def cache_dir() -> Path:
    root = os.environ.get("AUTOTUNE_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "autotune"
    )
    return Path(root) / "help"


def render_help(argv: list[str]) -> tuple[int, str]:
    """Typer's help page for ``argv`` (and its exit code), as it would print it."""
    from autotune.cli import main as cli_main

    out = io.StringIO()
    code: int = 0
    with contextlib.redirect_stdout(out):
        saved, sys.argv = sys.argv, ["autotune", *argv]
        try:
            cli_main()
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            sys.argv = saved
    return code, out.getvalue()


def main() -> None:
    argv = sys.argv[1:]
    if not is_help_request(argv):
        from autotune.cli import main as cli_main

        cli_main()
        return
    width = shutil.get_terminal_size().columns
    cli_source = b"".join(module.read_bytes() for module in sorted(CLI_PACKAGE.glob("*.py")))
    key = help_key(argv, cli_source=cli_source, typer_stamp=_typer_stamp(), width=width)
    page = cache_dir() / f"{key}.txt"
    with contextlib.suppress(OSError):
        sys.stdout.write(page.read_text())
        return
    code, text = render_help(argv)
    sys.stdout.write(text)
    if code == 0 and text:
        with contextlib.suppress(OSError):  # a read-only home only costs the speed-up
            page.parent.mkdir(parents=True, exist_ok=True)
            partial = page.with_suffix(f".{os.getpid()}.tmp")
            partial.write_text(text)
            partial.replace(page)  # atomic: two first calls at once cannot leave half a page
    raise SystemExit(code)
