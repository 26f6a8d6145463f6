"""False verdicts: autotune's race of finalists and baselines, judged against the landscapes' truth.

After its search, a study races the finalists and every baseline on fresh interleaved launches and
states a verdict (``autotune.study.confirm``): the leader's gain over each baseline with a 95 %
interval, and a recommendation (a baseline unless something beats the best baseline significantly).
This benchmark runs autotune's own study loop (the TPE sampler as shipped, ``--budget`` launches)
then its confirmation at the default budget, or (``--night N``) a night of N launches, search and race
together, as ``Night.of_launches`` splits it, on landscapes whose truth is known, and counts the
verdicts the truth contradicts:

- a **false significant claim**: a gain marked significant whose sign the truth does not have (the
  leader claimed faster than a baseline that is truly as fast or faster; no tolerance);
- a **false best**: the recommended configuration truly more than 2 % slower than the best baseline;
- in a second scenario, where a baseline is the truth's optimum itself (so nothing beats the best
  baseline by more than the noise), the share of studies whose recommendation is a baseline.

Landscapes: the recorded real ones (``benchmarks/landscapes/*.json``, replayed with their real
launch-to-launch noise; baselines: the recorded space's, completed on the grid) and generated twin
landscapes (``benchmarks/family.py``; each launch's speed carries a factor of sd ``--launch-sd``
besides the measurement's own noise).

    python benchmarks/verdicts.py --seeds 20 --family 10 --family-seed 5000 --family-seeds 2 --json out.json

See docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import random
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import optuna
import yaml
from optuna.trial import TrialState

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script from anywhere
    sys.path.insert(0, str(ROOT))

from autotune.gpu import GpuInventory  # noqa: E402
from autotune.records import TrialRecord  # noqa: E402
from autotune.space import Baseline, FlagValue, SearchSpace  # noqa: E402
from autotune.study import make_sampler  # noqa: E402
from autotune.study.confirm import Confirmation, Finalist  # noqa: E402
from autotune.study.night import Night, run_night  # noqa: E402
from autotune.testing import study_runner  # noqa: E402
from benchmarks import family, replay  # noqa: E402
from benchmarks.landscape import Evaluation, Landscape  # noqa: E402
from benchmarks.nights import LandscapeLauncher, make_runner  # noqa: E402
from benchmarks.problems import problem_of, solve  # noqa: E402

WITHIN = 0.02  # a recommendation truly more than 2 % below the best baseline is a false best
LAUNCH_SD = 0.04  # the twin's timing.launch_sd default: relative sd of speed between launches
LAUNCH_SEED = 7_000_000  # offset of the launch-factor stream's seed from the study's seed
TARGET_FALSE = 0.05  # false significant claims, and false bests: at most this share of studies
TARGET_BASELINE = 0.90  # with a baseline that is the optimum: at least this share recommend a baseline
OPTIMUM = "optimum"  # the name of the baseline added in the second scenario
SCENARIOS = ("shipped", "baseline-optimal")


# ---------------------------------------------------------------------------------------------
# A landscape to judge, and one study on it


@dataclass
class Studied:
    """One study's search and confirmation, and the truth to judge them by."""

    records: list[TrialRecord]
    confirmation: Confirmation | None
    truth: Callable[[TrialRecord], float | None]
    launches: int
    confirm_launches: int


@dataclass
class Subject:
    """A landscape: its space (with the ordinary baselines), its true optimum as a baseline, and a
    study on it (space, seed, budget -> :class:`Studied`)."""

    name: str
    kind: str
    space: SearchSpace
    optimum: float
    optimum_baseline: Baseline
    study: Callable[[SearchSpace, int, Night], Studied]
    notes: list[str]

    def scenario_space(self, scenario: str) -> SearchSpace:
        if scenario == "shipped":
            return self.space
        return self.space.model_copy(update={"baselines": [*self.space.baselines, self.optimum_baseline]})


def night_of(space: SearchSpace, *, budget: int, night: int | None) -> Night:
    """A search of ``budget`` launches and the race at its default budget after it, or a night of
    ``night`` launches, search and race together (the race's finalists as many as its floor holds)."""
    if night is None:
        return Night(trials=budget)
    return Night.of_launches(night, baselines=len(space.baselines))


