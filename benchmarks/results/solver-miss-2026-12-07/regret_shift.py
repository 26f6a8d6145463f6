"""How the reported regrets move with the re-solved optimum (resolve-*.jsonl): for every report JSON under a
results folder that holds a member whose optimum the re-solve raised, each method's mean and median regret over
the report's members, as reported and against the re-solved optimum. Read-only.

python3 regret_shift.py RESULTS_DIR resolve-*.jsonl
"""

from __future__ import annotations

import glob
import json
import statistics
import sys


def main() -> None:
    root, files = sys.argv[1], sys.argv[2:]
    resolved = {}
    for path in files:
        unmodelled = "unmodelled" in path or "52800" in path
        for line in open(path):
            r = json.loads(line)
            if r["resolved"] > r["solved"] * 1.000001:
                resolved[(r["seed"], unmodelled)] = r
    for path in sorted(glob.glob(f"{root}/**/*.json", recursive=True)):
        try:
            d = json.load(open(path))
        except (OSError, ValueError):
            continue
        if not isinstance(d, dict) or not isinstance(d.get("methods"), dict) or d.get("case") not in ("all", None):
            continue
        members = {m["seed"]: m for m in d.get("members", []) if isinstance(m, dict) and "seed" in m}
        unmodelled = bool(d.get("unmodelled"))
        hit = {s: resolved[(s, unmodelled)] for s in members if (s, unmodelled) in resolved}
        if not hit:
            continue
        for seed, r in hit.items():
            if abs(members[seed]["optimum_tok_s"] - r["solved"]) > 1e-3 * r["solved"]:
                hit[seed] = None  # drawn by other code: the report's optimum is not this solve's
        for name, m in d["methods"].items():
            runs = [x for x in m.get("runs", []) if isinstance(x, dict) and x.get("regret_pct") is not None]
            if not runs:
                continue
            old, new, changed = [], [], []
            for x in runs:
                old.append(x["regret_pct"])
                r = hit.get(x["seed"])
                if r is None:
                    new.append(x["regret_pct"])
                    continue
                answer = r["solved"] * (1 - x["regret_pct"] / 100)
                new.append(100 * (1 - answer / r["resolved"]))
                changed.append(f"{x['seed']}: {x['regret_pct']:.2f} -> {new[-1]:.2f}")
            if not changed:
                continue
            where = path[len(root):].lstrip("/")
            means = f"mean {statistics.fmean(old):.2f} -> {statistics.fmean(new):.2f}"
            medians = f"median {statistics.median(old):.2f} -> {statistics.median(new):.2f}"
            print(f"{where} | {name} | {len(runs)} runs | {means} | {medians} | " + "; ".join(changed))
        skipped = [s for s, r in hit.items() if r is None]
        if skipped:
            where = path[len(root):].lstrip("/")
            print(f"{where} | members {skipped}: report's optimum differs from today's solve, not moved")


if __name__ == "__main__":
    main()
