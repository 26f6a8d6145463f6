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
from autotune.headroom_figures import oom_shortfall_bytes

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
        # V1's refusal (kv_cache_utils.py, shared by the GPU, CPU and TPU builds) spells "models's" in
        # most releases and "model's" in others
        r"To serve at least one request with the models?(?:'s)? max seq len",
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
# (and, in 0.6.5, one field a line: "model weights take   X GiB", "available_kv_cache_memory   Y GiB");
# V1's refusal of a max seq len repeats the available KV memory (the only mention where a log is cut).
_WEIGHTS_LINE = re.compile(
    r"(?:(?:Model loading|Loading model weights) took |model weights take\s+)(?P<gib>[\d.]+) ?(?:GiB|GB)"
)
_KV_MEMORY_LINE = re.compile(
    r"(?:Available KV cache memory: |reserved for KV Cache is |available_kv_cache_memory\s+"
    r"|larger than the available KV cache memory \()(?P<gib>-?[\d.]+) ?GiB"
)
_KV_TOKENS_LINE = re.compile(r"KV cache size: (?P<tokens>[\d,]+) tokens")
# V1's refusal of a max seq len the KV cache cannot hold once (kv_cache_utils.py): the length, the GiB
# it needs and the GiB available, then, where the estimate is above 0, the longest length that fits
# ("Based on the available memory, the estimated maximum model length is N." in most releases,
# "Estimated maximum model length is N." in later ones). V0 printed tokens instead of GiB.
_KV_REFUSAL = re.compile(
    r"To serve at least one request with the models?(?:'s)? max seq len \((?P<length>\d+)\), \(?"
    r"(?P<needed>[\d.]+) GiB KV cache is needed, which is larger than the available KV cache memory "
    r"\((?P<available>-?[\d.]+) GiB\)\.?"
    r"(?:\s*(?:Based on the available memory, the e|E)stimated maximum model length is (?P<estimate>\d+))?"
)
_V0_TOKENS_REFUSAL = re.compile(
    r"The model's max seq len \((?P<length>\d+)\) is larger than the maximum number of tokens that can be "
    r"stored in KV cache \((?P<tokens>\d+)\)"
)
_GRAPH_LINE = re.compile(r"Graph capturing finished in [\d.]+ secs?, took (?P<gib>-?[\d.]+) GiB")
_CONCURRENCY_LINE = re.compile(r"Maximum concurrency for [\d,]+ tokens per request: (?P<times>[\d.]+)x")


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
    """vLLM's ``SpecDecoding metrics: ...`` line (V0's ``Speculative metrics: ...``), one logging
    interval, by field: what the release printed, and the mean acceptance length where it printed it
    or its fields give it (None where they do not)."""

    mean_acceptance_length: float | None = None
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
    """Parse the ``SpecDecoding metrics`` line by field name. Releases differ in their fields: 0.8's
    gave the draft acceptance rate and the accepted and drafted tokens only (no mean, and no count of
    drafts to derive one); later ones add the mean and the per-position rates, whose count gives the
    drafts (``Drafted`` / positions), so a missing mean is 1 + accepted / drafts. V0's ``Speculative
    metrics`` line gives counts only (see :func:`_parse_v0_spec_line`)."""
    match = _SPEC_LINE.search(line.strip())
    if match is None:
        return _parse_v0_spec_line(line)
    fields = _fields(match["fields"])
    accepted, drafted = _leading_number(fields.get("Accepted")), _leading_number(fields.get("Drafted"))
    positions = fields.get("Per-position acceptance rate", "")
    per_position = [float(p) for p in positions.split(",") if _NUMBER.match(p.strip())] if positions else []
    rate = _leading_number(fields.get("Avg Draft acceptance rate", fields.get("Draft acceptance rate")))
    read = SpecDecodingLine(
        mean_acceptance_length=_leading_number(fields.get("Mean acceptance length")),
        accepted=int(accepted) if accepted is not None else None,
        drafted=int(drafted) if drafted is not None else None,
        per_position=per_position,
        draft_acceptance_rate=rate,
    )
    if read.mean_acceptance_length is None and read.accepted is not None and read.drafts:
        read = read.model_copy(update={"mean_acceptance_length": 1 + read.accepted / read.drafts})
    if read.mean_acceptance_length is None and accepted is None and drafted is None:
        return None  # every release printed the token counts: not one of its lines
    return read


