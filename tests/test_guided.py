"""The model-guided search (``--sampler model``): the pass model fitted to a night's launches proposes
the speculative flags, keeps each prediction with its trial, says when it falls back to TPE, and
several hosts on one storage propose from the same stored trials."""

from __future__ import annotations

import inspect
import json
import random
from collections.abc import Callable
from pathlib import Path

import optuna
import pytest
import yaml

from autotune.decision import Launch, Reuse, Skip
from autotune.gpu import GpuInventory
from autotune.outcomes import OutcomeKind
from autotune.pass_setup import read_pass_setup
from autotune.records import MetricRecord, Prediction
from autotune.space import CategoricalParam, load_space, suggest
from autotune.study import guided_sibling, make_sampler
from autotune.study.guided import FALLBACK_ERROR, STALLED, STARTUP_TRIES, ModelGuided, describe_search
from autotune.study.guided_deaths import sizing_deaths, stalled
from autotune.study.guided_reads import JUDGED, Draw, config_of, flags_of, judged_error, spec_key
from autotune.study.guided_sibling import ROOM, has_room, siblings
from autotune.study.history import History
from autotune.study.launchable import WouldLaunch
from autotune.study.rules import decide
from autotune.testing import simulated_outcome, study_runner
from autotune.testing.records import trial_record
from passmodel import calibrate, launch_flags
from tests.conftest import ROOT, TWIN_SPACE, idle_gpus
from tests.test_study_twin import run, small_space

CONFIGS = ROOT / "search_spaces" / "configs"


def a6000s(count: int = 2) -> GpuInventory:
    """Two simulated RTX A6000s, as the twin's inventory names them."""
    inventory = idle_gpus(count)
    named = [g.model_copy(update={"name": "NVIDIA RTX A6000 (simulated)"}) for g in inventory.gpus]
    return inventory.model_copy(update={"gpus": named})


def physical(flags: dict[str, object]) -> tuple[float, float]:
    """(decode tok/s, accept length) of the twin space's setup, slower by a third than the datasheet
    says (the fit finds the factor): a landscape the pass model can describe."""
    profile = read_pass_setup(load_space(TWIN_SPACE), a6000s()).profile()
    assert profile is not None
    spec = {k: v for k, v in flags.items() if k.startswith("speculative-")}
    cfg = launch_flags.launch_config(profile, {**spec, "tp-size": 2})
    rate = calibrate.expected_rate(profile, cfg, concurrency=1, input_len=0, output_len=24)
    return rate / 1.3, calibrate.profile_accept_length(profile, cfg)


def guided_runner(tmp_path: Path, *, sampler: optuna.samplers.BaseSampler, storage: optuna.storages.BaseStorage,
                  rate: object = physical, space_changes: dict[str, object] | None = None,
                  dies: Callable[[dict[str, object]], bool] = lambda flags: False):  # type: ignore[no-untyped-def]
    """``dies``: the launches that die of memory (any sizing)."""
    space = load_space(TWIN_SPACE).model_copy(update={"baselines": [], **(space_changes or {})})

    def launcher(plan, log_path, phase, early_stop=None):  # type: ignore[no-untyped-def]
        if dies(plan.flags):
            return simulated_outcome(space, plan, kind=OutcomeKind.MEMORY_TOO_LOW, reason="CUDA out of memory")
        tok_s, accept = rate(plan.flags)  # type: ignore[operator]
        return simulated_outcome(space, plan, tok_s=tok_s, rounds=2, ci95=0.5, accept_length=accept)

    return study_runner(space, tmp_path, inventory=a6000s(), launcher=launcher, sampler=sampler, storage=storage)


def test_the_twin_space_gives_a_setup_and_a_space_without_configs_says_what_it_lacks() -> None:
    space = load_space(TWIN_SPACE)
    setup = read_pass_setup(space, a6000s())
    assert setup.setup is not None and not setup.missing
    assert set(setup.drafters) == {"z-lab/Qwen3.6-27B-DFlash", "/models/qwen3.6-27b-dflash/checkpoint-2000"}
    profile = setup.profile()
    assert profile is not None and profile.model.mtp is not None and profile.gpus.count == 2
    bare = space.model_copy(update={"config_json": None, "draft_model_configs": {}})
    lacking = read_pass_setup(bare, a6000s())
    assert lacking.setup is None
    summary = lacking.summary()
    assert summary.startswith("no pass model: the model's config.json (Qwen/Qwen3.6-27B") and "\n" not in summary
    unknown_gpu = read_pass_setup(space, idle_gpus(2))  # the harness's GPUs have no datasheet
    assert unknown_gpu.setup is None and "datasheet" in unknown_gpu.summary()


def test_without_a_setup_the_sampler_falls_back_to_tpe_and_says_why(tmp_path: Path) -> None:
    storage = optuna.storages.InMemoryStorage()
    sampler = make_sampler("model", 0)
    assert isinstance(sampler, ModelGuided)
    bare = {"config_json": None, "draft_model_configs": {}}
    runner = guided_runner(tmp_path, sampler=sampler, storage=storage, space_changes=bare)
    assert describe_search(sampler, runner.pass_setup).startswith("search: model-guided, falling back to TPE: no pass")
    runner.run(trials=3, timeout_s=None)
    records = runner.records()
    assert len([r for r in records if r.served]) == 3
    assert all(r.proposal.predicted is None for r in records)  # no model, no prediction
    assert sampler.search(runner.study, records[-1].number).startswith("tpe: no pass model: the model's config.json")


