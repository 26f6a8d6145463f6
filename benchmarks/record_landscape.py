"""Record a real engine's landscape: every grid configuration, several fresh launches each.

    python benchmarks/record_landscape.py search_spaces/llamacpp-gpu.yaml --name h200-llamacpp \\
        --grid spec-type=none,draft-simple --grid spec-draft-n-max=3,10 --grid flash-attn=on,off ... \\
        --launches 3 --out benchmarks/landscapes/h200-llamacpp.json

Each launch goes through the study's own trial path (``autotune.trial.run_trial``: the engine's
normalisation and command line, a fresh server, the space's measurement protocol), so a recorded
launch is what a study's trial would have measured. The grid is every combination of the values
given with ``--grid`` (one per tuned flag of the space; a flag whose ``when`` does not hold is left
out, duplicates after that dropped). Launch order: one pass over the grid per round, shuffled
(seeded) within the round, so drift spreads over every configuration. Each finished launch is
appended to ``OUT.partial.jsonl`` at once: an interrupted recording resumes where it stopped, and
``--deadline-s`` ends a run cleanly (to continue in the next one).
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pydantic import ValidationError

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from autotune.engines import get_engine  # noqa: E402
from autotune.engines.base import Engine  # noqa: E402
from autotune.errors import AutotuneError  # noqa: E402
from autotune.measure.protocol import MeasureSettings  # noqa: E402
from autotune.measure.suites import load_suite  # noqa: E402
from autotune.outcomes import OutcomeKind  # noqa: E402
from autotune.space import Condition, FlagValue, SearchSpace, load_space, resolve_command  # noqa: E402
from autotune.trial import TrialOutcome, TrialSetup, run_trial  # noqa: E402
from benchmarks.quiet_check import cpu_name  # noqa: E402
from benchmarks.recorded import (  # noqa: E402
    GridFlag,
    Machine,
    RecordedConfig,
    RecordedLandscape,
    RecordedLaunch,
)


class RecordError(Exception):
    """A bad grid or space: one line for the user."""


def parse_value(text: str) -> FlagValue:
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            pass
    return {"true": True, "false": False}.get(text.lower(), text)


def assignments(items: list[str], option: str) -> dict[str, FlagValue]:
    """``NAME=VALUE`` items of a repeatable option."""
    pairs = [item.partition("=") for item in items]
    bad = [item for item, (_, sep, _) in zip(items, pairs, strict=True) if not sep]
    if bad:
        raise RecordError(f"{option} {bad[0]!r}: expected NAME=VALUE")
    return {name: parse_value(value) for name, _, value in pairs}


def measure_settings(space: SearchSpace, overrides: dict[str, FlagValue]) -> MeasureSettings:
    """The space's measurement settings with ``--measure`` overrides, validated again."""
    settings = space.measure_settings()
    try:
        return MeasureSettings.model_validate({**settings.model_dump(), **overrides})
    except ValidationError as exc:
        first = exc.errors()[0]
        raise RecordError(f"--measure {'.'.join(map(str, first['loc']))}: {first['msg']}") from None


def parse_grid(items: list[str], space: SearchSpace) -> list[GridFlag]:
    """``--grid NAME=V1,V2`` for every tuned flag of the space, each value inside the flag's range."""
    given: dict[str, list[FlagValue]] = {}
    for item in items:
        name, sep, values = item.partition("=")
        if not sep or not values:
            raise RecordError(f"--grid {item!r}: expected NAME=V1,V2,...")
        if name not in space.tuned:
            raise RecordError(f"--grid {name}: not a tuned flag of {space.source}; tuned: {', '.join(space.tuned)}")
        given[name] = [parse_value(v) for v in values.split(",")]
        outside = [v for v in given[name] if not space.tuned[name].contains(v)]
        if outside:
            raise RecordError(f"--grid {name}: {outside} outside the space's range for it")
    missing = [name for name in space.tuned if name not in given]
    if missing:
        raise RecordError(f"--grid needed for every tuned flag; missing: {', '.join(missing)}")
    return [
        GridFlag(name=name, values=given[name], when=str(param.when) if param.when else None)
        for name, param in space.tuned.items()
    ]


def grid_configs(grid: list[GridFlag], engine: Engine, fixed: dict[str, FlagValue]) -> list[dict[str, FlagValue]]:
    """Every combination, conditional flags dropped where their condition fails, engine-equal ones once."""
    configs: dict[str, dict[str, FlagValue]] = {}
    for values in itertools.product(*(flag.values for flag in grid)):
        flags: dict[str, FlagValue] = {}
        for flag, value in zip(grid, values, strict=True):
            if flag.when is None or Condition.parse(flag.when).holds({**fixed, **flags}):
                flags[flag.name] = value
        key = engine.normalise({**fixed, **flags}).config_key
        configs.setdefault(key, flags)
    return list(configs.values())


def launch_record(outcome: TrialOutcome, round_index: int, started_at: str, objective: str) -> RecordedLaunch:
    measurement = outcome.measurement
    metric = measurement.metric(objective) if measurement is not None else None
    accept = measurement.metric("accept_length") if measurement is not None else None
    return RecordedLaunch(
        round=round_index,
        outcome=outcome.kind.value,
        reason=outcome.reason,
        value=outcome.objective if outcome.kind is OutcomeKind.OK else None,
        rel_ci95=metric.rel_ci95 if metric is not None else None,
        accept_length=accept.value if accept is not None else None,
        rounds=measurement.rounds if measurement is not None else None,
        launch_s=outcome.launch_s,
        measure_s=outcome.measure_s,
        stop_s=outcome.stop_s,
        started_at=started_at,
    )


