"""autotune.testing drives the product's own study loop with no server, GPU or database: a launcher
function stands in for the servers, an inventory built here for the GPUs, and what the runner does
with them is the real loop's (baselines first, the engine's and the study's rules before a launch,
the launcher asked only for what was decided to launch)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from autotune.decision import Launch, Reuse, Skip
from autotune.engines.base import LaunchPlan
from autotune.errors import UserError
from autotune.measure.client import RequestRecord
from autotune.measure.protocol import EarlyStop
from autotune.outcomes import OutcomeKind
from autotune.space import SearchSpace, load_space, parse_space
from autotune.study import make_sampler
from autotune.study.race import FinalistsRace, race_finalists
from autotune.testing import checked_space, memory_as_logged, simulated_outcome, study_runner
from autotune.trial import TrialOutcome
from tests.conftest import TWIN_SPACE, idle_gpus, run_queued

GIB = 1 << 30
HAND_FOUND = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3, "speculative-eagle-topk": 1,
              "speculative-num-draft-tokens": 4, "mem-fraction-static": 0.88, "max-running-requests": 16,
              "mamba-full-memory-ratio": 0.5}  # fmt: skip


def rate(flags: dict[str, Any]) -> float:
    """Deeper drafts decode faster, up to a point."""
    steps = int(flags.get("speculative-num-steps", 1))
    return 30.0 + 6 * steps - 0.8 * steps**2


def dies(flags: dict[str, Any]) -> bool:
    """The widest draft trees' buffers do not fit."""
    return int(flags.get("speculative-num-draft-tokens", 2)) >= 14


class Servers:
    """Stands in for launching: each plan it is asked for is served at :func:`rate`, or dies of memory."""

    def __init__(self, space: SearchSpace) -> None:
        self.space = space
        self.plans: list[LaunchPlan] = []

    def __call__(
        self, plan: LaunchPlan, log_path: Path, phase: object, early_stop: EarlyStop | None = None
    ) -> TrialOutcome:
        self.plans.append(plan)
        space = self.space
        memory = memory_as_logged(weights_bytes=25.2 * GIB, kv_pool_bytes=12.3 * GIB, kv_tokens=100_000)
        if dies(plan.flags):
            return simulated_outcome(space, plan, kind=OutcomeKind.MEMORY_TOO_HIGH,
                                     reason="CUDA out of memory (draft tree)", memory=memory,
                                     launch_s=30.0)  # fmt: skip
        return simulated_outcome(space, plan, tok_s=rate(plan.flags), rounds=2, ci95=0.5, memory=memory,
                                 launch_s=30.0, measure_s=20.0, stop_s=2.0)  # fmt: skip


def test_a_runner_from_the_harness_runs_the_study_loop_and_launches_only_what_it_decided(tmp_path: Path) -> None:
    space = load_space(TWIN_SPACE)
    servers = Servers(space)
    runner = study_runner(space, tmp_path, inventory=idle_gpus(2), launcher=servers, sampler=make_sampler("random", 5))
    runner.enqueue_baselines()
    runner.run(trials=2, timeout_s=None)
    # Proposed as a sampler might: a start step SGLang's adaptive steps refuse, then the hand-found
    # config with other memory sizing (its single-stream rate is the one already measured).
    runner.study.enqueue_trial({"speculative-algorithm": "NEXTN", "speculative-num-steps": 2,
                                "speculative-eagle-topk": 1, "speculative-adaptive": True})  # fmt: skip
    runner.study.enqueue_trial({**HAND_FOUND, "speculative-adaptive": False, "mem-fraction-static": 0.84,
                                "max-running-requests": 8, "cuda-graph-max-bs-decode": 32})  # fmt: skip
    run_queued(runner, 4)

    records = runner.records()
    assert len(records) == 6
    baselines = [b.name for b in space.baselines]
    assert [r.baseline for r in records[: len(baselines)]] == baselines
    assert all(r.baseline is None for r in records[len(baselines) :])

    refused, borrowed = records[2], records[3]
    assert isinstance(refused.decision, Skip) and refused.decision.rule == "engine"
    assert refused.outcome == OutcomeKind.INVALID_CONFIG.value
    hand_found = records[baselines.index("hand-found")]
    assert isinstance(borrowed.decision, Reuse) and borrowed.decision.rule == "same-rate"
    assert borrowed.reused_from == hand_found.number and borrowed.value == hand_found.value

    launched = []
    for record in records:
        assert record.state == "COMPLETE"
        decision = record.decision
        assert decision is not None, f"trial {record.number} was neither launched nor decided by a rule"
        if isinstance(decision, Launch):
            launched.append(decision.plan)
            assert record.flags == decision.plan.flags
            if dies(decision.plan.flags):
                assert record.outcome == OutcomeKind.MEMORY_TOO_HIGH.value and not record.feasible
            else:
                assert record.outcome == OutcomeKind.OK.value and record.value == pytest.approx(rate(record.flags))
        else:
            assert decision.rule, f"trial {record.number} was not launched, and no rule says why"
    # The launcher saw exactly the plans the runner decided to launch, in the order it decided them.
    assert [(p.engine, p.flags) for p in servers.plans] == [(p.engine, p.flags) for p in launched]
    assert {r.launch.config_key for r in (refused, borrowed)}.isdisjoint(p.config_key for p in servers.plans)


