"""Signed error of the model's pre-launch prediction, per launch (a diagnostic, not the product).

Usage: python signed_errors.py TREE BUDGET CASE:SEED... > out.jsonl   (TREE: the tree whose code runs)
Each line: one member's search (the model-guided sampler, no race: every launch is a search launch), and for
each measured launch the model predicted, the number of measured launches before it, the prediction, the
measurement and the truth. ``summary.py`` pools them.
"""

import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(sys.argv[1]).resolve()))

import autotune.study.guided as guided  # noqa: E402
import benchmarks.nights as nights  # noqa: E402
from benchmarks import family, family_tight  # noqa: E402
from benchmarks.problems import add_unmodelled, problem_of  # noqa: E402

DRAW = {"all": family.members, "tight": family_tight.tight_members, "wide-trees": family.wide_trees_members}


def main() -> None:
    print("MARKER", guided.__file__, file=sys.stderr)
    budget = int(sys.argv[2])
    for spec in sys.argv[3:]:
        case, seed = spec.split(":")
        member = DRAW[case](1, int(seed))[0]
        assert member.seed == int(seed), (case, seed, member.seed)
        space = family.space_naming_configs(member, Path(tempfile.mkdtemp()))
        problem = problem_of(member.profile, space, noise_rel=None)
        problem.launch_sd = member.profile.timing.launch_sd
        add_unmodelled(problem, member.seed)
        run = nights.run_study(problem, member.seed, budget, sampler="model", name="model", confirm=False)
        measured = [s for s in run.steps if s.launched and s.measured]
        launches = [
            {"before": k, "predicted": s.predicted, "measured": s.measured, "true": s.true}
            for k, s in enumerate(measured)
            if s.predicted is not None and s.true
        ]
        print(json.dumps({"case": case, "seed": member.seed, "launches": launches}), flush=True)


main()