def machine_facts() -> Machine:
    try:
        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout.strip().splitlines()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        smi = []
    if smi and os.environ.get("CUDA_VISIBLE_DEVICES") != "":
        names = [line.split(",")[0].strip() for line in smi]
        return Machine(hardware=f"{len(names)}x {names[0]}", driver=smi[0].split(",")[1].strip(), cores=os.cpu_count())
    return Machine(hardware=f"CPU: {cpu_name()}", cores=os.cpu_count())


def engine_version(launcher: list[str]) -> str:
    try:
        done = subprocess.run([*launcher, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    lines = [line for line in (done.stdout + done.stderr).splitlines() if "version" in line.lower()]
    return lines[0].strip() if lines else "unknown"


def file_label(path: str | None) -> str | None:
    if path is None:
        return None
    file = Path(path)
    return f"{file.name} ({file.stat().st_size / 1e9:.2f} GB)" if file.exists() else file.name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("space", type=Path, help="the space file (engine, launcher, model, fixed flags, measurement)")
    parser.add_argument("--name", required=True, help="the landscape's name")
    parser.add_argument("--grid", action="append", default=[], help="NAME=V1,V2,...: one per tuned flag")
    parser.add_argument("--launches", type=int, default=3, help="fresh launches per configuration (default 3)")
    parser.add_argument("--measure", action="append", default=[], help="KEY=VALUE: override a measurement setting")
    parser.add_argument("--fixed", action="append", default=[], help="NAME=VALUE: override or add a fixed flag")
    parser.add_argument("--seed", type=int, default=0, help="seed of the launch order")
    parser.add_argument("--deadline-s", type=float, default=None, help="stop cleanly after this long (resume later)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    try:
        space = load_space(args.space)
        engine_name = space.engine_names()[0]
        engine = get_engine(engine_name)
        grid = parse_grid(args.grid, space)
        fixed = {**space.fixed_for(engine_name), **assignments(args.fixed, "--fixed")}
        measure = measure_settings(space, assignments(args.measure, "--measure"))
    except (RecordError, AutotuneError, ValueError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    launcher = resolve_command(space.launcher_for(engine_name))
    configs = grid_configs(grid, engine, fixed)
    partial = args.out.with_name(args.out.name + ".partial.jsonl")
    done: dict[tuple[int, int], RecordedLaunch] = {}
    if partial.exists():
        for line in partial.read_text().splitlines():
            entry = json.loads(line)
            done[(entry["config"], entry["launch"]["round"])] = RecordedLaunch.model_validate(entry["launch"])
    order = [
        (round_index, index)
        for round_index in range(args.launches)
        for index in random.Random(args.seed * 1000 + round_index).sample(range(len(configs)), len(configs))
    ]
    todo = [step for step in order if (step[1], step[0]) not in done]
    print(f"{len(configs)} configurations x {args.launches} launches; {len(todo)} launches to go", flush=True)
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as scratch:
        setup = TrialSetup(
            launcher=launcher,
            model=space.model,
            env=dict(space.env),
            suite=load_suite(space.suite_path()),
            measure=measure,
            concurrency_levels=[measure.concurrency],
            objective_concurrency=measure.concurrency,
            launch_timeout_s=space.launch.timeout_s,
            stop_timeout_s=space.launch.stop_timeout_s,
            records_dir=Path(scratch) / "servers",
        )
        for count, (round_index, index) in enumerate(todo, start=1):
            if args.deadline_s is not None and time.monotonic() - started > args.deadline_s:
                print(f"deadline reached; {len(todo) - count + 1} launches left (run again to resume)", flush=True)
                return 3
            plan = engine.normalise({**fixed, **configs[index]})
            stamp = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
            outcome = run_trial(engine, setup, plan, log_path=Path(scratch) / f"launch-{count}.log")
            record = launch_record(outcome, round_index, stamp, measure.objective)
            done[(index, round_index)] = record
            with partial.open("a") as handle:
                handle.write(json.dumps({"config": index, "launch": record.model_dump(mode="json")}) + "\n")
            value = f"{record.value:.1f}" if record.value is not None else record.outcome
            print(f"[{count}/{len(todo)}] round {round_index} {configs[index]}: {value} "
                  f"(launch {record.launch_s:.1f} s, measure {record.measure_s:.1f} s)", flush=True)  # fmt: skip
    landscape = RecordedLandscape(
        name=args.name,
        recorded_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        machine=machine_facts(),
        engine=engine_name,
        engine_version=engine_version(launcher),
        model=file_label(space.model) or space.model,
        draft_model=file_label(str(fixed["spec-draft-model"])) if "spec-draft-model" in fixed else None,
        space=str(args.space),
        fixed=fixed,
        grid=grid,
        objective=measure.objective,
        measurement=measure,
        configs=[
            RecordedConfig(
                flags=flags,
                launches=[done[(index, r)] for r in range(args.launches) if (index, r) in done],
            )
            for index, flags in enumerate(configs)
        ],
    )
    args.out.write_text(landscape.model_dump_json(indent=1))
    best = landscape.best
    print(f"wrote {args.out}: best {best.flags} at {best.mean:.1f} mean over {len(best.values)} launches")
    return 0


if __name__ == "__main__":
    sys.exit(main())