def test_the_checked_space_reads_no_help_and_selects_the_space_s_gpus(tmp_path: Path) -> None:
    data = yaml.safe_load(TWIN_SPACE.read_text())
    data["launcher"] = [str(tmp_path / "no-such-launcher")]  # reading its --help would fail
    data["gpus"]["devices"] = [1, 3]
    space = parse_space(data, path=TWIN_SPACE)
    checked = checked_space(space, idle_gpus(4))
    prepared = checked.engines[space.engine]
    assert prepared.flag_set.flags == frozenset(space.all_flag_names())
    assert prepared.launcher == data["launcher"]
    assert checked.inventory is not None and [g.index for g in checked.inventory.gpus] == [1, 3]
    assert [b.name for b in checked.baselines] == [b.name for b in space.baselines]
    for baseline, plan in zip(space.baselines, (b.plan for b in checked.baselines), strict=True):
        assert plan == prepared.engine.normalise({**space.fixed, **baseline.flags})

    data["baselines"] = [{"name": "refused", "flags": {"speculative-algorithm": "NEXTN", "speculative-num-steps": 2,
                                                       "speculative-adaptive": True}}]  # fmt: skip
    with pytest.raises(UserError, match="baseline 'refused'"):
        checked_space(parse_space(data, path=TWIN_SPACE), idle_gpus(4))


def test_a_simulated_outcome_is_measured_as_the_space_says() -> None:
    data = yaml.safe_load(TWIN_SPACE.read_text())
    data["objective"] = {"metric": "output_tok_s", "concurrency": 1}
    space = parse_space(data, path=TWIN_SPACE)
    plan = LaunchPlan(engine="sglang", flags={"tp-size": 2})
    served = simulated_outcome(space, plan, tok_s=42.0, rounds=3, ci95=1.5, accept_length=2.5, early_stopped=True)
    assert served.kind is OutcomeKind.OK and served.objective == 42.0
    measurement = served.measurement
    assert measurement is not None and measurement.rounds == 3 and measurement.early_stopped
    assert measurement.round_values == [42.0] * 3
    assert measurement.max_tokens_cap == space.measurement.max_tokens
    assert measurement.precision_target == space.measurement.target_rel_ci
    assert [m.name for m in measurement.metrics] == ["output_tok_s", "accept_length", "decode_tok_s"]
    objective = measurement.metric("output_tok_s")
    assert objective is not None and objective.ci95 == 1.5
    died = simulated_outcome(space, plan, kind=OutcomeKind.CRASHED, reason="boom")
    assert died.measurements == [] and died.reason == "boom" and died.objective is None
    with pytest.raises(ValueError, match="tok_s"):
        simulated_outcome(space, plan)


def test_memory_is_reported_as_a_log_shows_it() -> None:
    facts = memory_as_logged(weights_bytes=25.2345 * GIB, kv_tokens=1000, graph_bytes=None)
    assert facts is not None
    assert facts.weights_bytes == pytest.approx(25.23 * GIB) and facts.graph_bytes is None
    assert facts.kv_tokens == 1000
    assert memory_as_logged(graph_bytes=1.0 * GIB) is None  # died before logging weights or pool


def test_a_rate_beyond_what_the_bandwidth_allows_is_a_failed_measurement_never_a_best(tmp_path: Path) -> None:
    space = load_space(TWIN_SPACE).model_copy(update={"baselines": []})
    memory = memory_as_logged(weights_bytes=25.2 * GIB, kv_pool_bytes=12.3 * GIB, kv_tokens=100_000)

    def launcher(plan: LaunchPlan, log_path: Path, phase: object, early_stop: EarlyStop | None = None) -> TrialOutcome:
        # 25 GiB of weights per pass at 768 GB/s allow ~30 passes/s: 9039 tok/s is a burst's artefact
        outcome = simulated_outcome(space, plan, tok_s=9039.0, rounds=2, ci95=1.0, memory=memory, accept_length=3.0)
        request = RequestRecord(prompt_id="c1", category="coding", round=0, prompt_tokens=500, completion_tokens=48,
                                ttft_s=0.1, e2e_s=0.105, decode_tok_s=9039.0, accept_length=3.0, finish_reason="length")
        measured = [m.model_copy(update={"requests": [request]}) for m in outcome.measurements]  # fmt: skip
        return outcome.model_copy(update={"measurements": measured})

    runner = study_runner(space, tmp_path, inventory=idle_gpus(2), launcher=launcher, sampler=make_sampler("random", 1))
    runner.run(trials=1, timeout_s=None)
    (record,) = runner.records()
    assert record.outcome == "measurement-failed" and not record.feasible
    assert (record.reason or "").startswith("integrity check: decode 9039 tok/s is more than 20x the")
    assert race_finalists(runner, FinalistsRace()) is None  # nothing measured that could be a finalist
