"""``bench --profile``'s verdict: a one-sided (non-inferiority) test of the fresh figure against the
recorded one, its three categories and their boundaries, the interval it is read off, and the exit
code a schedule's levels give."""

from __future__ import annotations

import pytest

from autotune.bench import Verdict, VerdictCategory, compare, compare_levels, levels_exit_code
from autotune.measure.client import Measurement
from autotune.measure.statistics import Metric
from autotune.profile import Profile, ProfileLevel, ProfileMetric

NOT_SLOWER, SLOWER, CANNOT_TELL = VerdictCategory.NOT_SLOWER, VerdictCategory.SLOWER, VerdictCategory.CANNOT_TELL


def profile(value: float = 100.0, ci95: float | None = None, *, launches: int | None = None) -> Profile:
    """A profile recording ``value`` tok/s: the mean over ``launches`` confirmed launches, else one launch."""
    metric = ProfileMetric(value=value, unit="tok/s", ci95=ci95, n=launches)
    return Profile(study="s", trial=0, engine="llamacpp", model="m.gguf", launcher=["llama-server"], flags={},
                   metrics={"decode_tok_s": metric}, confirmed_launches=launches)  # fmt: skip


def measured(value: float, ci95: float | None = None, *, concurrency: int = 1) -> Measurement:
    speed = Metric(name="decode_tok_s", unit="tok/s", value=value, ci95=ci95, n=4)
    return Measurement(
        objective="decode_tok_s", concurrency=concurrency, max_tokens_cap=64, ignore_eos=True, warmup_requests=1,
        rounds=4, round_values=[value] * 4, precision_target=0.02, precision_reached=False, stop_reason="max rounds",
        steadiness=None, metrics=[speed], categories=[], duration_s=5.0, requests=[],
    )  # fmt: skip


def verdict(low: float, high: float, *, margin: float = 0.03) -> Verdict:
    """A verdict with the interval given (its category reads only the interval and the margin)."""
    return Verdict(metric="decode_tok_s", recorded=100.0, recorded_ci95=None, measured=100 * (1 + (low + high) / 2),
                   measured_ci95=None, launch_ci95=9.8, launches=None, margin=margin, change=(low + high) / 2,
                   low=low, high=high)  # fmt: skip


def judged(profile: Profile, measurement: Measurement, margin: float = 0.03) -> Verdict:
    result = compare(profile, measurement, margin=margin)
    assert result is not None
    return result


def test_the_next_morning_a_change_whose_interval_stays_above_minus_the_margin_is_not_slower() -> None:
    # The H200 relaunch that an equivalence test called "cannot tell apart": +3.5 % (-0.1 % to +7.0 %).
    # Confirmed over 3 launches (one launch varies by 1.5 * sqrt 3 = ±2.6 %), this launch's rounds ±1.9 %.
    result = judged(profile(100.0, 1.5, launches=3), measured(103.5, 1.9))
    assert result.low == pytest.approx(-0.0005, abs=1e-4) and result.high == pytest.approx(0.0705, abs=1e-4)
    assert result.category is NOT_SLOWER and result.category.exit_code == 0
    assert result.text() == "not slower than recorded by more than 3%: +3.5% (-0.1% to +7.1%)"
    # a drop within the margin, even a significant one, is not slower by more than the margin
    within = judged(profile(100.0, 0.5, launches=4), measured(98.5, 0.5))
    assert within.high < 0 and within.low >= -0.03 and within.category is NOT_SLOWER


def test_faster_is_not_slower_and_says_faster_only_when_the_whole_interval_is_above_zero() -> None:
    faster = judged(profile(100.0, 1.0, launches=4), measured(104.1, 1.0))
    assert faster.low > 0 and faster.category is NOT_SLOWER
    assert faster.text().startswith("not slower: faster by 4.1% (significant): +4.1% (")
    assert verdict(0.001, 0.05).text().startswith("not slower: faster by")
    assert verdict(0.0, 0.05).text().startswith("not slower than recorded by more than 3%")


def test_slower_only_when_the_whole_interval_lies_below_minus_the_margin() -> None:
    slower = judged(profile(100.0, 1.0, launches=4), measured(90.0, 1.0))
    assert slower.high < -0.03 and slower.category is SLOWER and slower.category.exit_code == 1
    assert slower.text().startswith("slower by 10.0% (significant, beyond the 3% margin): -10.0% (")
    # significantly slower, but not significantly by more than the margin: not told yet
    near = judged(profile(100.0, 1.0, launches=4), measured(96.0, 1.0))
    assert -0.03 < near.high < 0 and near.category is CANNOT_TELL
    assert "-4.0% (-6.4% to -1.6%), significantly slower but perhaps by less; " in near.text()


