"""Print the census's replays (JSON lines from run_all.sh) as a table per night and one line each.

Usage: python render.py CENSUS.jsonl
"""

import json
import sys

for line in open(sys.argv[1]):
    n = json.loads(line)
    opt = n["optimum"]
    print(
        f"\n## {n['case']} {n['seed']} @{n['budget']} {n['sampler']}: regret {n['regret_pct']:.1f} % "
        f"(incumbent #{n['incumbent']} gap {n['incumbent_gap_pct']:.1f} %), search {n['search_launches']}, "
        f"race budget {n['race_budget']} spent {n['race_spent']}, rounds {n['rounds']}, fit sd "
        f"{100 * (n['fit_sd'] or 0):.1f} % on {n['fit_dof']} dof, settled {n['settled']}"
    )
    print(f"   verdict: {n['note']}")
    for f in n["finalists"]:
        tag = "B:" + f["baseline"] if f["baseline"] else "  "
        mark = ("*chosen " if f["trial"] == n["chosen"] else "") + ("leader " if f["trial"] == n["leader"] else "")
        mark += "incumbent" if f["trial"] == n["incumbent"] else ""
        rel = " ".join(f"{100 * (v / opt - 1):+.1f}" for v in f["relaunches"].values())
        eff = (
            f"{f['effect_vs_leader_pct']:+.1f} +-{f['half_pct']:.1f}"
            if f["effect_vs_leader_pct"] is not None and f["half_pct"] is not None
            else "-"
        )
        print(
            f"   #{f['trial']:>2} {tag:<11} true gap {f['true_gap_pct']:5.1f}  "
            f"first {100 * ((f['first'] or 0) / opt - 1):+6.1f}"
            f"  relaunches vs opt [{rel}]  vs leader {eff}  dropped_after {n['dropped'].get(str(f['trial']))}  {mark}"
        )
        print(f"        {f['flags']}")
