"""The SGLang engine: launch rules, flag-set parsing, failure classification on recorded logs."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
import pytest

from autotune.engines.base import InvalidConfig, LaunchPlan, StreamChunk, parse_help_flags
from autotune.engines.sglang import SGLangEngine
from autotune.errors import FlagError
from autotune.headroom_figures import OOM_ROUNDING_BYTES
from autotune.measure.suites import Prompt

LOGS = Path(__file__).parent / "fixtures" / "sglang_logs"
engine = SGLangEngine()
NEXTN = {"speculative-algorithm": "NEXTN"}

HELP = """\
usage: launch_server.py [-h] --model-path MODEL_PATH [--mem-fraction-static MEM_FRACTION_STATIC]
                        [--enable-metrics]

options:
  -h, --help            show this help message and exit
  --model-path MODEL_PATH, --model MODEL_PATH
                        The path of the model weights.
  --mem-fraction-static MEM_FRACTION_STATIC
                        The fraction of the memory used for static allocation.
  --mamba-radix-cache-strategy {auto,no_buffer,extra_buffer,extra_buffer_lazy}
                        Replaces the old --mamba-scheduler-strategy flag.
  --enable-metrics      Enable log prometheus metrics.
  --cuda-graph-max-bs-decode CUDA_GRAPH_MAX_BS_DECODE
