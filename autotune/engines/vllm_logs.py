"""What vLLM 0.33 prints: its start-up stages and failures, its periodic stats lines, its memory
lines, and the labels of its info metrics."""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict

from autotune.engines import base
from autotune.engines.base import first_rank_search
from autotune.engines.failures import (
    ALLOCATING_KV,
    CAPTURING,
    LOADING_WEIGHTS,
    PROFILING,
    SERVING,
    FailureRules,
)

# What vLLM 0.33 prints on its way up and when it fails (the classifier is
# autotune.engines.failures). The KV cache is what is left of utilization x total after the weights,
# the profiled activations and the graphs, so an out-of-memory error while loading the weights means
# the budget is too small for them, and one in the profile run, the KV allocation, graph capture or
# the sampler warm-up means the budget leaves too little outside it.
FAILURES = FailureRules(
    stages=(
        (
            r"Starting to load model|Loading weights|Loading safetensors checkpoint|Loading model from"
            r"|, in (?:load_model|load_weights|initialize_model|make_layers|create_weights)$",
            LOADING_WEIGHTS,
        ),
        (
            r"(?:Model loading|Loading model weights|Loading weights) took|Memory profiling takes|Starting profile run"
            r"|, in (?:profile_run|_dummy_run|determine_available_memory|determine_num_available_blocks)$",
            PROFILING,
        ),
        (
            r"Available KV cache memory|KV cache size|# (?:GPU|cuda) blocks|num_gpu_blocks"
            r"|, in (?:initialize_kv_cache|initialize_cache|_allocate_kv_cache\w*)$",
            ALLOCATING_KV,
        ),
        (
            r"Capturing (?:CUDA graph|cudagraph|the model for CUDA graphs)|Graph capturing"
            r"|, in (?:capture_model|_warm_up_model|capture)$",
            CAPTURING,
        ),
        (
            r"Graph capturing finished|init engine .* took|Application startup complete|POST /v1/|warming up sampler"
            r"|, in (?:_dummy_sampler_run|run_engine_loop|engine_step|run_busy_loop|step_with_batch_queue)$",
            SERVING,
        ),
    ),
    too_low=(
        r"No available memory for the cache blocks",
        r"To serve at least one request with the model's max seq len",
        r"Cannot auto-fit max_model_len",
        r"is larger than the maximum number of tokens that can be stored in KV cache",
        r"Insufficient memory for KV cache",
        r"exceeds available Mamba cache blocks",
        r"reserved for KV Cache is -\d",  # the V0 profile left the cache nothing
        r"# (?:GPU|cuda) blocks: 0\b",
        r"Failed to create \w+ linear weights",  # linear.py logs it for an out-of-memory error while creating them
    ),
    too_high=(
        r"is less than desired GPU memory utilization",
        r"CUDA out of memory occurred when warming up sampler",
    ),
    retryable=(r"Error in memory profiling",),
    wrappers=(
        r"Engine core initialization failed",
        r"WorkerProc initialization failed",
        r"Engine process failed to start",
        r"EngineCore encountered an issue|EngineDeadError|WorkerProc hit an exception",
    ),
)

# vLLM's stats lines: "Key: value" fields separated by ", " (a value may hold ", " itself, as the
# per-position rates do; the next field starts with a capital letter and ends in ": ").
_FIELD = re.compile(r"(?P<key>[A-Z][\w .%/-]*?): (?P<value>.*?)(?=, [A-Z][\w .%/-]*?: |$)")
_ENGINE_LINE = re.compile(r"(?:Engine (?P<engine>\d+): )?(?P<fields>Avg (?:prompt|generation) throughput: .*)$")
_V0_SPEC_LINE = re.compile(r"Speculative metrics: (?P<fields>.*)$")
_SPEC_LINE = re.compile(r"SpecDecoding metrics: (?P<fields>.*)$")
_NUMBER = re.compile(r"^-?\d+(?:\.\d+)?|^nan")

