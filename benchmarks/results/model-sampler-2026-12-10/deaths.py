"""Memory deaths per row on the tight members (the rule's third condition), from this folder's reports:
python deaths.py (not the product)."""

import json
from pathlib import Path

HERE = Path(__file__).parent
for budget in (20, 60):
    for path in sorted(HERE.glob(f"tight-{budget}-*.json")):
        runs = next(iter(json.loads(path.read_text())["methods"].values()))["runs"]
        deaths = [r["memory_deaths"] for r in sorted(runs, key=lambda r: r["seed"])]
        launches = sum(r["launches"] for r in runs)
        print(f"{path.stem:40s} memory deaths {sum(deaths):3d} of {launches} launches  per member {deaths}")
