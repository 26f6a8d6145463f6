"""A study's records as calibration points (autotune.calibration_points), read back by the twin's
own points reader (passmodel.calibrate.Point)."""

from __future__ import annotations

from autotune.calibration_points import calibration_points
from autotune.decision import Reuse
from autotune.engines import get_engine
from autotune.records import LevelRecord, MetricRecord
from autotune.testing.records import trial_record
from passmodel.calibrate import Point

MTP3 = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3, "speculative-eagle-topk": 1}


def measured(
    tok_s: float | None, *, accept: float | None = None, out: int = 480, prompts: int | None = 1520, n: int = 10
) -> dict[str, MetricRecord]:
    """A measurement's metrics: ``n`` requests, ``out`` and ``prompts`` tokens over all of them."""
    metrics = {
        "decode_tok_s": MetricRecord(value=50.0, unit="tok/s", n=4),
        "completion_tokens": MetricRecord(value=out, unit="tok", n=n),
    }
    if tok_s is not None:
        metrics["output_tok_s"] = MetricRecord(value=tok_s, unit="tok/s", n=2)
    if accept is not None:
        metrics["accept_length"] = MetricRecord(value=accept, unit="tok/step", n=n)
    if prompts is not None:
        metrics["prompt_tokens"] = MetricRecord(value=prompts, unit="tok", n=n)
    return metrics


def test_each_measured_launch_is_a_point_at_the_objectives_concurrency() -> None:
    records = [
        trial_record(
            0, engine="sglang", flags=MTP3 | {"mem-fraction-static": 0.88}, metrics=measured(54.5, accept=3.7)
        ),
        trial_record(1, engine="sglang", flags={"mem-fraction-static": 0.9}, metrics=measured(31.0)),
        trial_record(2, engine="sglang", flags=MTP3, outcome="infeasible-memory-low", metrics=measured(1.0)),
        trial_record(3, engine="sglang", flags=MTP3, metrics=measured(None, accept=3.0)),  # no output rate
        trial_record(4, engine="sglang", flags=MTP3, confirm_of=0, metrics=measured(55.5, accept=3.6)),
        trial_record(5, flags=MTP3, decision=Reuse(rule="same", trial=0, same_config=True), metrics=measured(54.5)),
    ]
    found = calibration_points(records, concurrency=8)
    assert [p.model_dump(exclude_none=True) for p in found.points] == [
        {"flags": MTP3, "concurrency": 8, "input_len": 152, "output_len": 48, "tok_s": 54.5, "accept_length": 3.7},
        {"flags": {}, "concurrency": 8, "input_len": 152, "output_len": 48, "tok_s": 31.0},
        {"flags": MTP3, "concurrency": 8, "input_len": 152, "output_len": 48, "tok_s": 55.5, "accept_length": 3.6},
    ]
    assert found.without_prompt_tokens == 0 and found.other_engines == []
    for point in found.points:  # what the twin's calibrate reads
        assert Point.model_validate_json(point.model_dump_json(exclude_none=True)).tok_s == point.tok_s


def test_a_levels_study_gives_one_point_per_level() -> None:
    levels = {
        1: LevelRecord(concurrency=1, metrics=measured(40.0, accept=3.1)),
        16: LevelRecord(concurrency=16, metrics=measured(410.0, accept=2.9, out=960, prompts=3040, n=20)),
    }
    record = trial_record(0, engine="sglang", flags=MTP3, metrics=measured(40.0, accept=3.1), levels=levels)
    points = calibration_points([record], concurrency=1).points
    assert [(p.concurrency, p.tok_s, p.accept_length, p.output_len) for p in points] == [
        (1, 40.0, 3.1, 48),
        (16, 410.0, 2.9, 48),
    ]


def test_vllm_speculation_is_one_speculative_config_mapping() -> None:
    as_json = {"speculative-config": '{"method": "mtp", "num_speculative_tokens": 3}', "max-num-seqs": 16}
    as_fields = {"speculative-method": "mtp", "num-speculative-tokens": "2", "gpu-memory-utilization": 0.9}
    records = [
        trial_record(0, engine="vllm", flags=as_json, metrics=measured(60.0, accept=3.2)),
        trial_record(1, engine="vllm", flags=as_fields, metrics=measured(50.0, accept=2.5)),
        trial_record(2, engine="vllm", flags={"max-num-seqs": 16}, metrics=measured(30.0)),
    ]
    flags = [p.flags for p in calibration_points(records, concurrency=1).points]
    assert flags == [
        {"speculative-config": {"method": "mtp", "num_speculative_tokens": 3}},
        {"speculative-config": {"method": "mtp", "num_speculative_tokens": 2}},
        {},
    ]


def test_sglang_flags_are_the_speculative_ones_with_numbers_as_numbers_and_llamacpp_has_none() -> None:
    flags = {
        "speculative-num-steps": "3",
        "speculative-adaptive": True,
        "tp-size": 2,
        "speculative-draft-model-path": "z-lab/Qwen3.6-27B-DFlash",
        "speculative-accept-threshold-single": "0.5",
    }
    assert get_engine("sglang").calibration_flags(flags) == {
        "speculative-num-steps": 3,
        "speculative-adaptive": True,
        "speculative-draft-model-path": "z-lab/Qwen3.6-27B-DFlash",
        "speculative-accept-threshold-single": 0.5,
    }
    assert get_engine("llamacpp").calibration_flags({"draft-max": 8}) is None


def test_a_study_before_prompt_tokens_and_other_engines_are_counted() -> None:
    records = [
        trial_record(0, engine="sglang", flags=MTP3, metrics=measured(54.5, prompts=None)),
        trial_record(1, engine="llamacpp", flags={"draft-max": 8}, metrics=measured(20.0)),
        trial_record(2, flags=MTP3, metrics=measured(50.0)),  # no engine stored: the default, SGLang
    ]
    found = calibration_points(records, concurrency=1)
    assert [p.input_len for p in found.points] == [0, 152]
    assert found.without_prompt_tokens == 1 and found.other_engines == [1]
