"""Round 14's dev table (not the product): per spent member, regret % of round 12's rows (its change, (a) on a
60-launch night; its branch point) and of the dev candidates B1 and B2 here; deaths; the next-launch prediction
error after 3/5/10 launches."""

import json
import statistics
from pathlib import Path

HERE = Path(__file__).resolve().parent
R12 = HERE.parents[1] / "verify-sibling-2026-12-06"
ROUND_12 = [("r12", R12, "autotune-model"), ("bp", R12, "branch-point-model")]


def runs(folder: Path, budget: int, row: str) -> dict:
    out = {}
    for p in folder.glob(f"*-{budget}-{row}-*.json"):
        for m in json.loads(p.read_text())["methods"].values():
            for x in m["runs"]:
                out[x["seed"]] = x
    return out


def errors(run: dict) -> tuple:
    return tuple(round(v, 2) if v is not None else None for v in run.get("predicted_error_after", {}).values())


for budget, rows in (
    (60, [*ROUND_12, ("B1", HERE, "room-b1")]),
    (20, [*ROUND_12, ("B1", HERE, "room-b1"), ("B2", HERE, "room-b2")]),
):
    got = [(n, runs(f, budget, r)) for n, f, r in rows]
    seeds = sorted(set().union(*[set(g) for _, g in got[2:]]))
    print(f"\n== {budget} launches")
    print("seed   " + "  ".join(f"{n:>8}" for n, _ in got))
    for s in seeds:
        cells = "  ".join(f"{g[s]['regret_pct']:8.1f}" if s in g else "       -" for _, g in got)
        deaths = [g[s]["memory_deaths"] if s in g else None for _, g in got]
        print(s, cells, " deaths", deaths, " err3/5/10", [errors(g[s]) if s in g else None for _, g in got[1:]])
    for n, g in got[2:]:
        for part, sel in (("wide", [s for s in g if s < 51900]), ("fam+tight", [s for s in g if s >= 51900])):
            if sel:
                shown = [*got[:2], (n, g)]
                means = "  ".join(f"{m}={statistics.fmean(h[s]['regret_pct'] for s in sel):.2f}" for m, h in shown)
                medians = "  ".join(f"{m}={statistics.median(h[s]['regret_pct'] for s in sel):.2f}" for m, h in shown)
                print(f"{n} {part} ({len(sel)}): mean {means}  median {medians}")