def _run(runner: Any, launched: Callable[[], int], night: Night) -> tuple[Confirmation | None, int, int]:
    """The study as ``autotune study`` runs it: baselines first, the search's launches, then the race."""
    runner.enqueue_baselines()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the search's launches, or the study's own cap on proposals (PROPOSALS_PER_LAUNCH a launch asked)
        confirmation = run_night(runner, night).confirmation
    raced = sum(1 for r in runner.records() if r.confirm_of is not None)  # each relaunch launches once
    return confirmation, launched() - raced, raced


def _baseline_of(flags: dict[str, FlagValue], fixed: dict[str, FlagValue]) -> Baseline:
    """A baseline that launches ``flags`` (the fixed flags the space sets anyway left out)."""
    own = {k: v for k, v in flags.items() if k not in fixed or fixed[k] != v}
    return Baseline(name=OPTIMUM, flags=own, note="the landscape's true optimum")


class Drifting:
    """The landscape as a launcher whose load drifts within each of the race's rounds sees it: a round's
    k-th launch (from 0) serves (1 - ``drift`` k) of its speed; the search's launches are in no round."""

    def __init__(self, landscape: Landscape, drift: float) -> None:
        self.landscape, self.drift = landscape, drift
        self.study: optuna.Study | None = None  # set once the runner's study exists

    def evaluate(self, flags: Mapping[str, FlagValue], *, rng: random.Random | None = None) -> Evaluation:
        evaluation = self.landscape.evaluate(flags, rng=rng)
        if not self.drift or self.study is None or evaluation.tok_s is None:
            return evaluation  # no study's trials to read for a launch no drift can move
        position = round_position(self.study)
        if not position:
            return evaluation
        return dataclasses.replace(evaluation, tok_s=evaluation.tok_s * (1 - self.drift * position))


def round_position(study: optuna.Study) -> int:
    """The running launch's place in its race round: the launches of that round already finished (0 outside
    the race)."""
    trials = study.get_trials(deepcopy=False)
    running = [t for t in trials if t.state == TrialState.RUNNING]
    launch_round = running[-1].user_attrs.get("launch_round") if running else None
    if launch_round is None:
        return 0
    return sum(1 for t in trials if t.state.is_finished() and t.user_attrs.get("launch_round") == launch_round)


def family_subject(seed: int, *, launch_sd: float = LAUNCH_SD, drift: float = 0.0) -> Subject:
    """A generated twin landscape (``family.member(seed)``), each launch's speed times a factor of
    relative sd ``launch_sd`` (the measurement's own noise besides), and with ``drift`` a load drifting
    within the race's rounds (:class:`Drifting`)."""
    fam = family.member(seed)
    problem = problem_of(fam.profile, fam.space)
    optimum = solve(problem)

    def study(space: SearchSpace, study_seed: int, night: Night) -> Studied:
        scenario = dataclasses.replace(problem, space=space)
        landscape = scenario.landscape(study_seed)
        seen = Drifting(landscape, drift)
        launcher = LandscapeLauncher(scenario, seen, random.Random(study_seed), launch_sd=launch_sd,  # type: ignore[arg-type]
                                     launch_rng=random.Random(LAUNCH_SEED + study_seed))  # fmt: skip
        with tempfile.TemporaryDirectory(prefix="autotune-verdicts-") as tmp:
            runner = make_runner(scenario, Path(tmp), sampler=make_sampler("tpe", study_seed), launcher=launcher)
            seen.study = runner.study
            confirmation, searched, confirmed = _run(runner, lambda: len(launcher.evaluations), night)
            records = runner.records()
        return Studied(records, confirmation, lambda r: landscape.true_value(r.flags) if r.flags else None,
                       searched, confirmed)  # fmt: skip

    return Subject(name=f"family {seed}", kind="family", space=problem.space, optimum=optimum.tok_s,
                   optimum_baseline=_baseline_of(optimum.flags, problem.space.fixed), study=study,
                   notes=[fam.summary, *problem.notes])  # fmt: skip


