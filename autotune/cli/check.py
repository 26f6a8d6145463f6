"""``autotune check``: validate a search space against its launchers and print the baselines' commands."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from autotune.cli.common import app, console, error_funnel

if TYPE_CHECKING:
    from autotune.space import SearchSpace
    from autotune.study import Preflight
    from autotune.study.pool_tokens import RequestKv


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
        contexts = _request_kv(space, checked)
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
                "contexts": [c.model_dump(mode="json") for c in contexts],
            }
            print(json.dumps(payload, indent=2))
            return
        for name, info in engines.items():
            console.print(
                f"[green]ok[/green] {space_file}: engine {name}, {len(info['flags_checked'])} flags checked against "
                f"the launcher's --help ({info['launcher_flags']} known), {len(space.tuned)} tuned",
                highlight=False,
            )
        for c in contexts:
            console.print(
                f"one request of --{c.flag} {c.context} needs {c.bytes_per_gpu / 2**30:.2f} GiB of KV per GPU "
                "(the model's config.json; the first launches learn what the pool holds)",
                highlight=False,
            )
        for b in baselines:
            console.print(f"\n[bold]baseline {b['name']}[/bold]", highlight=False)
            for note in b["engine_rules_applied"]:
                console.print(f"  engine rule: {note}", highlight=False)
            console.print(shlex.join(b["argv"]), highlight=False, soft_wrap=True)


def _request_kv(space: SearchSpace, checked: Preflight) -> list[RequestKv]:
    """One request's KV per GPU for each context of the space, where the model's config.json is found."""
    from autotune.kv_layout import kv_layout
    from autotune.study.pool_tokens import request_kv

    layout = kv_layout(space.model, space.named_config())
    rules = [p.engine.memory_rules for p in checked.engines.values() if p.engine.memory_rules is not None]
    return request_kv(space, rules[0], layout) if layout is not None and rules else []