"""


def test_help_parsing_takes_invocations_not_descriptions() -> None:
    flags = parse_help_flags(HELP)
    assert {"model-path", "model", "mem-fraction-static", "mamba-radix-cache-strategy", "enable-metrics"} <= flags.flags
    assert "mamba-scheduler-strategy" not in flags.flags  # only mentioned in a description
    assert "enable-metrics" in flags.switches and "mem-fraction-static" not in flags.switches


def test_unknown_and_renamed_flags_are_named() -> None:
    flags = parse_help_flags(HELP)
    with pytest.raises(FlagError, match="unknown flag --mamba-scheduler-strategy") as info:
        engine.check_flags(["mamba-scheduler-strategy"], flags)
    assert info.value.hint == "it was renamed to --mamba-radix-cache-strategy"
    with pytest.raises(FlagError) as info:
        engine.check_flags(["cuda-graph-max-bs"], flags)
    assert info.value.hint == "it was renamed to --cuda-graph-max-bs-decode"
    with pytest.raises(FlagError) as info:
        engine.check_flags(["mem-fraction-statc"], flags)
    assert info.value.hint == "did you mean --mem-fraction-static?"
    with pytest.raises(FlagError, match="set by autotune itself"):
        engine.check_flags(["port"], flags)


def test_topk_one_sets_draft_tokens_to_steps_plus_one() -> None:
    plan = engine.normalise({**NEXTN, "speculative-num-steps": 3, "speculative-eagle-topk": 1})
    assert plan.flags["speculative-num-draft-tokens"] == 4
    rewritten = engine.normalise(
        {**NEXTN, "speculative-num-steps": 3, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 9}
    )
    assert rewritten.flags["speculative-num-draft-tokens"] == 4
    assert rewritten.notes == ["topk 1: --speculative-num-draft-tokens 9 becomes steps + 1 = 4"]
    assert rewritten.config_key == plan.config_key  # measured once


def test_topk_above_one_keeps_draft_tokens_and_needs_them() -> None:
    plan = engine.normalise(
        {**NEXTN, "speculative-num-steps": 3, "speculative-eagle-topk": 2, "speculative-num-draft-tokens": 6}
    )
    assert plan.flags["speculative-num-draft-tokens"] == 6
    with pytest.raises(InvalidConfig, match="missing --speculative-num-draft-tokens"):
        engine.normalise({**NEXTN, "speculative-num-steps": 3, "speculative-eagle-topk": 2})
    with pytest.raises(InvalidConfig, match="missing --speculative-eagle-topk"):
        engine.normalise({**NEXTN, "speculative-num-steps": 3})


def test_no_spec_flags_means_server_defaults() -> None:
    assert engine.normalise(NEXTN).flags == NEXTN
    with pytest.raises(InvalidConfig, match="without --speculative-algorithm"):
        engine.normalise({"speculative-num-steps": 2, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 3})


def test_dflash_rules() -> None:
    base = {"speculative-algorithm": "DFLASH", "speculative-num-draft-tokens": 16}
    with pytest.raises(InvalidConfig, match="needs --speculative-draft-model-path"):
        engine.normalise(base)
    plan = engine.normalise({**base, "speculative-draft-model-path": "z/drafter", "speculative-num-steps": 3})
    assert plan.flags["speculative-num-steps"] == 1 and plan.flags["speculative-eagle-topk"] == 1
    assert plan.flags["speculative-num-draft-tokens"] == 16
    assert "DFLASH forces --speculative-num-steps 1 (was 3)" in plan.notes
    with pytest.raises(InvalidConfig, match="must equal"):
        engine.normalise({**base, "speculative-draft-model-path": "z", "speculative-dflash-block-size": 8})


def test_mtp_name_and_extra_buffer_limit() -> None:
    with pytest.raises(InvalidConfig, match="use NEXTN"):
        engine.normalise({"speculative-algorithm": "MTP"})
    with pytest.raises(InvalidConfig, match="at most 256"):
        engine.normalise(
            {
                **NEXTN,
                "speculative-num-steps": 8,
                "speculative-eagle-topk": 64,
                "speculative-num-draft-tokens": 300,
                "mamba-radix-cache-strategy": "extra_buffer",
            }
        )


def test_context_length_spellings_are_one_config() -> None:
    spelled = engine.normalise({"context-length": "128Ki"})
    assert spelled.flags["context-length"] == 131072
    assert spelled.config_key == engine.normalise({"context-length": 131072}).config_key
    assert engine.normalise({"context-length": "25.6k"}).flags["context-length"] == 25600
    with pytest.raises(InvalidConfig, match="not a length"):
        engine.normalise({"context-length": "128K"})  # suffixes are case-sensitive in 0.5.23


def test_argv_uses_full_flag_names() -> None:
    plan = LaunchPlan(engine="sglang", flags={"tp-size": 2, "enable-metrics": True, "mem-fraction-static": 0.88})
    argv = engine.build_argv(["python", "-m", "sglang.launch_server"], model="m", plan=plan, host="127.0.0.1", port=9)
    assert argv == [
        "python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "m",
        "--host",
        "127.0.0.1",
        "--port",
        "9",
        "--tp-size",
        "2",
        "--enable-metrics",
        "--mem-fraction-static",
        "0.88",
    ]


def test_a_failed_capture_gives_no_graph_size() -> None:
    """A failed capture logs its batch sizes but no graph memory: nothing to size graphs with."""
    died = engine.memory_facts((LOGS / "too_high.log").read_text())
    assert died is not None and died.graph_bytes is None and died.graph_batch is None
    assert died.kv_tokens == 412000
    # "Tried to allocate 1.50 GiB ... of which 802.00 MiB is free": short by at least that, less the rounding
    assert died.oom_shortfall_bytes == 1.5 * 2**30 - 802 * 2**20 - OOM_ROUNDING_BYTES


@pytest.mark.parametrize(
    ("message", "shortfall_mib"),
    [
        # PyTorch 2.1 and later; memory PyTorch held unallocated might have served the allocation
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.25 GiB. GPU 0 has a total capacity of "
            "79.19 GiB of which 1.12 GiB is free. Including non-PyTorch memory, this process has 78.06 GiB memory in "
            "use. Of the allocated memory 75.50 GiB is allocated by PyTorch, and 256.00 MiB is reserved by PyTorch "
            "but unallocated.",
            2.25 * 1024 - 1.12 * 1024 - 256 - 64,
        ),
        (
            "CUDA out of memory. Tried to allocate 900.00 MiB. GPU 3 has a total capacity of 23.65 GiB of which "
            "0 bytes is free.",
            900 - 64,
        ),
        # before 2.1
        (
            "RuntimeError: CUDA out of memory. Tried to allocate 512.00 MiB (GPU 0; 15.90 GiB total capacity; "
            "13.13 GiB already allocated; 300.00 MiB free; 14.80 GiB reserved in total by PyTorch)",
            512 - 300 - 64,
        ),
        # more free than it tried to allocate (fragmentation): no shortfall to read
        (
            "CUDA out of memory. Tried to allocate 3.00 GiB. GPU 0 has a total capacity of 12.00 GiB of which 5.00 GiB "
            "is free.",
            None,
        ),
        ("CUDA out of memory. Tried to allocate 20.00 MiB", None),  # no free figure
    ],
)
def test_an_out_of_memory_message_s_figures_give_the_least_it_lacked(message: str, shortfall_mib: float | None) -> None:
    facts = engine.memory_facts(f"[2026-12-06 09:00:00 TP0] Load weight end. mem usage=20.00 GB\n{message}\n")
    assert facts is not None
    if shortfall_mib is None:
        assert facts.oom_shortfall_bytes is None
    else:
        assert facts.oom_shortfall_bytes == pytest.approx(shortfall_mib * 2**20)


REAL_HELP = Path(__file__).parent / "fixtures" / "sglang-0.5.23-help.txt"


def test_real_sglang_help_accepts_the_seed_space_and_rejects_old_names() -> None:
    from autotune.space import load_space
    from tests.conftest import REAL_SPACE

    flags = parse_help_flags(REAL_HELP.read_text())
    assert len(flags.flags) > 500
    space = load_space(REAL_SPACE)
    engine.check_flags(space.all_flag_names(), flags)  # every flag of the seed space exists in 0.5.23
    assert {"model-path", "host", "port"} <= flags.flags
    assert "enable-metrics" in flags.switches and "mem-fraction-static" not in flags.switches
    for old in ("mamba-scheduler-strategy", "cuda-graph-max-bs"):
        with pytest.raises(FlagError, match=f"unknown flag --{old}"):
            engine.check_flags([old], flags)


# Public examples of SGLang's decode log lines, from SGLang's public issues and PRs.
PUBLIC_DECODE_LINES = [
    "[2026-07-30 13:35:13 TP0] Decode batch, #running-req: 1, #full token: 257, full token usage: 0.00, "
    "mamba num: 3, mamba usage: 0.03, accept len: 2.83, accept rate: 0.61, cuda graph: True, "
    "gen throughput (token/s): 93.65, #queue-req: 0",
    "[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, cuda graph: True, "
    "gen throughput (token/s): 144.95, #queue-req: 0",
    "Decode batch. #running-req: 509, #token: 180776, token usage: 0.43, gen throughput (token/s): 7897.87, "
    "largest-len: 0, #queue-req: 0, ",
]


def test_decode_batch_lines_hybrid_plain_and_old_format() -> None:
    from autotune.engines.sglang_logs import parse_decode_line

    hybrid, plain, old = (parse_decode_line(line) for line in PUBLIC_DECODE_LINES)
    assert hybrid is not None and plain is not None and old is not None
    assert (hybrid.rank, hybrid.running_req, hybrid.tokens, hybrid.mamba_usage) == ("TP0", 1, 257, 0.03)
    assert (hybrid.accept_len, hybrid.accept_rate, hybrid.gen_throughput) == (2.83, 0.61, 93.65)
    assert (plain.running_req, plain.tokens, plain.token_usage, plain.accept_len) == (5, 20800, 0.29, None)
    assert plain.gen_throughput == 144.95 and plain.cuda_graph is True
    assert (old.time, old.rank, old.running_req, old.gen_throughput, old.queue_req) == (None, None, 509, 7897.87, 0)
    untagged = parse_decode_line(PUBLIC_DECODE_LINES[1].replace(" TP0]", "]"))
    assert untagged is not None and untagged.rank is None and untagged.gen_throughput == 144.95
    assert parse_decode_line("[2026-07-30 13:35:13 TP0] Prefill batch, #new-seq: 1, #new-token: 64") is None


def test_server_stats_from_log_window_and_metrics() -> None:
    log = "\n".join(
        [
            PUBLIC_DECODE_LINES[0],
            PUBLIC_DECODE_LINES[0].replace("93.65", "95.65"),
            PUBLIC_DECODE_LINES[0].replace(" TP0]", " TP1]").replace("93.65", "1.00"),
            "other line",
        ]
    )
    before = '# TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total{model_name="m"} 100\n'
    after = (
        '# TYPE sglang:generation_tokens_total counter\nsglang:generation_tokens_total{model_name="m"} 612\n'
        '# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{model_name="m"} 2.9\n'
    )
    stats = engine.server_stats(log_window=log, metrics_before=before, metrics_after=after)
    assert stats is not None
    assert stats.log_lines == 2 and stats.gen_tok_s == pytest.approx(94.65) and stats.accept_length == 2.83
    assert stats.generated_tokens == 512 and stats.metrics_accept_length == 2.9
    assert engine.server_stats(log_window="nothing", metrics_before=None, metrics_after=None) is None


METRICS = Path(__file__).parent / "fixtures" / "metrics"


def test_recorded_metrics_of_two_sglang_versions_are_read_by_name() -> None:
    """SGLang's docs scrape (``model_name`` label) and the first Prometheus support's (``name``
    label, start-up gauges): the counters are found whatever the labels."""
    from autotune.engines.base import counter_totals

    current = counter_totals((METRICS / "sglang-docs-2025-metrics.txt").read_text())
    assert current["sglang:generation_tokens_total"] == 7557572.0 and current["sglang:num_running_reqs"] == 162.0
    first = counter_totals((METRICS / "sglang-pr1853-2024-11-metrics.txt").read_text())
    assert first["sglang:prompt_tokens_total"] == 230794.0 and first["sglang:max_total_num_tokens"] == 570979.0
    # the 2024 scrape has no generation counter in the quoted part: no generated-token figure from it
    stats = engine.server_stats(log_window="", metrics_before=None, metrics_after=None)
    assert stats is None
    none_generated = engine.server_stats(
        log_window="",
        metrics_before=(METRICS / "sglang-pr1853-2024-11-metrics.txt").read_text(),
        metrics_after=(METRICS / "sglang-pr1853-2024-11-metrics.txt").read_text(),
    )
    assert none_generated is None


def test_a_server_without_speculation_has_no_metrics_accept_length() -> None:
    """SGLang serves its accept-length gauge at the default 0.0 until a verify step sets it: on a server
    without speculation the window's accept length is absent, not 0.0 (issue 33). The recorded scrape
    (no speculation), then the same server 512 tokens later with the gauges its scheduler sets each
    log interval (sglang/srt/metrics/collector.py, SchedulerStats defaults)."""
    from autotune.engines.base import MetricNames, metric_figures

    before = (METRICS / "sglang-docs-2025-metrics.txt").read_text()
    labels = '{model_name="meta-llama/Llama-3.1-8B-Instruct"}'
    after = before.replace(f"sglang:generation_tokens_total{labels} 7.557572e+06",
                           f"sglang:generation_tokens_total{labels} 7.558084e+06")  # fmt: skip
    assert after != before
    after += (
        "# HELP sglang:spec_accept_length The average acceptance length of speculative decoding.\n"
        f"# TYPE sglang:spec_accept_length gauge\nsglang:spec_accept_length{labels} 0.0\n"
        "# HELP sglang:spec_accept_rate The average acceptance rate of speculative decoding.\n"
        f"# TYPE sglang:spec_accept_rate gauge\nsglang:spec_accept_rate{labels} 0.0\n"
    )
    stats = engine.server_stats(log_window="", metrics_before=before, metrics_after=after)
    assert stats is not None and stats.generated_tokens == 512
    assert stats.metrics_accept_length is None
    # counters of verify steps (vLLM's, llama.cpp's) that did not move: no accept length either
    counted = MetricNames(generated="g_total", drafts="d_total", accepted="a_total")
    idle = "# TYPE g counter\ng_total 10\n# TYPE d counter\nd_total 4\n# TYPE a counter\na_total 6\n"
    assert metric_figures(counted, idle, idle.replace("g_total 10", "g_total 90")) == (80.0, None)
    verified = idle.replace("d_total 4", "d_total 6").replace("a_total 6", "a_total 9")  # 2 steps, 3 accepted
    assert metric_figures(counted, idle, verified) == (0.0, 2.5)


REAL = Path(__file__).parent / "fixtures" / "real_logs" / "sglang"


def test_data_parallel_groups_decode_side_by_side() -> None:
    """Under DP attention every group logs its own Decode batch lines (``DP1 TP0``, ``DP5 TP5``): the
    server's throughput is the sum of each group's median, not one rank's."""
    musa = engine.server_stats(
        log_window=(REAL / "decode_musa_dp_local_tp0_trailing_comma.log").read_text(),
        metrics_before=None,
        metrics_after=None,
    )
    assert musa is not None and musa.log_lines == 4
    assert musa.gen_tok_s == pytest.approx((18.49 + 17.67) / 2 + (17.16 + 17.59) / 2)
    mtp = engine.server_stats(
        log_window=(REAL / "decode_dp_mtp_accept_len.log").read_text(), metrics_before=None, metrics_after=None
    )
    assert mtp is not None and mtp.gen_tok_s == pytest.approx(171.01 + 168.28 + 173.06 + 155.80 + 152.08)
    assert mtp.accept_length == pytest.approx((2.90 + 2.86 + 2.94 + 2.65 + 2.58) / 5)


