"""Which axes the by-class solver took as performance axes on one member, and what the night's answer's
neighbours are worth (read-only: repeats Landscape._optimum_by_class's probe with its own RNG seed).

python -m benchmarks.results.solver-miss-2026-12-07.diag_classes SEED [--case all|tight] [--flags JSON]
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
from benchmarks.problems import add_unmodelled, problem_of, solve
from benchmarks.stream import perf_key


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("seed", type=int)
    ap.add_argument("--case", default="all")
    ap.add_argument("--flags", default=None, help="a configuration to vary axis by axis")
    ap.add_argument("--verbose", action="store_true", help="print each probe that found a speculative axis flat")
    args = ap.parse_args()
    fam = (family.member if args.case == "all" else family_tight.tight_member)(args.seed)
    with tempfile.TemporaryDirectory() as d:
        space = family.space_naming_configs(fam, Path(d))
        problem = problem_of(fam.profile, space)
        add_unmodelled(problem, fam.seed)
        opt = solve(problem)
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

        rng = random.Random(20260501)  # the solver's own seed: the same probes
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
                elif args.verbose and axis.name.startswith("speculative"):
                    print(f"  probe: {axis.name} gave {len(keys)} distinct key(s) on", json.dumps(sample))
        print("optimum", round(opt.tok_s, 3), "exhaustive", opt.exhaustive, "classes", opt.classes)
        print("performance axes:", [a.name for a in axes if a.name in relevant])
        print("taken as memory-only:", [a.name for a in axes if a.name not in relevant])
        if args.flags:
            base = json.loads(args.flags)
            flags = problem.normalise(base)
            print("given", land.true_value(flags) if flags else None, json.dumps(flags))
            for axis in axes:
                if axis.name not in base:
                    continue
                row = []
                for value in axis.values:
                    f = problem.normalise({**base, axis.name: value})
                    v = land.true_value(f) if f is not None else None
                    row.append(f"{value}:{'-' if v is None else round(v, 1)}")
                print(f"  vary {axis.name}: {' '.join(row)}")


if __name__ == "__main__":
    main()