def recorded_subject(path: Path, *, cycle: bool = False) -> Subject:
    """A recorded real landscape, replayed: each launch draws one recorded launch of its config (the
    real noise; with ``cycle``, without replacement: see :class:`replay.RecordedLauncher`); a config's
    truth is its recorded mean (0 if any launch failed). The baselines are the recorded space file's,
    each completed on the grid (an unset flag at the grid's first value)."""
    problem = replay.load_problem(path)
    notes: list[str] = []
    baselines = []
    for baseline in _space_baselines(ROOT / problem.recorded.space):
        flags = _on_grid(problem, baseline.flags)
        if problem.key(flags) in problem.launches:
            own = {k: v for k, v in flags.items() if k not in problem.space.fixed}
            baselines.append(baseline.model_copy(update={"flags": own}))
            notes.append(f"baseline {baseline.name}: {json.dumps(own)}")
        else:
            notes.append(f"baseline {baseline.name} is not a configuration of the recorded grid: left out")
    space = problem.space.model_copy(update={"baselines": baselines})
    best_key = max(problem.true, key=lambda k: problem.true[k])
    best = next(c for c in problem.recorded.configs if problem.key({**problem.recorded.fixed, **c.flags}) == best_key)

    def study(scenario_space: SearchSpace, seed: int, night: Night) -> Studied:
        scenario = dataclasses.replace(problem, space=scenario_space)
        launcher = replay.RecordedLauncher(scenario, random.Random(seed), cycle=cycle)
        with tempfile.TemporaryDirectory(prefix="autotune-verdicts-") as tmp:
            runner = study_runner(scenario_space, Path(tmp), inventory=GpuInventory(driver_version="none", gpus=[]),
                                  launcher=launcher, sampler=make_sampler("tpe", seed), name="verdicts")  # fmt: skip
            confirmation, searched, confirmed = _run(runner, lambda: len(launcher.drawn), night)
            records = runner.records()
        truth = problem.true
        return Studied(records, confirmation, lambda r: truth.get(r.launch.config_key or ""), searched, confirmed)

    return Subject(name=problem.recorded.name, kind="recorded", space=space, optimum=problem.optimum,
                   optimum_baseline=_baseline_of(dict(best.flags), {}), study=study, notes=notes)  # fmt: skip


def _space_baselines(path: Path) -> list[Baseline]:
    """The baselines a space file lists (read alone: the rest of the file may name tools not here)."""
    data = yaml.safe_load(path.read_text()) if path.exists() else None
    return [Baseline.model_validate(b) for b in (data or {}).get("baselines", [])]


def _on_grid(problem: replay.RecordedProblem, flags: dict[str, FlagValue]) -> dict[str, FlagValue]:
    """``flags`` as a point of the recorded grid: each axis that applies at its value there, else the
    grid's first value."""
    chosen: dict[str, FlagValue] = dict(problem.recorded.fixed)
    for axis in problem.axes:
        if axis.applies(chosen):
            chosen[axis.name] = flags[axis.name] if flags.get(axis.name) in axis.values else axis.values[0]
    return {k: v for k, v in chosen.items() if v is not False}


# ---------------------------------------------------------------------------------------------
# Judging one study


