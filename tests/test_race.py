"""The race of finalists and baselines, on hand-built records: paired by round so drift cancels, what
is significantly behind drops out, and a gain nobody showed does not replace the baseline."""

from __future__ import annotations

import math
import random

import pytest

from autotune.decision import Launch
from autotune.engines.base import LaunchPlan
from autotune.records import TrialRecord
from autotune.study.confirm import choose_finalists, confirm, confirmation_launches, fit, standing

FIXED = ["tp-size"]


def searched(number: int, value: float, *, baseline: str | None = None, flags: int = 3) -> TrialRecord:
    chosen = {"tp-size": 2, **{f"flag-{i}": number for i in range(flags)}}
    return TrialRecord(number=number, state="COMPLETE", outcome="ok", value=value, feasible=True, baseline=baseline,
                       config_key=f"config-{number}", flags=chosen,
                       decision=Launch(plan=LaunchPlan(engine="sglang", flags=chosen)))  # fmt: skip


def relaunched(number: int, of: TrialRecord, value: float | None) -> TrialRecord:
    served = value is not None
    return of.model_copy(update={"number": number, "value": value if served else 0.0, "confirm_of": of.number,
                                 "outcome": "ok" if served else "infeasible-memory-high", "feasible": served,
                                 "baseline": of.baseline, "reason": None if served else "out of memory"})  # fmt: skip


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
    now = standing(confirmation_launches(records, [a, b, c]), margin=0.02)
    assert 2 not in now.racing  # 20 % behind with 0.5 % noise
    assert now.settled and sorted(now.equivalent) == [0, 1]


def test_a_gain_inside_the_noise_keeps_the_baseline() -> None:
    # The H200 study: the best 5.5 % ahead of the defaults, launches 4-5 % apart.
    defaults = searched(0, 551.0, baseline="draft-defaults", flags=1)
    best = searched(1, 600.0, flags=8)
    records = race([defaults, best], {0: 551.0, 1: 581.0}, 2, sd=0.045, seed=3)
    result = confirm(records, choose_finalists(records, top=3), objective="decode_tok_s", fixed=FIXED, margin=0.02)
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
    result = confirm(records, finalists, objective="decode_tok_s", fixed=FIXED, margin=0.02)
    assert result is not None and result.best == 2 and result.settled
    gains = {g.baseline: g for g in result.gains}
    assert gains["hand-found"].significant and gains["hand-found"].gain == pytest.approx(58 / 52 - 1, abs=0.02)
    assert gains["cautious"].low is not None and gains["cautious"].low > 0.4
    assert result.note.startswith("trial 2 is the best: +")
    assert "over hand-found" in result.note


def test_a_finalist_whose_relaunches_fail_is_not_confirmed_and_the_verdict_says_so() -> None:
    baseline, died = searched(0, 50.0, baseline="defaults"), searched(1, 59.8)
    records = [baseline, died]
    for round_index in range(2):
        records.append(relaunched(10 + 2 * round_index, baseline, 50.0 + round_index))
        records.append(relaunched(11 + 2 * round_index, died, None))
    result = confirm(records, [died, baseline], objective="decode_tok_s", fixed=FIXED, margin=0.02)
    assert result is not None and result.best == 0
    failed = next(f for f in result.finalists if f.trial == 1)
    assert not failed.confirmed and failed.values == [] and len(failed.failed) == 2
    assert "trial 1: no relaunch served, not confirmed" in result.note
