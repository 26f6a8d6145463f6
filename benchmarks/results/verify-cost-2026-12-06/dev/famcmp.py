"""Dev table (not the product): each spent family / tight member's regret, memory deaths and harmful answer
from famq.sh's reports under /tmp/vdev/fam, one column per tree; then each tree's mean and median.

Usage: python famcmp.py TREE...
"""

import json
import statistics
import sys


def load(tree: str, case: str, budget: int, first: int) -> dict:
    report = json.load(open(f"/tmp/vdev/fam/{tree}-{case}-{budget}-{first}.json"))
    kinds = {m["seed"]: m["summary"].split(":")[0] for m in report["members"]}
    runs = next(iter(report["methods"].values()))["runs"]
    return {r["seed"]: (r["regret_pct"], r["memory_deaths"], r["harmful"], kinds[r["seed"]]) for r in runs}


trees = sys.argv[1:]
regrets: dict[str, list[float]] = {t: [] for t in trees}
for case, first in (("all", 50000), ("all", 50200), ("tight", 50300)):
    try:
        rows = {t: load(t, case, 20, first) for t in trees}
    except FileNotFoundError as missing:
        print("missing", missing.filename)
        continue
    for seed in sorted(rows[trees[0]]):
        cells = (f"{rows[t][seed][0]:6.1f} d{rows[t][seed][1]} h{rows[t][seed][2]}" for t in trees)
        print(seed, rows[trees[0]][seed][3][:10], *cells)
        for t in trees:
            regrets[t].append(rows[t][seed][0])
for t in trees:
    print(t, len(regrets[t]), f"mean {statistics.fmean(regrets[t]):.2f} median {statistics.median(regrets[t]):.2f}")
