"""Round 13's verdicts table (not the product): per verdicts.py JSON given, its totals (false claims, false
bests, a baseline recommended when optimal) and, per scenario, the search's and the race's launches
(median and total over its studies).

Usage: python vsum.py NAME=FILE...
"""

import json
import statistics
import sys

print("| run | studies judged | false claims | false bests | baseline recommended when optimal | "
      "search launches, shipped / baseline-optimal: median (total) | race launches, the same |")
print("|---|---|---|---|---|---|---|")
for arg in sys.argv[1:]:
    name, path = arg.split("=", 1)
    report = json.load(open(path))
    t = report["totals"]
    runs = [r for land in report["landscapes"] for r in land["runs"]]
    cells = []
    for key in ("launches", "confirm_launches"):
        parts = []
        for scenario in ("shipped", "baseline-optimal"):
            values = [r[key] for r in runs if r["scenario"] == scenario]
            parts.append(f"{statistics.median(values):g} ({sum(values)})")
        cells.append(" / ".join(parts))
    claims, bests, kept = (100 * t[k] for k in ("false_claim_rate", "false_best_rate", "baseline_recommended_rate"))
    print(f"| {name} | {t['judged']}/{t['studies']} | {t['false_claim_studies']}/{t['judged']} ({claims:.0f} %) | "
          f"{t['false_bests']}/{t['judged']} ({bests:.0f} %) | "
          f"{t['optimal_baseline_recommended']}/{t['optimal_studies']} ({kept:.0f} %) | {cells[0]} | {cells[1]} |")