def test_where_no_model_can_be_built_the_night_is_tpe_s_own(tmp_path: Path) -> None:
    """The fallback is the study's TPE as it is (multivariate, grouped), not TPE flag by flag: the same
    seed proposes the same night."""
    bare = {"config_json": None, "draft_model_configs": {}}

    def night(sampler: optuna.samplers.BaseSampler, folder: str) -> list[dict[str, object]]:
        runner = guided_runner(tmp_path / folder, sampler=sampler, storage=optuna.storages.InMemoryStorage(),
                               space_changes=bare)  # fmt: skip
        runner.run(trials=8, timeout_s=None)
        return [t.params for t in runner.study.trials]

    assert night(make_sampler("model", 5), "model") == night(make_sampler("tpe", 5), "tpe")


def test_a_night_is_proposed_by_the_model_and_each_trial_keeps_its_prediction(tmp_path: Path) -> None:
    storage = optuna.storages.InMemoryStorage()
    sampler = make_sampler("model", 1)
    runner = guided_runner(tmp_path, sampler=sampler, storage=storage)
    runner.run(trials=8, timeout_s=None)
    launched = [r for r in runner.records() if r.served]
    assert len(launched) == 8
    depths = [int(str(r.flags.get("speculative-num-draft-tokens"))) for r in launched[:3]]
    assert min(depths) == 2 and max(depths) == 16  # the first launches: the shallowest and the deepest draft
    predicted = [r for r in launched if r.proposal.predicted is not None]
    assert len(predicted) >= 5 and all(p.proposal.predicted.search == "model" for p in predicted)  # type: ignore[union-attr]
    drafts = {json.dumps({k: v for k, v in r.flags.items() if k.startswith("speculative-")}) for r in launched}
    assert len(drafts) == len(launched)  # each launch a draft not launched before


def test_a_large_error_before_the_launches_makes_the_night_fall_back_to_tpe(tmp_path: Path) -> None:
    """A landscape the model cannot follow: the rate jumps at random between configurations."""
    jumps = random.Random(5)
    seen: dict[str, float] = {}

    def erratic(flags: dict[str, object]) -> tuple[float, float]:
        key = json.dumps(flags, sort_keys=True, default=str)
        return seen.setdefault(key, jumps.choice([5.0, 60.0, 400.0])), 2.0

    storage = optuna.storages.InMemoryStorage()
    sampler = make_sampler("model", 2)
    runner = guided_runner(tmp_path, sampler=sampler, storage=storage, rate=erratic)
    notes: list[str] = []
    runner.events.note = notes.append  # type: ignore[method-assign]
    runner.run(trials=12, timeout_s=None)
    records = runner.records()
    space = runner.space
    error = judged_error(records, space)
    assert error is not None and error > FALLBACK_ERROR
    last = records[-1].number
    assert sampler.search(runner.study, last + 1).startswith(f"tpe: the model's median error on its last {JUDGED}")
    assert any("search tpe: the model's median error" in note for note in notes)  # said mid-night


def test_judged_error_reads_the_predictions_made_before_the_launches() -> None:
    space = load_space(TWIN_SPACE)
    metrics = {"decode_tok_s": MetricRecord(value=100.0, unit="tok/s", n=2)}
    made = [
        trial_record(i, flags={"speculative-algorithm": "NEXTN"}, value=100.0, metrics=metrics) for i in range(JUDGED)
    ]
    before = Prediction(tok_s=130.0, search="model")
    records = [r.model_copy(update={"proposal": r.proposal.model_copy(update={"predicted": before})}) for r in made]
    assert judged_error(records, space) == pytest.approx(0.3)
    assert judged_error(records[:-1], space) is None  # fewer than JUDGED: not judged yet


def test_two_hosts_on_one_sqlite_study_both_propose_from_the_stored_trials(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'shared.db'}"
    first = make_sampler("model", 3)
    one = guided_runner(tmp_path / "one", sampler=first, storage=optuna.storages.RDBStorage(url))
    one.run(trials=5, timeout_s=None)
    # Another host: its own process state (a fresh sampler), the same database.
    second = make_sampler("model", 4)
    assert isinstance(second, ModelGuided)
    other = guided_runner(tmp_path / "two", sampler=second, storage=optuna.storages.RDBStorage(url))
    assert other.study.study_name == one.study.study_name
    other.run(trials=3, timeout_s=None)
    records = other.records()
    assert len([r for r in records if r.served]) == 8
    second_host = [r for r in records if r.number >= 5 and r.served]
    # The second host's first proposal is already fitted to the first host's five launches.
    assert second_host and all(r.proposal.predicted is not None for r in second_host)
    assert [r.proposal.predicted.search for r in second_host] == ["model"] * len(second_host)  # type: ignore[union-attr]


