"""The ``autotune`` command line: parse, call one function, print; errors through one funnel.

One module per command. User errors print ``Error: ...`` (plus ``hint:``/``log:`` lines) and exit 2;
runtime failures exit 1; a traceback only with ``--debug``. Heavy imports stay inside the commands
so ``--help`` imports typer and the command modules only.
"""

from __future__ import annotations

import sys
import warnings

from autotune.cli.common import app, own_warnings_only

# Each module registers its command on ``app``; ``--help`` lists them in this order.
# isort: off
from autotune.cli import study, show, export, confirm, check, bench, gpus, dashboard, report  # noqa: F401, E402
# isort: on

__all__ = ["app", "main"]


def main() -> None:
    if not sys.warnoptions:  # -W / PYTHONWARNINGS and --debug show everything
        warnings.showwarning = own_warnings_only
    app()
