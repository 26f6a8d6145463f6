"""The scoreboard's per-member table (not the product): each member's regret % in every row, per night, from
the ``{all,tight,wide-trees}-{20,60}-ROW-SEED.json`` reports in this folder; marks a regret below -0.5 %
(the answer truly faster than the benchmark's solved optimum: the solver missed it) and a member where
every row gave the same regret.

Usage: python members.py FOLDER
"""

import json
import sys
from pathlib import Path

folder = Path(sys.argv[1])
for budget in (20, 60):
    regrets: dict[int, dict[str, float]] = {}
    summaries: dict[int, str] = {}
    for path in sorted(folder.glob(f"*-{budget}-*.json")):
        report = json.loads(path.read_text())
        for member in report["members"]:
            summaries[member["seed"]] = member["summary"]
        for method, result in report["methods"].items():
            for run in result["runs"]:
                regrets.setdefault(run["seed"], {})[method] = run["regret_pct"]
    if not regrets:
        continue
    rows = sorted({m for by in regrets.values() for m in by})
    print(f"\n## Night of {budget} launches: regret % per member\n")
    print("| member | " + " | ".join(rows) + " | note |")
    print("|---|" + "---|" * (len(rows) + 1))
    for seed in sorted(regrets):
        by = regrets[seed]
        notes = []
        if any(v < -0.5 for v in by.values()):
            notes.append("regret below -0.5 %")
        if len(by) == len(rows) and len({round(v, 2) for v in by.values()}) == 1:
            notes.append("every row ties")
        cells = [f"{by[m]:.1f}" if m in by else "-" for m in rows]
        print(f"| {seed} {summaries[seed].split(',')[0]} | " + " | ".join(cells) + f" | {'; '.join(notes)} |")
