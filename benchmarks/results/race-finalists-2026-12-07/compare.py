"""Round 15's tables (not the product): every row of the reports in FOLDER at BUDGET launches (rows named
by the report's file name, so two trees' rows of one method stay apart): per row regret median / p90 / mean
(benchmarks.judge.regret_summary), harmful answers, the race's claims and false claims, the search's and
the race's launches, memory deaths (and per search launch); the mean per case kind; per member regret /
the incumbent's true gap / the search's launches.

Usage: python compare.py FOLDER BUDGET
"""

import json
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.judge import regret_summary  # noqa: E402

folder, budget = Path(sys.argv[1]), int(sys.argv[2])
rows: dict[str, list[dict]] = {}
kinds: dict[int, str] = {}
for path in sorted(folder.glob(f"*-{budget}-*.json")):
    row = re.sub(r"-\d+$", "", path.stem.split("-", 2)[2])
    report = json.loads(path.read_text())
    for member in report["members"]:
        kind = "tight" if path.stem.startswith("tight") else member["summary"].split(":")[0]
        kinds[member["seed"]] = kind if kind in ("wide-trees", "flat-top", "huge", "tight") else "base"
    for runs in report["methods"].values():
        rows.setdefault(row, []).extend(runs["runs"])
for runs in rows.values():
    runs.sort(key=lambda r: r["seed"])
print(f"| row ({budget} launches) | members | regret % median / p90 / mean | within 2 % | harmful | false / claims |"
      " search launches: median (total) | race launches: median (total) | memory deaths (per search launch) |")
print("|---|---|---|---|---|---|---|---|---|")
for row, runs in rows.items():
    s = regret_summary(runs, budget)
    spent = [r["confirm_launches"] for r in runs]
    searched = [r["launches"] for r in runs]
    deaths = sum(r["memory_deaths"] for r in runs)
    print(f"| {row} | {len(runs)} | {s['median']:.2f} / {s['p90']:.2f} / {s['mean']:.2f} | "
          f"{sum(r['regret_pct'] <= 2 for r in runs)} | {s['harmful']} | {s['false_claims']} / {s['claims']} | "
          f"{statistics.median(searched):g} ({sum(searched)}) | {statistics.median(spent):g} ({sum(spent)}) | "
          f"{deaths} ({deaths / max(sum(searched), 1):.3f}) |")
order = [k for k in ("base", "wide-trees", "flat-top", "huge", "tight") if k in kinds.values()]
print("\n| row | " + " | ".join(f"{k} ({list(kinds.values()).count(k)})" for k in order) + " |")
print("|---|" + "---|" * len(order))
for row, runs in rows.items():
    cells = [statistics.fmean([r["regret_pct"] for r in runs if kinds[r["seed"]] == k] or [float("nan")])
             for k in order]
    print(f"| {row} | " + " | ".join(f"{c:.2f}" for c in cells) + " |")
print("\nPer member: regret % / the search's incumbent's true gap % / the search's launches\n")
print("| member | kind | " + " | ".join(rows) + " |")
print("|---|---|" + "---|" * len(rows))
for seed in sorted(kinds):
    cells = [next((f"{r['regret_pct']:.1f} / {100 * r['final_gap']:.1f} / {r['launches']}" for r in runs
                   if r["seed"] == seed), "") for runs in rows.values()]
    print(f"| {seed} | {kinds[seed]} | " + " | ".join(cells) + " |")
