"""The tables of a model-sampler round's results README, from the JSON reports in its folder:

    .venv/bin/python -m benchmarks.round_tables FOLDER [--branch-point COMMIT]

One script for every round (model-sampler-2026-12-05 onwards): each round's folder holds the reports,
this prints their tables. Per night (20, 60 launches): the family's, the tight and the wide-trees
members' runs pooled (``{all,tight,wide-trees}-{20,60}.json``, or one report per row,
``{all,tight,wide-trees}-{20,60}-ROW.json``, run side by side),
each row's regret (:func:`benchmarks.judge.regret_summary`), launches until one within 2 % is launched,
memory deaths, each row against TPE's night paired over members (:func:`benchmarks.judge.paired_regret`),
the mean regret per case kind (the case a member's summary names; the tight members are their own kind),
and a row's error of the next launch's rate predicted before it where its runs recorded one
(:func:`benchmarks.judge.predicted_error_spread`). The reports named ``*-branch-point-model*.json`` are
the model row at the round's branch point (``--branch-point`` names its commit), named apart and paired
against the round's model row. Then the recorded llama.cpp landscapes' tables, where the folder holds them.
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from benchmarks.judge import TPE_NIGHT, paired_regret, predicted_error_spread, quantile_reached, regret_summary

CASES = ("base", "wide-trees", "flat-top", "huge", "tight")
RECORDED = ("h200-llamacpp-deep", "h200-llamacpp-drafts")


def case_of(summary: str, tight: bool) -> str:
    if tight:
        return "tight"
    head = summary.split(":", 1)[0]
    return head if head in CASES else "base"


def _interval_cells(paired: dict[str, Any]) -> list[str]:
    return [f"{paired[q]['difference']:+.2f} ({paired[q]['interval'][0]:+.2f} to {paired[q]['interval'][1]:+.2f})"
            for q in ("median", "p90")]  # fmt: skip


def night(folder: Path, budget: int, branch_point: str) -> None:
    rows: dict[str, list[dict[str, Any]]] = {}
    cases: dict[int, str] = {}
    for name, tight in (("all", False), ("tight", True), ("wide-trees", False)):
        paths = [*folder.glob(f"{name}-{budget}.json"), *sorted(folder.glob(f"{name}-{budget}-*.json"))]
        for path in paths:
            report = json.loads(path.read_text())
            for member in report["members"]:
                cases[(member["seed"])] = case_of(member["summary"], tight)
            for method, result in report["methods"].items():
                label = branch_point if "branch-point-model" in path.stem else method
                rows.setdefault(label, []).extend(result["runs"])
    if not rows:
        return
    for runs in rows.values():  # paired by member: every row in seed order (a row may come in several files)
        runs.sort(key=lambda run: run["seed"])
    members = len(next(iter(rows.values())))
    print(f"\n## Night of {budget} launches, {members} members (--unmodelled)\n")
    print(
        "| row | regret % median / p90 / mean | within 2 % / 5 % | found 2 % (median launches) | memory deaths "
        "(median share; tight members) | harmful | false / claims |"
    )
    print("|---|---|---|---|---|---|---|")
    for method, runs in rows.items():
        r = regret_summary(runs, budget)
        found = quantile_reached([x["launches_to_find_2pct"] for x in runs], 0.5)
        tight = [x["memory_death_rate"] for x in runs if cases[x["seed"]] == "tight"]
        deaths = f"{statistics.median(tight):.0%}" if tight else "-"
        print(
            f"| {method} | {r['median']:.1f} / {r['p90']:.1f} / {r['mean']:.1f} | {r['within_2pct']:.0%} / "
            f"{r['within_5pct']:.0%} | {found if found is not None else f'>{budget}'} | {deaths} | {r['harmful']} | "
            f"{r['false_claims']} / {r['claims']} |"
        )
    print(f"\nAgainst {TPE_NIGHT}, paired over members (difference, 95 % interval; negative: better than TPE):\n")
    print("| row | median | p90 |")
    print("|---|---|---|")
    for method, paired in paired_regret(rows).items():
        cells = _interval_cells(paired)
        print(f"| {method} | {cells[0]} | {cells[1]} |")
    model = next((name for name in rows if name.startswith("autotune-model (")), None)
    if model is not None and branch_point in rows:
        print("\nThis round's model row against the branch point's, paired over members (negative: better):\n")
        print("| median | p90 | mean (this round / branch point) |")
        print("|---|---|---|")
        # paired_regret pairs a row against TPE's: the branch point's row stands in for it here
        cells = _interval_cells(paired_regret({TPE_NIGHT: rows[branch_point], model: rows[model]})[model])
        means = [statistics.fmean(x["regret_pct"] for x in rows[name]) for name in (model, branch_point)]
        print(f"| {cells[0]} | {cells[1]} | {means[0]:.1f} / {means[1]:.1f} |")
    print("\nMean regret % per case kind (members):\n")
    kinds = [k for k in CASES if k in cases.values()]
    print("| row | " + " | ".join(f"{k} ({list(cases.values()).count(k)})" for k in kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for method, runs in rows.items():
        means = [statistics.fmean(x["regret_pct"] for x in runs if cases[x["seed"]] == k) for k in kinds]
        print(f"| {method} | " + " | ".join(f"{m:.1f}" for m in means) + " |")
    for method, runs in rows.items():
        after = predicted_error_spread(runs)
        if any(e["runs"] for e in after.values()):
            print(f"\n{method}: the next launch's rate predicted before it is made, error median / p90 (runs):\n")
            print("| after 3 launches | after 5 | after 10 |")
            print("|---|---|---|")
            print("| " + " | ".join(f"{e['median']:.1%} / {e['p90']:.1%} ({e['runs']})" if e["runs"] else "-"
                                    for e in after.values()) + " |")  # fmt: skip


def recorded(folder: Path) -> None:
    for name in RECORDED:
        path = folder / f"{name}.json"
        if not path.exists():
            continue
        report = json.loads(path.read_text())
        seeds = len(report["seeds"])
        print(f"\n## {name} ({report['configs']} configurations, night {report['budget']}, {seeds} seeds)\n")
        print("| row | regret % median / p90 / mean | vs TPE: median | vs TPE: p90 |")
        print("|---|---|---|---|")
        for method, result in report["methods"].items():
            r = result["summary"]["regret"]
            paired = report["paired"].get(method)
            cells = ["—", "—"] if paired is None else _interval_cells(paired)
            print(f"| {method} | {r['median']:.1f} / {r['p90']:.1f} / {r['mean']:.1f} | {cells[0]} | {cells[1]} |")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path, help="a round's results folder (its JSON reports)")
    parser.add_argument(
        "--branch-point", metavar="COMMIT", help="the commit of the *-branch-point-model reports (their row's name)"
    )
    args = parser.parse_args(argv)
    label = "autotune-model at the branch point" + (f" ({args.branch_point})" if args.branch_point else "")
    for budget in (20, 60):
        night(args.folder, budget, label)
    recorded(args.folder)


if __name__ == "__main__":
    main()
