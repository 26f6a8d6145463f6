"""The vLLM engine: speculative fields and JSON, launch rules, argv against vLLM 0.34's and 0.33's real --help,
failure classification on recorded logs, public log lines from vLLM's issues and user reports, metrics deltas."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from autotune.engines.base import FlagSet, InvalidConfig, LaunchPlan, parse_help_flags
from autotune.engines.vllm import VLLMEngine
from autotune.engines.vllm_flags import parse_max_model_len
from autotune.engines.vllm_logs import parse_engine_line, parse_spec_line
from autotune.errors import FlagError, LauncherError
from autotune.headroom_figures import OOM_ROUNDING_BYTES
from autotune.measure.suites import ChatMessage, Prompt
from autotune.outcomes import OutcomeKind

FIXTURES = Path(__file__).parent / "fixtures"
LOGS = FIXTURES / "vllm_logs"
RELEASES = ("0.34.0", "0.33.0")  # the newest, and the one a deployment that has not upgraded runs
LAUNCHER = ["/opt/vllm/.venv/bin/vllm", "serve"]
BATCH = {"max-num-seqs": 16, "max-num-batched-tokens": 4096}
MTP3 = {"speculative-method": "mtp", "num-speculative-tokens": 3}

engine = VLLMEngine()


@pytest.fixture(scope="module", params=RELEASES)
def real_flags(request: pytest.FixtureRequest) -> FlagSet:
    """A vLLM release's own flag set: ``vllm serve --help=all`` run on a CPU machine (see the fixtures)."""
    return parse_help_flags((FIXTURES / f"vllm-{request.param}-serve-help.txt").read_text())


# ---------------------------------------------------------------- speculative fields and JSON


def test_fields_json_and_shorthands_are_one_effective_config() -> None:
    fields = engine.normalise({**MTP3, **BATCH})
    as_json = engine.normalise({"speculative-config": '{"method": "mtp", "num_speculative_tokens": 3}', **BATCH})
    alias = engine.normalise({"sc": '{"method": "mtp", "num-speculative-tokens": 3}', **BATCH})
    shorthands = engine.normalise({"spec-method": "mtp", "spec-tokens": 3, **BATCH})
    dotted = engine.normalise(
        {"speculative-config.method": "mtp", "speculative-config.num_speculative_tokens": 3, **BATCH}
    )
    renamed = engine.normalise({"speculative-method": "qwen3_next_mtp", "num-speculative-tokens": 3, **BATCH})
    keys = {p.config_key for p in (fields, as_json, alias, shorthands, dotted, renamed)}
    assert keys == {fields.config_key}
    assert fields.flags["speculative-method"] == "mtp" and fields.flags["num-speculative-tokens"] == 3
    assert "speculative-config" not in fields.flags  # the plan keeps fields; the JSON is built for argv
    assert renamed.notes == ["speculative method qwen3_next_mtp is replaced by mtp (vLLM rewrites it)"]


def test_a_key_given_twice_is_refused_as_vllm_refuses_it() -> None:
    with pytest.raises(InvalidConfig, match=r"--spec-tokens and --speculative-config\['num_speculative_tokens'\]"):
        engine.normalise(
            {"speculative-config": '{"method": "mtp", "num_speculative_tokens": 3}', "spec-tokens": 2, **BATCH}
        )
    with pytest.raises(InvalidConfig, match="both set the speculative key 'method'"):
        engine.normalise({"speculative-method": "mtp", "spec-method": "mtp", "num-speculative-tokens": 2, **BATCH})
    with pytest.raises(InvalidConfig, match="not valid JSON"):
        engine.normalise({"speculative-config": "{bad", **BATCH})


