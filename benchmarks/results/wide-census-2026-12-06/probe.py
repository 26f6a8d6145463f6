"""What one more launch would have told the fit (the wide-trees census, issue 53; not the product).

Replays a member's model night as wide_replay.py does, then refits the model to the night's search
launches plus one launch it never made, measured at its truth (no noise): the incumbent's width and
depth at about half its draft tokens (a part-filled sibling of the best tree). Prints the optimum's
price and the fit's own best shape, before and after, each also with the fit's prior on its constants
off (passmodel.calibrate.PRIOR_WEIGHT = 0), which holds a constant near the setup's value.

Usage: python probe.py TREE SEED BUDGET
"""

import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(sys.argv[1]).resolve()))

import benchmarks.nights as nights  # noqa: E402
from autotune.study import attrs, guided  # noqa: E402
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
TOKENS = "speculative-num-draft-tokens"


def main() -> None:
    print("MARKER", guided.__file__)
    seed, budget = int(sys.argv[2]), int(sys.argv[3])
    member = family.members(1, seed)[0]
    space = family.space_naming_configs(member, Path(tempfile.mkdtemp()))
    problem = problem_of(member.profile, space, noise_rel=None)
    problem.launch_sd = member.profile.timing.launch_sd
    add_unmodelled(problem, member.seed)
    optimum = solve(problem)
    nights.run_study(problem, seed, budget, sampler="model", name="probe", confirm=True)
    records = [r for r in captured["records"] if r.confirm_of is None]
    setup = attrs.pass_setup(captured["study"])
    assert setup is not None and (profile := setup.profile()) is not None
    served = [(r, p) for r in records if (p := guided.point_of(r, space)) is not None]
    trees = [(r, p) for r, p in served if (r.flags.get("speculative-eagle-topk") or 1) > 1]
    if not trees:
        print(f"member {seed}: the night measured no tree")
        return
    best_record, best_point = max(trees, key=lambda rp: rp[1].tok_s)
    landscape, opt_flags = problem.landscape(0), {**space.fixed, **optimum.flags}
    half = max(2, round(int(best_record.flags[TOKENS]) / 2))
    sibling_flags = {**best_record.flags, TOKENS: half}
    normal = problem.normalise(sibling_flags)
    truth = landscape._fixed(normal) if normal is not None else None
    if truth is None or truth.true_tok_s is None:
        print(f"member {seed}: the sibling at {half} tokens does not start")
        return
    spec = {k: v for k, v in best_point.flags.items()}
    spec[TOKENS] = half
    measured = {"flags": spec, "tok_s": truth.true_tok_s, "accept_length": truth.accept_length}
    sibling = best_point.model_copy(update=measured)
    shapes = [
        {**opt_flags, **{k: v for k, v in f.items() if k.startswith("speculative") or k == "tp-size"}}
        for f in ({"speculative-num-steps": s, "speculative-eagle-topk": k, TOKENS: t}
                  for s in range(1, 9) for k in (2, 4, 8) for t in range(2, 65))
    ]  # fmt: skip
    print(f"member {seed}: optimum {optimum.tok_s:.2f}; sibling of trial {best_record.number} at {half} tokens, "
          f"truly {truth.true_tok_s:.2f}")  # fmt: skip
    night = [p for _, p in served]
    prior = calibrate.PRIOR_WEIGHT
    for label, points, weight in (("night's launches", night, prior), ("+ sibling", [*night, sibling], prior),
                                  ("night, no prior", night, 0.0), ("+ sibling, no prior", [*night, sibling], 0.0)):
        calibrate.PRIOR_WEIGHT = weight
        fitted = guided._fit(profile, space, points)
        assert fitted is not None
        at_opt = guided._rate(fitted, space, opt_flags) or 0.0
        priced = [(guided._rate(fitted, space, f) or 0.0, f) for f in shapes]
        rate, top = max(priced, key=lambda rf: rf[0])
        top_normal = problem.normalise(top)
        top_true = (landscape.true_value(top_normal) or 0.0) if top_normal is not None else 0.0
        print(f"  {label:20} verify_token_ms {fitted.profile.overheads.verify_token_ms:.4f}  optimum priced "
              f"{at_opt:.2f} ({at_opt / optimum.tok_s:.2f} of truth); the fit's best tree "
              f"s{top['speculative-num-steps']} k{top['speculative-eagle-topk']} t{top[TOKENS]} predicted "
              f"{rate:.2f}, truly {top_true / optimum.tok_s:.3f} "
              "of the optimum")  # fmt: skip


main()
