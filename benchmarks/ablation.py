"""The search's ablation: the study loop with each pre-launch rule switched off in turn, beside
the random sampler in the same loop and plain random search.

Rows: the study loop as shipped (TPE); the same without each of ``autotune.study.rules.RULE_NAMES``;
the random sampler in the same loop; plain random search. The sampler's heuristics were rows too
until they were judged and removed (benchmarks/results/ablation-2026-12-02/, made at 3afca4d).
On the family members (one run each, the member's seed seeding the sampler and the
noise, the profile's launch-to-launch spread applied) a loop run stops once its incumbent is truly
within 2 % of the optimum or at the budget (``--full-budget``: always at the budget, then it races
its finalists inside the budget as a study does, and "raced" counts the members whose race named one
within 2 %). Columns:
median and 90th percentile of launches to 2 %, of launches until one within 2 % was launched
(found, crowned or not), the share of the run's launches that died of memory (median and worst),
and the paired bootstrap interval of each row's median and p90 minus the shipped loop's (members
resampled). On each recorded landscape (``benchmarks/landscapes/*.json``): median launches to 2 %
(and to found) over seeds, the grid's size as its budget, beside a reference that launches every
configuration once.

    python benchmarks/ablation.py --family 32 --family-seed 9100 --budget 60 --recorded-seeds 6 \\
        --workers 2 --json out.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import multiprocessing
import random
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from autotune.study import rounds as rounds_module  # noqa: E402
from autotune.study.race import RACE_SHARE  # noqa: E402
from autotune.study.rounds import RACE_STOP, RaceStop  # noqa: E402
from autotune.study.rules import RULE_NAMES  # noqa: E402
from autotune.study.sampler import SamplerName  # noqa: E402
from benchmarks import family, replay  # noqa: E402
from benchmarks.grid_tools import random_candidates  # noqa: E402
from benchmarks.judge import paired_interval, quantile  # noqa: E402
from benchmarks.nights import (  # noqa: E402
    FINALISTS,
    run_candidates,
    run_recorded_grid_once,
    run_recorded_random,
    run_recorded_study,
    run_study,
)
from benchmarks.problems import problem_of, solve  # noqa: E402
from benchmarks.runs import WITHIN, Run  # noqa: E402

LANDSCAPES = ROOT / "benchmarks" / "landscapes"


@dataclass(frozen=True)
class Row:
    """One way of searching: the loop with some switches off, or plain random search."""

    name: str
    sampler: SamplerName = "tpe"
    rules_off: tuple[str, ...] = ()
    plain: bool = False  # plain random search, outside the loop
    race_share: float = RACE_SHARE  # --full-budget: the race's share of the budget
    race_stop: RaceStop = RACE_STOP  # --full-budget: what the race waits for (rounds.standing)
    finalists: int = FINALISTS  # --full-budget: the race's top configurations, besides the baselines


FULL = Row("study loop (TPE)")
ROWS: tuple[Row, ...] = (
    FULL,
    *(Row(f"- rule {name}", rules_off=(name,)) for name in RULE_NAMES),
    Row("random sampler, same loop", sampler="random"),
    Row("plain random search", plain=True),
    # The race's choices, tried on the dev slice (--full-budget only).
    Row("race stops on the baseline", race_stop="baseline"),
    Row("race share 0.2", race_share=0.2),
    Row("race share 0.4", race_share=0.4),
    Row("race top 4", finalists=4),
    Row("race top 5", finalists=5),
)


@dataclass
class Outcome:
    launches_to_2pct: int | None
    memory_death_share: float
    launches_to_find_2pct: int | None = None  # a configuration truly within 2 % launched (crowned or not)
    raced_within_2pct: bool | None = None  # the race's answer is truly within 2 % (--full-budget)
    claims: int = 0  # significant gains over a baseline the race stated (--full-budget)
    false_claims: int = 0  # of those, with a sign the truth does not have
    night_launches: int | None = None  # search + race (--full-budget)


@dataclass
class Results:
    """Per row, one outcome per member (family) or per seed (a recording)."""

    rows: dict[str, list[Outcome]] = field(default_factory=dict)

    def add(self, row: Row, outcome: Outcome) -> None:
        self.rows.setdefault(row.name, []).append(outcome)


# ---------------------------------------------------------------------------------------------
# Running


def family_member(args: tuple[int, int, Sequence[Row], bool]) -> tuple[int, str, str, dict[str, Outcome]]:
    """Every row once on the member of ``seed``; the member's launch spread applies. A loop run stops
    once its incumbent is within 2 %, unless ``full_budget``: then it spends the budget (memory deaths are
    a share of all its launches) and races its finalists."""
    seed, budget, rows, full_budget = args
    member = family.member(seed)
    problem = problem_of(member.profile, member.space)
    problem.launch_sd = member.profile.timing.launch_sd
    optimum = solve(problem).tok_s
    out = {}
    for row in rows:
        if row.plain:
            run = run_candidates(problem, seed, budget, row.name, random_candidates(problem, seed))
        else:
            with race_stop(row.race_stop):
                run = run_study(problem, seed, budget, sampler=row.sampler, rules_off=row.rules_off,
                                name=row.name, until=None if full_budget else optimum,
                                confirm=full_budget, race_share=row.race_share,
                                finalists=row.finalists)  # fmt: skip
        out[row.name] = outcome_of(run, optimum)
    return seed, member.case, member.summary, out


GRID_ONCE = "every configuration once (reference)"


@contextlib.contextmanager
def race_stop(until: RaceStop) -> Iterator[None]:
    """The race's stopping rule for one row (a module setting, as the product has one)."""
    before = rounds_module.RACE_STOP
    rounds_module.RACE_STOP = until
    try:
        yield
    finally:
        rounds_module.RACE_STOP = before


