"""This folder's tables (not the product): per night and row, regret median / p90 / mean over the members, the
race's launches, the challengers' tree against main's paired over members, the model row against TPE's, and
the mean per case kind. Reads ``{main,ch}-{model,tpe}-{20,60}.jsonl`` (``../race-choice-2026-12-07/replay.py``).

Usage: .venv/bin/python benchmarks/results/race-challengers-2026-12-07/tables.py FOLDER
"""

import json
import statistics
import sys
from pathlib import Path

from benchmarks import family
from benchmarks.judge import TPE_NIGHT, paired_regret, quantile
from benchmarks.round_tables import case_of

TREES = {"main": "main b65c652", "ch": "challengers 263a943"}


def load(path: Path) -> list[dict]:
    return sorted((json.loads(line) for line in path.read_text().splitlines()), key=lambda n: n["seed"])


def kinds(nights: list[dict]) -> dict[int, str]:
    out = {}
    for n in nights:
        if n["case"] == "tight":
            out[n["seed"]] = "tight"
        else:
            draw = family.members if n["case"] == "all" else family.wide_trees_members
            out[n["seed"]] = case_of(draw(1, n["seed"])[0].summary, False)
    return out


def paired(theirs: list[dict], mine: list[dict]) -> str:
    assert [n["seed"] for n in theirs] == [n["seed"] for n in mine]
    p = paired_regret({TPE_NIGHT: mine, "x": theirs})["x"]
    mean = statistics.fmean(a["regret_pct"] - b["regret_pct"] for a, b in zip(theirs, mine, strict=True))
    cells = [
        f"{p[q]['difference']:+.2f} ({p[q]['interval'][0]:+.2f} to {p[q]['interval'][1]:+.2f})"
        for q in ("median", "p90")
    ]
    return f"{cells[0]} | {cells[1]} | {mean:+.2f}"


def main() -> None:
    folder = Path(sys.argv[1])
    for budget in (20, 60):
        rows = {(t, s): load(folder / f"{t}-{s}-{budget}.jsonl") for t in TREES for s in ("model", "tpe")}
        kind = kinds(rows["main", "model"])
        print(f"\n## Night of {budget} launches, {len(kind)} members\n")
        print(
            "| tree | row | regret % median / p90 / mean | race launches used, median (total) | "
            "configurations raced (total) | nights that kept a baseline |"
        )
        print("|---|---|---|---|---|---|")
        for (t, s), nights in rows.items():
            r = [n["regret_pct"] for n in nights]
            used = [sum(f["n"] for f in n["finalists"]) for n in nights]
            raced = sum(len(n["finalists"]) for n in nights)
            kept = sum(1 for n in nights if n["note"].startswith("keep baseline"))
            print(f"| {TREES[t]} | {s} | {quantile(r, 0.5):.1f} / {quantile(r, 0.9):.1f} / {statistics.fmean(r):.2f} | "
                  f"{statistics.median(used):g} ({sum(used)}) | {raced} | {kept} |")
        print("\nChallengers against main, paired over members (difference; 95 % interval; negative: better):\n")
        print("| row | median | p90 | mean |")
        print("|---|---|---|---|")
        for s in ("model", "tpe"):
            print(f"| {s} | {paired(rows['ch', s], rows['main', s])} |")
        print("\nThe model row against TPE's, paired over members, each tree (negative: the model row better):\n")
        print("| tree | median | p90 | mean |")
        print("|---|---|---|---|")
        for t in TREES:
            print(f"| {TREES[t]} | {paired(rows[t, 'model'], rows[t, 'tpe'])} |")
        names = [k for k in ("base", "wide-trees", "flat-top", "huge", "tight") if k in kind.values()]
        print("\nMean regret % per case kind:\n")
        print("| tree | row | " + " | ".join(f"{k} ({list(kind.values()).count(k)})" for k in names) + " |")
        print("|---|---|" + "---|" * len(names))
        for (t, s), nights in rows.items():
            cells = [statistics.fmean(n["regret_pct"] for n in nights if kind[n["seed"]] == k) for k in names]
            print(f"| {TREES[t]} | {s} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
        print("\nPer member, regret % (main -> challengers):\n")
        print("| member | kind | model | TPE |")
        print("|---|---|---|---|")
        for i, n in enumerate(rows["main", "model"]):
            cells = []
            for s in ("model", "tpe"):
                a, b = rows["main", s][i]["regret_pct"], rows["ch", s][i]["regret_pct"]
                cells.append(f"{a:.1f}" if abs(a - b) < 0.05 else f"{a:.1f} -> **{b:.1f}**")
            print(f"| {n['seed']} | {kind[n['seed']]} | {cells[0]} | {cells[1]} |")


main()
