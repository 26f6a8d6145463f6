"""``autotune gpus``: the GPUs NVML (or a space's simulated inventory) reports."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from autotune.cli.common import app, console, error_funnel


@app.command()
def gpus(
    space_file: Annotated[
        Optional[Path], typer.Option("--space", help="Read the GPUs a search space names (e.g. the twin's).")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """List the GPUs (through NVML): memory, the processes holding it, bandwidth, driver."""
    with error_funnel():
        from autotune.gpu import read_inventory, read_nvml
        from autotune.report.console import inventory_table
        from autotune.space import load_space

        inventory = read_inventory(load_space(space_file).gpus) if space_file else read_nvml()
        if as_json:
            print(inventory.model_dump_json(indent=2))
            return
        console.print(inventory_table(inventory))
