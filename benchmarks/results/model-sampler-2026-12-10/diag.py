"""Round 5's diagnostic (not the product): one member's model night, each trial's launch, the rate predicted
before it, the measured and true rates; at each proposal, the model's prediction of the optimum's configuration.

Usage: python diag.py TREE all|tight SEED BUDGET (TREE: the tree whose code runs, an archive's folder).
"""

import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(sys.argv[1]).resolve()))

import autotune.study.guided as guided  # noqa: E402
from benchmarks import family, family_tight  # noqa: E402
from benchmarks.nights import run_study  # noqa: E402
from benchmarks.problems import add_unmodelled, problem_of, solve  # noqa: E402

SHOWN = ("tp-size", "mem-fraction-static", "cuda-graph-max-bs-decode", "attention-backend")


def short(flags: dict[str, Any] | None) -> dict[str, Any]:
    flags = flags or {}
    spec = {k.removeprefix("speculative-"): v for k, v in flags.items() if k.startswith("speculative-")}
    spec.pop("draft-model-path", None)
    return {**spec, **{k: v for k, v in flags.items() if k in SHOWN}}


def main() -> None:
    print("MARKER", guided.__file__)
    case, seed, budget = sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    member = (family.members if case == "all" else family_tight.tight_members)(1, seed)[0]
    space = family.space_naming_configs(member, Path(tempfile.mkdtemp()))
    problem = problem_of(member.profile, space, noise_rel=None)
    problem.launch_sd = member.profile.timing.launch_sd
    add_unmodelled(problem, member.seed)
    optimum = solve(problem)
    print(member.summary)
    print("OPT", round(optimum.tok_s, 1), short(optimum.flags))
    predicted: list[tuple[int, float | None, str]] = []
    choose = guided.ModelGuided._choose

    def watched(self: guided.ModelGuided, study: Any) -> Any:
        out = choose(self, study)
        space_, fitted = self._study_space(study), self._fitted(study)
        rate = None
        if space_ is not None and fitted is not None:
            params = guided.model_params(space_, optimum.flags)
            rate = guided._rate(fitted, space_, guided.flags_of(space_, params))
        predicted.append((len(study.trials), rate, out[1][:60]))
        return out

    guided.ModelGuided._choose = watched  # type: ignore[method-assign]
    run = run_study(problem, seed, budget, sampler="model", name="diag", confirm=True)
    for i, step in enumerate(run.steps):
        launched = "L" if step.launched else "-"
        print(i, launched, step.outcome, step.measured, step.true, step.predicted, short(step.flags))
    for trial, rate, search in predicted:
        print("optimum predicted at trial", trial, rate, search)
    print("regret", run.summary(optimum.tok_s, problem.gpus)["regret_pct"], "confirmed true", run.confirmed_true)


main()