def test_decode_lines_read_by_field_whatever_the_prefix_order_or_extra_fields() -> None:
    """One real line (sglang#6081, DP attention with MTP) under the variations releases and log
    collectors produce: a ``[N]`` prefix, a pipeline rank tag, fields reordered, a field added."""
    from autotune.engines.sglang_logs import parse_decode_line

    real = (
        "[2025-05-31 18:31:21 DP0 TP0] Decode batch. #running-req: 8, #token: 37217, token usage: 0.13, "
        "accept len: 2.90, cuda graph: True, gen throughput (token/s): 171.01, #queue-req: 0"
    )
    variants = [
        "[3] " + real,
        real.replace("DP0 TP0", "PP1 TP0"),
        real.replace("accept len: 2.90, cuda graph: True, ", "cuda graph: True, ").replace(
            "#queue-req: 0", "#queue-req: 0, accept len: 2.90, #retracted-req: 0, "
        ),
    ]
    for line in [real, *variants]:
        parsed = parse_decode_line(line)
        assert parsed is not None, line
        assert (parsed.running_req, parsed.gen_throughput, parsed.accept_len, parsed.queue_req) == (8, 171.01, 2.90, 0)
    assert parse_decode_line(variants[1]).rank == "PP1 TP0"  # type: ignore[union-attr]


