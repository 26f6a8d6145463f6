"""SGLang (``python -m sglang.launch_server`` / ``sglang serve``): flags, launch rules, protocol.

The rules applied in :meth:`SGLangEngine.normalise` are the ones SGLang 0.5.23 applies at launch
(see shared/sglang.md); autotune applies them first so equal effective configs are measured once
and configs SGLang would refuse are never launched.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import AsyncIterator, Mapping

import httpx
from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict, Field

from autotune.engines.base import (
    EffectiveConfig,
    Engine,
    Failure,
    InvalidConfig,
    LaunchPlan,
    MemoryFacts,
    ServerStats,
    StreamChunk,
    flag_argv,
    memory_failure,
    sse_events,
)
from autotune.errors import MeasurementError
from autotune.feasibility import MemoryRules
from autotune.outcomes import OutcomeKind
from autotune.space import FlagValue
from autotune.workload import Prompt

STEPS = "speculative-num-steps"
TOPK = "speculative-eagle-topk"
DRAFT = "speculative-num-draft-tokens"
ALGORITHM = "speculative-algorithm"
DRAFT_MODEL = "speculative-draft-model-path"
DFLASH_BLOCK = "speculative-dflash-block-size"
RADIX_STRATEGY = "mamba-radix-cache-strategy"
CONTEXT = "context-length"
DISABLE_OVERLAP = "disable-overlap-schedule"
TRACK_INTERVAL = "mamba-track-interval"
DEFAULT_TRACK_INTERVAL = 256

# Log text -> failure kind, checked in order (sglang.md "Memory").
_MEMORY_TOO_LOW = (
    "Loaded weights leave no GPU memory for the KV cache",
    "Not enough memory. Please try to increase --mem-fraction-static",
    "Not enough GPU memory for hybrid (mamba/linear-attention) state cache",
    "Hybrid (mamba/linear-attention) state cache is too small to serve any requests",
)
_MEMORY_TOO_HIGH = ("Capture cuda graph failed", "CUDA out of memory", "torch.OutOfMemoryError")
_PORT_TAKEN = re.compile(r".*address already in use.*", re.IGNORECASE)
_ERRORISH = re.compile(r"\w*(Error|Exception)\b|Fatal|Segmentation fault")
_INVALID = (
    re.compile(r"error: unrecognized arguments: .*"),
    re.compile(r"error: ambiguous option: .*"),
    re.compile(r"error: argument .*"),
    re.compile(r"^AssertionError.*$", re.MULTILINE),
    re.compile(r"^ValueError: .*$", re.MULTILINE),
)


_DECODE_PREFIX = re.compile(
    r"^(?:\[(?P<time>\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(?: (?P<rank>[A-Z]+\d+(?: [A-Z]+\d+)*))?\] )?"
    r"Decode batch(?: \[\d+\])?[.,] (?P<fields>.*)$"
)
_FIELD = re.compile(r"\s*(?P<key>[^:,]+?):\s*(?P<value>[^,]+?)\s*(?:,|$)")


class DecodeBatchLine(BaseModel):
    """One ``Decode batch`` log line (plain or hybrid usage fields, with or without a rank tag)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    time: str | None
    rank: str | None
    running_req: int
    tokens: int | None = Field(description="#token, or #full token on hybrid models")
    token_usage: float | None
    mamba_usage: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    cuda_graph: bool | None = None
    gen_throughput: float
    queue_req: int | None = None


def parse_decode_line(line: str) -> DecodeBatchLine | None:
    """Parse SGLang's ``Decode batch`` line by field name; None for any other line."""
    match = _DECODE_PREFIX.match(line.strip())
    if match is None:
        return None
    fields = {m["key"].strip(): m["value"].strip() for m in _FIELD.finditer(match["fields"])}

    def number(*keys: str) -> float | None:
        for key in keys:
            if key in fields:
                try:
                    return float(fields[key])
                except ValueError:
                    return None
        return None

    running, throughput = number("#running-req"), number("gen throughput (token/s)")
    if running is None or throughput is None:
        return None
    tokens = number("#token", "#full token")
    queue = number("#queue-req")
    graph = next((fields[k] for k in fields if k.endswith(" graph")), None)
    return DecodeBatchLine(
        time=match["time"],
        rank=match["rank"],
        running_req=int(running),
        tokens=int(tokens) if tokens is not None else None,
        token_usage=number("token usage", "full token usage"),
        mamba_usage=number("mamba usage"),
        accept_len=number("accept len"),
        accept_rate=number("accept rate"),
        cuda_graph=graph == "True" if graph is not None else None,
        gen_throughput=throughput,
        queue_req=int(queue) if queue is not None else None,
    )


