"""Regret per member, main against the remedy, from two replay files; median, p90 (nearest rank), mean.

Usage: python compare.py MAIN.jsonl REMEDY.jsonl
"""

import json
import math
import statistics
import sys
from pathlib import Path


def load(path: str) -> dict[int, dict]:
    return {n["seed"]: n for n in map(json.loads, Path(path).read_text().splitlines())}


def spread(values: list[float]) -> str:
    ordered = sorted(values)
    p90 = ordered[max(math.ceil(0.9 * len(ordered)) - 1, 0)]
    return f"median {statistics.median(ordered):.1f} p90 {p90:.1f} mean {statistics.fmean(ordered):.2f}"


def main() -> None:
    main_, remedy = load(sys.argv[1]), load(sys.argv[2])
    seeds = sorted(main_.keys() & remedy.keys())
    for seed in seeds:
        a, b = main_[seed], remedy[seed]
        change = b["regret_pct"] - a["regret_pct"]
        mark = "" if abs(change) < 0.05 else ("  better" if change < 0 else "  WORSE")
        print(f"{seed} {a['case']:10} main {a['regret_pct']:5.1f}  remedy {b['regret_pct']:5.1f}{mark}")
    print(f"members {len(seeds)}")
    print("main  ", spread([main_[s]["regret_pct"] for s in seeds]))
    print("remedy", spread([remedy[s]["regret_pct"] for s in seeds]))


main()
