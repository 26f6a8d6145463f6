"""Round 9's dev check (not the product): where did a race's budget cut a round, and did the cut round
keep the verdict's comparison (the fit's leader and best baseline)? Read from the census's replays
(each finalist's relaunches by round, ``../race-census-2026-12-06/*.jsonl``), the standing after each
round recomputed with this tree's ``rounds.standing``.

Usage: python cut_rounds.py JSONL... (prints one line per cut round and a count per file)
"""

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from autotune.study.rounds import fit, standing  # noqa: E402

MARGIN = 0.02  # the twin space's measurement.target_rel_ci, as the census's races ran


def cuts(night: dict) -> list[str]:
    """Each round the budget cut: what it kept against what was open, and whether the pair was in it."""
    runs = {f["trial"]: {int(r): v for r, v in f["relaunches"].items()} for f in night["finalists"]}
    baselines = {f["trial"] for f in night["finalists"] if f["baseline"] is not None}
    rounds = sorted({r for by_round in runs.values() for r in by_round})
    found, spent = [], 0
    for index, launch_round in enumerate(rounds[1:], start=1):
        before = {c: {r: v for r, v in by_round.items() if r < launch_round} for c, by_round in runs.items()}
        spent = sum(len(v) for v in before.values())
        now = standing(before, margin=MARGIN, baselines=baselines)
        ran = [c for c, by_round in runs.items() if launch_round in by_round]
        if len(ran) >= len(now.racing):
            continue
        effects = fit({c: v for c, v in before.items() if v}).effects
        leader = max(effects, key=lambda c: effects[c])
        best = max((c for c in effects if c in baselines), key=lambda c: effects[c], default=None)
        pair_open = leader in now.racing and best in now.racing
        kept = leader in ran and best in ran
        found.append(
            f"{night['case']} {night['seed']} @{night['budget']} {night.get('sampler', '')}: round {index + 1} "
            f"(after {spent} of {night['race_budget']}) ran {ran} of open {now.racing}; leader {leader}, best "
            f"baseline {best}: pair open {pair_open}, pair kept {kept}"
        )
    return found


for path in sys.argv[1:]:
    nights = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    nights = [n for n in nights if "finalists" in n]
    lines = [line for n in nights for line in cuts(n)]
    missed = sum(1 for line in lines if "pair open True, pair kept False" in line)
    print(f"== {Path(path).name}: {len(nights)} races, {len(lines)} cut rounds, {missed} cut the open verdict pair")
    for line in lines:
        print(line)