def test_speculative_rules() -> None:
    with pytest.raises(InvalidConfig, match="mtp needs num_speculative_tokens"):
        engine.normalise({"speculative-method": "mtp", **BATCH})
    with pytest.raises(InvalidConfig, match="at least 1"):
        engine.normalise({"speculative-method": "mtp", "num-speculative-tokens": 0, **BATCH})
    with pytest.raises(InvalidConfig, match="without a method or a draft model"):
        engine.normalise({"num-speculative-tokens": 3, **BATCH})
    with pytest.raises(InvalidConfig, match="eagle3 needs a draft model"):
        engine.normalise({"speculative-method": "eagle3", "num-speculative-tokens": 3, **BATCH})
    with pytest.raises(InvalidConfig, match="draft_tensor_parallel_size=2 must be 1 or the target's"):
        engine.normalise({**MTP3, "draft-tensor-parallel-size": 2, "tensor-parallel-size": 4, **BATCH})
    assert (
        engine.normalise({**MTP3, "draft-tensor-parallel-size": 2, "tp": 2, **BATCH}).flags[
            "draft-tensor-parallel-size"
        ]
        == 2
    )
    # ngram: lookup sizes default to 5, one mirrors the other, min <= max
    ngram = engine.normalise({"speculative-method": "ngram", "num-speculative-tokens": 4, **BATCH})
    assert (ngram.flags["prompt-lookup-min"], ngram.flags["prompt-lookup-max"]) == (5, 5)
    mirrored = engine.normalise(
        {"speculative-method": "ngram", "num-speculative-tokens": 4, "prompt-lookup-max": 3, **BATCH}
    )
    assert (mirrored.flags["prompt-lookup-min"], mirrored.flags["prompt-lookup-max"]) == (3, 3)
    with pytest.raises(InvalidConfig, match="prompt_lookup_min=4 must be <= prompt_lookup_max=2"):
        engine.normalise({"speculative-method": "ngram", "prompt-lookup-min": 4, "prompt-lookup-max": 2, **BATCH})
    # lookup sizes mean nothing to MTP: dropped (vLLM zeroes them), so the config is measured once
    with_lookup = engine.normalise({**MTP3, "prompt-lookup-min": 2, **BATCH})
    assert with_lookup.config_key == engine.normalise({**MTP3, **BATCH}).config_key
    assert "prompt_lookup_min dropped" in with_lookup.notes[0]
    # a draft model without a method: vLLM infers draft_model (or ngram)
    inferred = engine.normalise({"speculative-model": "org/draft", "num-speculative-tokens": 2, **BATCH})
    assert inferred.flags["speculative-method"] == "draft_model"


# ---------------------------------------------------------------- other launch rules


def test_rejection_sample_method_rules() -> None:
    block = engine.normalise({**MTP3, "rejection-sample-method": "block", **BATCH})
    assert block.flags["rejection-sample-method"] == "block"
    argv = engine.build_argv(LAUNCHER, model="m", plan=block, host="h", port=1)
    assert json.loads(argv[argv.index("--speculative-config") + 1])["rejection_sample_method"] == "block"
    standard = engine.normalise({**MTP3, "rejection-sample-method": "standard", **BATCH})
    assert standard.config_key == engine.normalise({**MTP3, **BATCH}).config_key  # vLLM's default: one launch
    assert standard.notes == ["rejection_sample_method standard is vLLM's default: left out, one launch"]
    fly_keys = engine.normalise({**MTP3, "speculative-config.fly_window_size": 2, **BATCH})
    assert "speculative-config.fly_window_size" not in fly_keys.flags  # read only by FLy
    synthetic = {**MTP3, "rejection-sample-method": "synthetic", **BATCH}
    by_length = engine.normalise({**synthetic, "speculative-config.synthetic_acceptance_length": 2.5})
    by_rates = engine.normalise({**synthetic, "speculative-config.synthetic_acceptance_rates": "[0.9, 0.6, 0.3]"})
    argv = engine.build_argv(LAUNCHER, model="m", plan=by_rates, host="h", port=1)
    assert json.loads(argv[argv.index("--speculative-config") + 1])["synthetic_acceptance_rates"] == [0.9, 0.6, 0.3]
    assert engine.set_accept_length(by_length.flags) == 2.5
    assert engine.set_accept_length(by_rates.flags) == pytest.approx(2.8)
    assert engine.set_accept_length(block.flags) is None
    for flags, reason in (
        ({**MTP3, "rejection-sample-method": "greedy"}, "must be one of standard, block, synthetic, fly"),
        (synthetic, "requires exactly one of synthetic_acceptance_rates or synthetic_acceptance_length"),
        ({**synthetic, "speculative-config.synthetic_acceptance_length": 4.5}, r"must be in \[1, 4\]"),
        ({**synthetic, "speculative-config.synthetic_acceptance_rates": "[0.5, 0.6, 0.1]"}, "non-increasing"),
        ({**synthetic, "speculative-config.synthetic_acceptance_rates": "[0.5]"}, "must have length 3"),
        ({**MTP3, "speculative-config.synthetic_acceptance_length": 2.0}, "only valid with rejection_sample_method"),
        ({"speculative-method": "mtp", "num-speculative-tokens": 1, "rejection-sample-method": "fly"}, "at least 2"),
        ({**MTP3, "rejection-sample-method": "fly", "speculative-config.fly_window_size": 3}, "smaller than"),
    ):
        with pytest.raises(InvalidConfig, match=reason):
            engine.normalise({**flags, **BATCH})


