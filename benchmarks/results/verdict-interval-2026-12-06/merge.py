"""Round 10's merge (not the product): the verdicts runs were split into chunks of 10 members (one process
each, so the shared 2 cores gave them their share and a cut could keep whole members); this joins the
chunks of one run into the report ``verdicts.py`` writes for the whole run (landscapes in member order,
totals summed, the same groups and rates) and prints its table.

Usage: python merge.py FOLDER RUN TREE   (reads FOLDER/chunks/verdicts-RUN-TREE-*.json, writes
FOLDER/verdicts-RUN-TREE.json)
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks.verdicts import counts, groups, print_table, rates  # noqa: E402

folder, run, tree = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
chunks = [json.loads(p.read_text()) for p in sorted(folder.glob(f"chunks/verdicts-{run}-{tree}-*.json"))]
first = chunks[0]
for chunk in chunks:
    assert all(chunk[k] == first[k] for k in ("budget", "night", "launch_sd", "within", "targets", "drift"))
landscapes = sorted((lan for c in chunks for lan in c["landscapes"]), key=lambda lan: lan["name"])
total = {key: sum(lan[key] for lan in landscapes) for key in counts([])}
report = {
    **{k: v for k, v in first.items() if k not in ("landscapes", "groups", "totals", "wall_s")},
    "landscapes": landscapes,
    "groups": groups(landscapes),
    "totals": {**total, **rates(total)},
    "wall_s": max(c["wall_s"] for c in chunks),
    "chunks": len(chunks),
}
(folder / f"verdicts-{run}-{tree}.json").write_text(json.dumps(report, indent=1) + "\n")
print_table(report)
