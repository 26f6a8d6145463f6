"""The race of finalists and baselines, on hand-built records: paired by round so drift cancels, what
is significantly behind drops out, and a gain nobody showed does not replace the baseline."""

from __future__ import annotations

import math
import random

import pytest

from autotune.decision import Launch
from autotune.engines.base import LaunchPlan
from autotune.records import TrialRecord
from autotune.study.confirm import choose_finalists, verdict
from autotune.study.rounds import (
    PRIOR_LAUNCH_NOISE,
    fit,
    launches_to_settle,
    planning_sd,
    relaunches_by_round,
    standing,
)
from autotune.testing.records import trial_record

FIXED = ["tp-size"]


def searched(number: int, value: float, *, baseline: str | None = None, flags: int = 3) -> TrialRecord:
    chosen = {"tp-size": 2, **{f"flag-{i}": number for i in range(flags)}}
    return trial_record(number, value=value, baseline=baseline, config_key=f"config-{number}", flags=chosen,
                        decision=Launch(plan=LaunchPlan(engine="sglang", flags=chosen)))  # fmt: skip


def relaunched(number: int, of: TrialRecord, value: float | None) -> TrialRecord:
    served = value is not None
    return trial_record(number, value=value if served else 0.0, confirm_of=of.number,
                        outcome="ok" if served else "infeasible-memory-high", baseline=of.baseline,
                        reason=None if served else "out of memory", decision=of.decision,
                        config_key=of.launch.config_key, flags=of.flags)  # fmt: skip


def race(finalists: list[TrialRecord], speeds: dict[int, float], rounds: int, *, sd: float, drift: float = 0.0,
         seed: int = 0) -> list[TrialRecord]:  # fmt: skip
    """Interleaved rounds of relaunches of every finalist: each launch its true speed, a round's drift
    for everyone in that round, and launch noise of ``sd``."""
    rng = random.Random(seed)
    records = list(finalists)
    for round_index in range(rounds):
        shift = 1 + drift * round_index
        for finalist in finalists:
            value = speeds[finalist.number] * shift * rng.gauss(1.0, sd)
            records.append(relaunched(len(records) + 100, finalist, value))
    return records


def test_round_effects_cancel_drift_from_the_comparison() -> None:
    launches = {0: {0: 100.0, 1: 80.0, 2: 60.0}, 1: {0: 110.0, 1: 88.0, 2: 66.0}}  # each round 20 % slower
    model = fit(launches)
    difference, half = model.interval(1, 0)
    assert math.exp(difference) == pytest.approx(1.10)
    assert model.sd == pytest.approx(0.0, abs=1e-9) and half == pytest.approx(0.0, abs=1e-9)


def test_a_significantly_slower_config_drops_out_and_equals_settle_the_race() -> None:
    a, b, c = searched(0, 100.0), searched(1, 98.0), searched(2, 80.0)
    records = race([a, b, c], {0: 100.0, 1: 100.0, 2: 80.0}, 3, sd=0.005)
    now = standing(relaunches_by_round(records, [a, b, c]), margin=0.02)
    assert 2 not in now.racing  # 20 % behind with 0.5 % noise
    assert now.settled and sorted(now.equivalent) == [0, 1]


def test_a_gain_inside_the_noise_keeps_the_baseline() -> None:
    # The H200 study: the best 5.5 % ahead of the defaults, launches 4-5 % apart.
    defaults = searched(0, 551.0, baseline="draft-defaults", flags=1)
    best = searched(1, 600.0, flags=8)
    records = race([defaults, best], {0: 551.0, 1: 581.0}, 2, sd=0.045, seed=3)
    result = verdict(records, choose_finalists(records, top=3), objective="decode_tok_s", fixed=FIXED, margin=0.02)
    assert result is not None
    (gain,) = result.gains
    assert gain.baseline == "draft-defaults" and gain.trial == 1 and not gain.significant
    assert result.best == 0 and result.recommended.baseline
    assert result.note.startswith("keep baseline draft-defaults: the best, trial 1, is +")
    assert "not significant" in result.note and not result.settled and result.more_launches