def test_lossy_verification_is_named_where_given() -> None:
    assert engine.lossy_speculation({"rejection-sample-method": "fly"}) == (
        "rejection_sample_method fly changes the model's outputs"
    )
    assert engine.lossy_speculation({"speculative-config": '{"method": "mtp", "rejection_sample_method": "synthetic"}'})
    assert engine.lossy_speculation({"speculative-config.rejection_sample_method": "fly"})
    for lossless in ("block", "standard"):
        assert engine.lossy_speculation({"rejection-sample-method": lossless}) is None
    assert engine.lossy_speculation({"speculative-config": "{not json"}) is None  # refused later, with its reason


def test_batch_limits_are_always_both_and_ordered() -> None:
    with pytest.raises(InvalidConfig, match="missing --max-num-batched-tokens"):
        engine.normalise({"max-num-seqs": 16})
    with pytest.raises(InvalidConfig, match="missing --max-num-seqs, --max-num-batched-tokens"):
        engine.normalise({"gpu-memory-utilization": 0.9})
    with pytest.raises(InvalidConfig, match=r"max_num_batched_tokens \(8\) must be greater than or equal"):
        engine.normalise({"max-num-seqs": 16, "max-num-batched-tokens": 8})
    assert engine.normalise({"max-num-seqs": 16, "max-num-batched-tokens": 16}).flags["max-num-seqs"] == 16


def test_max_model_len_spellings_and_other_rules() -> None:
    assert parse_max_model_len("32k") == 32000
    assert parse_max_model_len("32K") == 32768
    assert parse_max_model_len(131072) == 131072
    assert parse_max_model_len("25.6k") == 25600
    assert parse_max_model_len("-1") == parse_max_model_len("auto") == "auto"
    for bad in ("1.5K", "abc", "0"):
        with pytest.raises(InvalidConfig):
            parse_max_model_len(bad)
    assert engine.normalise({"max_model_len": "128K", **BATCH}).config_key == (
        engine.normalise({"max-model-len": 131072, **BATCH}).config_key
    )
    with pytest.raises(InvalidConfig, match=r"must be in \(0, 1\]"):
        engine.normalise({"gpu-memory-utilization": 1.2, **BATCH})
    assert engine.normalise({"O": "3", **BATCH}).flags["optimization-level"] == 3
    with pytest.raises(InvalidConfig, match="0..3"):
        engine.normalise({"optimization-level": 5, **BATCH})
    with pytest.raises(InvalidConfig, match="disable-log-stats"):
        engine.normalise({"disable-log-stats": True, **BATCH})
    with pytest.raises(InvalidConfig, match="given twice"):
        engine.normalise({"tp": 2, "tensor-parallel-size": 2, **BATCH})


def test_switches_that_default_on_are_turned_off_explicitly() -> None:
    off = engine.normalise({"enable-prefix-caching": False, **BATCH})
    assert off.flags["enable-prefix-caching"] is False
    assert off.config_key == engine.normalise({"disable-prefix-caching": True, **BATCH}).config_key
    assert "enable-prefix-caching" not in engine.normalise({"disable-prefix-caching": False, **BATCH}).flags
    argv = engine.build_argv(LAUNCHER, model="m", plan=off, host="h", port=1)
    assert "--disable-prefix-caching" in argv and "--enable-prefix-caching" not in argv
    # a switch that is off by default: false leaves it out
    assert "enable-log-requests" not in engine.normalise({"enable-log-requests": False, **BATCH}).flags


# ---------------------------------------------------------------- argv and the real flag set


def test_argv_places_the_model_after_serve_and_builds_one_json() -> None:
    plan = engine.normalise({"tp": 2, "gpu-memory-utilization": 0.9, "max-model-len": "128k", **MTP3, **BATCH})
    argv = engine.build_argv(LAUNCHER, model="Qwen/Qwen3.6-27B", plan=plan, host="127.0.0.1", port=8123)
    assert argv[:7] == [*LAUNCHER, "Qwen/Qwen3.6-27B", "--host", "127.0.0.1", "--port", "8123"]
    assert argv.count("--speculative-config") == 1
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec == {"method": "mtp", "num_speculative_tokens": 3}
    assert not {"--spec-method", "--spec-tokens", "--speculative-method", "--num-speculative-tokens"} & set(argv)
    assert argv[argv.index("--per-request-spec-decode-metrics") + 1] == "summary"
    assert argv[argv.index("--tensor-parallel-size") + 1] == "2"
    assert argv[argv.index("--max-model-len") + 1] == "128000"
    assert "--disable-log-stats" not in argv


