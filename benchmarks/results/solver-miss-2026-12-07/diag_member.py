"""Diagnose one family member's solved optimum against a night's answer (read-only: calls the benchmark code).

python diag_member.py SEED [--case all|tight] [--budget 20] [--night]
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path

from benchmarks import family, family_tight
from benchmarks.methods import methods
from benchmarks.problems import add_unmodelled, problem_of, solve


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("seed", type=int)
    ap.add_argument("--case", default="all")
    ap.add_argument("--budget", type=int, default=20)
    ap.add_argument("--night", action="store_true")
    args = ap.parse_args()
    fam = (family.member if args.case == "all" else family_tight.tight_member)(args.seed)
    with tempfile.TemporaryDirectory() as d:
        space = family.space_naming_configs(fam, Path(d))
        problem = problem_of(fam.profile, space)
        problem.launch_sd = fam.profile.timing.launch_sd
        add_unmodelled(problem, fam.seed)
        print("member", fam.seed, fam.summary)
        shown = [(a.name, a.values if len(a.values) < 8 else f"{len(a.values)} values", a.when) for a in problem.axes]
        print("axes", shown)
        print("fixed", problem.space.fixed)
        opt = solve(problem)
        print("optimum", round(opt.tok_s, 3), "exhaustive", opt.exhaustive, "classes", opt.classes)
        print("  flags", json.dumps(opt.flags))
        for v, f in opt.top:
            print("  top", round(v, 3), json.dumps(f))
        if args.night:
            method = methods(["autotune-model"], per_tier=8)[0]
            run = method.run(problem, fam.seed, args.budget)
            summary = run.summary(opt.tok_s, problem.gpus)
            print("night regret", summary["regret_pct"], "answer true", summary["final_true_tok_s"], run.confirmed_true)
            seen = set()
            for i, s in enumerate(run.steps):
                if not s.launched or s.flags is None:
                    continue
                k = json.dumps(s.flags, sort_keys=True)
                if k in seen:
                    continue
                seen.add(k)
                print(f"  step {i} true={s.true} measured={s.measured} {k}")


if __name__ == "__main__":
    main()
