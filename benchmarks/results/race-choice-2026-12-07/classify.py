"""Classify each replayed night's loss (regret beyond the search's truly best launch, more than 1 point).

Usage: python classify.py REPLAY.jsonl [REPORT.json ...]  (reports: the scoreboard's, to check the replay)
(a) nothing within 1 point of the search's true best was a finalist (ranked out by first measurements);
(b) one was, and the race picked another: how the race ended says which way;
none: the answer is within 1 point of the search's truly best launch.
"""

import json
import sys
from collections import Counter
from pathlib import Path


def ending(night: dict) -> str:
    by_trial = {f["trial"]: f for f in night["finalists"]}
    chosen, leader = by_trial[night["best"]], by_trial[night["leader"]]
    if night["best"] != night["leader"] and chosen["baseline"]:
        return "baseline kept (leader's gain not significant)"
    if night["best"] != night["leader"]:
        return "equivalent within margin, nearer defaults"
    return f"leader chosen ({'settled' if night['settled'] else 'open'}; leader true gap {leader['true_gap_pct']})"


def main() -> None:
    nights = [json.loads(line) for line in Path(sys.argv[1]).read_text().splitlines()]
    reported = {}
    for path in sys.argv[2:]:
        for rows in json.loads(Path(path).read_text())["methods"].values():
            reported.update({r["seed"]: round(r["regret_pct"], 2) for r in rows["runs"]})
    counts: Counter[str] = Counter()
    for n in nights:
        loss = n["regret_pct"] - n["search_best_gap_pct"]
        best_finalist = min(f["true_gap_pct"] for f in n["finalists"])
        cls = "none" if loss <= 1 else ("a" if best_finalist > n["search_best_gap_pct"] + 1 else "b")
        counts[cls] += 1
        check = "" if n["seed"] not in reported else ("=" if reported[n["seed"]] == n["regret_pct"] else "MISMATCH")
        print(f"{n['seed']} {n['case']:10} regret {n['regret_pct']:5.1f} final_gap {n['final_gap_pct']:5.1f} "
              f"search_best {n['search_best_gap_pct']:5.1f} best_rank {n['best_rank']}/{n['configs']} "
              f"best_finalist {best_finalist:5.1f} class {cls:4} {ending(n) if cls != 'none' else ''} {check}")
        if cls != "none" or n["regret_pct"] > n["final_gap_pct"] + 1:
            for f in n["finalists"]:
                print(f"      trial {f['trial']:3} {'B' if f['baseline'] else ' '} first {f['first']:7.1f} "
                      f"mean {f['mean']:7.1f} (n {f['n']}) true gap {f['true_gap_pct']:5.1f} "
                      f"dropped {f['dropped_after']} pred {f['predicted']}")
            print(f"      within 1 point of search best at ranks {n['within1_ranks']}; settled {n['settled']}; "
                  f"{n['note']}")
    print(dict(counts))


main()