def test_a_gain_well_beyond_the_noise_is_named_with_its_interval() -> None:
    cautious = searched(0, 38.0, baseline="cautious", flags=1)
    hand = searched(1, 52.0, baseline="hand-found", flags=4)
    best = searched(2, 60.0, flags=6)
    records = race([cautious, hand, best], {0: 38.0, 1: 52.0, 2: 58.0}, 3, sd=0.01, drift=-0.05)
    finalists = choose_finalists(records, top=1)
    assert [f.number for f in finalists] == [2, 1, 0]  # the top config, then every baseline
    result = verdict(records, finalists, objective="decode_tok_s", fixed=FIXED, margin=0.02)
    assert result is not None and result.best == 2 and result.settled
    gains = {g.baseline: g for g in result.gains}
    assert gains["hand-found"].significant and gains["hand-found"].gain == pytest.approx(58 / 52 - 1, abs=0.02)
    assert gains["cautious"].low is not None and gains["cautious"].low > 0.4
    assert result.note.startswith("trial 2 is the best: +")
    assert "over hand-found" in result.note


def test_a_baseline_measured_best_does_not_take_the_place_of_the_best_searched_configuration() -> None:
    defaults = searched(0, 60.0, baseline="defaults", flags=1)
    best, second = searched(1, 58.0), searched(2, 55.0)
    assert [f.number for f in choose_finalists([defaults, best, second], top=1)] == [0, 1]
    assert [f.number for f in choose_finalists([defaults, best, second], top=2)] == [0, 1, 2]
    # A search trial that launched the baseline's configuration is that baseline, not a finalist, and
    # the baseline's own record stands for it (it carries the label the verdict compares against).
    again = trial_record(3, value=61.0, config_key="config-0", flags=defaults.flags, decision=defaults.decision)
    assert [f.number for f in choose_finalists([defaults, best, second, again], top=1)] == [0, 1]
    assert [f.baseline for f in choose_finalists([again, defaults, best], top=1)] == ["defaults", None]
    assert [f.number for f in choose_finalists([defaults, best], top=0)] == [0]  # no race: the baselines only


def test_the_verdict_compares_against_a_baseline_whose_configuration_the_search_launched_again() -> None:
    hand = searched(0, 52.0, baseline="hand-found", flags=4)
    again = trial_record(1, value=53.0, config_key=hand.launch.config_key, flags=hand.flags, decision=hand.decision)
    best = searched(2, 60.0, flags=6)
    finalists = choose_finalists([hand, again, best], top=1)
    records = race(finalists, {0: 52.0, 2: 58.0}, 3, sd=0.01)
    result = verdict([again, *records], finalists, objective="decode_tok_s", fixed=FIXED, margin=0.02)
    assert result is not None
    assert [g.baseline for g in result.gains] == ["hand-found"] and result.gains[0].significant


def test_a_finalist_whose_relaunches_fail_is_not_confirmed_and_the_verdict_says_so() -> None:
    baseline, died = searched(0, 50.0, baseline="defaults"), searched(1, 59.8)
    records = [baseline, died]
    for round_index in range(2):
        records.append(relaunched(10 + 2 * round_index, baseline, 50.0 + round_index))
        records.append(relaunched(11 + 2 * round_index, died, None))
    result = verdict(records, [died, baseline], objective="decode_tok_s", fixed=FIXED, margin=0.02)
    assert result is not None and result.best == 0
    failed = next(f for f in result.finalists if f.trial == 1)
    assert not failed.confirmed and failed.values == [] and len(failed.failed) == 2
    assert "trial 1: no relaunch served, not confirmed" in result.note


# ---------------------------------------------------------------- elimination, stopping, the estimate


def _launches(values: dict[int, list[float]]) -> dict[int, dict[int, float]]:
    """Configuration -> round -> value, rounds numbered from 0."""
    return {c: dict(enumerate(v)) for c, v in values.items()}


