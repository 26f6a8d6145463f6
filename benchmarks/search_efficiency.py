"""Search efficiency: launches until autotune's best is within 2 % of the true optimum, vs grids.

Runs autotune's own study loop (``StudyRunner.objective``: the sampler, baselines, engine rules,
duplicate skipping, memory-feasibility prediction and constraints the product uses) on the SGLang
twin's landscape (``benchmarks/landscape.py``: the twin's launch rules and physics called directly,
with measurement noise) instead of real launches, side by side with the baselines SGLang users
have: random search, the full grid in a fixed order, and a tiered grid like ``sglang.auto_benchmark``.

    python benchmarks/search_efficiency.py --twin-profile qwen3.6-27b-2xa6000 \\
        --space search_spaces/qwen3.6-27b-2xa6000-twin.yaml --seeds 10 --budget 80 --json out.json

See docs/benchmarks.md for what is measured and the assumptions behind the simulated seconds.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, Literal

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from autotune.study.sampler import SamplerName  # noqa: E402
from benchmarks import family, family_tight, peers, replay  # noqa: E402
from benchmarks.judge import MODEL_NIGHT, REFERENCE, TPE_NIGHT, aggregate, paired_regret, regret_summary, spread  # noqa: E402
from benchmarks.methods import DEFAULT_FAMILY_METHODS, DEFAULT_METHODS, methods  # noqa: E402
from benchmarks.nights import run_recorded_random, run_recorded_study  # noqa: E402
from benchmarks.problems import (  # noqa: E402
    Problem,
    add_unmodelled,
    load_problem,
    problem_of,
    solve,
    twin_defaults_true,
    unmodelled_seed,
)
from benchmarks.runs import WITHIN, Run  # noqa: E402
from benchmarks.tables import print_family_table, print_recorded_table, print_regret_table, print_table  # noqa: E402

FamilyCase = Literal["all", "tight", "tight-context", "wide-trees", "issue-46"]


def benchmark(
    problem: Problem, *, seeds: int, budget: int, method_names: Sequence[str] = DEFAULT_METHODS, per_tier: int = 8,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Every method on every seed; returns the numbers the table and ``--json`` show."""
    optimum = solve(problem)
    defaults = twin_defaults_true(problem)
    results: dict[str, Any] = {}
    by_method: dict[str, list[dict[str, Any]]] = {}
    for method in methods(method_names, per_tier=per_tier):
        rows = []
        for seed in range(seeds):
            run = method.run(problem, seed, budget)
            run.defaults_true = defaults
            rows.append({**run.summary(optimum.tok_s, problem.gpus), "seed": seed, "wall_s": run.wall_s})
            if progress is not None:
                progress(f"{method.name}: seed {seed} done")
        by_method[method.name] = rows
        results[method.name] = {"summary": {**aggregate(rows, budget), "regret": regret_summary(rows, budget)},
                                "runs": rows}  # fmt: skip
    return {
        "profile": problem.profile.name,
        "space": str(problem.space.source),
        "gpus": problem.gpus,
        "noise_rel": problem.noise_rel,
        "launch_cost": asdict(problem.cost),
        "optimum": {"tok_s": optimum.tok_s, "flags": optimum.flags, "exhaustive": optimum.exhaustive,
                    "grid_candidates": optimum.candidates or None, "within_2pct": optimum.within_2pct or None},
        "notes": problem.notes,
        "seeds": seeds,
        "budget": budget,
        "launch_sd": problem.launch_sd,
        "defaults_tok_s": defaults,
        "methods": results,
        "paired": paired_regret(by_method),
        **({"unmodelled": problem.unmodelled.model_dump()} if problem.unmodelled is not None else {}),
    }  # fmt: skip


