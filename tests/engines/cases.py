"""What each engine declares for the contract suite (tests/test_engine_contract.py): its recorded
``--help``, a valid configuration, equivalent spellings, and its recorded logs with what a reader
finds in them. A new engine adds one :class:`EngineCase` here; the suite refuses an engine without.

Every expected value below was read off the fixture by hand (the fixture's own numbers), not taken
from what the engine code returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from autotune.outcomes import OutcomeKind
from autotune.space import FlagValue

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures"


@dataclass(frozen=True)
class LogCase:
    """A recorded log of a failed launch: its exit code, the kind a reader gives it and a piece of
    the line that says so."""

    file: str
    exit_code: int | None
    kind: OutcomeKind
    reason: str


@dataclass(frozen=True)
class StatsCase:
    """A recorded log window (and /metrics scrapes) with the figures a reader computes from it."""

    log: str
    metrics_before: str | None
    metrics_after: str | None
    log_lines: int
    gen_tok_s: float | None
    accept_length: float | None
    generated_tokens: float | None
    metrics_accept_length: float | None


@dataclass(frozen=True)
class FormCase:
    """A log window in one of the forms the engine's releases print its periodic (or per-request)
    lines in, written for the test in that form, and what a reader takes from it: the lines that
    count, the throughput (data-parallel groups summed) and the accept length."""

    file: str
    log_lines: int
    gen_tok_s: float | None
    accept_length: float | None


@dataclass(frozen=True)
class ShortfallCase:
    """A refusal to start for want of pool memory (written in the engine's real wording) and the
    figures its message carries (GiB for the byte fields), with the KV memory the log states."""

    file: str
    figures: dict[str, float | None]
    kv_pool_gib: float | None


@dataclass(frozen=True)
class EngineCase:
    name: str
    help_file: str
    help_argument: str
    """What the engine appends to the launcher to list its flags."""
    launcher_tail: tuple[str, ...]
    """Words the launcher ends with (vLLM's ``serve``)."""
    valid: dict[str, FlagValue]
    """A configuration the engine accepts, using flags of several kinds (switch, number, text)."""
    added_by_argv: frozenset[str]
    """Flags the command line gets from the engine itself (metrics switches), not from the plan."""
    equivalent: list[tuple[dict[str, FlagValue], dict[str, FlagValue]]]
    different: tuple[dict[str, FlagValue], dict[str, FlagValue]]
    failures: list[LogCase]
    startup_log: str | None
    memory: dict[str, float] | None
    """Expected :class:`MemoryFacts` fields of ``startup_log`` (GiB for the byte fields)."""
    stats: StatsCase
    forms: list[FormCase] = field(default_factory=list)
    shortfalls: list[ShortfallCase] = field(default_factory=list)
    extra: dict[str, object] = field(default_factory=dict)




def table(text: str) -> list[LogCase]:
    """Rows of ``file | exit code | kind (OutcomeKind value) | part of the reason``."""
    rows = [[cell.strip() for cell in line.split(" | ")] for line in text.strip().splitlines()]
    return [LogCase(file, int(code), OutcomeKind(kind), reason) for file, code, kind, reason in rows]

NEXTN = {"speculative-algorithm": "NEXTN"}
BATCH = {"max-num-seqs": 16, "max-num-batched-tokens": 4096}
MTP3 = {"speculative-method": "mtp", "num-speculative-tokens": 3}
DRAFT = {"spec-draft-model": "/m/draft.gguf", "spec-type": "draft-simple"}

CASES: dict[str, EngineCase] = {
    "sglang": EngineCase(
        name="sglang",
        help_file="sglang-0.5.23-help.txt",
        help_argument="--help",
        launcher_tail=(),
        valid={
            **NEXTN,
            "speculative-num-steps": 3,
            "speculative-eagle-topk": 1,
            "tp-size": 2,
            "mem-fraction-static": 0.88,
            "context-length": "128Ki",
            "mamba-radix-cache-strategy": "extra_buffer",
            "disable-overlap-schedule": True,
        },
        added_by_argv=frozenset({"enable-metrics"}),
        equivalent=[
            (
                {**NEXTN, "speculative-num-steps": 3, "speculative-eagle-topk": 1},
                {**NEXTN, "speculative-num-steps": 3, "speculative-eagle-topk": 1, "speculative-num-draft-tokens": 9},
            ),
            ({"context-length": "128Ki"}, {"context-length": 131072}),
            # adaptive steps: topk 1 and the middle of the default candidate steps (0, 1, 3, 5, 7)
            (
                {**NEXTN, "speculative-adaptive": True},
                {**NEXTN, "speculative-adaptive": True, "speculative-num-steps": 3, "speculative-eagle-topk": 1,
                 "speculative-num-draft-tokens": 9},
            ),  # fmt: skip
            # adaptive with a tree: SGLang warns and serves the static tree
            (
                {**NEXTN, "speculative-num-steps": 3, "speculative-eagle-topk": 2, "speculative-num-draft-tokens": 6},
                {**NEXTN, "speculative-num-steps": 3, "speculative-eagle-topk": 2, "speculative-num-draft-tokens": 6,
                 "speculative-adaptive": True},
            ),  # fmt: skip
        ],
        different=({"mem-fraction-static": 0.88}, {"mem-fraction-static": 0.85}),
        failures=table(
            """
            sglang_logs/too_low.log                         |   1 | infeasible-memory-low  | Not enough memory
            sglang_logs/too_high.log                        |   1 | infeasible-memory-high | CUDA out of memory. Tried
            sglang_logs/partial_spec.log                    |   1 | invalid-config         | AssertionError
            sglang_logs/unknown_flag.log                    |   2 | invalid-config         | unrecognized arguments
            sglang_logs/segfault.log                        | -11 | crashed                | Segmentation fault
            sglang_logs/port_taken.log                      |   1 | port-in-use            | address already in use
            real_logs/sglang/capture_prefix_gloo_closed.log |   1 | crashed                | gloo
            """
        ),
        startup_log="sglang_logs/startup_ok.log",
        memory={
            "weights_bytes": 27.19,
            "kv_pool_bytes": 11.0,
            "kv_tokens": 180224,
            "graph_bytes": 1.12,
            "free_at_start_bytes": 47.21,
            "avail_after_pools_bytes": 5.66,
            "graph_batch": 48,
        },
        # Real Decode batch lines (SGLang on NPU, TP0 EP0) and one real /metrics scrape taken twice.
        stats=StatsCase(
            log="real_logs/sglang/decode_npu_tp0_ep0_spec.log",
            metrics_before="metrics/sglang-docs-2025-metrics.txt",
            metrics_after="metrics/sglang-docs-2025-metrics.txt",
            log_lines=3,
            gen_tok_s=631.96,
            accept_length=(3.05 + 2.63 + 2.83) / 3,
            generated_tokens=0.0,
            metrics_accept_length=None,
        ),
        # The scheduler's Python-logging prefix "[time{ rank tags}]" (see autotune/engines/sglang_logs.py):
        # DP groups decode side by side (their medians summed); the other ranks of a group print its batch.
        forms=[
            FormCase("sglang_logs/decode_dp_attn_cp.log", 6, 42.0 + 31.0, None),  # DP0 ATTN_CP1 TP1 EP1
            FormCase("sglang_logs/decode_pp_attn_cp.log", 3, 56.0, None),  # PP1 ATTN_CP0 TP0, no DP
            FormCase("sglang_logs/decode_dp_moe_dp.log", 4, 21.0 + 26.0, None),  # .125 ms, DP1 MOE_DP0 TP2 EP2
        ],
    ),
    "vllm": EngineCase(
        name="vllm",
        help_file="vllm-0.34.0-serve-help.txt",
        help_argument="--help=all",
        launcher_tail=("serve",),
        valid={
            **BATCH,
            **MTP3,
            "tp": 2,
            "gpu-memory-utilization": 0.9,
            "max-model-len": "128k",
            "enable-prefix-caching": False,
            "enforce-eager": True,
        },
        added_by_argv=frozenset({"per-request-spec-decode-metrics"}),
        equivalent=[
            ({**MTP3, **BATCH}, {"speculative-config": '{"method": "mtp", "num_speculative_tokens": 3}', **BATCH}),
            ({"max_model_len": "128K", **BATCH}, {"max-model-len": 131072, **BATCH}),
            ({"enable-prefix-caching": False, **BATCH}, {"disable-prefix-caching": True, **BATCH}),
        ],
        different=({**MTP3, **BATCH}, {**MTP3, **BATCH, "num-speculative-tokens": 2}),
        failures=table(
            """
            vllm_logs/argparse_unknown_flag.real.log      |   2 | invalid-config         | unrecognized arguments
            vllm_logs/argparse_bad_json.real.log          |   2 | invalid-config         | --speculative-config/-sc
            vllm_logs/argparse_bad_int.real.log           |   2 | invalid-config         | invalid int value
            vllm_logs/config_batched_below_seqs.log       |   1 | invalid-config         | max_num_batched_tokens
            vllm_logs/config_spec_key_twice.log           |   1 | invalid-config         | are mutually exclusive
            vllm_logs/engine_free_memory.log              |   1 | infeasible-memory-high | less than desired GPU memory
            vllm_logs/engine_no_kv_memory.log             |   1 | infeasible-memory-low  | No available memory
            vllm_logs/engine_max_seq_len.log              |   1 | infeasible-memory-low  | To serve at least one request
            vllm_logs/engine_max_seq_len_models_typo.log  |   1 | infeasible-memory-low  | the models's max seq len
            vllm_logs/engine_max_seq_len_message_only.log |   1 | infeasible-memory-low  | the models's max seq len
            vllm_logs/engine_max_seq_len_tpu.log          |   1 | infeasible-memory-low  | the models's max seq len
            vllm_logs/engine_max_seq_len_estimated.log    |   1 | infeasible-memory-low  | Estimated maximum model
            vllm_logs/engine_max_seq_len_no_estimate.log  |   1 | infeasible-memory-low  | the models's max seq len
            vllm_logs/engine_auto_fit.log                 |   1 | infeasible-memory-low  | Cannot auto-fit max_model_len
            vllm_logs/engine_sampler_oom.log              |   1 | infeasible-memory-high | warming up sampler
            vllm_logs/engine_graph_oom.log                |   1 | infeasible-memory-high | CUDA out of memory. Tried
            vllm_logs/engine_memory_profiling.log         |   1 | crashed                | retryable: AssertionError
            vllm_logs/engine_nccl.log                     |   1 | crashed                | RuntimeError: NCCL error
            vllm_logs/port_in_use.log                     |   1 | port-in-use            | Address already in use
            real_logs/vllm/v05_capture_cuda_error_oom.log |   1 | infeasible-memory-high | CUDA error: out
            """
        ),
        startup_log="vllm_logs/startup_ok.log",
        memory={"weights_bytes": 25.89, "kv_pool_bytes": 15.59, "kv_tokens": 480592, "graph_bytes": 0.82},
        # Real periodic lines of a DFlash run (two busy intervals); no public scrape of vLLM's
        # speculative counters in exposition format was found, so no /metrics here.
        stats=StatsCase(
            log="real_logs/vllm/stats_2026_05_dflash_5090.log",
            metrics_before=None,
            metrics_after=None,
            log_lines=2,
            gen_tok_s=(123.8 + 124.5) / 2,
            accept_length=(2.63 * 2355 / 5 + 2.66 * 2345 / 5) / ((2355 + 2345) / 5),
            generated_tokens=None,
            metrics_accept_length=None,
        ),
        # 0.8's V1 line: the rate, accepted and drafted tokens, no mean and no count of drafts to derive one.
        forms=[FormCase("vllm_logs/spec_v1_counts_only.log", 2, (88.5 + 91.5) / 2, None)],
        # V1's refusal of a max seq len the KV cache cannot hold once: "models's" (most releases, the TPU
        # builds through the same check), "model's" with "Estimated maximum model length" (later ones), none
        # estimated (it was 0); the GiB needed / available, the longest length that fits / the max seq len.
        shortfalls=[
            ShortfallCase(
                "vllm_logs/engine_max_seq_len.log",
                {"needed_bytes": 8.16, "pool_bytes": 8.03, "pool_tokens": 257936, "needed_tokens": 262144},
                8.03,
            ),
            ShortfallCase(
                "vllm_logs/engine_max_seq_len_models_typo.log",
                {"needed_bytes": 5.0, "pool_bytes": 3.75, "pool_tokens": 30720, "needed_tokens": 40960},
                3.75,
            ),
            ShortfallCase(
                "vllm_logs/engine_max_seq_len_message_only.log",
                {"needed_bytes": 8.0, "pool_bytes": 2.4, "pool_tokens": 19648, "needed_tokens": 65536},
                2.4,
            ),
            ShortfallCase(
                "vllm_logs/engine_max_seq_len_tpu.log",
                {"needed_bytes": 16.0, "pool_bytes": 0.75, "pool_tokens": 6144, "needed_tokens": 131072},
                0.75,
            ),
            ShortfallCase(
                "vllm_logs/engine_max_seq_len_estimated.log",
                {"needed_bytes": 8.0, "pool_bytes": 6.5, "pool_tokens": 212992, "needed_tokens": 262144},
                6.5,
            ),
            ShortfallCase(
                # no estimate printed: the tokens the available GiB hold at the GiB one request needs per token
                "vllm_logs/engine_max_seq_len_no_estimate.log",
                {"needed_bytes": 4.0, "pool_bytes": 0.01, "pool_tokens": 81, "needed_tokens": 32768},
                0.01,
            ),
        ],
    ),
    "llamacpp": EngineCase(
        name="llamacpp",
        help_file="llamacpp/llama-server-0.3.36-help.txt",
        help_argument="--help",
        launcher_tail=(),
        valid={**DRAFT, "spec-draft-n-max": 4, "ctx-size": 2048, "threads": 1, "kv-unified": True},
        added_by_argv=frozenset({"metrics"}),
        equivalent=[
            ({"md": "/m/draft.gguf", "spec-type": "draft-simple", "c": 2048}, {**DRAFT, "ctx-size": 2048}),
            ({**DRAFT, "spec-type": "none", "spec-draft-n-max": 4}, {"spec-type": "none"}),
        ],
        different=({**DRAFT, "spec-draft-n-max": 4}, {**DRAFT, "spec-draft-n-max": 8}),
        failures=table(
            """
            llamacpp/unknown_flag.log  |   1 | invalid-config         | invalid argument: --no-such-flag
            llamacpp/removed_flag.log  |   1 | invalid-config         | handling argument "--draft-max"
            llamacpp/bad_value.log     |   1 | invalid-config         | unknown speculative type: draft-fancy
            llamacpp/ctx_too_large.log |   1 | infeasible-memory-high | failed to allocate buffer
            llamacpp/port_taken.log    |   1 | port-in-use            | couldn't bind HTTP server socket
            """
        ),
        startup_log=None,
        memory=None,
        # Recorded from a real llama-server (llama-cpp-python 0.3.36's): two requests of 16 tokens,
        # eval 116.35 and 164.09 tokens/s, mean len 5.00 each; counters 0 -> 32 tokens, 6 drafts, 24 accepted.
        stats=StatsCase(
            log="llamacpp/serving_draft.log",
            metrics_before="llamacpp/metrics_before.txt",
            metrics_after="llamacpp/metrics_after.txt",
            log_lines=2,
            gen_tok_s=(116.35 + 164.09) / 2,
            accept_length=5.0,
            generated_tokens=32.0,
            metrics_accept_length=1 + 24 / 6,
        ),
        # Per-request lines by release: "draft acceptance rate = R (A accepted / G generated)" without a mean
        # (tokens per target step from the eval line: (n - 1) / (n - 1 - A)), the same behind a process's
        # prefix, the EAGLE3 builds' "mean acceptance length", the 2024 builds' JSON lines ("runs", no draft).
        forms=[
            FormCase("llamacpp/requests_draft_rate_2024.log", 2, 90.0, (63 / 21 + 109 / 59) / 2),
            FormCase("llamacpp/requests_pid_prefix.log", 2, 90.0, (63 / 21 + 109 / 59) / 2),
            FormCase("llamacpp/requests_eagle3_mean_acceptance_length.log", 2, 122.5, (2.98 + 3.10) / 2),
            FormCase("llamacpp/requests_json_2024.log", 2, 85.0, None),
        ],
    ),
}