def _check_against(argv: list[str], flags: FlagSet) -> None:
    """Every option of argv exists in the flag set, with a value exactly when it takes one."""
    rest = argv[len(LAUNCHER) + 1 :]
    index = 0
    while index < len(rest):
        token = rest[index]
        assert token.startswith("--"), f"stray value {token!r} in {rest}"
        name = token[2:]
        assert name in flags.flags, f"--{name} is not a flag of this vLLM"
        index += 1 if name in flags.switches else 2


def test_argv_is_accepted_by_vllm_flag_sets(real_flags: FlagSet) -> None:
    for flags in (
        {"tp": 2, "gpu-memory-utilization": 0.92, "max-model-len": "auto", **MTP3, **BATCH},
        {"tensor-parallel-size": 2, "enable-prefix-caching": False, "enforce-eager": True, "O": 3, **BATCH},
        {"kv-cache-dtype": "fp8", "max-cudagraph-capture-size": 64, "no-enforce-eager": True, **BATCH},
        {"spec-method": "ngram", "spec-tokens": 4, "prompt-lookup-max": 3, "async-scheduling": False, **BATCH},
        {
            "speculative-config": '{"method": "mtp", "num_speculative_tokens": 2}',
            "performance-mode": "interactivity",
            **BATCH,
        },
        {**MTP3, "rejection-sample-method": "block", **BATCH},
    ):
        plan = engine.normalise(flags)
        _check_against(engine.build_argv(LAUNCHER, model="m", plan=plan, host="127.0.0.1", port=1), real_flags)


def test_real_help_flag_set_and_check_flags(real_flags: FlagSet) -> None:
    from autotune.space import load_space
    from tests.conftest import SPACES

    assert len(real_flags.flags) > 400
    for flag in (
        *("speculative-config", "spec-tokens", "gpu-memory-utilization", "max-num-seqs", "max-num-batched-tokens"),
        *("max-model-len", "tensor-parallel-size", "enable-prefix-caching", "disable-prefix-caching"),
        *("kv-cache-dtype", "optimization-level", "max-cudagraph-capture-size", "per-request-spec-decode-metrics"),
    ):
        assert flag in real_flags.flags, flag
    assert "enforce-eager" in real_flags.switches and "max-num-seqs" not in real_flags.switches
    space = load_space(SPACES / "qwen3.6-27b-2xa6000-vllm-twin.yaml")
    engine.check_flags(space.all_flag_names(), real_flags)  # the twin space is valid on real vLLM 0.34 and 0.33
    engine.check_flags(["tp", "O", "max_num_seqs", "max-num-batched-tokens", "spec-tokens", "spec-method"], real_flags)


def test_check_flags_refusals(real_flags: FlagSet) -> None:
    batch = ["max-num-seqs", "max-num-batched-tokens"]
    with pytest.raises(FlagError, match="set by autotune itself"):
        engine.check_flags(["port", *batch], real_flags)
    with pytest.raises(FlagError, match="disable-log-stats turns off"):
        engine.check_flags(["disable-log-stats", *batch], real_flags)
    with pytest.raises(FlagError, match="unknown flag --gpu-memory-utilisation") as info:
        engine.check_flags(["gpu-memory-utilisation", *batch], real_flags)
    assert info.value.hint == "did you mean --gpu-memory-utilization?"
    with pytest.raises(FlagError, match="set one JSON object twice"):
        engine.check_flags(["speculative-config", "num-speculative-tokens", *batch], real_flags)
    with pytest.raises(FlagError, match="both set the speculative key 'num_speculative_tokens'"):
        engine.check_flags(["spec-tokens", "num-speculative-tokens", *batch], real_flags)
    with pytest.raises(FlagError, match="missing --max-num-batched-tokens"):
        engine.check_flags(["max-num-seqs"], real_flags)
    old = FlagSet(flags=frozenset({"max-num-seqs", "max-num-batched-tokens"}))
    with pytest.raises(FlagError, match="no --speculative-config"):
        engine.check_flags(["num-speculative-tokens", *batch], old)