def family_benchmark(
    count: int, first_seed: int, *, budget: int, method_names: Sequence[str] = DEFAULT_FAMILY_METHODS,
    per_tier: int = 8, noise_rel: float | None = None, launch_sd: float | None = None,
    progress: Callable[[str], None] | None = None, case: FamilyCase = "all", unmodelled: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """Every method once on every member (the member's seed seeds the sampler and the noise);
    ``launch_sd``: the relative sd of speed between launches (:class:`LandscapeLauncher`; default each
    member's profile's ``timing.launch_sd``); ``case``: the family's members, its tight members only
    (:func:`family_tight.tight_member`), its wide-trees members only (:func:`family.wide_trees_members`), or
    issue 46's landscape; ``unmodelled``: each member's truth with the effects no model knows
    (:mod:`benchmarks.unmodelled`), listed with the member."""
    chosen = methods(method_names, per_tier=per_tier)
    rows: dict[str, list[dict[str, Any]]] = {m.name: [] for m in chosen}
    described = []
    drawn = (
        {
            "all": family.members,
            "tight": family_tight.tight_members,
            "tight-context": family_tight.tight_context_members,
            "wide-trees": family.wide_trees_members,
        }[case](count, first_seed)
        if case != "issue-46"
        else [family_tight.issue_46_member()] * count
    )
    with tempfile.TemporaryDirectory(prefix="autotune-family-configs-") as configs:
        for index, fam in enumerate(drawn):
            fam = fam.model_copy(update={"seed": first_seed + index}) if case == "issue-46" else fam
            space = family.space_naming_configs(fam, Path(configs) / str(index))
            problem = problem_of(fam.profile, space, noise_rel=noise_rel)
            problem.launch_sd = launch_sd if launch_sd is not None else fam.profile.timing.launch_sd
            effects = {"unmodelled": add_unmodelled(problem, fam.seed).model_dump()} if unmodelled else {}
            optimum = solve(problem)
            defaults = twin_defaults_true(problem)
            described.append({"seed": fam.seed, "summary": fam.summary, "optimum_tok_s": optimum.tok_s,
                              "optimum": optimum.flags, "defaults_tok_s": defaults, **effects})  # fmt: skip
            for method in chosen:
                run = method.run(problem, fam.seed, budget)
                run.defaults_true = defaults
                rows[method.name].append({**run.summary(optimum.tok_s, problem.gpus), "seed": fam.seed})
            if progress is not None:
                progress(f"member {fam.seed} done: {fam.summary}")
    results = {}
    for name, runs in rows.items():
        results[name] = {
            "summary": {
                "members": len(runs),
                "reached": sum(r["launches_to_2pct"] is not None for r in runs),
                "launches_to_2pct": spread([r["launches_to_2pct"] for r in runs]),
                "gpu_hours_to_2pct": spread([r["gpu_hours_to_2pct"] for r in runs]),
                "memory_death_rate": spread([r["memory_death_rate"] for r in runs]),
                "final_gap": spread([r["final_gap"] for r in runs]),
                "regret": regret_summary(runs, budget),
            },
            "runs": runs,
        }
    return {"paired": paired_regret(rows), "family_seeds": [first_seed, first_seed + count - 1], "case": case,
            "budget": budget, "launch_sd": launch_sd, "members": described, "methods": results,
            **({"unmodelled": True} if unmodelled else {})}  # fmt: skip


RECORDED_NAMES = {
    "autotune": REFERENCE,
    "autotune-tpe": TPE_NIGHT,
    "autotune-model": MODEL_NIGHT,
    "random-runner": "random (autotune loop)",
}


def recorded_regret(
    path: Path, *, seeds: Sequence[int], budget: int | None, method_names: Sequence[str],
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The night's answer on a recorded landscape, per method (autotune and its random loop race inside
    the night, the grid's size by default; the peers and bounds of :mod:`benchmarks.peers`)."""
    problem = replay.load_problem(path)
    budget = budget or len(problem.launches)
    nights: dict[tuple[str, int], Run] = {}

    def study(sampler: SamplerName, seed: int) -> Run:
        if (sampler, seed) not in nights:
            nights[sampler, seed] = run_recorded_study(problem, seed, budget, sampler=sampler, race_in_budget=True)
        return nights[sampler, seed]

    plays: dict[str, Callable[[int], Run]] = {
        "autotune": lambda seed: study("tpe", seed),
        "autotune-tpe": lambda seed: study("tpe", seed),
        "autotune-model": lambda seed: study("model", seed),
        "random-runner": lambda seed: study("random", seed),
        "bound-perfect-race": lambda seed: peers.perfect_race(study("tpe", seed)),
        "bound-oracle-finalists": lambda seed: peers.recorded_oracle_finalists(problem, seed, budget),
        **{name: (lambda seed, play=play: play(peers.recorded_bench(problem, seed), seed, budget))
           for name, play in peers.PEERS.items()},
    }  # fmt: skip
    unknown = [m for m in method_names if m not in plays]
    if unknown:
        raise SystemExit(f"unknown method(s) {unknown} for --recorded; known: {sorted(plays)}")
    defaults = peers.recorded_bench(problem, 0).defaults_true
    by_method: dict[str, list[dict[str, Any]]] = {}
    for name in method_names:
        rows = []
        for seed in seeds:
            run = plays[name](seed)
            run.defaults_true = defaults
            rows.append({**run.summary(problem.optimum, 1), "seed": seed})
        by_method[RECORDED_NAMES.get(name, name)] = rows
        if progress is not None:
            progress(f"{path.stem}: {name} done")
    return {"recorded": str(path), "name": problem.recorded.name, "hardware": problem.recorded.machine.hardware,
            "configs": len(problem.launches), "budget": budget, "optimum": problem.optimum, "seeds": list(seeds),
            "defaults_tok_s": defaults, "paired": paired_regret(by_method),
            "methods": {name: {"summary": {"regret": regret_summary(rows, budget)}, "runs": rows}
                        for name, rows in by_method.items()}}  # fmt: skip


def recorded_benchmark(path: Path, *, seeds: int, budget: int | None = None) -> dict[str, Any]:
    """autotune and random search on a recorded landscape; the budget defaults to the grid's size."""
    problem = replay.load_problem(path)
    budget = budget or len(problem.launches)
    runs = {
        "autotune (TPE)": [run_recorded_study(problem, s, budget, sampler="tpe") for s in range(seeds)],
        "random (autotune loop)": [run_recorded_study(problem, s, budget, sampler="random") for s in range(seeds)],
        "random search": [run_recorded_random(problem, s, budget) for s in range(seeds)],
    }
    results = {}
    for name, method_runs in runs.items():
        rows = [{**r.summary(problem.optimum, 1), "seed": r.seed} for r in method_runs]
        confirmed = [r["confirmed_gap"] for r in rows if r["confirmed_gap"] is not None]
        results[name] = {"summary": {"seeds": seeds, "reached": sum(r["launches_to_2pct"] is not None for r in rows),
                                     "launches_to_2pct": spread([r["launches_to_2pct"] for r in rows]),
                                     "final_gap": spread([r["final_gap"] for r in rows]),
                                     "confirmed_gap": spread(confirmed) if confirmed else None,
                                     "confirmed_within_2pct": sum(g <= WITHIN for g in confirmed)},
                         "runs": rows}  # fmt: skip
    return {"recorded": str(path), "name": problem.recorded.name, "hardware": problem.recorded.machine.hardware,
            "configs": len(problem.launches), "grid_points": len(problem.recorded.configs), "budget": budget,
            "optimum": problem.optimum, "methods": results}  # fmt: skip


def pool_reports(paths: Sequence[Path]) -> dict[str, Any]:
    """Family reports of the same methods and night run apart (members split over processes) as one:
    every member's runs pooled, the regret summary and the paired intervals computed again."""
    reports = [json.loads(path.read_text()) for path in paths]
    budget = reports[0]["budget"]
    rows: dict[str, list[dict[str, Any]]] = {}
    for report in reports:
        if report["budget"] != budget or set(report["methods"]) != set(reports[0]["methods"]):
            raise SystemExit(f"cannot pool {paths}: the nights or the methods differ")
        for name, result in report["methods"].items():
            rows.setdefault(name, []).extend(result["runs"])
    return {"pooled": [str(p) for p in paths], "budget": budget, "paired": paired_regret(rows),
            "members": [m for report in reports for m in report.get("members", [])],
            "methods": {name: {"summary": {"regret": regret_summary(runs, budget)}, "runs": runs}
                        for name, runs in rows.items()}}  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--twin-profile", help="twin profile: a built-in name or a YAML path (with --space)")
    parser.add_argument("--space", help="search-space YAML file (with --twin-profile)")
    parser.add_argument("--family", type=int, default=None, metavar="N",
                        help="instead of one profile: N generated landscapes (benchmarks/family.py)")  # fmt: skip
    parser.add_argument("--family-seed", type=int, default=0, metavar="S", help="the first member's seed")
    parser.add_argument("--family-case", choices=["all", "tight", "tight-context", "wide-trees", "issue-46"],
                        default="all", help="with --family: every case, tight members only, tight-context members "
                        "only (issue 54), the first N wide-trees members at seeds from --family-seed on, or "
                        "issue 46's landscape N times "
                        "(the seed then seeds the search)")  # fmt: skip
    parser.add_argument("--recorded", type=Path, default=None, metavar="FILE",
                        help="instead of a twin: a recorded real landscape (benchmarks/landscapes/*.json)")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--budget", type=int, default=None, help="launches per run (default 80; --recorded: the grid)")
    parser.add_argument("--json", type=Path, default=None, help="write the numbers here")
    parser.add_argument("--methods", default=None,
                        help="comma-separated: autotune (TPE's night, the default until model-sampler-2026-12-07), "
                        "autotune-tpe, autotune-model (the CLI's default now), "
                        "random-runner "
                        "(each races inside the night), "
                        "peer-auto-benchmark, peer-spec-tuner, peer-tune-k, peer-llama-optimus, peer-one-at-a-time, "
                        "bound-perfect-race, bound-oracle-finalists, random, grid, tiered, tpe-startup2, "
                        "tpe-startup10, tpe-startup20, tpe-independent, gp, autotune-minus-RULE, "
                        "random-runner-minus-RULE (RULE a pre-launch rule) (default: "
                        f"{','.join(DEFAULT_METHODS)}; with --family {','.join(DEFAULT_FAMILY_METHODS)})")  # fmt: skip
    parser.add_argument("--per-tier", type=int, default=8, help="candidates per tier of the tiered grid")
    parser.add_argument("--noise", type=float, default=None, help="relative sd of a measurement (default: target/1.96)")
    parser.add_argument(
        "--launch-sd",
        type=float,
        default=None,
        help="relative sd of speed between launches (default: the profile's timing.launch_sd)",
    )
    parser.add_argument("--first-seed", type=int, default=0,
                        help="with --recorded and --methods: the first seed (seeds FIRST to FIRST+N-1)")  # fmt: skip
    parser.add_argument("--exhaustive", action="store_true", help="find the optimum by evaluating every candidate")
    parser.add_argument("--unmodelled", action="store_true",
                        help="effects no model knows on each twin landscape's truth, drawn per member "
                        "(benchmarks/unmodelled.py)")  # fmt: skip
    parser.add_argument("--pool", type=Path, nargs="+", default=None, metavar="JSON",
                        help="instead of running: pool --family reports of the same methods and night, and print "
                        "the regret table over all their members")  # fmt: skip
    args = parser.parse_args(argv)
    if args.unmodelled and (args.recorded is not None or args.pool is not None):
        parser.error("--unmodelled puts effects on a twin landscape (--family or --twin-profile), not a recording")
    progress = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    started = time.monotonic()
    if args.pool is not None:
        report = pool_reports(args.pool)
        print_regret_table(report, f"The night's answer over {len(report['members'])} members pooled from "
                           f"{len(args.pool)} reports, night {report['budget']} launches")  # fmt: skip
    elif args.recorded is not None and args.methods:
        report = recorded_regret(args.recorded, seeds=range(args.first_seed, args.first_seed + args.seeds),
                                 budget=args.budget, method_names=[m.strip() for m in args.methods.split(",")
                                                                   if m.strip()], progress=progress)  # fmt: skip
        report["wall_s"] = time.monotonic() - started
        print_regret_table(report, f"The night's answer on the recorded landscape {report['name']} "
                           f"({report['hardware']}), night {report['budget']} launches, seeds {args.first_seed}.."
                           f"{args.first_seed + args.seeds - 1}")  # fmt: skip
    elif args.recorded is not None:
        report = recorded_benchmark(args.recorded, seeds=args.seeds, budget=args.budget)
        print_recorded_table(report)
    elif args.family is not None:
        names = args.methods.split(",") if args.methods else DEFAULT_FAMILY_METHODS
        report = family_benchmark(args.family, args.family_seed, budget=args.budget or 80,
                                  method_names=[m.strip() for m in names if m.strip()], per_tier=args.per_tier,
                                  noise_rel=args.noise, launch_sd=args.launch_sd, progress=progress,
                                  case=args.family_case, unmodelled=args.unmodelled)  # fmt: skip
        report["wall_s"] = time.monotonic() - started
        print_family_table(report)
        print_regret_table(
            report,
            f"The night's answer over family members {args.family_seed}.."
            f"{args.family_seed + args.family - 1}, night {report['budget']} launches",
        )
    else:
        if args.twin_profile is None or args.space is None:
            parser.error("give --twin-profile and --space, or --family N")
        problem = load_problem(args.twin_profile, args.space, noise_rel=args.noise)
        problem.launch_sd = args.launch_sd if args.launch_sd is not None else problem.profile.timing.launch_sd
        if args.unmodelled:
            add_unmodelled(problem, unmodelled_seed(problem.profile))
        solve(problem, exhaustive=args.exhaustive or None)
        names = args.methods.split(",") if args.methods else DEFAULT_METHODS
        report = benchmark(problem, seeds=args.seeds, budget=args.budget or 80,
                           method_names=[m.strip() for m in names if m.strip()], per_tier=args.per_tier,
                           progress=progress)  # fmt: skip
        report["wall_s"] = time.monotonic() - started
        print_table(report)
        print_regret_table(
            report, f"The night's answer on {report['profile']} ({args.seeds} seeds), night {report['budget']} launches"
        )
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
