"""The verdicts table of a round's results README, from ``benchmarks/verdicts.py`` JSON reports:

    .venv/bin/python -m benchmarks.verdict_tables NAME=FILE[,FILE...] [NAME=FILE[,FILE...] ...]

One row per NAME: a run split over several processes gives several files, whose counts are summed.
Each row: the studies judged, false claims (studies with a claim the truth contradicts), false bests, a
baseline recommended where a baseline is optimal, and per scenario the search's and the race's launches
(median and total over the studies). Rounds 8-15 copied this into their folders as ``vsum.py``.
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

SCENARIOS = ("shipped", "baseline-optimal")
COUNTS = ("studies", "judged", "false_claim_studies", "false_bests", "optimal_baseline_recommended", "optimal_studies")
HEADER = (
    "| run | studies judged | false claims | false bests | baseline recommended when optimal | "
    "search launches, shipped / baseline-optimal: median (total) | race launches, the same |\n"
    "|---|---|---|---|---|---|---|"
)


class Run(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    files: tuple[Path, ...]


def parse_run(text: str) -> Run:
    name, _, files = text.partition("=")
    if not name or not files or "" in files.split(","):
        raise argparse.ArgumentTypeError(f"run {text!r}: expected NAME=FILE[,FILE...]")
    return Run(name=name, files=tuple(Path(f) for f in files.split(",")))


def _share(part: int, whole: int) -> str:
    return f"{part}/{whole} ({100 * part / whole:.0f} %)" if whole else f"{part}/0"


def _launches(runs: Sequence[dict[str, Any]], key: str) -> str:
    cells = []
    for scenario in SCENARIOS:
        values = [r[key] for r in runs if r["scenario"] == scenario]
        cells.append(f"{statistics.median(values):g} ({sum(values)})" if values else "-")
    return " / ".join(cells)


def row(name: str, reports: Sequence[dict[str, Any]]) -> str:
    totals = {key: sum(report["totals"][key] for report in reports) for key in COUNTS}
    runs = [run for report in reports for landscape in report["landscapes"] for run in landscape["runs"]]
    return (
        f"| {name} | {totals['judged']}/{totals['studies']} | "
        f"{_share(totals['false_claim_studies'], totals['judged'])} | "
        f"{_share(totals['false_bests'], totals['judged'])} | "
        f"{_share(totals['optimal_baseline_recommended'], totals['optimal_studies'])} | "
        f"{_launches(runs, 'launches')} | {_launches(runs, 'confirm_launches')} |"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("runs", type=parse_run, nargs="+", metavar="NAME=FILE[,FILE...]")
    args = parser.parse_args(argv)
    print(HEADER)
    for run in args.runs:
        missing = [str(f) for f in run.files if not f.is_file()]
        if missing:
            parser.error(f"run {run.name}: no such report: {', '.join(missing)}")
        print(row(run.name, [json.loads(f.read_text()) for f in run.files]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