_GIB = 2**30
# V0 (0.7-0.8) also prints one profile line: "model weights take X GiB; ... reserved for KV Cache is Y GiB"
# (and, in 0.6.5, one field a line: "model weights take   X GiB", "available_kv_cache_memory   Y GiB").
_WEIGHTS_LINE = re.compile(
    r"(?:(?:Model loading|Loading model weights) took |model weights take\s+)(?P<gib>[\d.]+) ?(?:GiB|GB)"
)
_KV_MEMORY_LINE = re.compile(
    r"(?:Available KV cache memory: |reserved for KV Cache is |available_kv_cache_memory\s+)(?P<gib>-?[\d.]+) ?GiB"
)
_KV_TOKENS_LINE = re.compile(r"KV cache size: (?P<tokens>[\d,]+) tokens")
_GRAPH_LINE = re.compile(r"Graph capturing finished in [\d.]+ secs?, took (?P<gib>-?[\d.]+) GiB")
_CONCURRENCY_LINE = re.compile(r"Maximum concurrency for [\d,]+ tokens per request: (?P<times>[\d.]+)x")
# The death of a KV cache that cannot hold one request: V1 prints both sides in GiB and the length that
# would fit; V0 prints the length against the tokens the cache holds.
_SHORT_V1 = re.compile(
    r"max seq len \((?P<needed>\d+)\), \((?P<needed_gib>[\d.]+) GiB KV cache is needed, which is larger than "
    r"the available KV cache memory \((?P<pool_gib>-?[\d.]+) GiB\)\.(?: Based on the available memory, the "
    r"estimated maximum model length is (?P<fits>\d+)\.)?"
)
_SHORT_V0 = re.compile(
    r"max seq len \((?P<needed>\d+)\) is larger than the maximum number of tokens that can be stored in KV "
    r"cache \((?P<fits>\d+)\)"
)


class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class EngineStatsLine(_Line):
    """vLLM's periodic ``Engine 000: Avg prompt throughput ...`` line (one logging interval)."""

    engine: int
    prompt_throughput: float
    generation_throughput: float
    running: int | None = None
    waiting: int | None = None
    kv_cache_usage: float | None = None  # percent
    prefix_cache_hit_rate: float | None = None  # percent


class SpecDecodingLine(_Line):
    """vLLM's ``SpecDecoding metrics: ...`` line (one logging interval)."""

    mean_acceptance_length: float
    accepted: int | None = None
    drafted: int | None = None
    per_position: list[float] = []
    draft_acceptance_rate: float | None = None  # percent
    steps: float | None = None  # verify steps, where the line gives them another way

    @property
    def drafts(self) -> float | None:
        """Verify steps in the interval (``Drafted`` tokens / draft positions)."""
        if self.steps is not None:
            return self.steps
        if self.drafted is None or not self.per_position:
            return None
        return self.drafted / len(self.per_position)


def _fields(text: str) -> dict[str, str]:
    return {m["key"].strip(): m["value"].strip() for m in _FIELD.finditer(text)}


def _leading_number(text: str | None) -> float | None:
    if text is None:
        return None
    match = _NUMBER.match(text.strip())
    return float(match.group(0)) if match else None


def parse_engine_line(line: str) -> EngineStatsLine | None:
    """Parse the periodic engine line by field name (prefix and field order do not matter)."""
    match = _ENGINE_LINE.search(line.strip())
    if match is None:
        return None
    fields = _fields(match["fields"])
    prompt = _leading_number(fields.get("Avg prompt throughput"))
    generation = _leading_number(fields.get("Avg generation throughput"))
    if prompt is None or generation is None:
        return None
    usage_key = next((k for k in fields if k.endswith("KV cache usage")), None)
    running, waiting = _leading_number(fields.get("Running")), _leading_number(fields.get("Waiting"))
    return EngineStatsLine(
        engine=int(match["engine"] or 0),
        prompt_throughput=prompt,
        generation_throughput=generation,
        running=int(running) if running is not None else None,
        waiting=int(waiting) if waiting is not None else None,
        kv_cache_usage=_leading_number(fields.get(usage_key)) if usage_key else None,
        prefix_cache_hit_rate=_leading_number(fields.get("Prefix cache hit rate")),
    )


def parse_spec_line(line: str) -> SpecDecodingLine | None:
    """Parse the ``SpecDecoding metrics`` line by field name; older releases print other fields, and the
    V0 engine's ``Speculative metrics`` line gives no mean, only counts (see :func:`_parse_v0_spec_line`)."""
    match = _SPEC_LINE.search(line.strip())
    if match is None:
        return _parse_v0_spec_line(line)
    fields = _fields(match["fields"])
    mean = _leading_number(fields.get("Mean acceptance length"))
    if mean is None:
        return None
    accepted, drafted = _leading_number(fields.get("Accepted")), _leading_number(fields.get("Drafted"))
    positions = fields.get("Per-position acceptance rate", "")
    per_position = [float(p) for p in positions.split(",") if _NUMBER.match(p.strip())] if positions else []
    return SpecDecodingLine(
        mean_acceptance_length=mean,
        accepted=int(accepted) if accepted is not None else None,
        drafted=int(drafted) if drafted is not None else None,
        per_position=per_position,
        draft_acceptance_rate=_leading_number(fields.get("Avg Draft acceptance rate")),
    )