def judge(studied: Studied, *, optimal: str | None = None) -> dict[str, Any]:
    """The stored confirmation against the truth: its significant claims, its recommendation."""
    records, confirmation = studied.records, studied.confirmation
    by_trial = {r.number: r for r in records}

    def true(trial: int) -> float:
        return studied.truth(by_trial[trial]) or 0.0  # a config that does not serve is worth nothing

    baselines = {r.baseline: studied.truth(r) for r in records if r.baseline is not None and r.confirm_of is None}
    best_baseline = max((v for v in baselines.values() if v), default=None)  # of those that serve
    seen = max((v for r in records if r.confirm_of is None and (v := studied.truth(r))), default=None)
    row: dict[str, Any] = {"launches": studied.launches, "confirm_launches": studied.confirm_launches,
                           "baselines_true": baselines, "best_baseline_true": best_baseline,
                           "best_true_seen": seen}  # fmt: skip
    raced = confirmation is not None and any(f.baseline and f.confirmed for f in confirmation.finalists)
    if confirmation is None:
        return {**row, "confirmed": False, "judged": False, "claims": [], "false_claims": 0, "false_best": False,
                "baseline_recommended": False}  # fmt: skip
    recommended = confirmation.recommended
    best_true, leader_true = true(confirmation.best), true(confirmation.leader)
    claims = []
    for gain in confirmation.gains:
        if not gain.significant:
            continue
        assert gain.low is not None and gain.high is not None
        leader, baseline = true(gain.trial), true(gain.baseline_trial)
        faster = gain.low > 0
        claims.append({"leader": gain.trial, "baseline": gain.baseline, "gain": gain.gain, "low": gain.low,
                       "high": gain.high, "rounds": gain.rounds, "leader_true": leader, "baseline_true": baseline,
                       "true_gain": leader / baseline - 1 if baseline else None,
                       "false": not (leader > baseline if faster else leader < baseline)})  # fmt: skip
    return {
        **row,
        "confirmed": True,
        "judged": raced,  # a baseline served in the race: a verdict against the baselines was possible
        "rounds": confirmation.rounds,
        "settled": confirmation.settled,
        "note": confirmation.note,
        "best": recommended.label,
        "best_true": best_true,
        "leader": next(f.label for f in confirmation.finalists if f.trial == confirmation.leader),
        "leader_true": leader_true,
        "baseline_recommended": recommended.baseline,
        "optimal_baseline_recommended": optimal is not None and recommended.label == f"baseline {optimal}",
        "finalists": [_finalist(f, true(f.trial)) for f in confirmation.finalists],
        "gains": [g.model_dump(include={"baseline", "gain", "low", "high", "rounds"}) for g in confirmation.gains],
        "claims": claims,
        "false_claims": sum(c["false"] for c in claims),
        "false_best": best_baseline is not None and best_true < (1 - WITHIN) * best_baseline,
    }


def _finalist(finalist: Finalist, true: float) -> dict[str, Any]:
    return {**finalist.model_dump(include={"label", "trial", "first", "values", "mean"}), "true": true}


