"""Lever 1's risk on the other kinds (the wide-trees census, issue 53; not the product): replay a member's
model night (as wide_replay.py does) and refit its final model on the night's launches with the fit's prior
(passmodel.calibrate.PRIOR_WEIGHT) on and off. Prints, each way, the verify cost a token (against the
member's own), the optimum's price, and the fit's best of 2,000 drawn candidates with its truth (at the
optimum's other flags) over the optimum.

Usage: python prior_off.py TREE SEED BUDGET
"""

import random
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(sys.argv[1]).resolve()))

import benchmarks.nights as nights  # noqa: E402
from autotune.space import suggest  # noqa: E402
from autotune.study import attrs, guided  # noqa: E402
from autotune.study.guided_reads import Draw, model_params  # noqa: E402
from benchmarks import family  # noqa: E402
from benchmarks.problems import add_unmodelled, problem_of, solve  # noqa: E402
from passmodel import calibrate  # noqa: E402

captured: dict[str, Any] = {}
original_run_night = nights.run_night


def watched_run_night(runner: Any, night: Any, **kwargs: Any) -> Any:
    result = original_run_night(runner, night, **kwargs)
    captured["records"], captured["study"] = runner.records(), runner.study
    return result


nights.run_night = watched_run_night  # type: ignore[assignment]


def main() -> None:
    print("MARKER", guided.__file__)
    seed, budget = int(sys.argv[2]), int(sys.argv[3])
    member = family.members(1, seed)[0]
    space = family.space_naming_configs(member, Path(tempfile.mkdtemp()))
    problem = problem_of(member.profile, space, noise_rel=None)
    problem.launch_sd = member.profile.timing.launch_sd
    add_unmodelled(problem, member.seed)
    optimum = solve(problem)
    run = nights.run_study(problem, seed, budget, sampler="model", name="prior", confirm=True)
    summary = run.summary(optimum.tok_s, problem.gpus)
    records = [r for r in captured["records"] if r.confirm_of is None]
    setup = attrs.pass_setup(captured["study"])
    profile = setup.profile() if setup is not None else None
    points = [p for r in records if (p := guided.point_of(r, space)) is not None]
    print(f"member {seed} ({member.case}): {member.summary}; regret {summary['regret_pct']:.1f} %")
    if profile is None or len(points) < 2:
        print("  no model fit (the night fell back to TPE)")
        return
    landscape, opt_flags = problem.landscape(0), {**space.fixed, **optimum.flags}
    rng = random.Random(seed)
    drawn = [{**opt_flags, **model_params(space, suggest(space, Draw(rng)).params)} for _ in range(2000)]
    for label, weight in (("prior on", calibrate.PRIOR_WEIGHT), ("prior off", 0.0)):
        calibrate.PRIOR_WEIGHT = weight
        fitted = guided._fit(profile, space, points)
        if fitted is None:
            print(f"  {label}: no fit")
            continue
        at_opt = guided._rate(fitted, space, opt_flags) or 0.0
        rate, best = max(((guided._rate(fitted, space, f) or 0.0, f) for f in drawn), key=lambda rf: rf[0])
        normal = problem.normalise(best)
        truth = (landscape.true_value(normal) or 0.0) if normal is not None else 0.0
        spec = {k.removeprefix("speculative-"): v for k, v in best.items()
                if k.startswith("speculative-") and "path" not in k}  # fmt: skip
        print(f"  {label:9} verify_token_ms {fitted.profile.overheads.verify_token_ms:.4f} (member "
              f"{member.profile.overheads.verify_token_ms:.4f}); fit error {fitted.error:.3f}; optimum priced "
              f"{at_opt / optimum.tok_s:.2f} of truth; the fit's best {spec} tp {best.get('tp-size')}: truly "
              f"{truth / optimum.tok_s:.3f} of the optimum")  # fmt: skip


main()