@pytest.mark.twin
@pytest.mark.slow
def test_a_twin_study_with_the_model_sampler_keeps_predictions_and_shows_and_draws_its_fit(tmp_path: Path) -> None:
    data = yaml.safe_load(TWIN_SPACE.read_text())
    configs = {path: str(CONFIGS / Path(config).name) for path, config in data["draft_model_configs"].items()}
    space = small_space(tmp_path, study="guided", model_config=str(CONFIGS / "qwen3.6-27b.json"),
                        draft_model_configs=configs)  # fmt: skip
    out = run("study", str(space), "--trials", "5", "--seed", "2", "--sampler", "model", "--confirm-top", "0",
              cwd=tmp_path).stdout  # fmt: skip
    assert "search: model-guided (pass model of Qwen3_5ForConditionalGeneration on 2x NVIDIA RTX A6000" in out
    data = json.loads(run("show", "guided", "--json", cwd=tmp_path).stdout)
    predicted = [t for t in data["trials"] if t.get("predicted")]
    assert predicted and all(t["predicted"]["tok_s"] > 0 for t in predicted)
    shown = run("show", "guided", cwd=tmp_path).stdout
    assert "model-guided search: pass model of" in shown
    assert "error of the rate predicted before each launch: median" in shown
    assert "predicted best untried: --speculative-" in shown
    trial = run("show", "guided", "--trial", str(predicted[-1]["number"]), cwd=tmp_path).stdout
    assert "predicted" in trial and "before the launch (search: model)" in trial
    run("report", "guided", cwd=tmp_path)
    report = tmp_path / "studies" / "guided" / "report"
    assert (report / "predicted.png").is_file() and "predicted.png" in (report / "index.html").read_text()


def test_a_candidate_at_tp_2_is_predicted_at_tp_2_where_the_space_tunes_tp(tmp_path: Path) -> None:
    """The landscape runs each launch at its own TP; the model, fitted to it, predicts TP 2 at TP 2 and
    TP 1 at TP 1 (one A6000 reads the weights alone: well under TP 2's rate)."""
    profile = read_pass_setup(load_space(TWIN_SPACE), a6000s()).profile()
    assert profile is not None

    def at_own_tp(flags: dict[str, object]) -> tuple[float, float]:
        spec = {k: v for k, v in flags.items() if k.startswith("speculative-")}
        cfg = launch_flags.launch_config(profile, {**spec, "tp-size": int(str(flags["tp-size"]))})
        rate = calibrate.expected_rate(profile, cfg, concurrency=1, input_len=0, output_len=24)
        return rate / 1.3, calibrate.profile_accept_length(profile, cfg)

    base = load_space(TWIN_SPACE)
    tuned = {**base.tuned, "tp-size": CategoricalParam(type="categorical", choices=[1, 2])}
    fixed = {k: v for k, v in base.fixed.items() if k != "tp-size"}
    storage = optuna.storages.InMemoryStorage()
    sampler = make_sampler("model", 1)
    assert isinstance(sampler, ModelGuided)
    runner = guided_runner(tmp_path, sampler=sampler, storage=storage, rate=at_own_tp,
                           space_changes={"tuned": tuned, "fixed": fixed})  # fmt: skip
    assert "at each candidate's TP" in read_pass_setup(runner.space, a6000s()).summary()
    runner.run(trials=8, timeout_s=None)
    assert {r.flags.get("tp-size") for r in runner.records() if r.served} >= {2}
    draft = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 2, "speculative-eagle-topk": 1,
             "speculative-num-draft-tokens": 3}  # fmt: skip
    at_tp2 = sampler.prediction(runner.study, {**fixed, **draft, "tp-size": 2}, "model")
    at_tp1 = sampler.prediction(runner.study, {**fixed, **draft, "tp-size": 1}, "model")
    assert at_tp2 is not None and at_tp1 is not None
    assert at_tp2.tok_s == pytest.approx(at_own_tp({**draft, "tp-size": 2})[0], rel=0.1)
    assert at_tp1.tok_s < 0.75 * at_tp2.tok_s


def tokens(flags: dict[str, object]) -> int:
    """Tokens a pass verifies (the twin space's MTP heads; a DFlash block its size)."""
    if flags.get("speculative-algorithm") == "DFLASH":
        return int(str(flags.get("speculative-dflash-block-size", 16)))
    return int(str(flags.get("speculative-num-draft-tokens", 0)))


def test_a_start_up_draft_that_died_of_memory_is_not_proposed_again(tmp_path: Path) -> None:
    """The shallowest drafts die of memory at any sizing: the start-up tries at most :data:`STARTUP_TRIES` of
    them, then moves on to the deepest (before, it asked for the shallowest again until one served); once the
    deepest served, at another sizing than theirs, the shallowest are tried again at that sizing, where
    again at most :data:`STARTUP_TRIES` die."""
    sampler = make_sampler("model", 1)
    runner = guided_runner(tmp_path, sampler=sampler, storage=optuna.storages.InMemoryStorage(),
                           dies=lambda flags: tokens(flags) == 2)  # fmt: skip
    runner.run(trials=6, timeout_s=None)
    first = runner.records()[: STARTUP_TRIES + 1]
    assert [tokens(r.flags) for r in first].count(2) == STARTUP_TRIES
    assert tokens(first[-1].flags) == 16 and first[-1].served  # the deepest draft, next
    by_model = [r for r in runner.records() if sampler.search(runner.study, r.number) == "model"]
    excused = sizing_deaths(runner.records())
    assert [tokens(r.flags) for r in by_model if r.number not in excused].count(2) == STARTUP_TRIES
    assert [tokens(r.flags) for r in by_model if r.number in excused].count(2) <= STARTUP_TRIES


