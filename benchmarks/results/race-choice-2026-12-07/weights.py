"""What the remedy's shrinkage did on one night: the model's error and the launch noise it weighed, and
the candidates' measured, predicted (calibrated), shrunk and true values, best shrunk first.

Usage: python weights.py REMEDY_TREE CASE SEED BUDGET   (the model row)
"""

import math
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(sys.argv[1]).resolve()))

import autotune.study.confirm as confirm  # noqa: E402
import benchmarks.nights as nights  # noqa: E402
from benchmarks import family, family_tight  # noqa: E402
from benchmarks.problems import add_unmodelled, problem_of, solve  # noqa: E402

DRAW = {"all": family.members, "tight": family_tight.tight_members, "wide-trees": family.wide_trees_members}


def main() -> None:
    print("MARKER", confirm.__file__)
    case, seed, budget = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    member = DRAW[case](1, seed)[0]
    problem = problem_of(member.profile, family.space_naming_configs(member, Path(tempfile.mkdtemp())), noise_rel=None)
    problem.launch_sd = member.profile.timing.launch_sd
    add_unmodelled(problem, member.seed)
    optimum = solve(problem).tok_s
    seen: list[Any] = []
    real = confirm.shrunk_means

    def watched(records: Any, objective: str) -> dict[int, float]:
        out = real(records, objective)
        if not any(r.confirm_of is not None for r in records):  # the choice before the race
            seen.append((list(records), out, confirm.measure_noise(records, objective).total))
        return out

    confirm.shrunk_means = watched  # type: ignore[assignment]
    run = nights.run_study(problem, seed, budget, sampler="model", name="model", confirm=True)
    records, shrunk, noise = seen[-1]
    predicted = [r for r in records if r.confirm_of is None and r.value and r.proposal.predicted and r.outcome == "ok"]
    errors = [math.log((r.value or 0.0) / r.proposal.predicted.tok_s) for r in predicted if r.proposal.predicted]
    bias, spread = statistics.fmean(errors), statistics.pstdev(errors)
    model = max(spread**2 - noise**2, 0.0)
    print(f"{case} {seed} night {budget}: {len(errors)} predicted launches, model error sd {spread:.3f} (bias "
          f"{bias:+.3f}), launch noise {noise:.3f}, weight on one launch {model / (model + noise**2):.2f}")
    by_number = {r.number: r for r in records}
    for number in sorted(shrunk, key=lambda n: -shrunk[n])[:8]:
        r, true = by_number[number], run.steps[number].true or 0.0
        rate = r.proposal.predicted.tok_s if r.proposal.predicted else None
        print(f"  trial {number:3} measured {r.value:8.1f} predicted {rate or 0:8.1f} shrunk {shrunk[number]:8.1f} "
              f"true gap {100 * (1 - true / optimum):5.1f}{' baseline' if r.baseline else ''}")


main()
