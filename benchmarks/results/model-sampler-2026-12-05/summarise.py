"""The tables of this folder's README from its JSON reports (run from the repository root):

    .venv/bin/python benchmarks/results/model-sampler-2026-12-05/summarise.py [FOLDER]

Per night (20, 60 launches): the family's and the tight members' runs pooled, each row's regret
(benchmarks.judge.regret_summary), launches until one within 2 % is launched, memory deaths, each row
against TPE's night paired over members (benchmarks.judge.paired_regret), and the mean regret per
case kind (the case a member's summary names; the tight members are their own kind).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from benchmarks.judge import TPE_NIGHT, paired_regret, quantile_reached, regret_summary  # noqa: E402

HERE = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).parent  # the reports' folder
CASES = ("base", "wide-trees", "flat-top", "huge", "tight")


def case_of(summary: str, tight: bool) -> str:
    if tight:
        return "tight"
    head = summary.split(":", 1)[0]
    return head if head in CASES else "base"


def night(budget: int) -> None:
    rows: dict[str, list[dict]] = {}
    cases: dict[int, str] = {}
    for name, tight in (("all", False), ("tight", True)):
        path = HERE / f"{name}-{budget}.json"
        if not path.exists():
            print(f"(no {path.name})")
            continue
        report = json.loads(path.read_text())
        for member in report["members"]:
            cases[(member["seed"])] = case_of(member["summary"], tight)
        for method, result in report["methods"].items():
            rows.setdefault(method, []).extend(result["runs"])
    if not rows:
        return
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
        cells = [f"{paired[q]['difference']:+.2f} ({paired[q]['interval'][0]:+.2f} to {paired[q]['interval'][1]:+.2f})"
                 for q in ("median", "p90")]  # fmt: skip
        print(f"| {method} | {cells[0]} | {cells[1]} |")
    print("\nMean regret % per case kind (members):\n")
    kinds = [k for k in CASES if k in cases.values()]
    print("| row | " + " | ".join(f"{k} ({list(cases.values()).count(k)})" for k in kinds) + " |")
    print("|---|" + "---|" * len(kinds))
    for method, runs in rows.items():
        means = [statistics.fmean(x["regret_pct"] for x in runs if cases[x["seed"]] == k) for k in kinds]
        print(f"| {method} | " + " | ".join(f"{m:.1f}" for m in means) + " |")


def recorded() -> None:
    for name in ("h200-llamacpp-deep", "h200-llamacpp-drafts"):
        path = HERE / f"{name}.json"
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
            cells = ["—", "—"] if paired is None else [
                f"{paired[q]['difference']:+.2f} ({paired[q]['interval'][0]:+.2f} to {paired[q]['interval'][1]:+.2f})"
                for q in ("median", "p90")]  # fmt: skip
            print(f"| {method} | {r['median']:.1f} / {r['p90']:.1f} / {r['mean']:.1f} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    night(20)
    night(60)
    recorded()