def test_a_decided_configuration_is_not_relaunched_and_the_open_ones_race_on() -> None:
    # 0 leads; 1 is 30 % behind (decided); 2 is about 1 % behind with launches 2-3 % apart (open).
    launches = _launches({0: [100.0, 104.0, 97.0], 1: [70.0, 71.0, 69.5], 2: [98.0, 99.0, 101.0]})
    now = standing(launches, margin=0.02)
    assert now.leader == 0 and now.racing == [0, 2] and now.decisive == [2] and not now.settled


def test_the_best_baseline_significantly_behind_is_decided_too() -> None:
    # The old race relaunched the best baseline whatever it showed; a decided comparison is not run again.
    launches = _launches({0: [100.0, 101.0, 99.0], 5: [60.0, 61.0, 59.5]})
    now = standing(launches, margin=0.02, baselines={5})
    assert now.settled and now.racing == [0]


def test_stopping_on_the_baseline_ignores_an_open_finalist_stopping_on_all_waits_for_it() -> None:
    # Leader 0 well clear of baseline 5; finalist 2 about 1 % behind the leader, still open.
    launches = _launches({0: [100.0, 104.0, 97.0], 2: [98.0, 99.0, 101.0], 5: [60.0, 61.0, 59.5]})
    assert standing(launches, margin=0.02, baselines={5}, until="baseline").settled
    waiting = standing(launches, margin=0.02, baselines={5}, until="all")
    assert not waiting.settled and waiting.decisive == [2]


def test_the_estimate_is_planned_with_a_normal_quantile_and_a_shrunk_sd() -> None:
    # Two rounds of two configurations: one degree of freedom. With t(1) = 12.7 the old estimate asked
    # for hundreds of launches; the planning one uses 1.96 and the sd shrunk toward the 5 % prior.
    launches = _launches({0: [110.0, 118.0], 1: [100.0, 100.0]})
    model = fit(launches)
    assert model.dof == 1 and model.sd is not None
    sd = planning_sd(model)
    assert min(model.sd, PRIOR_LAUNCH_NOISE) <= sd <= max(model.sd, PRIOR_LAUNCH_NOISE)
    difference = model.effects[0] - model.effects[1]
    expected = math.ceil(2 * (1.959964 * sd / difference) ** 2)
    assert launches_to_settle(model, 0, [1], margin=0.02) == max(expected, 3)
    old = 2 * (12.706 * model.sd / difference) ** 2
    assert launches_to_settle(model, 0, [1], margin=0.02) < old  # type: ignore[operator]


def test_the_estimate_asks_for_one_more_launch_at_least() -> None:
    launches = _launches({0: [150.0, 151.0, 149.0, 150.5], 1: [100.0, 100.5, 99.5, 100.2]})
    model = fit(launches)
    assert launches_to_settle(model, 0, [1], margin=0.02) == 5


@pytest.mark.parametrize(("baseline_flags", "best_flags"), [(2, 7), (7, 2)])
def test_an_open_gap_inside_the_margin_keeps_the_best_baseline_and_says_what_would_settle_it(
    baseline_flags: int, best_flags: int
) -> None:
    # A point gain of about 1 % with launches 6 % apart: the interval spans -12 % to +17 %, so nothing shows
    # the two are within 2 % of each other. The best baseline is kept whichever changes fewer flags (the
    # point estimate alone had called them equivalent and recommended the finalist with fewer flags).
    hand = searched(0, 100.0, baseline="hand-found", flags=baseline_flags)
    best = searched(1, 104.0, flags=best_flags)
    records = [hand, best]
    for index, (a, b) in enumerate([(100.0, 107.0), (108.0, 103.0), (95.0, 97.0)]):
        records += [relaunched(100 + 2 * index, hand, a), relaunched(101 + 2 * index, best, b)]
    result = verdict(records, [best, hand], objective="decode_tok_s", fixed=FIXED, margin=0.02)
    assert result is not None and not result.settled
    (gain,) = result.gains
    assert abs(gain.gain) < 0.02 and not gain.significant and gain.low is not None and gain.low < -0.02
    assert result.best == 0 and result.recommended.baseline
    assert result.more_launches is not None and result.more_launches > 3
    assert result.note.startswith("keep baseline hand-found: the best, trial 1, is +")
    assert result.note.endswith(f"not significant; about {result.more_launches} launches of each, in all, would "
                                "settle it") and "equivalent" not in result.note  # fmt: skip


