"""Round 10's diagnosis, a copy of round 9's (not the product, nothing judged by it): in the verdicts
runs of both trees, the baseline-optimal studies whose recommendation differs, with what each tree's
race did: launches per finalist (served), the note's reason. Usage: python diagnose.py NEW.json BP.json
"""

import json
import sys


def runs(path: str) -> dict[tuple[str, int], dict]:
    report = json.loads(open(path).read())
    return {
        (lan["name"], run["seed"]): run
        for lan in report["landscapes"]
        for run in lan["runs"]
        if run["scenario"] == "baseline-optimal" and run["judged"] and run["optimum_baseline_is_optimum"]
    }


def shape(run: dict) -> str:
    return " ".join(f"{f['label'].replace('baseline ', 'b:')}={len(f['values'])}" for f in run["finalists"])


def reason(run: dict) -> str:
    note = run["note"]
    return "equivalent (open, gap inside the margin)" if "inside the" in note else note.split(":")[0][:60]


new, bp = runs(sys.argv[1]), runs(sys.argv[2])
changed = [k for k in new if new[k]["baseline_recommended"] != bp[k]["baseline_recommended"]]
print(f"{len(new)} judged baseline-optimal studies; recommendation differs on {len(changed)}")
for key in changed:
    for tree, run in (("new", new[key]), ("bp", bp[key])):
        print(
            f"{key[0]} seed {key[1]} {tree}: baseline {run['baseline_recommended']}, launches {shape(run)}; "
            f"{reason(run)}"
        )
for tree, table in (("new", new), ("bp", bp)):
    missed = [r for r in table.values() if not r["baseline_recommended"]]
    within = sum("inside the" in r["note"] for r in missed)
    print(
        f"{tree}: baseline not recommended on {len(missed)}, of them by 'equivalent, gap inside the margin': {within}"
    )
same = [
    k
    for k in changed
    if sorted((f["trial"], len(f["values"])) for f in new[k]["finalists"])
    == sorted((f["trial"], len(f["values"])) for f in bp[k]["finalists"])
]
to_new = sum(1 for k in same if not new[k]["baseline_recommended"])
print(
    f"of the {len(changed)} that differ, {len(same)} relaunched every finalist as often in both trees (the races "
    f"alike: only the verdict differs); of those, the baseline lost on the branch in {to_new}, "
    f"at the branch point in {len(same) - to_new}"
)