def test_the_launcher_must_end_with_serve() -> None:
    with pytest.raises(LauncherError, match="ends with its 'serve' command"):
        VLLMEngine().read_flag_set(["/opt/vllm/.venv/bin/vllm"])


def test_per_request_metrics_flag_only_where_the_launcher_has_it() -> None:
    plan = engine.normalise({**MTP3, **BATCH})
    old = VLLMEngine()
    old._flag_set = FlagSet(flags=frozenset({"speculative-config", "max-num-seqs", "max-num-batched-tokens"}))
    assert "--per-request-spec-decode-metrics" not in old.build_argv(LAUNCHER, model="m", plan=plan, host="h", port=1)
    own = engine.normalise({**MTP3, **BATCH, "per-request-spec-decode-metrics": "detailed"})
    argv = engine.build_argv(LAUNCHER, model="m", plan=own, host="h", port=1)
    assert argv.count("--per-request-spec-decode-metrics") == 1 and "detailed" in argv


# ---------------------------------------------------------------- failure classification


@pytest.mark.parametrize(
    ("log", "kind", "root"),
    [
        ("engine_graph_oom.log", OutcomeKind.MEMORY_TOO_HIGH, "CUDA out of memory. Tried to allocate"),
        ("engine_nccl.log", OutcomeKind.CRASHED, "RuntimeError: NCCL error"),
    ],
)
def test_the_root_cause_not_the_engine_core_epilogue(log: str, kind: OutcomeKind, root: str) -> None:
    """vLLM ends every failed start with "Engine core initialization failed"; the reason is the root."""
    failure = engine.classify_failure(exit_code=1, log_text=(LOGS / log).read_text(), timed_out=False)
    assert failure.kind is kind and root in failure.reason
    assert "Engine core initialization failed" not in failure.reason


def test_a_worker_s_out_of_memory_message_gives_what_the_launch_lacked() -> None:
    log = (LOGS / "engine_graph_oom.log").read_text()
    # "Tried to allocate 1.02 GiB ... 512.00 MiB is free ... 1.20 GiB is reserved by PyTorch but unallocated":
    # the memory PyTorch held could have served it, so it lacked nothing that figures can show
    fragmented = engine.memory_facts(log)
    assert fragmented is not None and fragmented.kv_tokens == 466480 and fragmented.oom_shortfall_bytes is None
    died = engine.memory_facts(log.replace("1.20 GiB is reserved", "100.00 MiB is reserved"))
    assert died is not None
    assert died.oom_shortfall_bytes == pytest.approx(1.02 * 2**30 - 612 * 2**20 - OOM_ROUNDING_BYTES)


# ---------------------------------------------------------------- log lines and metrics

# A public pair of log lines from a user report of Qwen3.6-27B with MTP under vLLM.
PUBLIC_ENGINE_LINE = (
    "Engine 000: Avg prompt throughput: 2.5 tokens/s, Avg generation throughput: 74.7 tokens/s, Running: 1 reqs, "
    "Waiting: 0 reqs, GPU KV cache usage: 7.4%, Prefix cache hit rate: 0.0%"
)
PUBLIC_SPEC_LINE = (
    "SpecDecoding metrics: Mean acceptance length: 2.87, Accepted throughput: 48.90 tokens/s, Drafted throughput: "
    "157.19 tokens/s, Accepted: 489 tokens, Drafted: 1572 tokens, Per-position acceptance rate: 0.740, 0.473, 0.309, "
    "0.187, 0.099, 0.057, Avg Draft acceptance rate: 31.1%"
)
PREFIX = "(APIServer pid=4242) INFO 11-30 01:06:34 [loggers.py:283] "


