"""Each member's optimum as the benchmark solves it, against a re-solve whose performance classes span every
axis except those that only size memory (read-only; for the diagnosis, not a fix).

python -m benchmarks.results.solver-miss-2026-12-07.resolve [--case all|tight] [--unmodelled] SEED...
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from autotune_twin.launch import LaunchError, resolve_launch
from benchmarks import family, family_tight
from benchmarks.axes import grid
from benchmarks.landscape import _ArgError
from benchmarks.problems import add_unmodelled, problem_of, solve
from benchmarks.stream import perf_key

# The family's axes that only size memory (stream.py's _MEMORY_ONLY_FIELDS, by flag); every other axis,
# the draft path included, makes a class. The key check below catches any that is not.
MEMORY_AXES = {"mem-fraction-static", "max-running-requests", "cuda-graph-max-bs-decode", "chunked-prefill-size",
               "mamba-full-memory-ratio"}  # fmt: skip


def resolved(problem) -> tuple[float, dict]:
    land = problem.landscape(0)
    fixed = dict(problem.space.fixed)
    perf = [a for a in problem.axes if a.name not in MEMORY_AXES]
    mem = [a for a in problem.axes if a.name in MEMORY_AXES]

    def key_cfg(c):
        flags = problem.normalise(c)
        if flags is None:
            return None, None, None
        try:
            cfg = resolve_launch(land._namespace(flags), land.profile)
        except (_ArgError, LaunchError):
            return None, None, None
        return repr(perf_key(cfg)), cfg, flags

    classes = []
    for combo in grid(perf, fixed):
        for member in grid(mem, combo):
            key, cfg, _ = key_cfg(member)
            if key is not None:
                classes.append((land._performance(cfg)[0], key, combo))
                break
    classes.sort(key=lambda c: -c[0])
    for tok_s, key, combo in classes:
        for member in grid(mem, combo):
            k, _, flags = key_cfg(member)
            if flags is None or land._compute(flags).outcome != "ok":
                continue
            assert k == key, "a memory axis changed the rate"
            return tok_s, flags
    raise ValueError("nothing starts")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("seeds", type=int, nargs="+")
    ap.add_argument("--case", default="all")
    ap.add_argument("--unmodelled", action="store_true")
    args = ap.parse_args()
    for seed in args.seeds:
        fam = (family.member if args.case == "all" else family_tight.tight_member)(seed)
        with tempfile.TemporaryDirectory() as d:
            problem = problem_of(fam.profile, family.space_naming_configs(fam, Path(d)))
            if args.unmodelled:
                add_unmodelled(problem, fam.seed)
            opt = solve(problem)
            tok_s, flags = resolved(problem)
            print(json.dumps({"seed": seed, "case": fam.case, "drafting": fam.drafting, "solved": round(opt.tok_s, 4),
                              "resolved": round(tok_s, 4), "understated_pct": round(100 * (tok_s / opt.tok_s - 1), 2),
                              "solved_alg": opt.flags.get("speculative-algorithm"),
                              "resolved_flags": {k: v for k, v in flags.items() if k.startswith("spec")}}), flush=True)


if __name__ == "__main__":
    main()
