"""Round 12's held-out wide-trees selection (not the product; round 14 adds LAST, so that seed ranges are drawn
side by side and read in seed order): the first COUNT wide-trees members at seeds from FIRST on (to LAST at most)
whose landscape's own optimum (``--unmodelled`` truth, exhaustive as search_efficiency solves it) is a
tree (topk above 1); chosen by the landscape only, never by a method's result. Prints each drawn wide-trees
member's seed and optimum, and last the chosen seeds.

Usage: python tree_optima.py FIRST COUNT [LAST]
"""

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from benchmarks import family  # noqa: E402
from benchmarks.problems import add_unmodelled, problem_of, solve  # noqa: E402

first, count = int(sys.argv[1]), int(sys.argv[2])
last = int(sys.argv[3]) if len(sys.argv) > 3 else None
chosen: list[int] = []
seed = first
with tempfile.TemporaryDirectory() as configs:
    while len(chosen) < count and (last is None or seed <= last):
        fam = family.member(seed)
        if fam.case == "wide-trees":
            space = family.space_naming_configs(fam, Path(configs) / str(seed))
            problem = problem_of(fam.profile, space)
            add_unmodelled(problem, fam.seed)
            flags = solve(problem).flags
            topk = flags.get("speculative-eagle-topk") or 1
            tree = bool(flags.get("speculative-algorithm")) and flags.get("speculative-algorithm") != "DFLASH"
            tree = tree and int(topk) > 1
            print(seed, "tree" if tree else "not a tree", {k: v for k, v in flags.items() if "spec" in k}, flush=True)
            if tree:
                chosen.append(seed)
        seed += 1
print("chosen", " ".join(map(str, chosen)))