def parse_metrics(text: str) -> dict[str, float]:
    """Sum of every sample per name (labels dropped), with prometheus_client's parser."""
    totals: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
    return totals


_SI = {"k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12}
_IEC = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_LENGTH = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<suffix>Ki|Mi|Gi|Ti|k|M|G|T)?$")


def parse_context_length(value: FlagValue) -> int:
    """SGLang 0.5.23's spelling: ``131072``, SI ``128k`` (x1000, decimals allowed) or IEC ``128Ki``
    (x1024); suffixes are case-sensitive, so ``128K`` is refused, as SGLang's argparse does."""
    if isinstance(value, bool):
        raise InvalidConfig(f"--{CONTEXT} must be a number, not {value!r}")
    if isinstance(value, int):
        return value
    match = _LENGTH.match(str(value).strip())
    if match is None or ("." in match["number"] and match["suffix"] not in _SI):
        raise InvalidConfig(f"--{CONTEXT} {value!r} is not a length (e.g. 131072, 128Ki or 131k)")
    scale = _IEC.get(match["suffix"] or "") or _SI.get(match["suffix"] or "") or 1
    return int(float(match["number"]) * scale)


_GIB = 2**30
_WEIGHTS_LINE = re.compile(r"Load weight end\..*?mem usage=(?P<gb>[\d.]+) GB")
_KV_LINE = re.compile(
    r"KV Cache is allocated\. #tokens: (?P<tokens>\d+), K size: (?P<k>[\d.]+) GB, V size: (?P<v>[\d.]+) GB"
)
_GRAPH_LINE = re.compile(r"Capture cuda graph end\..*?mem usage=(?P<gb>[\d.]+) GB")
_FREE_LINE = re.compile(r"Load weight begin\. avail mem=(?P<gb>[\d.]+) GB")
_POOLS_LINE = re.compile(r"Memory pool end\. avail mem=(?P<gb>[\d.]+) GB")
_CAPTURE_LINE = re.compile(r"Capture cuda graph bs \[(?P<sizes>[\d, ]+)\]")
_LOG_NOISE = frozenset({"enable-metrics", "decode-log-interval", "log-level", "random-seed", "served-model-name"})
_SPEC_DEMAND = frozenset({STEPS, TOPK, DRAFT})