# The last two events of a real SGLang 0.5.23 stream (--enable-metrics, CPU, 2026-12-04), ids and text cut.
REAL_LAST_EVENTS = [
    {"text": "...", "meta_info": {"id": "b2e6", "finish_reason": None, "prompt_tokens": 7, "completion_tokens": 63}},
    {"text": "...", "meta_info": {
        "id": "b2e6", "finish_reason": {"type": "length", "length": 64}, "prompt_tokens": 7, "completion_tokens": 64,
        "cached_tokens": 0, "e2e_latency": 0.26582496099945274, "first_token_latency": 0.015017387999250786,
        "request_finished_ts": 1796399930.7392964, "decode_throughput": 251.1885875150559}},
]  # fmt: skip


def test_the_last_event_carries_sglang_s_own_decode_rate() -> None:
    """A host that stalls SGLang's HTTP process flushes a whole answer at once; the rate SGLang sends with
    the last event (timed from the scheduler's first token) is what the measurement then reads."""

    def handler(request: httpx.Request) -> httpx.Response:
        body = "".join(f"data: {json.dumps(event)}\n\n" for event in REAL_LAST_EVENTS) + "data: [DONE]\n\n"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body.encode())

    async def chunks() -> list[StreamChunk]:
        prompt = Prompt(id="c1", category="coding", prompt="def f(x):")
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            stream = SGLangEngine().stream_generate(client, "http://s", prompt, max_tokens=64, ignore_eos=True)
            return [chunk async for chunk in stream]

    streamed = asyncio.run(chunks())
    assert [c.server_decode_tok_s for c in streamed] == [None, pytest.approx(251.19, abs=0.01)]
    assert streamed[-1].finished and streamed[-1].completion_tokens == 64