def test_public_log_lines_parse_by_field() -> None:
    line = parse_engine_line(PUBLIC_ENGINE_LINE)
    assert line is not None
    assert (line.engine, line.prompt_throughput, line.generation_throughput) == (0, 2.5, 74.7)
    assert (line.running, line.waiting, line.kv_cache_usage, line.prefix_cache_hit_rate) == (1, 0, 7.4, 0.0)
    spec = parse_spec_line(PUBLIC_SPEC_LINE)
    assert spec is not None
    assert (spec.mean_acceptance_length, spec.accepted, spec.drafted) == (2.87, 489, 1572)
    assert spec.per_position == [0.740, 0.473, 0.309, 0.187, 0.099, 0.057]
    assert spec.draft_acceptance_rate == 31.1
    assert spec.drafts == pytest.approx(1572 / 6)
    assert 1 + 489 / spec.drafts == pytest.approx(2.87, abs=0.01)  # the line agrees with itself
    # with vLLM's prefix, with fields in another order and extra ones (Preemptions, KV fetch), older spec fields
    prefixed = parse_engine_line(PREFIX + PUBLIC_ENGINE_LINE)
    assert prefixed == line
    shuffled = parse_engine_line(
        "Engine 001: Avg generation throughput: 10.0 tokens/s, Avg prompt throughput: 1.0 tokens/s, Running: 2 reqs, "
        "Waiting: 3 reqs, KV fetch: 0 waiting to start, 1 in progress, 0 completed waiting, Preemptions: 4, "
        "GPU KV cache usage: 50.0%"
    )
    assert shuffled is not None and (shuffled.engine, shuffled.generation_throughput, shuffled.waiting) == (1, 10.0, 3)
    older = parse_spec_line(
        "SpecDecoding metrics: Draft acceptance rate: 63.6%, Mean acceptance length: 2.91, Accepted: 441 tokens, "
        "Drafted: 693 tokens, Per-position acceptance rate: 0.857, 0.688, 0.364"
    )
    assert older is not None and (older.mean_acceptance_length, older.per_position) == (2.91, [0.857, 0.688, 0.364])
    assert parse_spec_line("SpecDecoding metrics: Draft acceptance rate: 0.500, System efficiency: 0.400") is None
    assert parse_engine_line("Engine 000: something else") is None


def test_spec_lines_without_a_mean_keep_their_counts() -> None:
    """0.8's V1 line prints the rate, accepted and drafted tokens but no mean and no count of drafts:
    the counts are kept and no accept length is made up. Where the per-position rates give the drafts,
    the mean is 1 + accepted / drafts; V0's counts give it as emitted / (draft tokens / k)."""
    lines = (FIXTURES / "vllm_logs" / "spec_v1_counts_only.log").read_text().splitlines()
    counts = parse_spec_line(lines[1])
    assert counts is not None
    assert (counts.accepted, counts.drafted, counts.draft_acceptance_rate) == (500, 800, 62.5)
    assert counts.mean_acceptance_length is None and counts.drafts is None
    positions = parse_spec_line(
        "SpecDecoding metrics: Accepted: 600 tokens, Drafted: 900 tokens, Per-position acceptance rate: 0.800, "
        "0.700, 0.500, Avg Draft acceptance rate: 66.7%"
    )
    assert positions is not None and positions.mean_acceptance_length == pytest.approx(1 + 600 / 300)
    v0 = parse_spec_line(
        "Speculative metrics: Draft acceptance rate: 0.600, System efficiency: 0.450, Number of speculative "
        "tokens: 4, Number of accepted tokens: 240, Number of draft tokens: 400, Number of emitted tokens: 280."
    )
    assert v0 is not None and (v0.accepted, v0.drafted, v0.draft_acceptance_rate) == (240, 400, 60.0)
    assert v0.mean_acceptance_length == pytest.approx(280 / 100)


def _metrics(generated: float, drafts: float, accepted: float) -> str:
    """vLLM's counters for two engines (DP): deltas are summed over ``engine``."""
    lines = []
    for name, value in (
        ("vllm:generation_tokens", generated),
        ("vllm:spec_decode_num_drafts", drafts),
        ("vllm:spec_decode_num_accepted_tokens", accepted),
    ):
        lines += [f"# HELP {name}_total x", f"# TYPE {name}_total counter"]
        lines += [f'{name}_total{{model_name="m",engine="{e}"}} {value / 2}' for e in (0, 1)]
    return "\n".join(lines) + "\n"


