"""The speculation schedule's pure parts: the schedule a levels study's records give (tiers, shared
flags, the adaptive config SGLang 0.5.23 reads), and the verdict judged on the race's launches with
the race's own fit (:func:`autotune.study.rounds.fit`). The twin runs are in test_schedule_twin.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from autotune.engines import get_engine
from autotune.profile import Profile, load_profile, render
from autotune.records import LevelRecord, MetricRecord, TrialRecord
from autotune.study.levels import load_levels
from autotune.study.schedule import SCHEDULE, Launches, NoSchedule, Schedule, build, judge, schedule_profile
from autotune.testing.records import trial_record

LEVELS = [1, 4, 16]
SHARED = {"tp-size": 2, "speculative-algorithm": "NEXTN", "mem-fraction-static": 0.85}


def record(number: int, steps: int, speeds: dict[int, float], **flags: object) -> TrialRecord:
    """A trial measured at each level (decode_tok_s per level), launched with ``steps`` draft steps."""
    spec = {"speculative-num-steps": steps, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": steps + 1}
    levels = {
        c: LevelRecord(concurrency=c, metrics={"decode_tok_s": MetricRecord(value=v, unit="tok/s", ci95=1.0, n=4)})
        for c, v in speeds.items()
    }
    return trial_record(number, value=speeds[1], baseline=f"steps-{steps}", flags={**SHARED, **spec, **flags},
                        metrics=levels[1].metrics, levels=levels)  # fmt: skip


def schedule_of(records: list[TrialRecord]) -> Schedule | NoSchedule:
    best = max(records, key=lambda r: r.value or 0.0)
    levels = load_levels(records, LEVELS, metric="decode_tok_s", primary_best=best, gpus=2)
    return build(records, levels, study="s")


def deep_alone_shallow_loaded() -> list[TrialRecord]:
    return [
        record(0, 2, {1: 47.0, 4: 43.0, 16: 25.0}),
        record(1, 5, {1: 57.0, 4: 45.0, 16: 20.0}),
        record(2, 3, {1: 53.0, 4: 48.0, 16: 23.0}),
    ]


def test_each_level_s_winner_is_its_tier_with_one_candidate_step_per_slot() -> None:
    schedule = schedule_of(deep_alone_shallow_loaded())
    assert isinstance(schedule, Schedule)
    assert [(t.concurrency, t.steps, t.trial) for t in schedule.tiers] == [(1, 5, 1), (4, 3, 2), (16, 2, 0)]
    # one candidate per slot: SGLang's EMA controller has nothing to move, the schedule is the measured one;
    # a slot starts halfway (geometrically) from the level below: batches 2-7 run level 4's depth
    assert schedule.adaptive_config() == {
        "1": {"candidate_steps": [5]}, "2": {"candidate_steps": [3]}, "8": {"candidate_steps": [2]}
    }  # fmt: skip
    flags = schedule.launch_flags("/etc/a.json")
    assert flags["speculative-adaptive"] is True and flags["speculative-adaptive-config"] == "/etc/a.json"
    assert (flags["speculative-num-steps"], flags["speculative-eagle-topk"], flags["speculative-num-draft-tokens"]) == (
        5, 1, 6)  # fmt: skip
    assert flags["tp-size"] == 2 and schedule.decisions == []


def test_the_engine_accepts_the_schedule_it_would_launch(tmp_path: Path) -> None:
    schedule = schedule_of(deep_alone_shallow_loaded())
    assert isinstance(schedule, Schedule)
    path = tmp_path / "adaptive.json"
    path.write_text(json.dumps(schedule.adaptive_config()))
    plan = get_engine("sglang").normalise(schedule.launch_flags(str(path)))
    assert plan.flags["speculative-num-steps"] == 5 and plan.flags["speculative-adaptive"] is True


def test_neighbouring_levels_of_one_depth_share_a_slot() -> None:
    records = [record(0, 1, {1: 37.0, 4: 35.0, 16: 20.0}), record(1, 5, {1: 57.0, 4: 33.0, 16: 15.0})]
    schedule = schedule_of(records)
    assert isinstance(schedule, Schedule)
    assert schedule.adaptive_config() == {"1": {"candidate_steps": [5]}, "2": {"candidate_steps": [1]}}


def test_one_depth_everywhere_is_no_schedule_and_names_the_static_to_run() -> None:
    records = [record(0, 2, {1: 47.0, 4: 43.0, 16: 30.0}), record(1, 5, {1: 57.0, 4: 50.0, 16: 33.0})]
    result = schedule_of(records)
    assert isinstance(result, NoSchedule) and result.run == 1 and "every level's best drafts 5 steps" in result.reason


def test_a_winner_adaptive_cannot_run_gives_way_to_the_best_it_can_and_says_so() -> None:
    records = [*deep_alone_shallow_loaded(), record(3, 3, {1: 40.0, 4: 40.0, 16: 30.0}, **{"speculative-eagle-topk": 4,
                                                     "speculative-num-draft-tokens": 8})]  # fmt: skip
    schedule = schedule_of(records)
    assert isinstance(schedule, Schedule)
    assert schedule.tiers[2].trial == 0  # trial 3 (topk 4) won at 16: the best topk-1 run there is the tier
    assert any("topk 4 (adaptive runs topk 1 only)" in d for d in schedule.decisions)


def test_disagreeing_shared_flags_run_the_deepest_tier_s_and_say_which() -> None:
    records = deep_alone_shallow_loaded()
    records[0] = record(0, 2, {1: 47.0, 4: 43.0, 16: 25.0}, **{"mem-fraction-static": 0.80})
    schedule = schedule_of(records)
    assert isinstance(schedule, Schedule)
    assert schedule.shared_from == 1 and schedule.flags["mem-fraction-static"] == 0.85
    assert schedule.decisions == [
        "concurrency 16: its tier (baseline steps-2 (#0)) ran --mem-fraction-static 0.8; the schedule runs the "
        "deepest tier's (baseline steps-5 (#1)): its launch held the deepest drafts"
    ]


def race(per_level: dict[int, dict[int, float]], *, rounds: int = 3, noise: float = 0.01) -> Launches:
    """Launches whose log values are the true figure plus a fixed small wobble per (config, round)."""
    wobble = [noise, -noise, 0.0, noise / 2]
    return {
        level: {c: {r: v * math.exp(wobble[(r + abs(c)) % 4]) for r in range(rounds)} for c, v in configs.items()}
        for level, configs in per_level.items()
    }


def test_a_schedule_that_beats_every_static_somewhere_and_loses_nowhere_is_recommended() -> None:
    schedule = schedule_of(deep_alone_shallow_loaded())
    assert isinstance(schedule, Schedule)
    truth = {
        1: {SCHEDULE: 57.0, 1: 57.0, 2: 53.0, 0: 47.0},
        4: {SCHEDULE: 48.0, 1: 45.0, 2: 48.0, 0: 43.0},
        16: {SCHEDULE: 25.0, 1: 20.0, 2: 23.0, 0: 25.0},
    }
    verdict = judge(schedule, race(truth), rounds=3)
    assert verdict.recommended and verdict.run_trial is None
    assert verdict.note.startswith("run the schedule (5 steps at 1, 3 steps at 4, 2 steps at 16)")
    at_16 = next(v for v in verdict.levels if v.concurrency == 16)
    assert at_16.against_winner.trial == 0 and not at_16.against_winner.better and not at_16.worse
    assert next(c for c in at_16.statics if c.trial == 1).better  # the deep static loses under load


def test_a_static_the_schedule_never_beats_is_the_one_to_run() -> None:
    schedule = schedule_of(deep_alone_shallow_loaded())
    assert isinstance(schedule, Schedule)
    flat = {level: {SCHEDULE: 50.0, 1: 50.0, 2: 50.0, 0: 50.0} for level in LEVELS}
    verdict = judge(schedule, race(flat), rounds=3)
    assert not verdict.recommended and verdict.run_trial == 1  # the primary level's winner serves as well
    assert "significantly slower than it at no level" in verdict.note
    assert verdict.note.endswith("run baseline steps-5 (#1)")


def test_a_gain_where_the_schedule_drafts_the_static_s_own_depth_does_not_count_against_it() -> None:
    """A two-round CI race: at one user the schedule ran steps-5's depth and came out +4.6 % (+4.5 to
    +4.6 %) on two rounds that happened to agree; at sixteen steps-5 beat the schedule. One
    configuration against itself is no win: steps-5 serves every load as well, so it is the one to run."""
    records = [record(0, 3, {1: 46.0, 4: 44.0, 16: 38.0}), record(1, 5, {1: 54.0, 4: 45.0, 16: 37.0})]
    schedule = schedule_of(records)
    assert isinstance(schedule, Schedule) and [t.steps for t in schedule.tiers] == [5, 5, 3]
    launches: Launches = {
        1: {SCHEDULE: {0: 56.6, 1: 57.0}, 1: {0: 54.1, 1: 54.5}, 0: {0: 46.2, 1: 46.6}},
        4: {SCHEDULE: {0: 45.0, 1: 45.2}, 1: {0: 45.1, 1: 45.0}, 0: {0: 44.0, 1: 44.1}},
        16: {SCHEDULE: {0: 36.8, 1: 37.2}, 1: {0: 39.1, 1: 39.3}, 0: {0: 38.0, 1: 39.2}},
    }
    verdict = judge(schedule, launches, rounds=2)
    at_1 = verdict.levels[0].against_winner
    assert at_1.trial == 1 and at_1.same_depth and at_1.gain is not None and at_1.gain.low is not None
    assert at_1.gain.low > 0 and not at_1.better  # significant on its two rounds, yet no win
    assert not verdict.recommended and verdict.run_trial == 1
    assert "baseline steps-5 (#1) is significantly slower than it at no level" in verdict.note
    shallow_at_1 = next(c for c in verdict.levels[0].statics if c.trial == 0)
    assert not shallow_at_1.same_depth and shallow_at_1.better  # another depth: a real win


def test_a_schedule_slower_than_a_level_s_own_winner_is_declined() -> None:
    schedule = schedule_of(deep_alone_shallow_loaded())
    assert isinstance(schedule, Schedule)
    truth = {
        1: {SCHEDULE: 45.0, 1: 57.0, 2: 53.0, 0: 47.0},  # switching tiers costs more than the depth gains
        4: {SCHEDULE: 48.0, 1: 45.0, 2: 48.0, 0: 43.0},
        16: {SCHEDULE: 25.0, 1: 20.0, 2: 23.0, 0: 25.0},
    }
    verdict = judge(schedule, race(truth), rounds=3)
    assert not verdict.recommended and verdict.levels[0].worse
    assert "loses to the level's own winner at 1" in verdict.note


def test_a_schedule_slower_than_a_level_s_winner_by_less_than_the_margin_still_serves() -> None:
    """Where the schedule runs the winner's own depth, a significant shortfall inside the practical
    margin is launch noise or a cost no deployment would notice: not a loss."""
    schedule = schedule_of(deep_alone_shallow_loaded())
    assert isinstance(schedule, Schedule)
    truth = {
        1: {SCHEDULE: 56.2, 1: 57.0, 2: 53.0, 0: 47.0},  # -1.4 %, clear of zero at this small noise
        4: {SCHEDULE: 48.0, 1: 45.0, 2: 48.0, 0: 43.0},
        16: {SCHEDULE: 25.0, 1: 20.0, 2: 23.0, 0: 25.0},
    }
    launches = race(truth, noise=0.001)
    at_1 = judge(schedule, launches, rounds=3).levels[0].against_winner
    assert at_1.gain is not None and at_1.gain.high is not None and at_1.gain.high < 0  # significant ...
    assert not at_1.worse and judge(schedule, launches, rounds=3).recommended  # ... but inside 2 %
    assert judge(schedule, launches, rounds=3, margin=0.005).levels[0].worse  # beyond a tighter margin


def test_each_comparison_rests_on_its_own_pair_s_scatter() -> None:
    """A deep draft's launches scatter far more than a shallow one's at one user (a loaded CI race:
    8 % against 1.5 % sd). The schedule, which runs the deep winner's own depth there, is held against
    that winner on their own paired rounds (a level-wide pooled sd declined it at -14.6 %, -23.4 % to
    -4.6 %, on the schedule's, the winner's and the shallow draft's launches here)."""
    schedule = schedule_of(deep_alone_shallow_loaded())
    assert isinstance(schedule, Schedule)
    truth = {
        4: {SCHEDULE: 48.0, 1: 45.0, 2: 48.0, 0: 43.0},
        16: {SCHEDULE: 25.0, 1: 20.0, 2: 23.0, 0: 25.0},
    }
    launches = race(truth)
    launches[1] = {
        SCHEDULE: dict(enumerate([50.9, 48.8, 50.9])),
        1: dict(enumerate([60.7, 60.3, 55.4])),  # the level's winner, as deep as the schedule here
        2: dict(enumerate([52.0, 53.5, 52.5])),
        0: dict(enumerate([38.3, 34.9, 38.7])),  # the shallow draft: steady
    }
    at_1 = judge(schedule, launches, rounds=3).levels[0]
    winner = at_1.against_winner.gain
    assert winner is not None and winner.low is not None and winner.high is not None
    assert winner.low < 0 < winner.high and not at_1.worse  # not told apart from its winner on 3 rounds
    shallow = next(c for c in at_1.statics if c.trial == 0)
    assert shallow.better  # +30 %, told apart on their own steady rounds


def test_a_schedule_that_runs_fewer_of_a_level_s_users_at_once_loses_that_level() -> None:
    """Its buffers are sized for the deepest tier: fewer request slots, and the users left waiting are
    not in a per-user decode rate, which then flatters it."""
    schedule = schedule_of(deep_alone_shallow_loaded())
    assert isinstance(schedule, Schedule)
    truth = {
        1: {SCHEDULE: 57.0, 1: 57.0, 2: 53.0, 0: 47.0},
        4: {SCHEDULE: 48.0, 1: 45.0, 2: 48.0, 0: 43.0},
        16: {SCHEDULE: 30.0, 1: 20.0, 2: 23.0, 0: 25.0},
    }
    verdict = judge(schedule, race(truth), rounds=3, slots={SCHEDULE: 8, 0: 13, 1: 8, 2: 10})
    at_16 = verdict.levels[2]
    assert at_16.queues and at_16.worse and not verdict.recommended
    assert "runs 8 of its 16 users at once where baseline steps-2 (#0) runs 13" in verdict.note
    assert not verdict.levels[1].queues  # 8 at once serve 4 users: nobody waits


def test_a_schedule_that_never_served_is_declined_with_the_reason() -> None:
    schedule = schedule_of(deep_alone_shallow_loaded())
    assert isinstance(schedule, Schedule)
    truth = {level: {1: 50.0, 2: 50.0, 0: 50.0} for level in LEVELS}
    verdict = judge(schedule, race(truth), rounds=3, failed=["schedule, round 1: memory-failure: CUDA out of memory"])
    assert not verdict.recommended and "no interval" in verdict.note and "CUDA out of memory" in verdict.note


def test_the_exported_profile_names_its_config_and_renders(tmp_path: Path) -> None:
    schedule = schedule_of(deep_alone_shallow_loaded())
    assert isinstance(schedule, Schedule)
    truth = {
        1: {SCHEDULE: 57.0, 1: 57.0, 2: 53.0, 0: 47.0},
        4: {SCHEDULE: 48.0, 1: 45.0, 2: 48.0, 0: 43.0},
        16: {SCHEDULE: 25.0, 1: 20.0, 2: 23.0, 0: 25.0},
    }
    verdict = judge(schedule, race(truth), rounds=3)
    base = Profile(study="s", trial=1, engine="sglang", model="Qwen/Qwen3.6-27B", launcher=["python", "-m",
                   "sglang.launch_server"], flags={})  # fmt: skip
    config = tmp_path / "deploy" / "s-adaptive.json"
    profile = schedule_profile(base, verdict, config_file=config, metric="decode_tok_s", unit="tok/s")
    assert json.loads(config.read_text()) == verdict.config == profile.adaptive_config
    assert profile.flags["speculative-adaptive-config"] == str(config.resolve())
    assert [level.concurrency for level in profile.levels] == LEVELS and profile.confirmed_launches == 3
    assert profile.metrics["decode_tok_s"].value == pytest.approx(57.0, rel=0.02)
    script = render(profile, "sh")
    assert f"--speculative-adaptive-config {config.resolve()}" in script and "--speculative-adaptive " in script
    assert "speculation schedule:" in render(profile, "systemd")
    saved = tmp_path / "p.yaml"
    saved.write_text(render(profile, "yaml"))
    assert load_profile(saved) == profile
    copy = profile.with_adaptive_config_in(tmp_path / "bench")
    assert json.loads(Path(str(copy.flags["speculative-adaptive-config"])).read_text()) == verdict.config


# ---------------------------------------------------------------- vLLM (0.33 and 0.34)


VLLM_SHARED = {"tensor-parallel-size": 2, "speculative-method": "mtp", "max-num-seqs": 32,
               "max-num-batched-tokens": 4096}  # fmt: skip


def vllm_record(number: int, k: int, speeds: dict[int, float], **flags: object) -> TrialRecord:
    levels = {
        c: LevelRecord(concurrency=c, metrics={"decode_tok_s": MetricRecord(value=v, unit="tok/s", ci95=1.0, n=4)})
        for c, v in speeds.items()
    }
    return trial_record(number, value=speeds[1], baseline=f"mtp-{k}",
                        flags={**VLLM_SHARED, "num-speculative-tokens": k, **flags},
                        metrics=levels[1].metrics, levels=levels)  # fmt: skip


def vllm_schedule_of(records: list[TrialRecord]) -> Schedule | NoSchedule:
    best = max(records, key=lambda r: r.value or 0.0)
    levels = load_levels(records, LEVELS, metric="decode_tok_s", primary_best=best, gpus=2)
    return build(records, levels, study="s", engine="vllm")


def test_vllm_schedule_is_batch_ranges_from_1_to_max_num_seqs_with_the_deepest_k_as_num_speculative_tokens() -> None:
    records = [
        vllm_record(0, 2, {1: 47.0, 4: 43.0, 16: 25.0}),
        vllm_record(1, 5, {1: 57.0, 4: 45.0, 16: 20.0}),
        vllm_record(2, 3, {1: 53.0, 4: 48.0, 16: 23.0}),
    ]
    schedule = vllm_schedule_of(records)
    assert isinstance(schedule, Schedule)
    assert schedule.adaptive_config() is None  # no file: the ranges travel in --speculative-config
    # the same slots as SGLang's (halfway between levels), as inclusive ranges covering 1..max-num-seqs
    ranges = schedule.launch_flags("unused")["speculative-config.num_speculative_tokens_per_batch_size"]
    assert json.loads(str(ranges)) == [[1, 1, 5], [2, 7, 3], [8, 32, 2]]
    plan = get_engine("vllm").normalise(schedule.launch_flags("unused"))
    assert plan.flags["num-speculative-tokens"] == 5  # vLLM caps each range's k at it
    argv = get_engine("vllm").build_argv(["vllm", "serve"], model="m", plan=plan, host="h", port=1)
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "mtp", "num_speculative_tokens": 5,
                    "num_speculative_tokens_per_batch_size": [[1, 1, 5], [2, 7, 3], [8, 32, 2]]}  # fmt: skip
    assert "5 tokens at 1" in schedule.text()