@pytest.mark.parametrize(
    ("low", "high", "category"),
    [
        (-0.03, 0.05, NOT_SLOWER),  # the low end on -margin: not slower
        (-0.0301, 0.05, CANNOT_TELL),  # just below it, the high end above it
        (-0.10, -0.03, CANNOT_TELL),  # the high end on -margin: not wholly below it
        (-0.10, -0.0301, SLOWER),
        (-0.50, -0.40, SLOWER),
        (0.02, 0.08, NOT_SLOWER),
    ],
)
def test_the_boundaries_of_the_three_categories(low: float, high: float, category: VerdictCategory) -> None:
    assert verdict(low, high).category is category


def test_a_margin_of_zero_asks_only_whether_it_is_significantly_slower() -> None:
    assert verdict(0.0, 0.04, margin=0.0).category is NOT_SLOWER
    assert verdict(-0.01, 0.04, margin=0.0).category is CANNOT_TELL
    assert verdict(-0.05, -0.01, margin=0.0).category is SLOWER


def test_cannot_tell_says_what_would_settle_it_in_one_sentence() -> None:
    # this launch's few rounds make most of the interval: more rounds
    rounds = judged(profile(100.0, 1.0, launches=4), measured(97.0, 12.0))
    assert rounds.category is CANNOT_TELL
    assert rounds.text().endswith("; more rounds (--max-rounds) would settle it")
    # an unconfirmed profile: one launch's noise is the 5 % prior (±9.8 %) until a confirmation measures it
    prior = judged(profile(100.0, 2.0), measured(99.0, 2.0))
    assert prior.launches is None and prior.launch_ci95 == pytest.approx(9.8)
    assert prior.category is CANNOT_TELL and "autotune confirm" in prior.text() and "±9.8%" in prior.text()
    # confirmed, and one launch varies by more than the margin leaves room for
    noisy = judged(profile(100.0, 3.0, launches=9), measured(99.0, 2.0))
    assert noisy.launches == 9 and noisy.launch_ci95 == pytest.approx(9.0)
    assert noisy.text().endswith("one launch varies by ±9.0% here, which more rounds do not narrow: only a wider "
                                 "--margin would settle it")  # fmt: skip
    # the recorded mean's own interval is the widest part (its launches varied a lot between them)
    assert "confirming the profile over more launches" in verdict(-0.1, 0.1).model_copy(
        update={"recorded_ci95": 20.0, "launch_ci95": 5.0, "measured_ci95": 1.0}
    ).text()
    for each in (rounds, prior, noisy, verdict(-0.2, -0.1), verdict(0.01, 0.2), verdict(-0.02, 0.2)):
        assert ". " not in each.text() and "\n" not in each.text(), each.text()  # one sentence


def test_the_json_carries_the_category() -> None:
    dumped = judged(profile(100.0, 1.0, launches=4), measured(90.0, 1.0)).model_dump(mode="json")
    assert dumped["category"] == "slower"
    assert {verdict(-0.01, 0.05).model_dump(mode="json")["category"], verdict(-0.1, 0.05).model_dump()["category"]} \
        == {"not-slower", "cannot-tell"}  # fmt: skip


def test_a_schedules_levels_exit_with_the_worst_verdict() -> None:
    base = profile(100.0, 1.0, launches=4)
    at = base.model_copy(update={"levels": [
        ProfileLevel(concurrency=c, metrics={"decode_tok_s": ProfileMetric(value=100.0, unit="tok/s", ci95=1.0, n=4)})
        for c in (1, 4, 16)
    ]})  # fmt: skip
    fresh = {1: measured(101.0, 1.0, concurrency=1), 4: measured(96.0, 1.0, concurrency=4),
             16: measured(80.0, 1.0, concurrency=16)}  # fmt: skip
    verdicts = compare_levels(at, list(fresh.values()), margin=0.03)
    assert {c: v.category for c, v in verdicts.items() if v} == {1: NOT_SLOWER, 4: CANNOT_TELL, 16: SLOWER}
    assert levels_exit_code(verdicts.values()) == 1
    assert levels_exit_code([verdicts[1], verdicts[4]]) == 3
    assert levels_exit_code([verdicts[1]]) == 0
    # a level the launch did not measure fails the check
    missing = compare_levels(at, [fresh[1], fresh[4]], margin=0.03)
    assert missing[16] is None and levels_exit_code(missing.values()) == 1
