"""The tables of this folder's README from its JSON reports (run from the repository root):

    .venv/bin/python benchmarks/results/model-sampler-2026-12-09/summarise.py [FOLDER]

(model-sampler-2026-12-08's, without its recorded landscapes' tables: the branch point's model row,
``*-branch-point-model.json``, is named apart and paired against this round's model row.)

Per night (20, 60 launches): the family's and the tight members' runs pooled (one report per row:
``{all,tight}-{20,60}-ROW.json``, run side by side), each row's regret
(benchmarks.judge.regret_summary), launches until one within 2 % is launched, memory deaths, each row
against TPE's night paired over members (benchmarks.judge.paired_regret), and the mean regret per
case kind (the case a member's summary names; the tight members are their own kind), and the
model-guided row's error of the next launch's rate predicted before it (benchmarks.judge.predicted_error_spread).
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT))

from benchmarks.judge import (  # noqa: E402
    TPE_NIGHT,
    paired_regret,
    predicted_error_spread,
    quantile_reached,
    regret_summary,
)

BRANCH_POINT = "autotune-model at the branch point (7ec864c)"
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
        for path in sorted(HERE.glob(f"{name}-{budget}-*.json")):
            report = json.loads(path.read_text())
            for member in report["members"]:
                cases[(member["seed"])] = case_of(member["summary"], tight)
            for method, result in report["methods"].items():
                label = BRANCH_POINT if "branch-point-model" in path.stem else method
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
        cells = [f"{paired[q]['difference']:+.2f} ({paired[q]['interval'][0]:+.2f} to {paired[q]['interval'][1]:+.2f})"
                 for q in ("median", "p90")]  # fmt: skip
        print(f"| {method} | {cells[0]} | {cells[1]} |")
    model = next((name for name in rows if name.startswith("autotune-model (")), None)
    if model is not None and BRANCH_POINT in rows:
        print("\nThis round's model row against the branch point's, paired over members (negative: better):\n")
        print("| median | p90 | mean (this round / branch point) |")
        print("|---|---|---|")
        # paired_regret pairs a row against TPE's: the branch point's row stands in for it here
        paired = paired_regret({TPE_NIGHT: rows[BRANCH_POINT], model: rows[model]})[model]
        cells = [f"{paired[q]['difference']:+.2f} ({paired[q]['interval'][0]:+.2f} to {paired[q]['interval'][1]:+.2f})"
                 for q in ("median", "p90")]  # fmt: skip
        means = [statistics.fmean(x["regret_pct"] for x in rows[name]) for name in (model, BRANCH_POINT)]
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


if __name__ == "__main__":
    night(20)
    night(60)