def test_equals_are_only_what_the_race_settled_inside_the_margin_then_the_fewer_flags_win() -> None:
    # The same two configurations, the finalist truly 0.5 % faster and changing fewer flags: on three noisy rounds
    # the baseline is kept (open); on six precise ones both ends of the interval lie inside ±2 %, the race
    # settles them equal and recommends the finalist, saying they are as fast.
    hand = searched(0, 100.0, baseline="hand-found", flags=7)
    best = searched(1, 101.0, flags=2)
    noisy = race([hand, best], {0: 100.0, 1: 100.5}, 3, sd=0.06, seed=9)
    precise = race([hand, best], {0: 100.0, 1: 100.5}, 6, sd=0.003, seed=2)
    open_, settled = (verdict(r, [best, hand], objective="decode_tok_s", fixed=FIXED, margin=0.02)
                      for r in (noisy, precise))  # fmt: skip
    assert open_ is not None and settled is not None
    (point,) = open_.gains  # the finalist leads by a point gain inside the margin, its interval far wider
    assert open_.leader == 1 and abs(point.gain) < 0.02 and point.low is not None and point.low < -0.1
    assert not open_.settled and open_.best == 0 and open_.more_launches
    assert settled.settled and settled.best == 1 and settled.tied_with == [0]
    (gain,) = settled.gains
    assert gain.low is not None and gain.high is not None and -0.02 < gain.low and gain.high < 0.02
    assert settled.note.startswith("trial 1 is as fast as baseline hand-found within the margin and nearer")
    assert settled.note.count(". ") == 0 and "\n" not in settled.note  # one sentence


def test_an_open_gap_beyond_the_margin_still_says_what_would_settle_it() -> None:
    hand = searched(0, 100.0, baseline="hand-found", flags=2)
    best = searched(1, 110.0, flags=7)
    records = [hand, best]
    for index, (a, b) in enumerate([(100.0, 115.0), (108.0, 103.0)]):
        records += [relaunched(100 + 2 * index, hand, a), relaunched(101 + 2 * index, best, b)]
    result = verdict(records, [best, hand], objective="decode_tok_s", fixed=FIXED, margin=0.02)
    assert result is not None and not result.settled and result.best == 0
    assert result.more_launches is not None and result.more_launches > 2
    assert f"about {result.more_launches} launches of each, in all, would settle it" in result.note


def test_a_significant_gain_with_a_rival_still_open_names_the_rival_not_the_gain() -> None:
    hand = searched(0, 100.0, baseline="hand-found", flags=2)
    best = searched(1, 130.0, flags=7)
    rival = searched(2, 128.0, flags=6)
    records = [hand, best, rival]
    for index, (a, b, c) in enumerate([(100.0, 131.0, 124.0), (101.0, 128.0, 131.0), (99.0, 132.0, 126.0)]):
        records += [relaunched(100 + 3 * index, hand, a), relaunched(101 + 3 * index, best, b),
                    relaunched(102 + 3 * index, rival, c)]  # fmt: skip
    result = verdict(records, [best, rival, hand], objective="decode_tok_s", fixed=FIXED, margin=0.02)
    assert result is not None and not result.settled and result.best == 1
    assert "significant" in result.note and "not significant" not in result.note
    assert f"about {result.more_launches} launches of each, in all, would tell it from trial 2" in result.note