@pytest.mark.parametrize(
    "prefix",
    ["[11-02 11:05:44 DP1 ATTN_CP1 TP1]", "[2026-11-02 11:05:44.123 MOE_DP1 TP1]", "[PP1 ATTN_CP0 TP0]"],
)
def test_a_crash_under_any_rank_tag_is_named_by_its_bare_exception(prefix: str) -> None:
    """SGLang's logging prefixes (a date without the year, milliseconds, ATTN_CP and MOE_DP tags) are
    decoration: the reason names the exception, not the prefix."""
    log = (
        "[2026-11-02 11:05:40 TP0] Load weight begin.\n"
        f"{prefix} Scheduler hit an exception: Traceback (most recent call last):\n"
        f'{prefix}   File "scheduler.py", line 3, in run\n'
        f"{prefix} RuntimeError: NCCL communicator was aborted\n"
    )
    failure = SGLangEngine().classify_failure(exit_code=1, log_text=log, timed_out=False)
    assert failure.reason.endswith(": RuntimeError: NCCL communicator was aborted"), failure.reason


def test_an_acceptance_threshold_below_one_is_lossy_and_one_is_not() -> None:
    engine = SGLangEngine()
    assert engine.lossy_speculation({"speculative-accept-threshold-single": 1.0}) is None
    assert engine.lossy_speculation({"speculative-num-steps": 3}) is None
    assert engine.lossy_speculation({"speculative-accept-threshold-single": "0.9"}) == (
        "speculative-accept-threshold-single 0.9 below 1.0 changes the model's outputs"
    )