def _parse_v0_spec_line(line: str) -> SpecDecodingLine | None:
    """The V0 engine's ``Speculative metrics: Draft acceptance rate: R, System efficiency: S, Number of
    speculative tokens: k, Number of accepted tokens: A, Number of draft tokens: D, Number of emitted
    tokens: E.`` (R a fraction): D / k verify steps emitted E tokens, so tokens per step (the accept
    length) is E / (D / k); without E, 1 + A / (D / k)."""
    match = _V0_SPEC_LINE.search(line.strip())
    if match is None:
        return None
    fields = _fields(match["fields"])
    k, accepted, drafted, emitted = (
        _leading_number(fields.get(f"Number of {kind} tokens"))
        for kind in ("speculative", "accepted", "draft", "emitted")
    )
    rate = _leading_number(fields.get("Draft acceptance rate"))
    if accepted is None and drafted is None:
        return None
    steps = drafted / k if k and drafted else None
    mean = None
    if steps and emitted is not None:
        mean = emitted / steps
    elif steps and accepted is not None:
        mean = 1 + accepted / steps
    return SpecDecodingLine(
        mean_acceptance_length=mean,
        accepted=int(accepted) if accepted is not None else None,
        drafted=int(drafted) if drafted is not None else None,
        draft_acceptance_rate=rate * 100 if rate is not None else None,
        steps=steps,
    )


def info_labels(text: str, name: str) -> dict[str, str] | None:
    """The labels of an info-style gauge (``vllm:cache_config_info``) of the first engine."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                return dict(sample.labels)
    return None


def kv_shortfall(reason: str) -> base.PoolShortfall | None:
    """The figures of a refusal to start because one request of the max seq len does not fit the KV
    cache: the GiB it needs against the GiB available and, in tokens, the longest request that fits
    against the max seq len (V1's estimate where printed, else the available GiB over the bytes a token
    needs; V0's token count). vLLM prints no fraction: the launch's --gpu-memory-utilization says it."""
    refusal = _KV_REFUSAL.search(reason)
    if refusal is not None:
        needed_tokens, needed = int(refusal["length"]), float(refusal["needed"]) * _GIB
        available = max(float(refusal["available"]), 0.0) * _GIB
        estimate = refusal["estimate"]
        fits = int(estimate) if estimate is not None else int(available / (needed / needed_tokens)) if needed else None
        return base.PoolShortfall(
            pool_tokens=fits, needed_tokens=needed_tokens, pool_bytes=available, needed_bytes=needed
        )
    v0 = _V0_TOKENS_REFUSAL.search(reason)
    if v0 is not None:
        return base.PoolShortfall(pool_tokens=int(v0["tokens"]), needed_tokens=int(v0["length"]))
    return None


def memory_facts_of(log_text: str) -> base.MemoryFacts | None:
    """``Model loading took``, ``Available KV cache memory``, ``GPU KV cache size``, ``Graph
    capturing finished``, ``Maximum concurrency`` (the first rank's, per GPU); V0's profile line where
    those are missing; what a worker's out-of-memory message says it lacked (PyTorch's own words)."""
    weights, kv, tokens, graph, concurrency = (
        first_rank_search(p, log_text)
        for p in (_WEIGHTS_LINE, _KV_MEMORY_LINE, _KV_TOKENS_LINE, _GRAPH_LINE, _CONCURRENCY_LINE)
    )
    oom = oom_shortfall_bytes(log_text)
    if weights is None and kv is None and tokens is None and graph is None and oom is None:
        return None
    return base.MemoryFacts(
        weights_bytes=float(weights["gib"]) * _GIB if weights else None,
        kv_pool_bytes=float(kv["gib"]) * _GIB if kv else None,
        kv_tokens=int(tokens["tokens"].replace(",", "")) if tokens else None,
        graph_bytes=float(graph["gib"]) * _GIB if graph else None,
        max_concurrency=float(concurrency["times"]) if concurrency else None,
        oom_shortfall_bytes=oom,
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
        if spec is not None and spec.mean_acceptance_length is not None:
            accepts.append(spec.mean_acceptance_length)
            weights.append(spec.drafts or 0.0)
    return base.LogFigures(gen_tok_s=engines, accept_lengths=accepts, accept_weights=weights if all(weights) else None)
