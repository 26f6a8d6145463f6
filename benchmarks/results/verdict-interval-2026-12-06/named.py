"""Round 10's note on the sentence (not the product, nothing judged by it): in the verdicts runs of both trees,
the studies (both scenarios) that the branch point decided by the removed path ("a gap inside the margin:
equivalent"), and on the branch the launches of each its sentence names to settle the same race.

Usage: python named.py NEW.json BP.json
"""

import json
import re
import statistics
import sys


def runs(path: str) -> dict[tuple[str, str, int], dict]:
    report = json.loads(open(path).read())
    return {(lan["name"], run["scenario"], run["seed"]): run for lan in report["landscapes"] for run in lan["runs"]}


new, bp = runs(sys.argv[1]), runs(sys.argv[2])
path = [k for k, run in bp.items() if "inside the" in (run["note"] or "")]
named = [int(m.group(1)) for k in path if (m := re.search(r"about (\d+) launches", new[k]["note"] or ""))]
changed = sum(new[k]["best"] != bp[k]["best"] for k in path)
print(
    f"{len(bp)} studies; the branch point decided {len(path)} by the removed path; the branch recommends "
    f"another configuration on {changed} of them; its sentence names launches to settle on {len(named)}"
)
if named:
    print(
        f"launches of each named: median {statistics.median(named):g}, min {min(named)}, max {max(named)}, "
        f"above 50 on {sum(n > 50 for n in named)}"
    )