def recorded_seed(args: tuple[Path, int, Sequence[Row], bool]) -> tuple[str, int, dict[str, Outcome]]:
    """Every row once on a recorded landscape with one seed, the grid's size as the budget (with
    ``full_budget``: search and race together); and the reference: the grid itself, each configuration
    launched once in a shuffled order."""
    path, seed, rows, full_budget = args
    problem = replay.load_problem(path)
    budget = len(problem.launches)
    out = {GRID_ONCE: outcome_of(run_recorded_grid_once(problem, seed), problem.optimum)}
    for row in rows:
        if row.plain:
            run = run_recorded_random(problem, seed, budget)
        else:
            with race_stop(row.race_stop):
                run = run_recorded_study(problem, seed, budget, sampler=row.sampler, rules_off=row.rules_off,
                                         confirm=full_budget, race_in_budget=True,
                                         race_share=row.race_share, finalists=row.finalists)  # fmt: skip
        out[row.name] = outcome_of(run, problem.optimum)
    return path.stem, budget, out


def outcome_of(run: Run, optimum: float) -> Outcome:
    summary = run.summary(optimum, 1)
    gap = summary["confirmed_gap"]
    night = summary["launches"] + run.confirm_launches if gap is not None else None
    return Outcome(summary["launches_to_2pct"], summary["memory_death_rate"], summary["launches_to_find_2pct"],
                   None if gap is None else gap <= WITHIN, run.claims, run.false_claims, night)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Statistics


def reached(outcomes: Sequence[Outcome], budget: int, *, found: bool = False) -> list[float]:
    """Launches to 2 % (``found``: until one within 2 % was launched, crowned or not); a run that never
    got there counts as budget + 1 (shown as >budget)."""
    values = [o.launches_to_find_2pct if found else o.launches_to_2pct for o in outcomes]
    return [float(v) if v is not None else budget + 1.0 for v in values]


def family_table(results: Results, budget: int, *, seed: int = 0) -> list[dict[str, Any]]:
    """One line per row: quantiles, memory deaths, and the paired intervals against the shipped loop."""
    if not any(results.rows.values()):  # no family members (--family 0): the recordings alone
        return []
    rng = random.Random(seed)
    full = reached(results.rows[FULL.name], budget)
    lines = []
    for name, outcomes in results.rows.items():
        values, found = reached(outcomes, budget), reached(outcomes, budget, found=True)
        deaths = [o.memory_death_share for o in outcomes]
        line: dict[str, Any] = {"row": name, "members": len(values), "median": quantile(values, 0.5),
                                "p90": quantile(values, 0.9), "reached": sum(v <= budget for v in values),
                                "found_median": quantile(found, 0.5), "found_p90": quantile(found, 0.9),
                                "deaths_median": quantile(deaths, 0.5), "deaths_worst": max(deaths)}  # fmt: skip
        raced = [o.raced_within_2pct for o in outcomes if o.raced_within_2pct is not None]
        line["raced"] = sum(raced) if raced else None
        line["claims"] = sum(o.claims for o in outcomes)
        line["false_claims"] = sum(o.false_claims for o in outcomes)
        line["false_claim_members"] = sum(o.false_claims > 0 for o in outcomes)
        nights = [o.night_launches for o in outcomes if o.night_launches is not None]
        line["night_max"] = max(nights) if nights else None
        if name != FULL.name:
            line["median_minus_full"] = paired_interval(values, full, 0.5, rng)
            line["p90_minus_full"] = paired_interval(values, full, 0.9, rng)
        lines.append(line)
    return lines