class SGLangEngine(Engine):
    name = "sglang"
    # sglang.md "Memory": the pool (fraction x free - weights) must hold KV for the context and
    # the mamba state of the running requests (more with more draft tokens); the headroom
    # ((1 - fraction) x free) must hold activations and CUDA graphs (batch x draft tokens).
    memory_rules = MemoryRules(
        fraction_flag="mem-fraction-static",
        pool_demand=_SPEC_DEMAND | {CONTEXT, "max-running-requests", "max-mamba-cache-size"},
        pool_irrelevant=_LOG_NOISE | {"cuda-graph-max-bs-decode", "cuda-graph-max-bs-prefill"},
        headroom_demand=_SPEC_DEMAND | {"cuda-graph-max-bs-decode", "max-running-requests", "chunked-prefill-size"},
        headroom_irrelevant=_LOG_NOISE | {"mamba-full-memory-ratio", "max-mamba-cache-size", CONTEXT},
        graph_batch_flag="cuda-graph-max-bs-decode",
        graph_width_flag=DRAFT,
        # With the graph batch and draft tokens known, the steps, the tree width and the running
        # requests no longer change what the graphs hold.
        graph_ignored=_LOG_NOISE
        | {"mamba-full-memory-ratio", "max-mamba-cache-size", CONTEXT, STEPS, TOPK, "max-running-requests",
           "cuda-graph-max-bs-decode", DRAFT},  # fmt: skip
        # Outside the graphs, run-time memory is mostly the prefill chunk's activations.
        activation_demand=frozenset({"chunked-prefill-size", "max-prefill-tokens"}),
    )
    renamed_flags = {
        "mamba-scheduler-strategy": RADIX_STRATEGY,
        "cuda-graph-max-bs": "cuda-graph-max-bs-decode",
    }
    reserved_flags = frozenset({"model-path", "model", "host", "port"})

    def normalise(self, flags: Mapping[str, FlagValue]) -> LaunchPlan:
        """SGLang's launch-time rules (0.5.23):

        - steps, topk and draft tokens are given all together or not at all;
        - topk == 1 => draft tokens = steps + 1 (SGLang rewrites it silently; autotune fills it in);
        - DFLASH needs a draft model, forces steps and topk to 1, and its block size equals the
          draft tokens;
        - ``MTP`` parses but fails at launch (NEXTN is the name for built-in MTP heads);
        - mamba strategy ``no_buffer`` needs ``--disable-overlap-schedule``; under ``extra_buffer``
          (and ``auto``, which becomes it on Qwen3.5/3.6) draft tokens <= ``--mamba-track-interval``;
        - context lengths with SI/IEC suffixes (``128Ki``) are read as numbers.
        """
        out: dict[str, FlagValue] = {}
        for name, value in flags.items():
            if value is False:
                continue
            out[name] = round(value, 6) if isinstance(value, float) else value
        notes: list[str] = []
        if CONTEXT in out:
            out[CONTEXT] = parse_context_length(out[CONTEXT])

        algorithm = str(out[ALGORITHM]).upper() if ALGORITHM in out else None
        if algorithm == "MTP":
            raise InvalidConfig("--speculative-algorithm MTP fails at launch; use NEXTN for built-in MTP heads")
        if algorithm == "DFLASH":
            if DRAFT_MODEL not in out:
                raise InvalidConfig("DFLASH needs --speculative-draft-model-path")
            for forced in (STEPS, TOPK):
                if out.get(forced, 1) != 1:
                    notes.append(f"DFLASH forces --{forced} 1 (was {out[forced]})")
                out[forced] = 1
            if DFLASH_BLOCK in out and DRAFT in out and out[DFLASH_BLOCK] != out[DRAFT]:
                raise InvalidConfig(f"--{DFLASH_BLOCK} must equal --{DRAFT}")
            if DRAFT not in out and DFLASH_BLOCK in out:
                out[DRAFT] = out[DFLASH_BLOCK]
            if DRAFT not in out:
                raise InvalidConfig(f"DFLASH needs --{DRAFT} (its block size)")

        if algorithm not in (None, "DFLASH") and out.get(TOPK) == 1 and STEPS in out:
            implied = int(out[STEPS]) + 1
            if DRAFT in out and out[DRAFT] != implied:
                notes.append(f"topk 1: --{DRAFT} {out[DRAFT]} becomes steps + 1 = {implied}")
            out[DRAFT] = implied
        given = [f for f in (STEPS, TOPK, DRAFT) if f in out]
        if given and len(given) < 3:
            missing = ", ".join(f"--{f}" for f in (STEPS, TOPK, DRAFT) if f not in out)
            raise InvalidConfig(f"speculative steps, topk and draft tokens go together; missing {missing}")
        if given and algorithm is None:
            raise InvalidConfig(f"speculative flags given without --{ALGORITHM}")
        # sglang/srt/arg_groups/mamba_hook.py (0.5.23): no_buffer asserts the overlap scheduler is off
        # (:158); the extra_buffer strategies (and auto, which becomes extra_buffer on Qwen3.5/3.6)
        # assert mamba-track-interval >= draft tokens (:133; the interval defaults to 256).
        strategy = str(out.get(RADIX_STRATEGY, "auto"))
        if strategy == "no_buffer" and out.get(DISABLE_OVERLAP) is not True:
            raise InvalidConfig(f"--{RADIX_STRATEGY} no_buffer needs --{DISABLE_OVERLAP} (an AssertionError in SGLang)")
        if algorithm is not None and strategy in ("auto", "extra_buffer", "extra_buffer_lazy"):
            interval = int(out.get(TRACK_INTERVAL, DEFAULT_TRACK_INTERVAL))
            if int(out.get(DRAFT, 0)) > interval:
                raise InvalidConfig(
                    f"--{RADIX_STRATEGY} {strategy} allows at most {interval} draft tokens "
                    f"(--{TRACK_INTERVAL} {interval}; got {out[DRAFT]})"
                )
        return LaunchPlan(engine=self.name, flags=out, notes=notes)

    def build_argv(self, launcher: list[str], *, model: str, plan: LaunchPlan, host: str, port: int) -> list[str]:
        # /metrics feeds the cross-check of the client's numbers; it costs nothing measurable.
        metrics = [] if "enable-metrics" in plan.flags else ["--enable-metrics"]
        return [*launcher, "--model-path", model, "--host", host, "--port", str(port), *flag_argv(plan.flags), *metrics]

    def effective_config(self, client: httpx.Client, base_url: str, plan: LaunchPlan) -> EffectiveConfig:
        try:
            info = client.get(f"{base_url}/server_info", timeout=30.0).raise_for_status().json()
        except (httpx.HTTPError, ValueError) as exc:
            raise MeasurementError(f"cannot read the effective config from /server_info: {exc}") from None
        wanted = list(plan.flags) + [STEPS, TOPK, DRAFT, "mem-fraction-static", "max-running-requests", CONTEXT]
        values: dict[str, FlagValue | None] = {}
        for flag in dict.fromkeys(wanted):
            key = flag.replace("-", "_")
            if key in info and (info[key] is None or isinstance(info[key], (str, int, float, bool))):
                values[flag] = info[key]
        version = info.get("version")
        return EffectiveConfig(version=str(version) if version is not None else None, values=values)

    def memory_facts(self, log_text: str) -> MemoryFacts | None:
        weights, kv, graph = (pattern.search(log_text) for pattern in (_WEIGHTS_LINE, _KV_LINE, _GRAPH_LINE))
        if weights is None and kv is None and graph is None:
            return None
        free, pools, capture = (p.search(log_text) for p in (_FREE_LINE, _POOLS_LINE, _CAPTURE_LINE))
        sizes = [int(size) for size in capture["sizes"].split(",") if size.strip()] if capture else []
        return MemoryFacts(
            weights_bytes=float(weights["gb"]) * _GIB if weights else None,
            kv_pool_bytes=(float(kv["k"]) + float(kv["v"])) * _GIB if kv else None,
            kv_tokens=int(kv["tokens"]) if kv else None,
            graph_bytes=float(graph["gb"]) * _GIB if graph else None,
            free_at_start_bytes=float(free["gb"]) * _GIB if free else None,
            avail_after_pools_bytes=float(pools["gb"]) * _GIB if pools else None,
            graph_batch=max(sizes) if sizes and graph else None,
        )

    def classify_failure(self, *, exit_code: int | None, log_text: str, timed_out: bool) -> Failure:
        memory = memory_failure(log_text, too_low=_MEMORY_TOO_LOW, too_high=_MEMORY_TOO_HIGH)
        if memory is not None:
            return memory
        bind = _PORT_TAKEN.search(log_text)
        if bind is not None:
            return Failure(kind=OutcomeKind.PORT_IN_USE, reason=bind.group(0).strip())
        if timed_out:
            return Failure(
                kind=OutcomeKind.LAUNCH_TIMEOUT, reason="the server did not become ready before the deadline"
            )
        for pattern in _INVALID:
            match = pattern.search(log_text)
            if match is not None:
                return Failure(kind=OutcomeKind.INVALID_CONFIG, reason=match.group(0).strip() or "AssertionError")
        lines = [line.strip() for line in log_text.splitlines() if line.strip()]
        # The last error-looking line says more than SGLang's closing "Received sigquit ..." line.
        errors = [line for line in lines if _ERRORISH.search(line)]
        last = (errors or lines or ["(empty log)"])[-1]
        return Failure(kind=OutcomeKind.CRASHED, reason=f"exit code {exit_code}: {last}")

    async def reset_stats(self, client: httpx.AsyncClient, base_url: str) -> None:
        (await client.post(f"{base_url}/flush_cache")).raise_for_status()

    def server_stats(
        self, *, log_window: str, metrics_before: str | None, metrics_after: str | None
    ) -> ServerStats | None:
        lines = [p for p in map(parse_decode_line, log_window.splitlines()) if p is not None and p.running_req > 0]
        # One line per step is printed by every TP rank that logs; keep rank 0 (or untagged).
        lines = [p for p in lines if p.rank is None or p.rank.startswith("TP0")]
        accepts = [p.accept_len for p in lines if p.accept_len is not None]
        generated = accept = None
        if metrics_before is not None and metrics_after is not None:
            before, after = parse_metrics(metrics_before), parse_metrics(metrics_after)
            if "sglang:generation_tokens_total" in after:
                generated = after["sglang:generation_tokens_total"] - before.get("sglang:generation_tokens_total", 0.0)
            accept = after.get("sglang:spec_accept_length")
        if not lines and generated is None:
            return None
        return ServerStats(
            gen_tok_s=statistics.median(p.gen_throughput for p in lines) if lines else None,
            accept_length=statistics.fmean(accepts) if accepts else None,
            log_lines=len(lines),
            generated_tokens=generated,
            metrics_accept_length=accept,
        )

    async def stream_generate(
        self, client: httpx.AsyncClient, base_url: str, prompt: Prompt, *, max_tokens: int, ignore_eos: bool
    ) -> AsyncIterator[StreamChunk]:
        sampling = {"max_new_tokens": max_tokens, "temperature": prompt.temperature, "ignore_eos": ignore_eos}
        body = {"text": prompt.text, "sampling_params": sampling, "stream": True}
        async for event in sse_events(client, f"{base_url}/generate", body=body):
            meta = event.get("meta_info", {})
            finish = meta.get("finish_reason")
            accept = meta.get("spec_accept_length")
            yield StreamChunk(
                completion_tokens=int(meta.get("completion_tokens", 0)),
                prompt_tokens=meta.get("prompt_tokens"),
                finished=finish is not None,
                accept_length=float(accept) if accept is not None else None,
                finish_reason=finish.get("type") if isinstance(finish, dict) else finish,
            )
