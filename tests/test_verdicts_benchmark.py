"""The false-verdicts benchmark (benchmarks/verdicts.py), on a small recorded landscape with a tiny budget."""

from __future__ import annotations

import random
from pathlib import Path

from autotune.engines.base import LaunchPlan
from autotune.study.night import Night
from benchmarks import verdicts
from benchmarks.nights import LandscapeLauncher
from benchmarks.problems import problem_of, solve

ROOT = Path(__file__).resolve().parent.parent
RECORDED = ROOT / "benchmarks" / "landscapes" / "cpu-alone-llamacpp.json"


def test_the_report_counts_each_study_once_in_both_scenarios() -> None:
    subject = verdicts.recorded_subject(RECORDED)
    assert [b.name for b in subject.space.baselines] == ["no-draft", "draft-defaults"]
    report = verdicts.benchmark([(subject, range(2))], budget=6, launch_sd=verdicts.LAUNCH_SD)

    (landscape,) = report["landscapes"]
    runs = landscape["runs"]
    assert [(r["scenario"], r["seed"]) for r in runs] == [(s, seed) for s in verdicts.SCENARIOS for seed in (0, 1)]
    assert landscape["studies"] == len(runs) == 4
    assert 0 <= landscape["judged"] <= landscape["studies"]
    for run in runs:
        assert run["launches"] == 6
        if run["scenario"] == "baseline-optimal":
            assert set(run["baselines_true"]) == {"no-draft", "draft-defaults", verdicts.OPTIMUM}
            assert run["optimum_baseline_is_optimum"]  # the added baseline launched the true optimum
        if not run["judged"]:
            continue
        assert run["false_claims"] == sum(claim["false"] for claim in run["claims"])
        for claim in run["claims"]:  # a claim is false exactly when the truth lacks its sign
            faster = claim["low"] > 0
            assert claim["false"] == (not (claim["leader_true"] > claim["baseline_true"]) if faster
                                      else not (claim["leader_true"] < claim["baseline_true"]))  # fmt: skip
        assert run["false_best"] == (run["best_true"] < (1 - verdicts.WITHIN) * run["best_baseline_true"])
    assert landscape["significant_claims"] == sum(len(r["claims"]) for r in runs)
    assert landscape["false_claims"] == sum(r["false_claims"] for r in runs)
    assert landscape["false_claim_studies"] == sum(r["false_claims"] > 0 for r in runs)
    assert landscape["false_bests"] == sum(r["false_best"] for r in runs)
    scenario = [r for r in runs if r["scenario"] == "baseline-optimal" and r["judged"]]
    optimal = [r for r in scenario if r["optimum_baseline_is_optimum"]]
    assert landscape["optimal_studies"] == len(optimal)
    assert landscape["optimal_studies"] + landscape["optimal_not_optimum"] == len(scenario)
    assert landscape["optimal_baseline_recommended"] == sum(r["baseline_recommended"] for r in optimal)
    assert landscape["optimal_optimum_recommended"] <= landscape["optimal_baseline_recommended"]

    (row,) = report["groups"]
    totals = report["totals"]
    for key in ("studies", "judged", "false_claim_studies", "false_bests", "optimal_baseline_recommended"):
        assert row[key] == totals[key] == landscape[key]
    assert set(totals["meets"]) == {"false_claims", "false_bests", "baseline_recommended"}
    verdicts.print_table(report)


def test_the_launch_noise_is_off_unless_asked_for() -> None:
    problem = problem_of(verdicts.family.member(5000).profile, verdicts.family.member(5000).space)
    flags = solve(problem).flags
    plan = LaunchPlan(engine="sglang", flags=flags)

    def measured(**options: object) -> list[float]:
        launcher = LandscapeLauncher(problem, problem.landscape(1), random.Random(1), **options)  # type: ignore[arg-type]
        return [launcher(plan, Path("unused.log"), lambda *_: None).objective or 0.0 for _ in range(20)]

    plain = measured()
    assert measured(launch_sd=0.0, launch_rng=random.Random(2)) == plain
    noisy = measured(launch_sd=0.04, launch_rng=random.Random(2))
    assert noisy != plain and all(abs(n / p - 1) < 0.5 for n, p in zip(noisy, plain, strict=True))


def test_a_night_of_launches_splits_search_and_race_as_a_study_of_that_night_does() -> None:
    subject = verdicts.recorded_subject(RECORDED)
    report = verdicts.benchmark([(subject, range(1))], budget=30, launch_sd=verdicts.LAUNCH_SD, night=12)
    assert report["night"] == 12
    for run in report["landscapes"][0]["runs"]:
        night = Night.of_launches(12, baselines=3 if run["scenario"] == "baseline-optimal" else 2)
        assert night.race_relaunches is not None and night.top == 1  # a race of 6 holds the floor of none
        assert run["launches"] == night.trials == 6  # not the search budget of 30
        assert run["confirm_launches"] <= night.race_relaunches
        if run["confirmed"]:
            assert len([f for f in run["finalists"] if not f["label"].startswith("baseline")]) <= 1
    verdicts.print_table(report)


def test_a_drift_lowers_a_race_round_s_later_launches_and_leaves_the_search_alone() -> None:
    drift = 0.3  # far beyond the measurement's own noise, so each position reads plainly
    subject = verdicts.family_subject(5000, launch_sd=0.0, drift=drift)
    studied = subject.study(subject.space, 1, Night(trials=6))
    by_round: dict[int, list[float]] = {}
    for record in sorted(studied.records, key=lambda r: r.number):
        true = studied.truth(record)
        if not record.served or not true:
            continue
        ratio = (record.value or 0.0) / true
        if record.confirm_of is None:
            assert abs(ratio - 1) < 0.1  # the search's launches are in no round
        else:
            assert record.proposal.launch_round is not None
            by_round.setdefault(record.proposal.launch_round, []).append(ratio)
    assert by_round and all(len(ratios) >= 2 for ratios in by_round.values())
    for ratios in by_round.values():
        assert all(abs(r - (1 - drift * k)) < 0.1 for k, r in enumerate(ratios))