def earns_its_keep(line: dict[str, Any]) -> bool:
    """Switching it off makes the median or the p90 worse by more than the noise: the paired
    interval of the difference lies above zero."""
    return bool(line["median_minus_full"][0] > 0 or line["p90_minus_full"][0] > 0)


# ---------------------------------------------------------------------------------------------
# Output


def _launches(value: float, budget: int) -> str:
    return f">{budget}" if value > budget else f"{value:g}"


def _interval(bounds: tuple[float, float]) -> str:
    return f"{bounds[0]:+g}..{bounds[1]:+g}"


def print_tables(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=max(Console().width, 160))
    budget, first, last = report["budget"], *report["family_seeds"]
    if not report["family"]:
        print_recorded(console, report)
        return
    ends = "the run spends the whole budget" if report.get("full_budget") else "the run stops at 2 %"
    table = Table(
        title=f"Ablation on family members {first}..{last} ({last - first + 1}, held out), budget {budget} launches, "
        f"launch-to-launch sd as each profile's",
        caption="launches to 2 %: until the incumbent (highest mean over its launches) is truly within 2 % of the "
        "optimum, >N: not reached; raced (--full-budget): members whose race, inside the budget, "
        "named a configuration truly within 2 % (false claims: members with a gain over a baseline marked "
        "significant whose sign the truth does not have; night: the most launches, search + race); found: median / "
        "p90 launches until one truly within 2 % was "
        "launched, crowned or not (the rest is selection under the launch noise); deaths: share of the run's "
        f"launches that died of memory (median / worst; {ends}); Δ: 95 % "
        "paired bootstrap interval of the row's quantile minus the shipped loop's (members resampled; above 0: the "
        "row is worse). SIMULATED on generated twin profiles.",
    )
    raced = any(line.get("raced") is not None for line in report["family"])
    headers = ("row", *(("raced", "false claims", "night") if raced else ()), "median", "p90", "reached", "found",
               "deaths", "Δ median", "Δ p90", "verdict")  # fmt: skip
    for header in headers:
        table.add_column(header, justify="left" if header in ("row", "verdict") else "right")
    for line in report["family"]:
        verdict = ""
        if "median_minus_full" in line and line["row"].startswith("-"):
            verdict = "earns its keep" if earns_its_keep(line) else "no better than without"
        race = [f"{line['raced']}/{line['members']}" if line.get("raced") is not None else "",
                f"{line['false_claim_members']}/{line['members']} ({line['false_claims']} of {line['claims']})",
                f"<= {line['night_max']}" if line.get("night_max") is not None else ""] if raced else []  # fmt: skip
        table.add_row(line["row"], *race, _launches(line["median"], budget), _launches(line["p90"], budget),
                      f"{line['reached']}/{line['members']}",
                      f"{_launches(line['found_median'], budget)} / {_launches(line['found_p90'], budget)}",
                      f"{line['deaths_median']:.0%} / {line['deaths_worst']:.0%}",
                      _interval(line["median_minus_full"]) if "median_minus_full" in line else "",
                      _interval(line["p90_minus_full"]) if "p90_minus_full" in line else "", verdict)  # fmt: skip
    console.print(table)
    for case, lines in report.get("family_by_case", {}).items():
        console.print(f"{case}: " + ", ".join(f"{ln['row']} {_launches(ln['median'], budget)}/"
                                                f"{_launches(ln['p90'], budget)}" for ln in lines))  # fmt: skip
    print_recorded(console, report)


def print_recorded(console: Any, report: dict[str, Any]) -> None:
    from rich.table import Table

    if not report["recorded"]:
        return
    names = list(report["recorded"])
    table = Table(
        title=f"Ablation on the recorded real landscapes ({report['recorded_seeds']} seeds each, budget: the grid)",
        caption="median launches to 2 % over seeds, and in brackets until one within 2 % was launched (>N: not "
        "reached in the grid's size); each launch replays one recorded launch of its configuration. The reference "
        "launches every configuration once: what selection by one launch each allows, however good the search.",
    )
    table.add_column("row")
    for name in names:
        table.add_column(f"{name} ({report['recorded'][name]['grid']})", justify="right")
    for row in [*report["rows"], GRID_ONCE]:
        cells = []
        for name in names:
            rec = report["recorded"][name]
            outcomes = [Outcome(**o) for o in rec["runs"][row]]
            crowned = quantile(reached(outcomes, rec["grid"]), 0.5)
            found = quantile(reached(outcomes, rec["grid"], found=True), 0.5)
            raced = [o.raced_within_2pct for o in outcomes if o.raced_within_2pct is not None]
            race = f"; raced {sum(raced)}/{len(raced)}" if raced else ""
            cells.append(f"{_launches(crowned, rec['grid'])} ({_launches(found, rec['grid'])}){race}")
        table.add_row(row, *cells)
    console.print(table)