def judge_landscape(
    subject: Subject, seeds: Sequence[int], *, budget: int, night: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Every seed in both scenarios: the study, its verdict judged, and the counts."""
    runs = []
    for scenario in SCENARIOS:
        space = subject.scenario_space(scenario)
        for seed in seeds:
            optimal = OPTIMUM if scenario == "baseline-optimal" else None
            row = judge(subject.study(space, seed, night_of(space, budget=budget, night=night)), optimal=optimal)
            if optimal is not None:  # the added baseline launched the optimum, and nothing the study met beat it
                true, seen = row["baselines_true"].get(OPTIMUM), row["best_true_seen"]
                row["optimum_baseline_is_optimum"] = (true is not None and true >= subject.optimum * (1 - 1e-9)
                                                      and (seen is None or seen <= true * (1 + 1e-9)))  # fmt: skip
            runs.append({"scenario": scenario, "seed": seed, **row})
        if progress is not None:
            progress(f"{subject.name}: {scenario} done ({len(seeds)} seeds)")
    return {"name": subject.name, "kind": subject.kind, "optimum": subject.optimum,
            "optimum_baseline": subject.optimum_baseline.flags, "notes": subject.notes, "seeds": list(seeds),
            **counts(runs), "runs": runs}  # fmt: skip


def counts(runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Studies, those judged (a baseline served in the race), significant claims, false ones (claims, and
    studies with one), false bests, and the judged baseline-optimal studies' recommendations (those
    whose added baseline is truly the optimum: not when the engine's rules changed it, nor when the
    study met a configuration truly faster, i.e. the landscape's solved optimum is not the optimum)."""
    scenario = [r for r in runs if r["scenario"] == "baseline-optimal" and r["judged"]]
    optimal = [r for r in scenario if r["optimum_baseline_is_optimum"]]
    return {
        "studies": len(runs),
        "judged": sum(r["judged"] for r in runs),
        "significant_claims": sum(len(r["claims"]) for r in runs),
        "false_claims": sum(r["false_claims"] for r in runs),
        "false_claim_studies": sum(r["false_claims"] > 0 for r in runs),
        "false_bests": sum(r["false_best"] for r in runs),
        "optimal_studies": len(optimal),
        "optimal_not_optimum": len(scenario) - len(optimal),
        "optimal_baseline_recommended": sum(r["baseline_recommended"] for r in optimal),
        "optimal_optimum_recommended": sum(r.get("optimal_baseline_recommended", False) for r in optimal),
    }


def benchmark(
    subjects: Sequence[tuple[Subject, Sequence[int]]], *, budget: int, launch_sd: float, night: int | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Every landscape with its seeds; the report ``--json`` writes and the table shows."""
    landscapes = [judge_landscape(subject, seeds, budget=budget, night=night, progress=progress)
                  for subject, seeds in subjects]  # fmt: skip
    total = {key: sum(lan[key] for lan in landscapes) for key in counts([])}
    return {"budget": budget, "night": night, "launch_sd": launch_sd, "within": WITHIN,
            "targets": {"false_claims": TARGET_FALSE, "false_bests": TARGET_FALSE,
                        "baseline_recommended": TARGET_BASELINE},
            "landscapes": landscapes, "groups": groups(landscapes), "totals": {**total, **rates(total)}}  # fmt: skip


def rates(row: dict[str, Any]) -> dict[str, Any]:
    """Shares of the studies judged, and whether each meets its target."""
    studies, optimal = row["judged"], row["optimal_studies"]
    claims = row["false_claim_studies"] / studies if studies else None
    bests = row["false_bests"] / studies if studies else None
    baseline = row["optimal_baseline_recommended"] / optimal if optimal else None
    return {"false_claim_rate": claims, "false_best_rate": bests, "baseline_recommended_rate": baseline,
            "meets": {"false_claims": claims is not None and claims <= TARGET_FALSE,
                      "false_bests": bests is not None and bests <= TARGET_FALSE,
                      "baseline_recommended": baseline is not None and baseline >= TARGET_BASELINE}}  # fmt: skip


def groups(landscapes: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Rows of the table: each recorded landscape alone, the family members together."""
    rows = []
    for lan in landscapes:
        if lan["kind"] == "recorded":
            rows.append({"name": lan["name"], "seeds": len(lan["seeds"]), **_counted(lan)})
    members = [lan for lan in landscapes if lan["kind"] == "family"]
    if members:
        names = [int(lan["name"].removeprefix("family ")) for lan in members]
        summed = {key: sum(lan[key] for lan in members) for key in counts([])}
        name = f"family {min(names)}..{max(names)} ({len(members)} members)"
        rows.append({"name": name, "seeds": sum(len(lan["seeds"]) for lan in members), **summed, **rates(summed)})
    return rows


def _counted(lan: dict[str, Any]) -> dict[str, Any]:
    row = {key: lan[key] for key in counts([])}
    return {**row, **rates(row)}


# ---------------------------------------------------------------------------------------------
# Output


def _share(count: int, of: int) -> str:
    return f"{count}/{of} ({count / of:.0%})" if of else "-"


def print_table(report: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    night = report.get("night")
    table = Table(
        title=f"False verdicts of the race (search budget {report['budget']} launches, confirmation at its "
        "default budget)"
        if night is None
        else f"False verdicts of the race (nights of {night} launches, search and race together)",
        caption="studies: seeds x 2 scenarios (the space's baselines; one baseline added that is the true optimum); "
        "judged: a baseline served in the race. false claims: judged studies with a gain marked significant that "
        "the truth contradicts; false bests: judged studies "
        f"whose recommendation is truly more than {report['within']:.0%} below the best baseline; baseline "
        "recommended: of the judged baseline-optimal studies whose added baseline is truly the optimum. "
        "Recorded landscapes replay real launches "
        f"({report.get('replay', 'with replacement')}); family members are SIMULATED (each launch's speed x a "
        f"factor of sd {report['launch_sd']:.0%}"
        + (f"; a race round's k-th launch x (1 - {report['drift']:g} k)" if report.get("drift") else "")
        + ").",
    )
    for header in ("landscape", "seeds", "studies judged", "significant claims", "false claims", "false bests",
                   "baseline recommended when optimal"):  # fmt: skip
        table.add_column(header, justify="left" if header == "landscape" else "right")
    for row in report["groups"]:
        table.add_row(row["name"], str(row["seeds"]), f"{row['judged']}/{row['studies']}",
                      str(row["significant_claims"]), _share(row["false_claim_studies"], row["judged"]),
                      _share(row["false_bests"], row["judged"]),
                      _share(row["optimal_baseline_recommended"], row["optimal_studies"]))  # fmt: skip
    total, targets = report["totals"], report["targets"]

    def against(text: str, met: bool, target: str) -> str:
        return f"{text} {'ok' if met else 'MISSED'} ({target})"

    table.add_section()
    table.add_row(
        "total", str(sum(row["seeds"] for row in report["groups"])), f"{total['judged']}/{total['studies']}",
        str(total["significant_claims"]),
        against(_share(total["false_claim_studies"], total["judged"]), total["meets"]["false_claims"],
                f"<={targets['false_claims']:.0%}"),
        against(_share(total["false_bests"], total["judged"]), total["meets"]["false_bests"],
                f"<={targets['false_bests']:.0%}"),
        against(_share(total["optimal_baseline_recommended"], total["optimal_studies"]),
                total["meets"]["baseline_recommended"], f">={targets['baseline_recommended']:.0%}"),
    )  # fmt: skip
    console = Console(width=max(Console().width, 160))
    console.print(table)
    for lan in report["landscapes"]:
        if lan["optimal_not_optimum"]:
            console.print(f"note: {lan['name']}: {lan['optimal_not_optimum']} baseline-optimal studies left out of "
                          "the share: the added baseline is not the optimum (the study met a configuration truly "
                          "faster than the solved one, or the engine's rules changed it)")  # fmt: skip


def _rounded(value: Any) -> Any:
    """Floats to 6 significant digits (tok/s and gains need no more), for a JSON file of a readable size."""
    if isinstance(value, float):
        return float(f"{value:.6g}")
    if isinstance(value, dict):
        return {k: _rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_rounded(v) for v in value]
    return value


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--recorded", type=Path, nargs="*", default=None, metavar="FILE",
                        help="recorded landscapes (default: every benchmarks/landscapes/*.json; none when given "
                        "without a file)")  # fmt: skip
    parser.add_argument("--seeds", type=int, default=20, help="studies per scenario on each recorded landscape")
    parser.add_argument(
        "--first-seed", type=int, default=0, help="the first study seed (a held-out set starts past the seeds tuned on)"
    )
    parser.add_argument("--family", type=int, default=0, metavar="N", help="N generated twin landscapes")
    parser.add_argument("--family-seed", type=int, default=5000, metavar="S", help="the first member's seed")
    parser.add_argument("--family-seeds", type=int, default=2, help="studies per scenario on each member")
    parser.add_argument("--budget", type=int, default=30, help="launches of the search (default 30)")
    parser.add_argument("--night", type=int, default=None, metavar="N",
                        help="a night of N launches, search and race together, as Night.of_launches splits it "
                        "(--budget then unused)")  # fmt: skip
    parser.add_argument("--launch-sd", type=float, default=LAUNCH_SD,
                        help=f"relative sd of a family launch's speed (default {LAUNCH_SD})")  # fmt: skip
    parser.add_argument("--drift", type=float, default=0.0, metavar="F",
                        help="a family launch's speed times (1 - F k) for the k-th launch (from 0) of a race "
                        "round: a load drifting within rounds (default 0)")  # fmt: skip
    parser.add_argument("--cycle", action="store_true",
                        help="replay a recorded config's launches without replacement (default: with)")  # fmt: skip
    parser.add_argument("--json", type=Path, default=None, help="write every study's verdict and the counts here")
    args = parser.parse_args(argv)
    progress = lambda text: print(text, file=sys.stderr, flush=True)  # noqa: E731
    started = time.monotonic()
    files = sorted((ROOT / "benchmarks" / "landscapes").glob("*.json")) if args.recorded is None else args.recorded
    studies = range(args.first_seed, args.first_seed + args.seeds)
    subjects: list[tuple[Subject, Sequence[int]]] = [
        (recorded_subject(path, cycle=args.cycle), studies) for path in files
    ]
    seeds = range(args.first_seed, args.first_seed + args.family_seeds)
    subjects += [(family_subject(seed, launch_sd=args.launch_sd, drift=args.drift), seeds)
                 for seed in range(args.family_seed, args.family_seed + args.family)]  # fmt: skip
    if not subjects:
        parser.error("nothing to judge: give --recorded FILE or --family N")
    report = benchmark(subjects, budget=args.budget, launch_sd=args.launch_sd, night=args.night, progress=progress)
    report["replay"] = "without replacement" if args.cycle else "with replacement"
    report["drift"] = args.drift
    report["wall_s"] = time.monotonic() - started
    print_table(report)
    if args.json is not None:
        args.json.write_text(json.dumps(_rounded(report), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
