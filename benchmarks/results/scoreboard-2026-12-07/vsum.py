"""The scoreboard's verdicts table (round 15's script, copied; not the product): per verdicts.py JSON
given, its totals (false claims, false bests, a baseline recommended when optimal) and, per scenario,
the search's and the race's launches (median and total over its studies).

Usage: python vsum.py NAME=FILE[,FILE...]...  (a run split over several processes: its files' counts summed)
"""

import json
import statistics
import sys

print("| run | studies judged | false claims | false bests | baseline recommended when optimal | "
      "search launches, shipped / baseline-optimal: median (total) | race launches, the same |")
print("|---|---|---|---|---|---|---|")
for arg in sys.argv[1:]:
    name, paths = arg.split("=", 1)
    reports = [json.load(open(path)) for path in paths.split(",")]
    t = {key: sum(r["totals"][key] for r in reports) for key in
         ("studies", "judged", "false_claim_studies", "false_bests", "optimal_baseline_recommended", "optimal_studies")}
    t["false_claim_rate"] = t["false_claim_studies"] / t["judged"]
    t["false_best_rate"] = t["false_bests"] / t["judged"]
    t["baseline_recommended_rate"] = t["optimal_baseline_recommended"] / t["optimal_studies"]
    runs = [r for report in reports for land in report["landscapes"] for r in land["runs"]]
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