def test_server_stats_from_log_window_and_metric_deltas() -> None:
    idle = PUBLIC_ENGINE_LINE.replace("74.7", "0.0").replace("2.5", "0.0")
    log = "\n".join(
        [
            PREFIX + PUBLIC_ENGINE_LINE,
            PREFIX + PUBLIC_SPEC_LINE,
            PREFIX + PUBLIC_ENGINE_LINE.replace("74.7", "80.7"),
            PREFIX + PUBLIC_SPEC_LINE.replace("Accepted: 489", "Accepted: 300").replace("length: 2.87", "length: 2.14"),
            PREFIX + idle,
            "unrelated",
        ]
    )
    stats = engine.server_stats(
        log_window=log, metrics_before=_metrics(1000, 100, 150), metrics_after=_metrics(1600, 300, 500)
    )
    assert stats is not None
    assert stats.log_lines == 2 and stats.gen_tok_s == pytest.approx(77.7)  # the idle line does not count
    # each interval's printed mean, weighted by its verify steps: 1 + Σaccepted / Σsteps to rounding
    assert stats.accept_length == pytest.approx(1 + (489 + 300) / (2 * 1572 / 6), abs=0.01)
    assert stats.generated_tokens == 600
    assert stats.metrics_accept_length == pytest.approx(1 + 350 / 200)  # 1 + Δaccepted / Δdrafts
    assert engine.server_stats(log_window="nothing", metrics_before=None, metrics_after=None) is None


# ---------------------------------------------------------------- HTTP (mocked)


METRICS_TEXT = (
    "# HELP vllm:cache_config_info Information of the LLMEngine CacheConfig\n"
    "# TYPE vllm:cache_config_info gauge\n"
    'vllm:cache_config_info{block_size="784",cache_dtype="fp8",enable_prefix_caching="True",'
    'gpu_memory_utilization="0.9",kv_cache_size_tokens="480592",kv_cache_max_concurrency="3.37",'
    'num_gpu_blocks="613",sliding_window="None",engine="0"} 1.0\n'
)


def test_effective_config_from_models_and_cache_config_info() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": "m", "max_model_len": 21952}]})
        if request.url.path == "/metrics":
            return httpx.Response(200, text=METRICS_TEXT)
        return httpx.Response(200, json={"version": "0.33.0"})

    plan = LaunchPlan(engine="vllm", flags={"max-model-len": "auto"})
    with httpx.Client(transport=httpx.MockTransport(handler)) as client:
        effective = engine.effective_config(client, "http://x", plan)
    assert effective.version == "0.33.0"
    assert effective.values["max-model-len"] == 21952  # what auto-fit chose
    assert effective.values["kv-cache-dtype"] == "fp8"
    assert effective.values["enable-prefix-caching"] is True
    assert effective.values["gpu-memory-utilization"] == 0.9
    assert effective.values["kv-cache-size-tokens"] == 480592 and effective.values["block-size"] == 784


def _sse(events: list[object]) -> bytes:
    return b"".join(f"data: {json.dumps(e) if not isinstance(e, str) else e}\n\n".encode() for e in events)


def test_stream_generate_counts_steps_by_usage_and_reads_spec_metrics() -> None:
    seen: list[dict[str, object]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append({"path": request.url.path, **json.loads(request.content)})
        usage = [{"prompt_tokens": 7, "completion_tokens": n, "total_tokens": 7 + n} for n in (1, 4, 6)]
        events: list[object] = [
            {"choices": [{"index": 0, "text": "a", "finish_reason": None}], "usage": usage[0]},
            {"choices": [{"index": 0, "text": "bcd", "finish_reason": None}], "usage": usage[1]},
            {"choices": [{"index": 0, "text": "ef", "finish_reason": "length"}], "usage": usage[2]},
            {"choices": [], "usage": usage[2], "metrics": {"speculative_decoding": {"mean_acceptance_length": 2.5}}},
            "[DONE]",
        ]
        return httpx.Response(200, content=_sse(events), headers={"content-type": "text/event-stream"})

    async def collect(prompt: Prompt) -> list[object]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            return [c async for c in engine.stream_generate(client, "http://x", prompt, max_tokens=6, ignore_eos=True)]

    chunks = asyncio.run(collect(Prompt(id="p", category="code", prompt="def f():")))
    assert [c.completion_tokens for c in chunks] == [1, 4, 6, 6]  # type: ignore[attr-defined]
    assert chunks[-1].accept_length == 2.5 and chunks[-1].finish_reason == "length"  # type: ignore[attr-defined]
    assert chunks[2].finished  # type: ignore[attr-defined]
    body = seen[0]
    assert body["path"] == "/v1/completions" and body["prompt"] == "def f():" and body["ignore_eos"] is True
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    asyncio.run(collect(Prompt(id="c", category="chat", messages=[ChatMessage(role="user", content="hi")])))
    assert seen[1]["path"] == "/v1/chat/completions" and seen[1]["messages"] == [{"role": "user", "content": "hi"}]
