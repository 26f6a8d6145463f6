"""Round 14's tables (round 12's compare.py, plus the prediction errors; not the product): the held-out
reports in FOLDER at BUDGET launches, per slice (the wide-trees slice; the other slices, family and tight,
pooled) and row: regret median / p90 / mean (benchmarks.judge.regret_summary), harmful answers, memory deaths
launched on the tight members; the mean next-launch prediction error after 3, 5 and 10 launches (the reports'
predicted_error_after, over the nights that have one); the mean per case kind; per member regret / the
incumbent's true gap.

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
rows: dict[tuple[str, str], list[dict]] = {}
kinds: dict[int, str] = {}
for path in sorted(folder.glob(f"*-{budget}-*.json")):
    found = re.fullmatch(rf"(all|tight|wide-trees)-{budget}-(.+)-\d+", path.stem)
    if found is None:
        continue
    case, row = found.groups()
    part = "wide-trees" if case == "wide-trees" else "family + tight"
    report = json.loads(path.read_text())
    for member in report["members"]:
        kind = "tight" if case == "tight" else member["summary"].split(":")[0]
        kinds[member["seed"]] = kind if kind in ("wide-trees", "flat-top", "huge", "tight") else "base"
    for runs in report["methods"].values():
        rows.setdefault((part, row), []).extend(runs["runs"])
for runs in rows.values():
    runs.sort(key=lambda r: r["seed"])
print(f"| slice | row ({budget} launches) | members | regret % median / p90 / mean | within 2 % | harmful "
      "| memory deaths launched, tight members (total) |")
print("|---|---|---|---|---|---|---|")
for (part, row), runs in sorted(rows.items()):
    s = regret_summary(runs, budget)
    tight = [r["memory_deaths"] for r in runs if kinds[r["seed"]] == "tight"]
    print(f"| {part} | {row} | {len(runs)} | {s['median']:.2f} / {s['p90']:.2f} / {s['mean']:.2f} | "
          f"{sum(r['regret_pct'] <= 2 for r in runs)} | {s['harmful']} | {sum(tight) if tight else '-'} |")
print("\nMean next-launch prediction error after 3 / 5 / 10 launches (nights that have one)\n")
print("| slice | row | after 3 | after 5 | after 10 |")
print("|---|---|---|---|---|")
for (part, row), runs in sorted(rows.items()):
    cells = []
    for n in ("3", "5", "10"):
        seen = [e for r in runs if (e := (r.get("predicted_error_after") or {}).get(n)) is not None]
        cells.append(f"{statistics.fmean(seen):.3f} ({len(seen)})" if seen else "-")
    print(f"| {part} | {row} | " + " | ".join(cells) + " |")
order = [k for k in ("base", "wide-trees", "flat-top", "huge", "tight") if k in kinds.values()]
names = sorted({row for _, row in rows})
print("\nMean regret % per case kind (members of every slice)\n")
print("| row | " + " | ".join(f"{k} ({list(kinds.values()).count(k)})" for k in order) + " |")
print("|---|" + "---|" * len(order))
for row in names:
    runs = [r for (_, name), rs in rows.items() if name == row for r in rs]
    cells = [[r["regret_pct"] for r in runs if kinds[r["seed"]] == k] for k in order]
    print(f"| {row} | " + " | ".join(f"{statistics.fmean(c):.2f}" if c else "-" for c in cells) + " |")
print("\nPer member: regret % / the search's incumbent's true gap %\n")
print("| member | kind | " + " | ".join(names) + " |")
print("|---|---|" + "---|" * len(names))
for seed in sorted(kinds):
    cells = []
    for row in names:
        runs = [r for (_, name), rs in rows.items() if name == row for r in rs if r["seed"] == seed]
        cells.append(f"{runs[0]['regret_pct']:.1f} / {100 * runs[0]['final_gap']:.1f}" if runs else "")
    print(f"| {seed} | {kinds[seed]} | " + " | ".join(cells) + " |")
