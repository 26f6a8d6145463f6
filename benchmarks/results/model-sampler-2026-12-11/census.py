"""Round 7's census (not the product): per member and row of a round's held-out reports, the regret (the
race's confirmed answer), the true gap of the search's incumbent (its best measured launch) and the launch
that first came within 2 %; the regret the race's call added is the first less the second. Then each row's
memory deaths on the tight members (the search's launches, as each run reports them).

Usage: python census.py FOLDER BUDGET (FOLDER: a round's results, one report per row).
"""

import json
import re
import sys
from pathlib import Path

folder, budget = Path(sys.argv[1]), int(sys.argv[2])
table: dict[tuple[int, str], dict[str, str]] = {}
deaths: dict[str, list[int]] = {}
for path in sorted(folder.glob(f"*-{budget}-*.json")):
    row = re.sub(r"-\d+$", "", path.stem.split("-", 2)[2])
    report = json.loads(path.read_text())
    for runs in report["methods"].values():
        for member, run in zip(report["members"], runs["runs"], strict=True):
            kind = "tight" if path.stem.startswith("tight") else member["summary"].split(":")[0]
            kind = kind if kind in ("wide-trees", "flat-top", "huge", "tight") else "base"
            found = run["launches_to_find_2pct"]
            cell = f"{run['regret_pct']:.1f} / {100 * run['final_gap']:.1f} / {found if found else '-'}"
            table.setdefault((member["seed"], kind), {})[row] = cell
            if kind == "tight":
                deaths.setdefault(row, []).append(run["memory_deaths"])
rows = sorted({r for cells in table.values() for r in cells})
print("| member | kind | " + " | ".join(rows) + " |")
print("|---|---|" + "---|" * len(rows))
for (seed, kind), cells in sorted(table.items()):
    print(f"| {seed} | {kind} | " + " | ".join(cells.get(r, "") for r in rows) + " |")
for row, counts in sorted(deaths.items()):
    print(f"{row}: memory deaths on the {len(counts)} tight members {sum(counts)} {counts}")