def test_a_shape_no_launch_measured_is_launched_before_the_fit_is_exploited(tmp_path: Path) -> None:
    """Chains decode half as fast again as the pass model prices them (another kernel than a tree's) and the
    one-step chains die of memory: the night still launches a deeper chain, early, although a fit on the
    trees it measured prices every chain at a tree's costs (before, it launched trees and DFlash only)."""
    sampler = make_sampler("model", 1)
    chain = lambda flags: flags.get("speculative-algorithm") == "NEXTN" and flags.get("speculative-eagle-topk") == 1  # noqa: E731

    def rate(flags: dict[str, object]) -> tuple[float, float]:
        tok_s, accept = physical(flags)
        return (tok_s * 1.5 if chain(flags) else tok_s), accept

    runner = guided_runner(tmp_path, sampler=sampler, storage=optuna.storages.InMemoryStorage(), rate=rate,
                           dies=lambda flags: chain(flags) and tokens(flags) <= 2)  # fmt: skip
    runner.run(trials=8, timeout_s=None)
    assert any(r.served and chain(r.flags) for r in runner.records())


def test_a_prediction_takes_on_the_misses_of_the_launches_of_its_shape_near_it(tmp_path: Path) -> None:
    """Three-step chains decode 30 % faster than the pass model's physics allows next to the chains of 1, 2
    and 5 steps (a kernel's sweet spot): measured, the three-step chain is predicted again (as a race
    relaunches it) within 10 % (the fit alone, its constants shared by every depth, misses it by 15 %)."""
    sampler = make_sampler("model", 1)
    assert isinstance(sampler, ModelGuided)

    def chain(steps: int) -> dict[str, object]:
        return {"speculative-algorithm": "NEXTN", "speculative-num-steps": steps, "speculative-eagle-topk": 1,
                "speculative-adaptive": False}  # fmt: skip

    def rate(flags: dict[str, object]) -> tuple[float, float]:
        tok_s, accept = physical(flags)
        sweet = flags.get("speculative-eagle-topk") == 1 and flags.get("speculative-num-steps") == 3
        return (tok_s * 1.3 if sweet else tok_s), accept

    runner = guided_runner(tmp_path, sampler=sampler, storage=optuna.storages.InMemoryStorage(), rate=rate)
    for steps in (1, 2, 3, 5):
        runner.study.enqueue_trial(chain(steps))
    runner.run(trials=4, timeout_s=None)
    predicted = sampler.prediction(runner.study, chain(3), "none: not sampled")
    assert predicted is not None and predicted.tok_s == pytest.approx(rate(chain(3))[0], rel=0.1)


def test_a_shape_measured_once_is_predicted_at_its_own_miss_far_from_that_launch(tmp_path: Path) -> None:
    """Trees decode 40 % faster than the pass model prices them (their own kernel); chains as it prices them.
    Measured: three chains and one small tree. A deep wide tree, far from that tree, is predicted within 8 %
    (before, with the tree's miss weighed by nearness alone, 15 % low)."""
    sampler = make_sampler("model", 1)
    assert isinstance(sampler, ModelGuided)

    def draft(steps: int, topk: int, tokens: int) -> dict[str, object]:
        return {"speculative-algorithm": "NEXTN", "speculative-num-steps": steps, "speculative-eagle-topk": topk,
                "speculative-num-draft-tokens": tokens, "speculative-adaptive": False}  # fmt: skip

    def rate(flags: dict[str, object]) -> tuple[float, float]:
        tok_s, accept = physical(flags)
        return (tok_s * 1.4 if flags.get("speculative-eagle-topk") != 1 else tok_s), accept

    runner = guided_runner(tmp_path, sampler=sampler, storage=optuna.storages.InMemoryStorage(), rate=rate)
    for flags in (draft(1, 1, 2), draft(3, 1, 4), draft(6, 1, 7), draft(2, 4, 6)):
        runner.study.enqueue_trial(flags)
    runner.run(trials=4, timeout_s=None)
    predicted = sampler.prediction(runner.study, draft(5, 4, 16), "none: not sampled")
    assert predicted is not None and predicted.tok_s == pytest.approx(rate(draft(5, 4, 16))[0], rel=0.08)