# ---------------------------------------------------------------------------------------------


def run(args: argparse.Namespace, progress: Callable[[str], None]) -> dict[str, Any]:
    shipped = [
        row for row in ROWS if (row.race_share, row.race_stop, row.finalists) == (RACE_SHARE, RACE_STOP, FINALISTS)
    ]
    rows = [row for row in ROWS if row.name in args.rows] if args.rows else shipped
    seeds = range(args.family_seed, args.family_seed + args.family)
    recordings = sorted(LANDSCAPES.glob("*.json")) if args.recorded is None else args.recorded
    family_results, cases, summaries = Results(), {}, {}
    recorded: dict[str, dict[str, Any]] = {}
    tasks_family = [(seed, args.budget, rows, args.full_budget) for seed in seeds]
    tasks_recorded = [(path, seed, rows, args.full_budget) for path in recordings
                      for seed in range(args.recorded_seeds)]  # fmt: skip
    with multiprocessing.Pool(args.workers) as pool:
        for seed, case, summary, out in pool.imap(family_member, tasks_family):
            cases[seed], summaries[seed] = case, summary
            for row in rows:
                family_results.add(row, out[row.name])
            progress(f"member {seed} done ({summary})")
        for name, grid, out in pool.imap(recorded_seed, tasks_recorded):
            entry = recorded.setdefault(name, {"grid": grid, "runs": {}})
            for row_name, outcome in out.items():
                entry["runs"].setdefault(row_name, []).append(outcome.__dict__)
            progress(f"recording {name}: {len(entry['runs'][rows[0].name])} seeds done")
    by_case = {}
    for case in sorted(set(cases.values())):
        sub = Results({name: [o for s, o in zip(seeds, outs, strict=True) if cases[s] == case]
                       for name, outs in family_results.rows.items()})  # fmt: skip
        by_case[f"{case} ({sum(c == case for c in cases.values())})"] = [
            {"row": ln["row"], "median": ln["median"], "p90": ln["p90"]}
            for ln in family_table(sub, args.budget)
            if ln["row"] in (FULL.name, "random sampler, same loop")
        ]
    return {
        "family_seeds": [seeds.start, seeds.stop - 1],
        "budget": args.budget,
        "full_budget": args.full_budget,
        "rows": [row.name for row in rows],
        "members": {str(s): {"case": cases[s], "summary": summaries[s]} for s in seeds},
        "family": family_table(family_results, args.budget),
        "family_runs": {name: [o.__dict__ for o in outs] for name, outs in family_results.rows.items()},
        "family_by_case": by_case,
        "recorded_seeds": args.recorded_seeds,
        "recorded": recorded,
    }


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--family", type=int, default=32, metavar="N", help="family members (default 32)")
    parser.add_argument("--family-seed", type=int, default=9100, metavar="S", help="the first member's seed")
    parser.add_argument("--budget", type=int, default=60, help="launches per family run (default 60)")
    parser.add_argument("--recorded", type=Path, nargs="*", default=None, metavar="FILE",
                        help="recorded landscapes (default: every benchmarks/landscapes/*.json; the flag alone: "
                        "none)")  # fmt: skip
    parser.add_argument("--recorded-seeds", type=int, default=6, help="seeds per recorded landscape (default 6)")
    parser.add_argument("--rows", nargs="*", default=None, help="only these rows (by name)")
    parser.add_argument("--full-budget", action="store_true",
                        help="family runs spend the whole budget instead of stopping at 2 %%, as a study does (memory "
                        "deaths are then a share of all its launches), then race their finalists")  # fmt: skip
    parser.add_argument("--workers", type=int, default=1, help="processes (default 1)")
    parser.add_argument("--json", type=Path, default=None, help="write every number here")
    args = parser.parse_args(argv)
    started = time.monotonic()
    report = run(args, lambda text: print(text, file=sys.stderr, flush=True))
    report["wall_s"] = time.monotonic() - started
    print_tables(report)
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
