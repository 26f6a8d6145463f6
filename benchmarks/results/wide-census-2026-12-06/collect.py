"""Every spent wide-trees member in the model-sampler and race reports: each method's regret per budget."""

import json
import sys
from collections import defaultdict
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results")
rows: dict[tuple[int, str], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
for path in sorted(root.glob("model-sampler-2026-12-*/**/*.json")) + sorted(root.glob("race-*-2026-12-06/**/*.json")):
    try:
        report = json.loads(path.read_text())
    except ValueError:
        continue
    if not isinstance(report, dict) or "members" not in report:
        continue
    wide = {m["seed"]: m for m in report["members"] if m.get("summary", "").startswith("wide-trees")}
    for method, body in report.get("methods", {}).items():
        for run in body.get("runs", []):
            if run.get("seed") in wide:
                where = f"{path.parent.name}/{path.name}"
                rows[(run["seed"], wide[run["seed"]]["summary"])][f"{report['budget']} {method.split(' ')[0]}"].append(
                    f"{run['regret_pct']:.1f} (gap {100 * run['final_gap']:.1f}) [{where}]"
                )
for (seed, summary), methods in sorted(rows.items()):
    print(seed, summary)
    for method, values in sorted(methods.items()):
        for v in values:
            print(f"    {method:28s} {v}")