def test_vllm_no_schedule_under_data_parallelism_or_for_a_method_v1_does_not_schedule() -> None:
    dp = [vllm_record(0, 1, {1: 40.0, 4: 43.0, 16: 25.0}, **{"data-parallel-size": 2}),
          vllm_record(1, 5, {1: 57.0, 4: 40.0, 16: 20.0}, **{"data-parallel-size": 2})]  # fmt: skip
    built = vllm_schedule_of(dp)
    assert isinstance(built, NoSchedule) and "data parallelism" in built.reason
    suffix = [vllm_record(0, 1, {1: 40.0, 4: 43.0, 16: 25.0}, **{"speculative-method": "suffix"}),
              vllm_record(1, 5, {1: 57.0, 4: 40.0, 16: 20.0}, **{"speculative-method": "suffix"})]  # fmt: skip
    built = vllm_schedule_of(suffix)
    assert isinstance(built, NoSchedule) and "suffix" in built.reason


@pytest.mark.parametrize(
    ("ranges", "says"),
    [
        ("[[2, 8, 3]]", "start at 1"),
        ("[[1, 8, 3], [8, 16, 1]]", "non-overlapping"),
        ("[[1, 0, 3]]", "positive"),
        ("[[1, 8, -1]]", ">= 0"),
        ("[[4, 2, 1]]", "start must be <= end"),
        ("[]", "non-empty"),
    ],
)
def test_the_vllm_adapter_refuses_the_batch_ranges_vllm_refuses(ranges: str, says: str) -> None:
    from autotune.engines.base import InvalidConfig

    flags = {**VLLM_SHARED, "num-speculative-tokens": 3,
             "speculative-config.num_speculative_tokens_per_batch_size": ranges}  # fmt: skip
    with pytest.raises(InvalidConfig, match=says):
        get_engine("vllm").normalise(flags)


def test_the_verdict_is_kept_in_the_study_database_and_withdrawn_by_none(tmp_path: Path) -> None:
    import optuna

    from autotune.study import StudyView
    from autotune.study.attrs import record_schedule_verdict

    schedule = schedule_of(deep_alone_shallow_loaded())
    assert isinstance(schedule, Schedule)
    verdict = judge(schedule, race({1: {SCHEDULE: 57.0, 1: 57.0, 2: 53.0, 0: 47.0},
                                    4: {SCHEDULE: 48.0, 1: 45.0, 2: 48.0, 0: 43.0},
                                    16: {SCHEDULE: 25.0, 1: 20.0, 2: 23.0, 0: 25.0}}), rounds=3)  # fmt: skip
    url = f"sqlite:///{tmp_path / 's.db'}"
    study = optuna.create_study(study_name="s", storage=url)
    assert StudyView.open("s", url).schedule_verdict() is None  # never raced
    record_schedule_verdict(study, verdict)
    assert StudyView.open("s", url).schedule_verdict() == verdict  # read back from the database
    record_schedule_verdict(study, None)
    assert StudyView.open("s", url).schedule_verdict() is None