def test_the_model_proposes_only_what_the_rules_would_launch_and_gives_way_when_nothing_would(
    tmp_path: Path,
) -> None:
    sampler = make_sampler("model", 1)
    assert isinstance(sampler, ModelGuided)
    runner = guided_runner(tmp_path, sampler=sampler, storage=optuna.storages.InMemoryStorage())
    assert isinstance(sampler.would_launch, WouldLaunch)  # the runner's rules, handed over
    served = lambda: len([r for r in runner.records() if r.served])  # noqa: E731
    # The rules, as the model sees them: never the DFlash checkpoint, and nothing once four launches served.
    refused = "/models/qwen3.6-27b-dflash/checkpoint-2000"
    sampler.ask_rules(lambda p: None if p.get("speculative-draft-model-path") == refused or served() >= 4 else dict(p))
    notes: list[str] = []
    runner.events.note = notes.append  # type: ignore[method-assign]
    runner.run(trials=6, timeout_s=None)
    by_model = [r for r in runner.records() if sampler.search(runner.study, r.number) == "model"]
    assert len(by_model) == 4 and all(r.flags.get("speculative-draft-model-path") != refused for r in by_model)
    why = sampler.search(runner.study, runner.records()[-1].number)
    assert why == "tpe: the study's rules would launch none of the model's 20 best candidates"
    assert len([n for n in notes if "would launch none" in n]) == 1  # said once, when it happened


def test_the_rules_are_asked_with_the_sizings_of_the_measured_launches(tmp_path: Path) -> None:
    """The model's flags of a configuration measured already: at every sizing the rules answer from that
    measurement (the rate is one stream's: sizing cannot change it), so they would not launch it; another
    draft they would, at the measured launch's memory sizing (the rest is TPE's to draw), its graph batch the
    space's smallest where that draft verifies more tokens a pass than the measured one."""
    sampler = make_sampler("model", 1)
    assert isinstance(sampler, ModelGuided)
    runner = guided_runner(tmp_path, sampler=sampler, storage=optuna.storages.InMemoryStorage())
    assert sampler.would_launch({"speculative-algorithm": "NEXTN"}) == {"speculative-algorithm": "NEXTN"}  # none yet
    runner.run(trials=1, timeout_s=None)
    measured = runner.study.trials[0].params
    spec = {k: v for k, v in measured.items() if k.startswith("speculative-")}
    assert sampler.would_launch(spec) is None
    other = {"speculative-algorithm": "DFLASH", "speculative-draft-model-path": "z-lab/Qwen3.6-27B-DFlash",
             "speculative-dflash-block-size": 8, "speculative-adaptive": False}  # fmt: skip
    assert spec != other
    memory = ("mem-fraction-static", "max-running-requests", "cuda-graph-max-bs-decode")
    sizing = {k: v for k, v in measured.items() if k in memory}
    if tokens(runner.records()[0].flags) < tokens(other):
        sizing["cuda-graph-max-bs-decode"] = 4
    completed = sampler.would_launch(other)
    assert completed is not None and completed.keys() == {**other, **sizing}.keys()
    assert [completed[k] for k in other] == list(other.values())
    assert [completed[k] for k in sizing] == pytest.approx(list(sizing.values()))  # as launched: 0.8, not 0.79999


def test_after_proposals_that_do_not_serve_tpe_proposes_every_flag(tmp_path: Path) -> None:
    """After three launches every launch dies: the model gives way to TPE (which then draws the
    speculative flags too) after :data:`STALLED` proposals in a row did not serve, and says so."""
    sampler = make_sampler("model", 3)
    assert isinstance(sampler, ModelGuided)
    launches: list[int] = []

    def late_deaths(flags: dict[str, object]) -> bool:
        launches.append(1)
        return len(launches) > 3

    runner = guided_runner(tmp_path, sampler=sampler, storage=optuna.storages.InMemoryStorage(), dies=late_deaths)
    notes: list[str] = []
    runner.events.note = notes.append  # type: ignore[method-assign]
    runner.run(trials=3 + STALLED + 2, timeout_s=None)
    records = runner.records()
    assert not any(r.served for r in records[3 : 3 + STALLED])
    after = sampler.search(runner.study, records[3 + STALLED].number)
    assert after.startswith(f"tpe: the last {STALLED} proposals launched did not serve")
    assert any(f"search {after}" in note for note in notes)


def test_only_launches_start_or_end_a_stall() -> None:
    """Proposals the rules answered without a launch (a predicted death, a measured configuration reused)
    neither count toward a stall nor end one (before, three of them after a launch that served stalled the
    model: on a tight member TPE's such draws kept it stalled for 28 proposals, one launch among them)."""
    died = lambda n: trial_record(n, outcome=OutcomeKind.MEMORY_TOO_HIGH.value)  # noqa: E731
    served = lambda n: trial_record(n, value=10.0)  # noqa: E731
    skipped = lambda n: trial_record(  # noqa: E731
        n, outcome=OutcomeKind.PREDICTED_MEMORY_TOO_HIGH.value,
        decision=Skip(rule="memory", outcome=OutcomeKind.PREDICTED_MEMORY_TOO_HIGH, reason="r", constraint="memory"),
    )  # fmt: skip
    reused = lambda n: trial_record(n, value=10.0, decision=Reuse(rule="duplicate", trial=3, same_config=True))  # noqa: E731
    assert not stalled([served(0), skipped(1), skipped(2), reused(3)], STALLED)
    assert stalled([died(0), died(1), died(2), skipped(3), reused(4)], STALLED)
    assert not stalled([died(0), died(1), died(2), served(3), skipped(4), skipped(5), skipped(6)], STALLED)


