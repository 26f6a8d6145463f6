"""The diagnosis's second way in (mtp+dflash members 1182, 1228, 1342, num-draft-tokens never varied): each
one's solved optimum and class count with the benchmark code on the path (run with PYTHONPATH=the tree).

PYTHONPATH=TREE python benchmarks/results/solver-miss-2026-12-07/fix_mtp_dflash.py
"""

import json
import tempfile
import time
from pathlib import Path

from benchmarks import family, landscape
from benchmarks.problems import problem_of, solve

print("MARKER benchmark code loaded from", landscape.__file__)
for seed in (1182, 1228, 1342):
    fam = family.member(seed)
    with tempfile.TemporaryDirectory() as d:
        problem = problem_of(fam.profile, family.space_naming_configs(fam, Path(d)))
        start = time.perf_counter()
        opt = solve(problem)
        spec = {k: v for k, v in opt.flags.items() if k.startswith("spec")}
        row = {"seed": seed, "drafting": fam.drafting, "tok_s": round(opt.tok_s, 4), "classes": opt.classes,
               "seconds": round(time.perf_counter() - start, 1), "flags": spec}  # fmt: skip
        print(json.dumps(row), flush=True)
