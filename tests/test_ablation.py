"""The search ablation (benchmarks/ablation.py): its rows cover every rule, and its statistics
decide "better than without it" only beyond the members' noise."""

from __future__ import annotations

import random

from autotune.study.rules import RULE_NAMES
from benchmarks import ablation
from benchmarks.ablation import FULL, Outcome, Results, Row


def test_the_rows_switch_off_every_rule_once() -> None:
    assert [r.rules_off[0] for r in ablation.ROWS if r.rules_off] == list(RULE_NAMES)
    assert ablation.ROWS[0] == FULL and any(r.sampler == "random" for r in ablation.ROWS)


def test_not_reached_counts_past_the_budget_and_quantiles_are_nearest_rank() -> None:
    values = ablation.reached([Outcome(5, 0.0), Outcome(None, 0.1), Outcome(9, 0.0)], 60)
    assert values == [5.0, 61.0, 9.0]
    assert ablation.quantile(values, 0.5) == 9.0 and ablation.quantile(values, 0.9) == 61.0


def _results(full: list[int], other: list[int]) -> Results:
    results = Results()
    for a, b in zip(full, other, strict=True):
        results.add(FULL, Outcome(a, 0.0))
        results.add(Row("- rule thing", rules_off=("memory",)), Outcome(b, 0.0))
    return results


def test_a_row_worse_on_every_member_earns_its_keep_and_one_within_the_noise_does_not() -> None:
    rng = random.Random(0)
    full = [rng.randint(5, 30) for _ in range(30)]
    worse = ablation.family_table(_results(full, [v + 10 for v in full]), 60)[1]
    assert worse["median_minus_full"][0] > 0 and ablation.earns_its_keep(worse)
    shuffled = full[:]
    rng.shuffle(shuffled)  # the same values on other members: no difference but the noise
    alike = ablation.family_table(_results(full, shuffled), 60)[1]
    assert alike["median_minus_full"][0] <= 0 <= alike["median_minus_full"][1]
    assert not ablation.earns_its_keep(alike)


def test_a_full_budget_run_is_a_night_search_and_race_inside_the_budget() -> None:
    from autotune.study.race import split_launches

    seed, case, _, stopped = ablation.family_member((9902, 12, (FULL,), False))
    assert stopped[FULL.name].raced_within_2pct is None  # stopping at 2 %, nothing is raced
    _, _, _, full = ablation.family_member((9902, 12, (FULL,), True))
    outcome = full[FULL.name]
    assert outcome.raced_within_2pct is not None
    assert outcome.night_launches is not None and outcome.night_launches <= 12  # the race is in the budget
    assert 0 <= outcome.false_claims <= outcome.claims
    search, _ = split_launches(12, 5)  # a family member has two baselines, and the top 3 race
    assert case in ("base", "wide-trees", "flat-top", "huge")
    # one run, two stopping rules: the path to 2 % is the same draw as far as the search went
    before = stopped[FULL.name].launches_to_find_2pct
    if before is not None and before <= search:
        assert outcome.launches_to_find_2pct == before