def _parse_v0_spec_line(line: str) -> SpecDecodingLine | None:
    """The V0 engine's ``Speculative metrics: ... Number of speculative tokens: k, Number of accepted
    tokens: A, Number of draft tokens: D, Number of emitted tokens: E.``: D / k verify steps emitted E
    tokens, so tokens per step (the accept length) is E / (D / k)."""
    match = _V0_SPEC_LINE.search(line.strip())
    if match is None:
        return None
    fields = _fields(match["fields"])
    k, accepted, drafted, emitted = (
        _leading_number(fields.get(f"Number of {kind} tokens"))
        for kind in ("speculative", "accepted", "draft", "emitted")
    )
    if not k or not drafted or emitted is None:
        return None
    steps = drafted / k
    return SpecDecodingLine(
        mean_acceptance_length=emitted / steps,
        accepted=int(accepted) if accepted is not None else None,
        drafted=int(drafted),
        steps=steps,
    )


def info_labels(text: str, name: str) -> dict[str, str] | None:
    """The labels of an info-style gauge (``vllm:cache_config_info``) of the first engine."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return dict(sample.labels)
    return None


def pool_shortfall_of(text: str) -> base.PoolShortfall | None:
    """The figures of a KV cache too small for one request of the model length (the fraction is not
    printed: the plan's flag says it); None where ``text`` prints none."""
    v1 = _SHORT_V1.search(text)
    if v1 is not None:
        cell = float(v1["needed_gib"]) * _GIB / int(v1["needed"])
        pool = max(float(v1["pool_gib"]), 0.0) * _GIB
        fits = int(v1["fits"]) if v1["fits"] else int(pool / cell) if cell else None
        return base.PoolShortfall(
            pool_tokens=fits,
            needed_tokens=int(v1["needed"]),
            pool_bytes=pool,
            needed_bytes=float(v1["needed_gib"]) * _GIB,
        )
    v0 = _SHORT_V0.search(text)
    if v0 is not None:
        return base.PoolShortfall(pool_tokens=int(v0["fits"]), needed_tokens=int(v0["needed"]))
    return None


def memory_facts_of(log_text: str) -> base.MemoryFacts | None:
    """``Model loading took``, ``Available KV cache memory``, ``GPU KV cache size``, ``Graph
    capturing finished``, ``Maximum concurrency`` (the first rank's, per GPU); V0's profile line where
    those are missing."""
    weights, kv, tokens, graph, concurrency = (
        first_rank_search(p, log_text)
        for p in (_WEIGHTS_LINE, _KV_MEMORY_LINE, _KV_TOKENS_LINE, _GRAPH_LINE, _CONCURRENCY_LINE)
    )
    if weights is None and kv is None and tokens is None and graph is None:
        return None
    return base.MemoryFacts(
        weights_bytes=float(weights["gib"]) * _GIB if weights else None,
        kv_pool_bytes=float(kv["gib"]) * _GIB if kv else None,
        kv_tokens=int(tokens["tokens"].replace(",", "")) if tokens else None,
        graph_bytes=float(graph["gib"]) * _GIB if graph else None,
        max_concurrency=float(concurrency["times"]) if concurrency else None,
    )


def log_figures_of(log_window: str) -> base.LogFigures:
    """Busy intervals' generation throughput per engine (DP engines run side by side), and each
    interval's mean acceptance length, weighted by its verify steps (``Drafted`` tokens / draft
    positions) where the line says them."""
    engines: dict[str, list[float]] = {}
    accepts: list[float] = []
    weights: list[float] = []
    for line in log_window.splitlines():
        engine = parse_engine_line(line)
        if engine is not None and engine.generation_throughput > 0:
            engines.setdefault(f"engine {engine.engine}", []).append(engine.generation_throughput)
        spec = parse_spec_line(line)
        if spec is not None:
            accepts.append(spec.mean_acceptance_length)
            weights.append(spec.drafts or 0.0)
    return base.LogFigures(gen_tok_s=engines, accept_lengths=accepts, accept_weights=weights if all(weights) else None)
