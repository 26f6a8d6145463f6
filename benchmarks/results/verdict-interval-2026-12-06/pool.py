"""Round 10's verdicts tables (not the product): for each verdicts run in FOLDER (``PREFIX-SETTING-DRAW-TREE.json``)
its total row (false claims, false bests, a baseline recommended when it is optimal), then each tree's four runs
pooled, and the baseline-optimal studies per case kind (the member's kind from its summary note).

Usage: python pool.py FOLDER [PREFIX]   (PREFIX: ``verdicts`` by default; ``dev`` for the dev runs)
"""

import json
import re
import sys
from collections import Counter
from pathlib import Path

folder, prefix = Path(sys.argv[1]), sys.argv[2] if len(sys.argv) > 2 else "verdicts"
pooled: dict[str, Counter] = {}
kinds: dict[str, Counter] = {}
print("| run | tree | false claims | false bests | baseline recommended when optimal |")
print("|---|---|---|---|---|")
for path in sorted(folder.glob(f"{prefix}-*.json")):
    run, tree = path.stem.removeprefix(f"{prefix}-").rsplit("-", 1)
    report = json.loads(path.read_text())
    t = report["totals"]
    print(
        f"| {run} | {tree} | {t['false_claim_studies']}/{t['judged']} ({t['false_claim_rate']:.0%}) | "
        f"{t['false_bests']}/{t['judged']} ({t['false_best_rate']:.0%}) | {t['optimal_baseline_recommended']}/"
        f"{t['optimal_studies']} ({t['baseline_recommended_rate']:.0%}) |"
    )
    pooled.setdefault(tree, Counter()).update(
        {
            k: t[k]
            for k in ("judged", "false_claim_studies", "false_bests", "optimal_studies", "optimal_baseline_recommended")
        }
    )
    for lan in report["landscapes"]:
        kind = re.split(r"[:,]", lan["notes"][0])[0] if lan["notes"] else "base"
        kind = kind if kind in ("wide-trees", "flat-top", "huge", "tight") else "base"
        for r in lan["runs"]:
            if r["scenario"] == "baseline-optimal" and r["judged"] and r["optimum_baseline_is_optimum"]:
                kinds.setdefault(tree, Counter()).update({f"{kind} n": 1, f"{kind} kept": r["baseline_recommended"]})
print("\n| tree, runs pooled | false claims | false bests | baseline recommended when optimal |")
print("|---|---|---|---|")
for tree, c in pooled.items():
    print(
        f"| {tree} | {c['false_claim_studies']}/{c['judged']} ({c['false_claim_studies'] / c['judged']:.1%}) | "
        f"{c['false_bests']}/{c['judged']} ({c['false_bests'] / c['judged']:.1%}) | "
        f"{c['optimal_baseline_recommended']}/{c['optimal_studies']} "
        f"({c['optimal_baseline_recommended'] / c['optimal_studies']:.1%}) |"
    )
print("\nBaseline recommended when optimal, per case kind (all runs pooled):\n")
for tree, c in kinds.items():
    names = sorted({k.rsplit(" ", 1)[0] for k in c})
    print(f"- {tree}: " + ", ".join(f"{k} {c[k + ' kept']}/{c[k + ' n']}" for k in names))
