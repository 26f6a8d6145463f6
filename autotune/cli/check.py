"""``autotune check``: validate a search space against its launchers and print the baselines' commands."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Annotated, Any

import typer

from autotune.cli.common import app, console, error_funnel


@app.command()
def check(
    space_file: Annotated[Path, typer.Argument(help="Search-space YAML file.", metavar="SPACE")],
    as_json: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON.")] = False,
) -> None:
    """Validate a search space, check its flags against the launcher's --help, print the baselines' commands."""
    with error_funnel():
        from autotune.space import load_space
        from autotune.study import preflight

        space = load_space(space_file)
        checked = preflight(space, read_gpus=False)
        baselines = []
        for baseline in checked.baselines:
            plan = baseline.plan
            prepared = checked.engines[plan.engine]
            argv = prepared.engine.build_argv(
                prepared.launcher, model=space.model, plan=plan, host="127.0.0.1", port=30000
            )
            baselines.append(
                {"name": baseline.name, "engine": plan.engine, "argv": argv, "engine_rules_applied": plan.notes}
            )
        engines: dict[str, dict[str, Any]] = {
            name: {"flags_checked": space.flags_for(name), "launcher_flags": len(prepared.flag_set.flags)}
            for name, prepared in checked.engines.items()
        }
        if as_json:
            payload = {
                "space": str(space_file),
                "engine": space.engine_names()[0] if len(engines) == 1 else "choice",
                "engines": engines,
                "valid": True,
                "flags_checked": space.all_flag_names(),
                "tuned": list(space.tuned),
                "baselines": baselines,
            }
            print(json.dumps(payload, indent=2))
            return
        for name, info in engines.items():
            console.print(
                f"[green]ok[/green] {space_file}: engine {name}, {len(info['flags_checked'])} flags checked against "
                f"the launcher's --help ({info['launcher_flags']} known), {len(space.tuned)} tuned",
                highlight=False,
            )
        for b in baselines:
            console.print(f"\n[bold]baseline {b['name']}[/bold]", highlight=False)
            for note in b["engine_rules_applied"]:
                console.print(f"  engine rule: {note}", highlight=False)
            console.print(shlex.join(b["argv"]), highlight=False, soft_wrap=True)
