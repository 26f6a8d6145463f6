"""For many members: the axes the by-class solver's probe (Landscape._optimum_by_class, same RNG seed) takes
as memory-only although they are not (outside resolve.MEMORY_AXES), without solving. Read-only.

python -m benchmarks.results.solver-miss-2026-12-07.probe_scan [--case all|tight] SEED...
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
from pathlib import Path

from autotune_twin.launch import LaunchError, resolve_launch
from benchmarks import family, family_tight
from benchmarks.axes import random_candidate
from benchmarks.landscape import _ArgError
from benchmarks.problems import problem_of
from benchmarks.stream import perf_key

from .resolve import MEMORY_AXES


def misread(problem) -> list[str]:
    land = problem.landscape(0)
    axes, fixed = problem.axes, dict(problem.space.fixed)

    def key_of(c):
        flags = problem.normalise(c)
        if flags is None:
            return None
        try:
            return repr(perf_key(resolve_launch(land._namespace(flags), land.profile)))
        except (_ArgError, LaunchError):
            return None

    rng = random.Random(20260501)
    relevant: set[str] = set()
    for _ in range(24):
        sample = random_candidate(axes, fixed, rng)
        for axis in axes:
            if axis.name in relevant or axis.name not in sample:
                continue
            keys = set()
            for value in axis.values:
                variant = {**sample, axis.name: value}
                if set(random_candidate(axes, fixed, rng, keep=variant)) != set(sample):
                    relevant.add(axis.name)
                    break
                k = key_of({a: v for a, v in variant.items() if v is not False})
                if k is not None:
                    keys.add(k)
            if len(keys) > 1:
                relevant.add(axis.name)
    return [a.name for a in axes if a.name not in relevant and a.name not in MEMORY_AXES]


DRAW = {"all": family.member, "wide-trees": family.member, "tight": family_tight.tight_member,
        "tight-context": family_tight.tight_context_member}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("seeds", type=int, nargs="+")
    ap.add_argument("--case", default="all")
    args = ap.parse_args()
    for seed in args.seeds:
        fam = DRAW[args.case](seed)
        with tempfile.TemporaryDirectory() as d:
            problem = problem_of(fam.profile, family.space_naming_configs(fam, Path(d)))
            print(json.dumps({"seed": seed, "case": fam.case, "drafting": fam.drafting, "summary": fam.summary,
                              "misread": misread(problem)}), flush=True)


if __name__ == "__main__":
    main()
