"""Break-even acceptance on hand-made records whose step costs are known exactly."""

from __future__ import annotations

import pytest

from autotune.decision import Reuse
from autotune.records import MetricRecord, TrialRecord
from autotune.study.breakeven import SpeedPoint, break_even, speed_point
from autotune.testing.records import trial_record


def record(number: int, tok_s: float, accept: float | None, **flags: object) -> TrialRecord:
    metrics = {"decode_tok_s": MetricRecord(value=tok_s, unit="tok/s")}
    if accept is not None:
        metrics["accept_length"] = MetricRecord(value=accept, unit="tok/step")
    return trial_record(number, value=tok_s, engine="sglang", effective=flags, metrics=metrics,
                        roofline_share=0.5 if not flags else None)  # fmt: skip


def cycle_tok_s(accept: float, pass_ms: float, step_ms: float, steps: int) -> float:
    return accept / ((pass_ms + steps * step_ms) / 1000)


# No speculation: a 20 ms pass. NEXTN heads: 25 ms pass + 5 ms a step. A DFlash drafter at one depth: 40 ms.
NEXTN = {"speculative-algorithm": "NEXTN"}
DFLASH = {"speculative-algorithm": "DFLASH", "speculative-draft-model-path": "/ckpt/dflash-27b"}
RECORDS = [
    record(0, 1 / 0.020, None),
    record(1, cycle_tok_s(1.8, 25, 5, 1), 1.8, **NEXTN, **{"speculative-num-steps": 1}),
    record(2, cycle_tok_s(3.0, 25, 5, 3), 3.0, **NEXTN, **{"speculative-num-steps": 3}),
    record(3, cycle_tok_s(3.5, 25, 5, 5), 3.5, **NEXTN, **{"speculative-num-steps": 5}),
    record(4, cycle_tok_s(4.2, 20, 40, 1), 4.2, **DFLASH, **{"speculative-num-steps": 1}),
]


def points(records: list[TrialRecord]) -> list[SpeedPoint]:
    return [p for r in records if (p := speed_point(r, engine="sglang")) is not None]


def test_each_drafter_gets_its_step_costs_and_the_accept_length_that_ties_the_best() -> None:
    best = RECORDS[2]  # NEXTN at 3 steps: 75 tok/s
    result = break_even(points(RECORDS), best_tok_s=best.value, best_trial=best.number)
    assert result.note is None and result.bare_trials == [0]
    assert result.bare_pass_s == pytest.approx(0.020)
    nextn, dflash = sorted(result.drafters, key=lambda d: d.drafter)[::-1]
    assert nextn.drafter == "NEXTN" and nextn.pass_from == "fit" and nextn.trials == [1, 2, 3]
    assert (nextn.pass_s, nextn.step_s) == (pytest.approx(0.025), pytest.approx(0.005))
    assert nextn.rms_rel == pytest.approx(0.0, abs=1e-9)
    assert nextn.steps == 3 and nextn.break_even == pytest.approx(3.0)  # the best ties itself
    # one depth measured: the pass is the bare pass, the rest of the cycle is drafting
    assert dflash.drafter == "DFLASH dflash-27b" and dflash.pass_from == "bare pass"
    assert (dflash.pass_s, dflash.step_s) == (pytest.approx(0.020), pytest.approx(0.040))
    assert dflash.break_even == pytest.approx(75 * 0.060)  # 4.5, against 4.2 measured
    assert dflash.measured_accept == pytest.approx(4.2)
    assert dflash.predicted_tok_s(4.5) == pytest.approx(75)
    # the roofline: half the bandwidth share of a 20 ms pass is 10 ms, so even a free drafter needs 0.75
    assert result.roofline_pass_s == pytest.approx(0.010) and result.floor == pytest.approx(0.75)


def test_a_noisy_fit_says_how_far_off_it_is() -> None:
    noisy = [*RECORDS[:2], record(2, cycle_tok_s(3.0, 25, 5, 3) * 1.1, 3.0, **NEXTN, **{"speculative-num-steps": 3}),
             RECORDS[3]]  # fmt: skip
    fit = break_even(points(noisy), best_tok_s=80.0, best_trial=2).drafters[0]
    assert 0.01 < fit.rms_rel < 0.1


def test_without_speculative_trials_or_enough_of_them_it_says_so() -> None:
    assert break_even(points(RECORDS[:1]), best_tok_s=50.0, best_trial=0).note == (
        "no speculative trial measured: nothing to fit"
    )
    one_depth = break_even(points([RECORDS[2]]), best_tok_s=75.0, best_trial=2)
    assert one_depth.drafters == [] and one_depth.note is not None and one_depth.note.startswith("too few")
    assert break_even([], best_tok_s=None, best_trial=None).note == "no measured trial to compare with"


def test_unmeasured_and_borrowed_trials_are_not_points() -> None:
    failed = RECORDS[1].model_copy(update={"outcome": "diverged"})
    duplicate = RECORDS[1].model_copy(update={"decision": Reuse(rule="duplicate", trial=0, same_config=True)})
    no_accept = record(9, 60.0, None, **NEXTN, **{"speculative-num-steps": 2})
    assert points([failed, duplicate, no_accept]) == []
