"""The held-out runner of a model-sampler round: every row of every slice its own ``nice -n 10`` process,
side by side, each running ``search_efficiency`` from an archive of the commit its row names.

    .venv/bin/python -m benchmarks.heldout FOLDER --tree new=HEAD --tree bp=COMMIT \\
        --row autotune-model=new:autotune-model --row branch-point-model=bp:autotune-model \\
        --slice all:50000:12:20 --slice tight:50100:6:60 [--work DIR] [--dry-run]

A tree is ``git archive COMMIT`` unpacked in ``WORK/NAME``; a row is ``NAME=TREE:METHOD``; a slice is
``CASE:FIRST_SEED:COUNT:BUDGET`` (CASE ``all``, ``tight`` or ``wide-trees``: the first COUNT wide-trees
members at seeds from FIRST_SEED on), always ``--unmodelled``. Each process
writes ``FOLDER/CASE-BUDGET-ROW-FIRST_SEED.json`` (the names ``benchmarks/round_tables.py`` reads) and its
console beside it, which starts with the ``MARKER loaded`` lines of the files its tree's code came from
(``benchmarks/in_tree.py``): the process stops unless each lies in that tree. ``trees.txt`` in FOLDER
records each tree's commit.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

# Runs each process on its tree's code only, and proves it (MARKER lines).
IN_TREE = Path(__file__).with_name("in_tree.py")


class Row(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    name: str
    tree: str
    method: str


class Slice(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    case: str
    first_seed: int
    count: int
    budget: int


class Job(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    tree: str
    args: list[str]
    console: Path


def _split(text: str, sep: str, parts: int, what: str, form: str) -> list[str]:
    fields = text.split(sep, parts - 1)
    if len(fields) != parts or not all(fields):
        raise argparse.ArgumentTypeError(f"{what} {text!r}: expected {form}")
    return fields


def parse_tree(text: str) -> tuple[str, str]:
    name, commit = _split(text, "=", 2, "tree", "NAME=COMMIT")
    return name, commit


def parse_row(text: str) -> Row:
    name, _, rest = text.partition("=")
    tree, _, method = rest.partition(":")
    if not (name and tree and method):
        raise argparse.ArgumentTypeError(f"row {text!r}: expected NAME=TREE:METHOD")
    return Row(name=name, tree=tree, method=method)


def parse_slice(text: str) -> Slice:
    form = "CASE:FIRST_SEED:COUNT:BUDGET with CASE all, tight or wide-trees and whole numbers"
    case, *numbers = _split(text, ":", 4, "slice", form)
    if case not in ("all", "tight", "wide-trees") or not all(n.isdigit() for n in numbers):
        raise argparse.ArgumentTypeError(f"slice {text!r}: expected {form}")
    first, count, budget = (int(n) for n in numbers)
    return Slice(case=case, first_seed=first, count=count, budget=budget)


def jobs(folder: Path, rows: list[Row], slices: list[Slice]) -> list[Job]:
    out = []
    for piece in slices:
        for row in rows:
            stem = f"{piece.case}-{piece.budget}-{row.name}-{piece.first_seed}"
            args = ["--family", str(piece.count), "--family-seed", str(piece.first_seed), "--family-case",
                    piece.case, "--budget", str(piece.budget), "--methods", row.method, "--unmodelled",
                    "--json", str(folder / f"{stem}.json")]  # fmt: skip
            out.append(Job(tree=row.tree, args=args, console=folder / f"{stem}.txt"))
    return out


def unpack(commit: str, into: Path) -> str:
    """Unpacks ``git archive COMMIT`` into an emptied ``into``; returns the full commit."""
    full = subprocess.run(["git", "rev-parse", "--verify", f"{commit}^{{commit}}"], check=True, capture_output=True,
                          text=True).stdout.strip()  # fmt: skip
    shutil.rmtree(into, ignore_errors=True)
    into.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", full], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)
    return full


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="the results folder the reports and consoles go to")
    parser.add_argument("--tree", type=parse_tree, action="append", required=True, metavar="NAME=COMMIT")
    parser.add_argument("--row", type=parse_row, action="append", required=True, metavar="NAME=TREE:METHOD")
    parser.add_argument("--slice", type=parse_slice, action="append", required=True,
                        metavar="CASE:FIRST_SEED:COUNT:BUDGET")  # fmt: skip
    parser.add_argument("--work", type=Path, default=Path("/tmp/heldout"), help="where the archives are unpacked")
    parser.add_argument("--dry-run", action="store_true", help="print the processes, unpack and run nothing")
    args = parser.parse_args(argv)
    trees = dict(args.tree)
    unknown = sorted({row.tree for row in args.row} - trees.keys())
    if unknown:
        parser.error(f"--row names a tree no --tree gives: {', '.join(unknown)}")
    planned = jobs(args.folder.resolve(), args.row, args.slice)
    if args.dry_run:
        for job in planned:
            print(job.tree, " ".join(job.args))
        return 0
    args.folder.mkdir(parents=True, exist_ok=True)
    with (args.folder / "trees.txt").open("a") as log:
        for name, commit in trees.items():
            full = unpack(commit, args.work / name)
            log.write(f"{name}: {commit} = {full}, unpacked in {args.work / name}, {datetime.now(UTC):%H:%M} UTC\n")
    running = []
    for job in planned:
        with job.console.open("w") as console:
            command = ["nice", "-n", "10", sys.executable, str(IN_TREE), ".", "search_efficiency", *job.args]
            process = subprocess.Popen(command, cwd=args.work / job.tree, stdout=console, stderr=subprocess.STDOUT)
            running.append(process)
    failed = [job.console.name for job, process in zip(planned, running, strict=True) if process.wait() != 0]
    for name in failed:
        print(f"failed: {name}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
