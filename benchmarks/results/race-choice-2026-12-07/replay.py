"""Replay scoreboard nights member by member and say how each race ended (a diagnostic, not the product).

Usage: python replay.py TREE SAMPLER BUDGET CASE:SEED... > out.jsonl   (TREE: the tree whose code runs)
Each line: the night's regret (as the report computes it), the search's truly best launch, the finalists
(measured first value, race mean, true value) and how the race ended.
"""

import json
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


def night(case: str, seed: int, sampler: str, budget: int) -> dict[str, Any]:
    member = DRAW[case](1, seed)[0]
    assert member.seed == seed, (case, seed, member.seed)
    problem = problem_of(member.profile, family.space_naming_configs(member, Path(tempfile.mkdtemp())), noise_rel=None)
    problem.launch_sd = member.profile.timing.launch_sd
    add_unmodelled(problem, member.seed)
    optimum = solve(problem).tok_s
    caught: list[Any] = []
    real = nights.run_night

    def watched(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        caught.append(result.confirmation)
        return result

    nights.run_night = watched  # type: ignore[assignment]
    run = nights.run_study(problem, seed, budget, sampler=sampler, name=sampler, confirm=True)
    nights.run_night = real  # type: ignore[assignment]
    conf: confirm.Confirmation = caught[0]
    steps = run.steps
    gap = lambda tok: round(100 * (1 - (tok or 0.0) / optimum), 2)  # noqa: E731
    baselines = {json.dumps(steps[f.trial].flags, sort_keys=True) for f in conf.finalists if f.baseline}
    first: dict[str, tuple[float, float]] = {}  # config -> (highest first measurement, true)
    for s in steps:
        if s.launched and s.measured is not None and s.outcome == "ok":
            key = json.dumps(s.flags, sort_keys=True)
            if key not in baselines and s.measured > first.get(key, (0.0, 0.0))[0]:
                first[key] = (s.measured, s.true or 0.0)
    ranked = sorted(first.values(), key=lambda v: -v[0])
    best_true = max(v[1] for v in ranked) if ranked else 0.0
    base_true = max((steps[f.trial].true or 0.0 for f in conf.finalists if f.baseline), default=0.0)
    summary = run.summary(optimum, problem.gpus)
    return {
        "case": case, "seed": seed, "sampler": sampler, "budget": budget,
        "regret_pct": round(summary["regret_pct"], 2), "final_gap_pct": round(100 * summary["final_gap"], 2),
        "search_best_gap_pct": gap(max(best_true, base_true)),
        "best_rank": 1 + [v[1] for v in ranked].index(best_true) if ranked else None,
        "configs": len(ranked),
        "within1_ranks": [i + 1 for i, v in enumerate(ranked) if v[1] >= best_true - 0.01 * optimum],
        "finalists": [
            {"trial": f.trial, "baseline": f.baseline, "first": round(f.first or 0.0, 1), "mean": round(f.mean, 1),
             "n": len(f.values), "true_gap_pct": gap(steps[f.trial].true), "dropped_after": f.dropped_after,
             "predicted": round(steps[f.trial].predicted or 0.0, 1)}
            for f in conf.finalists
        ],
        "best": conf.best, "leader": conf.leader, "settled": conf.settled, "tied_with": conf.tied_with,
        "rounds": conf.rounds, "note": conf.note,
    }  # fmt: skip


def main() -> None:
    print("MARKER", confirm.__file__, file=sys.stderr)
    sampler, budget = sys.argv[2], int(sys.argv[3])
    for spec in sys.argv[4:]:
        case, seed = spec.split(":")
        print(json.dumps(night(case, int(seed), sampler, budget)), flush=True)


main()