def test_a_draft_that_died_of_a_sizing_the_night_left_is_tried_again_at_one_that_served(tmp_path: Path) -> None:
    """The shallowest drafts die of memory with 8 running requests, as launched first; then a 3-step chain
    serves with 16. Those deaths were the sizing's: the start-up asks for a shallowest draft again, at
    the served sizing, and it serves (before, two such deaths ended the start-up's shallow turn, and on a
    tight member no chain was launched again)."""
    sampler = make_sampler("model", 1)
    assert isinstance(sampler, ModelGuided)
    runner = guided_runner(tmp_path, sampler=sampler, storage=optuna.storages.InMemoryStorage(),
                           dies=lambda f: tokens(f) == 2 and f.get("max-running-requests") == 8)  # fmt: skip
    sizing = {"mem-fraction-static": 0.93, "mamba-full-memory-ratio": 0.5, "max-running-requests": 8,
              "cuda-graph-max-bs-decode": 8}  # fmt: skip
    chain = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 1, "speculative-eagle-topk": 1,
             "speculative-adaptive": False}  # fmt: skip
    tree = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 2, "speculative-eagle-topk": 2,
            "speculative-num-draft-tokens": 2, "speculative-adaptive": False}  # fmt: skip
    runner.study.enqueue_trial({**chain, **sizing})
    runner.study.enqueue_trial({**tree, **sizing})
    runner.study.enqueue_trial({**chain, "speculative-num-steps": 3, **sizing, "max-running-requests": 16})
    runner.run(trials=3, timeout_s=None)
    assert [r.served for r in runner.records()] == [False, False, True]
    assert sizing_deaths(runner.records()) == {0, 1}
    runner.run(trials=2, timeout_s=None)
    by_model = [r for r in runner.records()[3:] if sampler.search(runner.study, r.number) == "model"]
    assert any(tokens(r.flags) == 2 and r.served for r in by_model)


def test_only_proposals_that_died_before_any_launch_served_are_excused() -> None:
    """A proposal's memory death before the first launch that served was its drawn sizing's; a baseline's
    (the engine's defaults) and any death after a launch served count against the draft."""
    died = lambda n, **kw: trial_record(n, outcome=OutcomeKind.MEMORY_TOO_LOW.value, **kw)  # noqa: E731
    records = [died(0, baseline="engine defaults"), died(1), trial_record(2, value=10.0), died(3)]
    assert sizing_deaths(records) == {1}
    assert sizing_deaths(records[:2]) == set()  # nothing served yet: no sizing the night could leave for


def test_a_draft_deeper_than_every_served_one_is_asked_at_the_smallest_graph_batch(tmp_path: Path) -> None:
    """Its graphs capture more tokens a pass than the served launch's: at that launch's fraction with the
    smallest graph batch the space offers (the measured rate is one stream's, which the graph batch does not
    change); a draft no deeper than a served one at that launch's own sizing (before, every draft at the
    served launch's graph batch: deep trees asked at a shallow tree's died of memory, one after another)."""
    sampler = make_sampler("model", 1)
    assert isinstance(sampler, ModelGuided)
    runner = guided_runner(tmp_path, sampler=sampler, storage=optuna.storages.InMemoryStorage())
    sizing = {"mem-fraction-static": 0.9, "mamba-full-memory-ratio": 0.5, "max-running-requests": 32,
              "cuda-graph-max-bs-decode": 32}  # fmt: skip
    shallow = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 2, "speculative-eagle-topk": 2,
               "speculative-num-draft-tokens": 4, "speculative-adaptive": False}  # fmt: skip
    runner.study.enqueue_trial({**shallow, **sizing})
    runner.run(trials=1, timeout_s=None)
    assert runner.records()[0].served
    deep = {**shallow, "speculative-num-steps": 4, "speculative-num-draft-tokens": 12}
    as_deep = {**shallow, "speculative-num-steps": 3}
    completed_deep, completed_as_deep = sampler.would_launch(deep), sampler.would_launch(as_deep)
    assert completed_deep is not None and completed_as_deep is not None
    assert completed_deep["cuda-graph-max-bs-decode"] == 4  # the space's smallest
    assert completed_deep["mem-fraction-static"] == pytest.approx(0.9)
    assert completed_as_deep["cuda-graph-max-bs-decode"] == 32


