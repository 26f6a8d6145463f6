"""The race census (issue 53, not the product): replay one member's night (search and race, --unmodelled)
and print what the race had and did: its budget, the finalists with the search's measurement, each
relaunch and the truth, the race's fit (effects against the leader, intervals as the standing judges
them), the verdict, and what the chosen, the leader and the search's incumbent truly are.

Usage: python race_census.py TREE all|tight SEED BUDGET model|tpe [LAUNCH_SD|- [TOP]]
(TREE: the tree whose code runs, e.g. the worktree or an archive's folder; LAUNCH_SD: default (-) the
profile's; TOP: the race's finalists besides the baselines, default the product's 3).
"""

import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(sys.argv[1]).resolve()))

import benchmarks.nights as nights  # noqa: E402
from autotune.study import confirm, rounds  # noqa: E402
from benchmarks import family, family_tight  # noqa: E402
from benchmarks.problems import add_unmodelled, problem_of, solve, twin_defaults_true  # noqa: E402

captured: dict[str, Any] = {}
original_run_night = nights.run_night


def watched_run_night(runner: Any, night: Any, **kwargs: Any) -> Any:
    captured["night"] = night
    result = original_run_night(runner, night, **kwargs)
    captured["records"] = runner.records()
    return result


nights.run_night = watched_run_night  # type: ignore[assignment]


def main() -> None:
    print("MARKER", confirm.__file__)
    case, seed, budget, sampler = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    member = (family.members if case == "all" else family_tight.tight_members)(1, seed)[0]
    space = family.space_naming_configs(member, Path(tempfile.mkdtemp()))
    problem = problem_of(member.profile, space, noise_rel=None)
    given = sys.argv[6] if len(sys.argv) > 6 else "-"
    problem.launch_sd = float(given) if given != "-" else member.profile.timing.launch_sd
    top = int(sys.argv[7]) if len(sys.argv) > 7 else nights.FINALISTS
    add_unmodelled(problem, member.seed)
    optimum = solve(problem)
    run = nights.run_study(problem, seed, budget, sampler=sampler, name="census", confirm=True, finalists=top)
    run.defaults_true = twin_defaults_true(problem)
    summary = run.summary(optimum.tok_s, problem.gpus)
    night, records = captured["night"], captured["records"]
    true = {i: s.true for i, s in enumerate(run.steps)}
    served = [i for i, s in enumerate(run.steps) if s.measured]
    incumbent = max(served, key=lambda i: run.steps[i].measured or 0.0)
    finalists = confirm.choose_finalists([r for r in records if r.confirm_of is None], top=night.top)
    launches = rounds.relaunches_by_round(records, finalists)
    if not any(launches.values()):  # no relaunch served (fewer than two to race): the answer is unraced
        unraced = {"case": case, "seed": seed, "budget": budget, "sampler": sampler, "top": top, "raced": False,
                   "regret_pct": summary["regret_pct"], "incumbent_gap_pct": 100 * summary["final_gap"],
                   "race_budget": night.race_relaunches, "race_spent": run.confirm_launches}  # fmt: skip
        print("JSON", json.dumps(unraced))
        return
    fitted = rounds.fit({c: v for c, v in launches.items() if v})
    baselines = {f.number for f in finalists if f.baseline is not None}
    claims = max(sum(1 for c in fitted.effects if c not in baselines), 1)
    leader = max(fitted.effects, key=lambda c: fitted.effects[c])
    best_baseline = max((c for c in fitted.effects if c in baselines), key=lambda c: fitted.effects[c], default=None)
    out: dict[str, Any] = {
        "case": case, "seed": seed, "budget": budget, "sampler": sampler, "launch_sd": problem.launch_sd, "top": top,
        "regret_pct": summary["regret_pct"], "harmful": summary["harmful"], "defaults_true": run.defaults_true,
        "incumbent_gap_pct": 100 * summary["final_gap"],
        "search_launches": night.trials, "race_budget": night.race_relaunches, "race_spent": run.confirm_launches,
        "optimum": optimum.tok_s, "incumbent": incumbent, "incumbent_true": true[incumbent],
        "incumbent_measured": run.steps[incumbent].measured, "fit_sd": fitted.sd, "fit_dof": fitted.dof,
        "claims_widen": claims, "leader": leader, "best_baseline": best_baseline, "finalists": [],
    }  # fmt: skip
    for f in finalists:
        n = f.number
        row: dict[str, Any] = {
            "trial": n, "baseline": f.baseline, "first": f.value, "true": true[n],
            "true_gap_pct": 100 * (1 - (true[n] or 0.0) / optimum.tok_s),
            "relaunches": launches[n], "effect_vs_leader_pct": None, "half_pct": None,
            "flags": {k.removeprefix("speculative-"): v for k, v in f.flags.items() if "path" not in k},
        }  # fmt: skip
        if n in fitted.effects and n != leader:
            widen = claims if n == best_baseline else 1
            diff, half = fitted.interval(leader, n, comparisons=widen)
            row["effect_vs_leader_pct"] = 100 * (math.exp(-diff) - 1)
            row["half_pct"] = 100 * half if half is not None else None
        out["finalists"].append(row)
    verdict = confirm.verdict(records, finalists, objective="decode_tok_s", fixed=list(space.fixed),
                              margin=space.measurement.target_rel_ci)  # fmt: skip
    assert verdict is not None
    out.update(
        chosen=verdict.best,
        chosen_true=true[verdict.best],
        leader_true=true[verdict.leader],
        settled=verdict.settled,
        more_launches=verdict.more_launches,
        note=verdict.note,
        margin=verdict.margin,
        gains=[g.model_dump() for g in verdict.gains],
        rounds=verdict.rounds,
        dropped={f.trial: f.dropped_after for f in verdict.finalists},
    )
    print("JSON", json.dumps(out))


main()