def test_the_estimate_is_for_the_gain_the_sentence_states_not_a_rival_inside_the_margin() -> None:
    # README's demo under load (2026-12-04): trial 2 leads trial 6 by 0.9 % (open, inside the margin) and
    # hand-found by 10.5 % (open). The sentence states the gain over hand-found; its estimate had been the
    # 306 launches that telling trial 2 from trial 6 would take.
    hand, cautious = searched(1, 52.0, baseline="hand-found", flags=7), searched(0, 37.0, baseline="cautious", flags=4)
    best, rival, third = searched(2, 58.0, flags=9), searched(6, 57.0, flags=9), searched(3, 50.0, flags=9)
    finalists = [best, rival, third, hand, cautious]
    relaunches = [[53.46, 55.60, 64.99, 53.68], [58.90, 54.34, 52.50, 59.97], [45.68, 46.70],
                  [48.86, 54.44, 51.85, 50.46], [35.93, 38.30]]  # fmt: skip
    records = list(finalists)
    for round_index in range(4):
        for finalist, values in zip(finalists, relaunches, strict=True):
            if round_index < len(values):
                records.append(relaunched(100 + len(records), finalist, values[round_index]))
    result = verdict(records, finalists, objective="decode_tok_s", fixed=FIXED, margin=0.02)
    assert result is not None and not result.settled and result.leader == 2 and result.best == 1
    model = fit({c: v for c, v in relaunches_by_round(records, finalists).items() if v})
    stated = launches_to_settle(model, 2, [1], margin=0.02, comparisons=3)  # three configurations raced
    assert result.more_launches == stated and stated is not None and stated < 50
    assert launches_to_settle(model, 2, [6], margin=0.02) > 100  # what the sentence had named
    assert result.note.startswith("keep baseline hand-found: the best, trial 2, is +10.")
    assert result.note.endswith(f"not significant; about {stated} launches of each, in all, would settle it")


def test_each_configuration_is_shown_against_the_best_baseline_with_the_verdicts_own_interval() -> None:
    from rich.console import Console

    from autotune.report.console import confirmation_table

    cautious = searched(0, 38.0, baseline="cautious", flags=1)
    hand = searched(1, 52.0, baseline="hand-found", flags=4)
    best, other = searched(2, 58.0, flags=6), searched(3, 56.0, flags=5)
    records = race([cautious, hand, best, other], {0: 38.0, 1: 52.0, 2: 54.0, 3: 53.0}, 3, sd=0.04, seed=5)
    result = verdict(records, choose_finalists(records, top=2), objective="decode_tok_s", fixed=FIXED, margin=0.02)
    assert result is not None and result.reference == 1  # hand-found: the baseline the verdict compares with
    versus = {g.trial: g for g in result.versus}
    assert set(versus) == {0, 2, 3} and all(g.baseline_trial == 1 for g in versus.values())
    # the leader's row is the verdict's own comparison: the same gain and the same (paired, widened) interval
    stated = next(g for g in result.gains if g.baseline_trial == 1)
    assert versus[result.leader] == stated
    console = Console(width=220, record=True)
    console.print(confirmation_table(result))
    text = console.export_text()
    assert "vs baseline hand-found (verdict's 95% CI)" in text and "reference" in text
    assert stated.interval_text() in text and stated.interval_text().split(" ")[1].strip("(") in result.note


def test_on_vllm_equals_are_resolved_toward_the_smaller_gpu_memory_utilization() -> None:
    """Without a logged peak the race reads each engine's own memory flag: vLLM's is
    --gpu-memory-utilization (it had none, so a vLLM tie fell to the higher mean)."""

    def vllm(number: int, utilization: float, value: float) -> TrialRecord:
        flags = {"tp-size": 2, "gpu-memory-utilization": utilization}
        return trial_record(number, value=value, engine="vllm", config_key=f"config-{number}", flags=flags,
                            decision=Launch(plan=LaunchPlan(engine="vllm", flags=flags)))  # fmt: skip

    roomy, lean = vllm(0, 0.95, 100.0), vllm(1, 0.80, 99.0)
    records = race([roomy, lean], {0: 100.0, 1: 100.0}, 4, sd=0.002, seed=1)
    result = verdict(records, choose_finalists(records, top=2), objective="decode_tok_s", fixed=FIXED, margin=0.02)
    assert result is not None and sorted(result.tied_with + [result.best]) == [0, 1]
    assert {f.trial: f.memory for f in result.finalists} == {0: 0.95, 1: 0.80}
    assert result.best == 1