def test_once_a_launch_served_the_rules_are_asked_only_at_measured_sizings(tmp_path: Path) -> None:
    """A draft died of memory above the measured launch's fraction: at that launch's sizing the rules
    predict it dies again, so it is not proposed, although at a lower fraction the rules would let it
    through (exploring the sizing is TPE's: such sizings died time and again on the tight members)."""
    sampler = make_sampler("model", 1)
    assert isinstance(sampler, ModelGuided)
    deep = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 6, "speculative-eagle-topk": 4,
            "speculative-adaptive": False, "speculative-num-draft-tokens": 16}  # fmt: skip
    sizing = {"mem-fraction-static": 0.9, "mamba-full-memory-ratio": 0.5, "max-running-requests": 8,
              "cuda-graph-max-bs-decode": 8}  # fmt: skip
    runner = guided_runner(tmp_path, sampler=sampler, storage=optuna.storages.InMemoryStorage(),
                           dies=lambda flags: tokens(flags) == 16)  # fmt: skip
    runner.study.enqueue_trial({"speculative-algorithm": "NEXTN", "speculative-num-steps": 1,
                                "speculative-eagle-topk": 1, "speculative-adaptive": False, **sizing})  # fmt: skip
    runner.study.enqueue_trial({**deep, **sizing})
    runner.run(trials=2, timeout_s=None)
    assert [r.served for r in runner.records()] == [True, False]
    # Deeper than the served chain: asked at its fraction with the space's smallest graph batch, where the
    # rules may let it through (less graph memory), never at a fraction no launch served at.
    asked = sampler.would_launch(deep)
    assert asked is None or (asked["mem-fraction-static"], asked["cuda-graph-max-bs-decode"]) == (0.9, 4)
    lower = suggest(runner.space, Draw(random.Random(0), {**deep, **sizing, "mem-fraction-static": 0.75}))
    plan = runner.engines["sglang"].normalise(lower.flags)
    assert isinstance(decide(runner.rules, plan, History(runner.records(), number=99), baseline=False), Launch)


def test_the_default_search_is_the_model_guided_one() -> None:
    """Judged once on held out (benchmarks/results/model-sampler-2026-12-07): ahead of TPE at both budgets."""
    from autotune.cli.study import Sampler, study
    from autotune.study.runner import StudyRunner

    assert inspect.signature(study).parameters["sampler"].default is Sampler.model
    assert inspect.signature(StudyRunner.open).parameters["sampler"].default == "model"


def fast_trees(flags: dict[str, object]) -> tuple[float, float]:
    """Trees decode 60 % faster than the pass model prices them."""
    tok_s, accept = physical(flags)
    return (tok_s * 1.6 if flags.get("speculative-eagle-topk") not in (None, 1) else tok_s), accept


def chain_and_full_tree_night(tmp_path: Path, sampler: optuna.samplers.BaseSampler):  # type: ignore[no-untyped-def]
    """A night on :func:`fast_trees` whose first launches are the start-up's shallowest chain and deepest draft,
    a full tree (s5 k4 t16)."""
    runner = guided_runner(tmp_path, sampler=sampler, storage=optuna.storages.InMemoryStorage(), rate=fast_trees)
    nextn = {"speculative-algorithm": "NEXTN", "speculative-adaptive": False}
    runner.study.enqueue_trial({**nextn, "speculative-num-steps": 1, "speculative-eagle-topk": 1})
    runner.study.enqueue_trial({**nextn, "speculative-num-steps": 5, "speculative-eagle-topk": 4,
                                "speculative-num-draft-tokens": 16})  # fmt: skip
    return runner


