"""Round 15's per-study comparison of the two trees' verdicts runs (not the product): per landscape and
scenario, the studies whose finalists differ, whose answer is truly better or worse, that are newly judged,
and the false claims, false bests and race launches of each tree.

Usage: python vdiff.py FOLDER  (reads FOLDER/verdicts-*-new*.json and FOLDER/verdicts-*-bp*.json)
"""

import collections
import json
import sys
from pathlib import Path

folder = Path(sys.argv[1])


def load(tree: str) -> dict:
    out = {}
    for path in sorted(folder.glob(f"verdicts-*-{tree}*.json")):
        for land in json.loads(path.read_text())["landscapes"]:
            name = "family" if land["name"].startswith("family") else land["name"]
            for run in land["runs"]:
                out[(name, land["name"], run["scenario"], run["seed"])] = run
    return out


new, bp = load("new"), load("bp")
rows: dict = collections.OrderedDict()
for key in sorted(new):
    x, y = new[key], bp[key]
    r = rows.setdefault((key[0], key[2]), collections.Counter())
    r["studies"] += 1
    r["finalists differ"] += [f["trial"] for f in x["finalists"]] != [f["trial"] for f in y["finalists"]]
    truth, was = x["best_true"] or 0, y["best_true"] or 0
    r["better"] += truth > was + 1e-9
    r["worse"] += truth < was - 1e-9
    r["newly judged"] += x["judged"] and not y["judged"]
    r["fc"] += x["false_claims"]
    r["fc_bp"] += y["false_claims"]
    r["fb"] += x["false_best"] and x["judged"]
    r["fb_bp"] += y["false_best"] and y["judged"]
    r["race"] += x["confirm_launches"]
    r["race_bp"] += y["confirm_launches"]
print("| landscape | scenario | studies | finalists differ | answer truly better / worse | newly judged | "
      "false claims branch / bp | false bests branch / bp | race launches branch / bp |")
print("|---|---|---|---|---|---|---|---|---|")
for (land, scenario), r in rows.items():
    print(f"| {land} | {scenario} | {r['studies']} | {r['finalists differ']} | {r['better']} / {r['worse']} | "
          f"{r['newly judged']} | {r['fc']} / {r['fc_bp']} | {r['fb']} / {r['fb_bp']} | {r['race']} / {r['race_bp']} |")