def test_where_the_fit_proposes_a_tree_the_full_tree_s_sibling_at_half_its_tokens_is_launched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trees decode 60 % faster than the pass model prices them, and the start-up's shallowest chain and deepest
    draft, a full tree (s5 k4 t16), served, on a night with room from its start: where the fit next proposes a
    tree, the night launches that full tree at 8 draft tokens instead, so trees of one width span the counts that
    tell the fit a verified token's cost (before, the model priced the trees it proposed with the setup's
    default)."""
    monkeypatch.setattr(guided_sibling, "ROOM", 0)
    sampler = make_sampler("model", 1)
    runner = chain_and_full_tree_night(tmp_path, sampler)
    runner.run(trials=5, timeout_s=None)  # the two DFlash drafters first: shapes no launch served
    proposed = next(r for r in runner.records()[2:] if r.flags.get("speculative-eagle-topk") not in (None, 1))
    assert sampler.search(runner.study, proposed.number) == "model"
    assert {k: proposed.flags.get(k) for k in ("speculative-num-steps", "speculative-eagle-topk")} == {
        "speculative-num-steps": 5, "speculative-eagle-topk": 4}  # fmt: skip
    assert tokens(proposed.flags) == 8


def test_a_sibling_is_launched_once_a_night_while_the_trees_leave_the_verify_cost_unidentified() -> None:
    """A full tree alone: its siblings at half its draft tokens and fewer, nearest half first; with the sibling
    served the trees identify the verify cost and none is asked again; two that did not serve end the role."""
    space = load_space(TWIN_SPACE)
    profile = read_pass_setup(space, a6000s()).profile()
    assert profile is not None

    def nextn(steps: int, topk: int, tokens: int) -> dict[str, object]:
        return {"speculative-algorithm": "NEXTN", "speculative-adaptive": False, "speculative-num-steps": steps,
                "speculative-eagle-topk": topk, "speculative-num-draft-tokens": tokens}  # fmt: skip

    full = [(nextn(1, 1, 2), 40.0), (nextn(5, 4, 16), 50.0)]
    found = siblings(profile, space, full, {}, STARTUP_TRIES)
    assert [tokens(p) for p in found][:3] == [8, 7, 6] and {p["speculative-eagle-topk"] for p in found} == {4}
    assert siblings(profile, space, [*full, (nextn(5, 4, 8), 55.0)], {}, STARTUP_TRIES) == []
    keys = [spec_key(cfg) for p in found[:STARTUP_TRIES] if (cfg := config_of(profile, space, flags_of(space, p)))]
    assert siblings(profile, space, full, dict.fromkeys(keys), STARTUP_TRIES) == []


def test_a_start_up_role_s_tree_after_a_served_tree_gives_way_to_its_sibling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The shallowest chain and a tree (s3 k4 t12) served, the deepest draft not yet, on a night with room from
    its start: the start-up's deepest role would launch a tree of 15-16 draft tokens, which leaves the verify cost
    unidentified as the first tree did; the night launches the served tree at 6 draft tokens instead, and the
    role's tree after it (before, the sibling replaced only the fit's proposals, so a night whose later trees
    were start-up roles' never had one)."""
    monkeypatch.setattr(guided_sibling, "ROOM", 0)
    sampler = make_sampler("model", 1)
    space = load_space(TWIN_SPACE)
    nextn_only = {**space.tuned, "speculative-algorithm": CategoricalParam(type="categorical", choices=["NEXTN"])}
    runner = guided_runner(tmp_path, sampler=sampler, storage=optuna.storages.InMemoryStorage(),
                           space_changes={"tuned": nextn_only})  # fmt: skip
    nextn = {"speculative-algorithm": "NEXTN", "speculative-adaptive": False}
    runner.study.enqueue_trial({**nextn, "speculative-num-steps": 1, "speculative-eagle-topk": 1})
    runner.study.enqueue_trial({**nextn, "speculative-num-steps": 3, "speculative-eagle-topk": 4,
                                "speculative-num-draft-tokens": 12})  # fmt: skip
    runner.run(trials=4, timeout_s=None)
    sibling, role = runner.records()[2:4]
    assert sampler.search(runner.study, sibling.number) == "model"
    assert {k: sibling.flags.get(k) for k in ("speculative-num-steps", "speculative-eagle-topk")} == {
        "speculative-num-steps": 3, "speculative-eagle-topk": 4}  # fmt: skip
    assert tokens(sibling.flags) == 6
    assert role.flags.get("speculative-eagle-topk") not in (None, 1) and tokens(role.flags) >= 15


def test_a_short_night_s_trees_are_launched_as_proposed_and_a_night_with_room_has_its_sibling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The chain and full-tree night of :func:`fast_trees`: its first :data:`ROOM` launches (the whole search of a
    20-launch night) are the trees the model proposes, as on a night that never has room, and they leave the
    verify cost unidentified; the launch after them is the best served tree at half its draft tokens or fewer
    (before, the sibling took the night's second tree launch, whatever the night's length)."""
    sampler = make_sampler("model", 1)
    runner = chain_and_full_tree_night(tmp_path / "room", sampler)
    runner.run(trials=ROOM + 1, timeout_s=None)
    records = runner.records()
    short, after = records[:ROOM], records[ROOM]
    monkeypatch.setattr(guided_sibling, "ROOM", 10**6)
    never = chain_and_full_tree_night(tmp_path / "never", make_sampler("model", 1))
    never.run(trials=ROOM, timeout_s=None)
    assert [r.flags for r in short] == [r.flags for r in never.records()]
    profile = read_pass_setup(runner.space, a6000s()).profile()
    assert profile is not None
    trees = [r for r in short if r.flags.get("speculative-eagle-topk") not in (None, 1)]
    assert len(trees) >= 3  # the model's own tree proposals after the full tree were launched as proposed
    assert not calibrate.verify_identified([launch_flags.launch_config(profile, r.flags) for r in trees])
    best = max(trees, key=lambda r: r.value or 0.0)
    step_topk = ("speculative-num-steps", "speculative-eagle-topk")
    assert sampler.search(runner.study, after.number) == "model"
    assert {k: after.flags.get(k) for k in step_topk} == {k: best.flags.get(k) for k in step_topk}
    assert tokens(after.flags) <= tokens(best.flags) / 2


def test_room_counts_the_search_s_launches_only() -> None:
    """A baseline's launch and a failed launch count; a race's relaunch, a reused measurement and a predicted
    death do not."""
    skipped = Skip(rule="memory", outcome=OutcomeKind.PREDICTED_MEMORY_TOO_HIGH, reason="r", constraint="memory")
    reused = Reuse(rule="duplicate", trial=2, same_config=True)
    search = [trial_record(0, value=1.0, baseline="default"), trial_record(1, state="FAIL", outcome="failed"),
              *(trial_record(n, value=1.0) for n in range(2, ROOM))]  # fmt: skip
    answered = [trial_record(ROOM, value=1.0, confirm_of=0), trial_record(ROOM + 1, decision=skipped),
                trial_record(ROOM + 2, value=1.0, decision=reused)]  # fmt: skip
    assert not has_room([*search[:-1], *answered])
    assert has_room(search)
