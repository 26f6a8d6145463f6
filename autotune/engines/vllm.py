"""vLLM (``vllm serve MODEL``): flags, launch rules, protocol.

Facts read off the vllm 0.33.0 wheel's Python sources (its ``--help=all`` is recorded in
tests/fixtures/vllm-0.33.0-serve-help.txt). The launcher is the ``serve`` command itself, e.g.
``[/opt/vllm/.venv/bin/vllm, serve]`` or, for the twin, ``[python, -m, autotune_twin, --personality,
vllm, serve]``; :meth:`VLLMEngine.build_argv` puts the model right after it (vLLM's positional
``model_tag``), then ``--host`` and ``--port``, then the plan's flags. The flag set is read from
``LAUNCHER --help=all`` (vLLM 0.33's plain ``--help`` lists only the groups).

Speculative decoding is tuned through **fields** that the engine folds into one
``--speculative-config`` JSON object when it builds the command line:

============================ ============================ =========================================
field (space spelling)        JSON key                     note
============================ ============================ =========================================
``speculative-method``        ``method``                   ``mtp`` for Qwen3.5/3.6/Next MTP heads;
                                                           ``qwen3_next_mtp`` & co. become ``mtp``
``num-speculative-tokens``    ``num_speculative_tokens``   k; required with ``mtp``
``speculative-model``         ``model``                    the draft model (draft_model, eagle, ...)
``prompt-lookup-min``/``-max`` ``prompt_lookup_min``/``max`` ngram only; default 5, one mirrors the
                                                           other; dropped for other methods (vLLM
                                                           sets them to 0 there)
``draft-tensor-parallel-size`` ``draft_tensor_parallel_size`` 1 or the target's TP
``speculative-config.KEY``    ``KEY``                      any other key (vLLM's own dotted syntax)
============================ ============================ =========================================

``speculative-config.num_speculative_tokens_per_batch_size`` (a speculation schedule per load) is a
list of inclusive batch ranges ``[start, end, k]``; the plan keeps it as compact JSON text (a flag
value is a scalar) and the command line writes it as the list, checked by vLLM 0.33's rules
(``vllm/v1/spec_decode/dynamic/utils.py``: positive, sorted without overlap, the first starting at
1, k >= 0; a k above ``num_speculative_tokens`` is capped, a gap or the tail carries the k before it).

vLLM's shorthands ``--spec-method``, ``--spec-model`` and ``--spec-tokens`` and a literal
``--speculative-config`` JSON are accepted too and folded the same way, so equal settings are one
effective config; a key given twice (JSON and a field or shorthand) is refused, as vLLM refuses it,
and a space may not mix ``speculative-config`` with fields at all (:meth:`VLLMEngine.check_flags`).
The plan keeps the fields, not the JSON, so a study shows ``num-speculative-tokens: 3`` and the
feasibility rules can order it.

Other rules applied in :meth:`VLLMEngine.normalise`: short aliases (``tp``, ``sc``, ``cc``, ``O``)
and underscores become vLLM's long spelling; ``--max-num-seqs`` and ``--max-num-batched-tokens``
are always both given (their defaults depend on the GPU, so trials would not compare) and
``max-num-batched-tokens >= max-num-seqs``; ``--max-model-len`` spellings (``32k``, ``32K``,
``-1``/``auto``) are read as vLLM reads them; ``false`` for a switch vLLM turns on by default
(prefix caching, chunked prefill, async scheduling, ...) is passed as its negative spelling
(``--disable-prefix-caching``); ``--disable-log-stats`` is refused (it turns off both ``/metrics`` and
the log lines autotune cross-checks with).
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from prometheus_client.parser import text_string_to_metric_families
from pydantic import BaseModel, ConfigDict

from autotune.engines import base
from autotune.engines.base import (
    Engine,
    FlagSet,
    InvalidConfig,
    LaunchPlan,
    first_rank_search,
    parse_help_flags,
    run_help,
    scalar,
    sse_events,
)
from autotune.engines.base import counter_totals as counter_totals
from autotune.engines.failures import (
    ALLOCATING_KV,
    CAPTURING,
    LOADING_WEIGHTS,
    PROFILING,
    SERVING,
    FailureRules,
)
from autotune.engines.speculation import ScheduleForm, SpeculationFlags
from autotune.errors import FlagError, LauncherError, MeasurementError
from autotune.feasibility import MemoryRules
from autotune.measure.suites import Prompt
from autotune.space import FlagValue

if TYPE_CHECKING:
    import httpx

SPEC_CONFIG = "speculative-config"
DOTTED = SPEC_CONFIG + "."
METHOD = "speculative-method"
TOKENS = "num-speculative-tokens"
DRAFT_MODEL = "speculative-model"
LOOKUP_MIN = "prompt-lookup-min"
LOOKUP_MAX = "prompt-lookup-max"
DRAFT_TP = "draft-tensor-parallel-size"
MAX_SEQS = "max-num-seqs"
MAX_BATCHED = "max-num-batched-tokens"
MAX_MODEL_LEN = "max-model-len"
KV_DTYPE = "kv-cache-dtype"
UTILIZATION = "gpu-memory-utilization"
TP = "tensor-parallel-size"
SPEC_METRICS = "per-request-spec-decode-metrics"
DISABLE_LOG_STATS = "disable-log-stats"

# Field -> JSON key of --speculative-config (the module docstring's table).
SPEC_FIELDS: dict[str, str] = {
    METHOD: "method",
    TOKENS: "num_speculative_tokens",
    DRAFT_MODEL: "model",
    LOOKUP_MIN: "prompt_lookup_min",
    LOOKUP_MAX: "prompt_lookup_max",
    DRAFT_TP: "draft_tensor_parallel_size",
}
FIELD_OF_KEY = {key: field for field, key in SPEC_FIELDS.items()}
SPEC_SHORTHANDS: dict[str, str] = {
    "spec-method": "method",
    "spec-model": "model",
    "spec-tokens": "num_speculative_tokens",
}
ALIASES: dict[str, str] = {
    "tp": TP,
    "sc": SPEC_CONFIG,
    "cc": "compilation-config",
    "O": "optimization-level",
    "device-memory-utilization": UTILIZATION,
}
# Switches vLLM 0.33 turns on by default (or decides at run time): false -> the negative spelling.
NEGATIONS: dict[str, str] = {
    "enable-prefix-caching": "disable-prefix-caching",
    "enable-chunked-prefill": "disable-chunked-prefill",
    "async-scheduling": "no-async-scheduling",
    "enable-flashinfer-autotune": "disable-flashinfer-autotune",
    "enable-batch-sharded-sampling": "disable-batch-sharded-sampling",
    "scheduler-reserve-full-isl": "no-scheduler-reserve-full-isl",
    "swa-bounded-replay": "no-swa-bounded-replay",
    "enforce-eager": "no-enforce-eager",
}
POSITIVE_OF = {negative: positive for positive, negative in NEGATIONS.items()}
# vLLM 0.33's MTPModelTypes other than "mtp": rewritten to "mtp" with a warning.
MTP_ALIASES = frozenset(
    (
        "deepseek_mtp dots3_note_mtp mimo_mtp mimo_v2_mtp glm4_moe_mtp glm4_moe_lite_mtp glm_ocr_mtp ernie_mtp "
        "nemotron_h_mtp exaone_moe_mtp exaone4_5_mtp qwen3_next_mtp qwen4_exp_mtp qwen3_5_mtp longcat_flash_mtp "
        "bailing_hybrid_v3_mtp minimax_m3_mtp bailing_hybrid_mtp kimi_k3_mtp pangu_ultra_moe_mtp step3p5_mtp "
        "step5_mtp hy_v3_mtp hy_v4_mtp gemma4_mtp inkling_mtp glm5_next_mtp"
    ).split()
)
NEEDS_DRAFT_MODEL = frozenset({"draft_model", "eagle", "eagle3", "dflash"})
NGRAM = frozenset({"ngram", "ngram_gpu"})
DEFAULT_LOOKUP = 5
PER_BATCH_KEY = "num_speculative_tokens_per_batch_size"
# vllm/config/vllm.py _maybe_disable_dynamic_sd_for_v1: Model Runner V1 runs the per-batch k for these.
# ngram_gpu is not among them (others fall back to static k there, with a warning).
PER_BATCH_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")
PER_BATCH = DOTTED + PER_BATCH_KEY
DATA_PARALLEL = "data-parallel-size"

# What vLLM 0.33 prints on its way up and when it fails (the classifier is
# autotune.engines.failures). The KV cache is what is left of utilization x total after the weights,
# the profiled activations and the graphs, so an out-of-memory error while loading the weights means
# the budget is too small for them, and one in the profile run, the KV allocation, graph capture or
# the sampler warm-up means the budget leaves too little outside it.
FAILURES = FailureRules(
    stages=(
        (r"Starting to load model|Loading weights|Loading safetensors checkpoint|Loading model from"
         r"|, in (?:load_model|load_weights|initialize_model|make_layers|create_weights)$", LOADING_WEIGHTS),
        (r"(?:Model loading|Loading model weights|Loading weights) took|Memory profiling takes|Starting profile run"
         r"|, in (?:profile_run|_dummy_run|determine_available_memory|determine_num_available_blocks)$", PROFILING),
        (r"Available KV cache memory|KV cache size|# (?:GPU|cuda) blocks|num_gpu_blocks"
         r"|, in (?:initialize_kv_cache|initialize_cache|_allocate_kv_cache\w*)$", ALLOCATING_KV),
        (r"Capturing (?:CUDA graph|cudagraph|the model for CUDA graphs)|Graph capturing"
         r"|, in (?:capture_model|_warm_up_model|capture)$", CAPTURING),
        (r"Graph capturing finished|init engine .* took|Application startup complete|POST /v1/|warming up sampler"
         r"|, in (?:_dummy_sampler_run|run_engine_loop|engine_step|run_busy_loop|step_with_batch_queue)$", SERVING),
    ),  # fmt: skip
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

# What a reply of cache_config_info says, under the flag it answers for.
_CACHE_LABELS = {
    "gpu_memory_utilization": UTILIZATION,
    "cache_dtype": "kv-cache-dtype",
    "enable_prefix_caching": "enable-prefix-caching",
    "block_size": "block-size",
    "num_gpu_blocks": "num-gpu-blocks",
    "kv_cache_size_tokens": "kv-cache-size-tokens",
    "kv_cache_max_concurrency": "kv-cache-max-concurrency",
    "mamba_cache_mode": "mamba-cache-mode",
}
_LOG_NOISE = frozenset({"served-model-name", "seed", SPEC_METRICS, "enable-log-requests", "uvicorn-log-level"})
_DEMAND = frozenset({MAX_MODEL_LEN, MAX_SEQS, MAX_BATCHED, "max-cudagraph-capture-size", TOKENS})


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


_SUFFIX = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<suffix>[kKmMgGtT])?$")


def parse_max_model_len(value: FlagValue) -> int | str:
    """vLLM 0.33's ``--max-model-len``: ``32k`` = 32000, ``32K`` = 32768 (no decimals with binary
    suffixes), ``-1`` or ``auto`` = fit what memory allows (returned as ``"auto"``)."""
    if isinstance(value, bool):
        raise InvalidConfig(f"--{MAX_MODEL_LEN} must be a length, not {value!r}")
    text = str(value).strip()
    if text in ("-1", "auto"):
        return "auto"
    match = _SUFFIX.match(text)
    if match is None or (match["suffix"] and match["suffix"].isupper() and "." in match["number"]):
        raise InvalidConfig(f"--{MAX_MODEL_LEN} {value!r} is not a length (e.g. 131072, 128k, 128K or auto)")
    suffix = match["suffix"] or ""
    scale = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}
    length = int(float(match["number"]) * scale.get(suffix, 1))
    if length < 1:
        raise InvalidConfig(f"--{MAX_MODEL_LEN} must be positive (or -1 / auto)")
    return length


def batch_ranges(value: object) -> list[list[int]]:
    """``num_speculative_tokens_per_batch_size`` (a list, or its JSON text) checked as vLLM 0.33's
    ``validate_and_normalize_dynamic_sd_schedule`` checks it, sorted by start.

    Raises:
        InvalidConfig: with vLLM's reason.
    """
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidConfig(f"{PER_BATCH_KEY} is not valid JSON: {exc}") from None
    if not isinstance(value, list) or not value:
        raise InvalidConfig(f"{PER_BATCH_KEY} must be a non-empty list of [range_start, range_end, k] entries")
    ranges: list[list[int]] = []
    for entry in value:
        if not isinstance(entry, list) or len(entry) != 3 or not all(type(v) is int for v in entry):
            raise InvalidConfig(f"each {PER_BATCH_KEY} entry must be [range_start, range_end, k], got {entry!r}")
        start, end, k = entry
        if start <= 0 or end <= 0:
            raise InvalidConfig(f"batch-size range ({start}, {end}) must be positive")
        if start > end:
            raise InvalidConfig(f"batch-size range start must be <= end for ({start}, {end}, {k})")
        if k < 0:
            raise InvalidConfig(f"{PER_BATCH_KEY} values must be >= 0")
        ranges.append([start, end, k])
    ranges.sort(key=lambda r: r[0])
    for before, after in zip(ranges, ranges[1:], strict=False):
        if after[0] <= before[1]:
            raise InvalidConfig("batch-size ranges must be non-overlapping and sorted")
    if ranges[0][0] != 1:
        raise InvalidConfig("the first batch-size range must start at 1 so every batch size has a k")
    return ranges


def canonical_name(name: str) -> str:
    """vLLM's spelling of a flag name: aliases resolved, underscores read as dashes (before a dot)."""
    head, dot, tail = name.partition(".")
    head = ALIASES.get(head, head)
    head = ALIASES.get(head.replace("_", "-"), head.replace("_", "-"))
    return head + dot + tail


def _int(value: FlagValue, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidConfig(f"{what} must be an integer, not {value!r}")
    try:
        return int(value)
    except ValueError:
        raise InvalidConfig(f"{what} must be an integer, not {value!r}") from None


class PerBatchSchedule(ScheduleForm):
    """vLLM's ``num_speculative_tokens_per_batch_size`` inside ``--speculative-config``: inclusive batch
    ranges ``[start, end, k]``; vLLM looks the running batch's request count up in them every step."""

    what = "vLLM's per-batch setting"
    per_tier = frozenset({TOKENS, PER_BATCH})

    def tier_depth(self, flags: Mapping[str, FlagValue]) -> int | str:
        """Its num_speculative_tokens, for a method the per-batch setting runs, without data parallelism."""
        dp = flags.get(DATA_PARALLEL, 1)
        if isinstance(dp, int) and dp > 1:
            return f"data-parallel-size {dp} (vLLM turns the per-batch setting off under data parallelism)"
        method = flags.get(METHOD)
        if method is None and flags.get(DRAFT_MODEL) is None:
            return 0
        if method not in PER_BATCH_METHODS:
            return f"method {method} (the per-batch setting runs {'/'.join(PER_BATCH_METHODS)} only)"
        if flags.get(PER_BATCH) is not None:
            return "a per-batch setting itself"
        k = flags.get(TOKENS)
        return k if isinstance(k, int) and not isinstance(k, bool) else "no explicit num_speculative_tokens"

    def drafts(self, shared: Mapping[str, FlagValue]) -> bool:
        return bool(shared.get(METHOD) or shared.get(DRAFT_MODEL))

    def batch_ranges(self, shared: Mapping[str, FlagValue], slots: Mapping[int, int]) -> list[list[int]]:
        """A slot's range runs to the batch before the next slot's, the last to ``max-num-seqs`` (vLLM
        would carry its k through the tail anyway; written out, the range says what runs). vLLM 0.33's
        rules (v1/spec_decode/dynamic/utils.py): positive, sorted, not overlapping, the first starting
        at 1, k >= 0; a k above num_speculative_tokens is capped."""
        keys = list(slots.items())
        top = shared.get(MAX_SEQS)
        last = top if isinstance(top, int) and not isinstance(top, bool) else keys[-1][0]
        ends = [key - 1 for key, _ in keys[1:]] + [max(last, keys[-1][0])]
        return [[key, end, k] for (key, k), end in zip(keys, ends, strict=True)]

    def launch_flags(
        self, shared: Mapping[str, FlagValue], slots: Mapping[int, int], *, start: int, config_path: str
    ) -> dict[str, FlagValue]:
        """The ranges inline; num_speculative_tokens the deepest tier's k (vLLM caps every range's k at
        it and sizes the per-request buffers for it)."""
        return {**shared, TOKENS: max(slots.values()), PER_BATCH: json.dumps(self.batch_ranges(shared, slots))}

    def config_text(self, shared: Mapping[str, FlagValue], slots: Mapping[int, int]) -> str:
        return f"{PER_BATCH_KEY} {json.dumps(self.batch_ranges(shared, slots))}"


class VLLMEngine(Engine):
    name = "vllm"
    speculation = SpeculationFlags(method=METHOD, depth=TOKENS, draft_model=DRAFT_MODEL, unit="token")
    schedule_form = PerBatchSchedule()
    # In vLLM 0.33 these size the KV budget, the sequence pool and the prefill batch; one
    # stream decodes alike under any of them that still admits it (max-model-len is not among them:
    # a prompt beyond it is refused).
    memory_sizing_flags = {UTILIZATION: 0, MAX_SEQS: 1, MAX_BATCHED: 1}
    # vLLM 0.33's memory split: the budget is utilization x TOTAL memory (it must be free at start); the
    # KV cache gets budget - (weights + activations + graphs), and must hold one request of
    # max-model-len plus (1 + k) mamba-state pages per running request on hybrid models. So every
    # demand flag makes a "too low" failure worse. "Too high": the budget does not fit the free
    # memory, or what is left outside it cannot hold the sampler warm-up (max-num-seqs x (1 + k)).
    memory_rules = MemoryRules(
        fraction_flag=UTILIZATION,
        default_fraction=0.92,
        budget_of="total",
        tp_flag=TP,
        pool_demand=_DEMAND,
        pool_irrelevant=_LOG_NOISE,
        pool_scale={KV_DTYPE: {"auto": 2.0, "bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0,
                                       "fp8_e5m2": 1.0}},  # fmt: skip
        headroom_demand=frozenset({MAX_SEQS, TOKENS, MAX_BATCHED, "max-cudagraph-capture-size"}),
        headroom_irrelevant=_LOG_NOISE | {MAX_MODEL_LEN},
        weights_flags=frozenset({SPEC_CONFIG, "quantization", "dtype", "load-format"}),
    )
    reserved_flags = frozenset({"model", "host", "port"})
    failure_rules = FAILURES
    metric_names = base.MetricNames(
        generated="vllm:generation_tokens_total",
        drafts="vllm:spec_decode_num_drafts_total",
        accepted="vllm:spec_decode_num_accepted_tokens_total",
    )

    def __init__(self) -> None:
        self._flag_set: FlagSet | None = None

    # -- 1. valid flags ----------------------------------------------------------------------------

    def read_flag_set(self, launcher: list[str], *, env: Mapping[str, str] | None = None) -> FlagSet:
        """``LAUNCHER --help=all`` (vLLM 0.33 groups its plain ``--help``); the launcher ends in ``serve``."""
        if not launcher or launcher[-1] != "serve":
            raise LauncherError(
                f"a vLLM launcher ends with its 'serve' command, got {launcher}",
                hint="e.g. launcher: [/opt/vllm/.venv/bin/vllm, serve]",
            )
        flag_set = parse_help_flags(run_help([*launcher, "--help=all"], env=env))
        if UTILIZATION not in flag_set.flags:  # a release whose --help lists every flag
            flag_set = parse_help_flags(run_help([*launcher, "--help"], env=env))
        self._flag_set = flag_set
        return flag_set

    def check_flags(self, names: list[str], flag_set: FlagSet) -> None:
        """vLLM's flags (aliases and underscores allowed), plus the speculative fields; see the module
        docstring for the rules on mixing them."""
        canonical = [canonical_name(n) for n in names]
        real: list[str] = []
        fields: dict[str, list[str]] = {}
        for raw, name in zip(names, canonical, strict=True):
            if name in self.reserved_flags:
                raise FlagError(f"--{raw} is set by autotune itself; remove it from the search space", flag=raw)
            if name == DISABLE_LOG_STATS:
                raise FlagError(
                    f"--{DISABLE_LOG_STATS} turns off vLLM's /metrics and stats lines, which autotune reads",
                    flag=raw,
                    hint="remove it from the search space",
                )
            key = SPEC_FIELDS.get(name) or SPEC_SHORTHANDS.get(name)
            if name.startswith(DOTTED):
                key = name[len(DOTTED) :].replace("-", "_")
            if key is not None:
                fields.setdefault(key, []).append(raw)
                if name in SPEC_SHORTHANDS:
                    real.append(name)
                continue
            real.append(name)
        flag_set.check(list(dict.fromkeys(real)), engine=self.name)
        if fields and SPEC_CONFIG not in flag_set.flags:
            first = next(iter(fields.values()))[0]
            raise FlagError(f"--{first}: this vLLM has no --{SPEC_CONFIG} to fold it into", flag=first)
        for key, spellings in fields.items():
            if len(spellings) > 1:
                raise FlagError(
                    f"{' and '.join('--' + s for s in spellings)} both set the speculative key '{key}'",
                    flag=spellings[1],
                    hint="keep one of them",
                )
        if fields and SPEC_CONFIG in canonical:
            raw = names[canonical.index(SPEC_CONFIG)]
            raise FlagError(
                f"--{raw} and speculative fields ({', '.join(s for v in fields.values() for s in v)}) set one "
                "JSON object twice",
                flag=raw,
                hint="give the speculative settings either as --speculative-config JSON or as fields, not both",
            )
        missing = [f for f in (MAX_SEQS, MAX_BATCHED) if f not in canonical]
        if missing:
            raise FlagError(
                f"vLLM needs both --{MAX_SEQS} and --{MAX_BATCHED}; missing --{missing[0]}",
                flag=missing[0],
                hint="their defaults depend on the GPU (256 / 2048 below 70 GiB, 1024 / 8192 on H100/H200), so "
                "set both in fixed: or tuned: for trials to compare",
            )

    # -- 2. normalise ------------------------------------------------------------------------------

    def normalise(self, flags: Mapping[str, FlagValue]) -> LaunchPlan:
        """vLLM 0.33's rules (module docstring); refuses what vLLM refuses at parse or config time."""
        notes: list[str] = []
        out, spec = self._split_flags(flags)
        if spec:
            out.update(self._speculative(spec, out, notes))
        self._value_rules(out)
        self._batch_rules(out)
        return LaunchPlan(engine=self.name, flags=out, notes=notes)

    @classmethod
    def _split_flags(cls, flags: Mapping[str, FlagValue]) -> tuple[dict[str, FlagValue], dict[str, FlagValue]]:
        """The flags in vLLM's spelling, and apart from them the speculative keys (fields, shorthands, JSON)."""
        out: dict[str, FlagValue] = {}
        spec: dict[str, FlagValue] = {}
        source: dict[str, str] = {}
        spec_json: tuple[str, dict[str, Any]] | None = None
        for raw, value in flags.items():
            name = canonical_name(raw)
            if name in POSITIVE_OF:  # --disable-prefix-caching: true == enable-prefix-caching: false
                if value is False:
                    continue
                name, value = POSITIVE_OF[name], False
            if value is False and name not in NEGATIONS:
                continue
            if name == DISABLE_LOG_STATS:
                raise InvalidConfig(f"--{DISABLE_LOG_STATS} turns off the metrics and log lines autotune reads")
            if name == SPEC_CONFIG:
                spec_json = (raw, cls._json_object(value))
                continue
            key = SPEC_FIELDS.get(name) or SPEC_SHORTHANDS.get(name)
            if name.startswith(DOTTED):
                key = name[len(DOTTED) :].replace("-", "_")
            if key is not None:
                if key in spec:
                    raise InvalidConfig(f"--{source[key]} and --{raw} both set the speculative key '{key}'")
                spec[key], source[key] = value, raw
                continue
            if name in out:
                raise InvalidConfig(f"--{name} is given twice (as --{raw} too)")
            out[name] = round(value, 6) if isinstance(value, float) else value
        if spec_json is not None:
            raw, given = spec_json
            for key, value in given.items():
                key = key.replace("-", "_")
                if key in spec:
                    raise InvalidConfig(f"--{source[key]} and --{raw}['{key}'] are mutually exclusive")
                spec[key] = value
        return out, spec

    @staticmethod
    def _value_rules(out: dict[str, FlagValue]) -> None:
        """Read --max-model-len and -O, drop --kv-cache-dtype auto, check --gpu-memory-utilization; in place."""
        if MAX_MODEL_LEN in out:
            out[MAX_MODEL_LEN] = parse_max_model_len(out[MAX_MODEL_LEN])
        if out.get(KV_DTYPE) == "auto":  # vLLM's default: the same launch as leaving it unset, one config
            del out[KV_DTYPE]
        if "optimization-level" in out:
            level = _int(out["optimization-level"], "--optimization-level")
            if level not in (0, 1, 2, 3):
                raise InvalidConfig(f"--optimization-level must be 0..3 (-O0 .. -O3), got {level}")
            out["optimization-level"] = level
        if UTILIZATION in out:
            fraction = out[UTILIZATION]
            if isinstance(fraction, bool) or not isinstance(fraction, (int, float)) or not 0 < fraction <= 1:
                raise InvalidConfig(f"--{UTILIZATION} must be in (0, 1], got {fraction!r}")

    @staticmethod
    def _batch_rules(out: Mapping[str, FlagValue]) -> None:
        """Refuse batch limits vLLM refuses (or leaves to the GPU): both given, a prompt fits, tokens >= sequences."""
        if MAX_SEQS not in out or MAX_BATCHED not in out:
            missing = ", ".join(f"--{f}" for f in (MAX_SEQS, MAX_BATCHED) if f not in out)
            raise InvalidConfig(
                f"vLLM's defaults for --{MAX_SEQS} and --{MAX_BATCHED} depend on the GPU; give both "
                f"(missing {missing}) so trials compare"
            )
        seqs, batched = _int(out[MAX_SEQS], f"--{MAX_SEQS}"), _int(out[MAX_BATCHED], f"--{MAX_BATCHED}")
        # vllm/config/scheduler.py:317-329 (0.33.0): without chunked prefill a prompt must fit one batch.
        model_len = out.get(MAX_MODEL_LEN)
        if out.get("enable-chunked-prefill") is False and isinstance(model_len, int) and 0 < batched < model_len:
            raise InvalidConfig(
                f"max_num_batched_tokens ({batched}) is smaller than max_model_len ({model_len}) "
                "with chunked prefill disabled"
            )
        if batched < seqs:
            raise InvalidConfig(
                f"max_num_batched_tokens ({batched}) must be greater than or equal to max_num_seqs ({seqs})"
            )

    @staticmethod
    def _json_object(value: FlagValue) -> dict[str, Any]:
        try:
            data = json.loads(str(value))
        except json.JSONDecodeError as exc:
            raise InvalidConfig(f"--{SPEC_CONFIG} is not valid JSON: {exc}") from None
        if not isinstance(data, dict):
            raise InvalidConfig(f"--{SPEC_CONFIG} must be a JSON object")
        return data

    @staticmethod
    def _speculative(
        spec: dict[str, FlagValue], flags: Mapping[str, FlagValue], notes: list[str]
    ) -> dict[str, FlagValue]:
        """vLLM's SpeculativeConfig rules; returns the fields the plan keeps."""
        method = spec.get("method")
        if method is None and spec.get("model") is not None:
            method = spec["method"] = "ngram" if spec["model"] in ("ngram", "[ngram]") else "draft_model"
            notes.append(f"speculative method {method} inferred from the draft model (vLLM's rule)")
        if isinstance(method, str) and method in MTP_ALIASES:
            notes.append(f"speculative method {method} is replaced by mtp (vLLM rewrites it)")
            method = spec["method"] = "mtp"
        model, k = spec.get("model"), spec.get("num_speculative_tokens")
        if k is not None:
            k = spec["num_speculative_tokens"] = _int(k, "num_speculative_tokens")
            if k < 1:
                raise InvalidConfig(f"num_speculative_tokens must be at least 1, got {k}")
        if method is None and model is None:
            raise InvalidConfig("speculative settings without a method or a draft model")
        if method == "mtp" and k is None:
            raise InvalidConfig("speculative method mtp needs num_speculative_tokens")
        if method in NEEDS_DRAFT_MODEL and model is None:
            raise InvalidConfig(f"speculative method {method} needs a draft model ({DRAFT_MODEL})")
        if method in NGRAM:
            low, high = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
            if low is None and high is None:
                low = high = DEFAULT_LOOKUP
            low, high = (high if low is None else low), (low if high is None else high)
            low, high = _int(low, "prompt_lookup_min"), _int(high, "prompt_lookup_max")  # type: ignore[arg-type]
            if low > high:
                raise InvalidConfig(f"prompt_lookup_min={low} must be <= prompt_lookup_max={high}")
            spec["prompt_lookup_min"], spec["prompt_lookup_max"] = low, high
        else:
            dropped = [key for key in ("prompt_lookup_min", "prompt_lookup_max") if spec.pop(key, None) is not None]
            if dropped:
                notes.append(f"{', '.join(dropped)} dropped: vLLM ignores them for method {method}")
        if spec.get(PER_BATCH_KEY) is not None:
            spec[PER_BATCH_KEY] = json.dumps(batch_ranges(spec[PER_BATCH_KEY]), separators=(",", ":"))
            if method not in PER_BATCH_METHODS:
                notes.append(f"{PER_BATCH_KEY} runs with Model Runner V2 only for method {method}: "
                             "on V1 vLLM falls back to static num_speculative_tokens")  # fmt: skip
            dp = flags.get("data-parallel-size", 1)
            if isinstance(dp, int) and dp > 1:
                notes.append(f"{PER_BATCH_KEY} is off under data parallelism (vLLM falls back to static k)")
        draft_tp = spec.get("draft_tensor_parallel_size")
        target_tp = _int(flags.get(TP, 1), f"--{TP}")
        if draft_tp is not None and _int(draft_tp, "draft_tensor_parallel_size") not in (1, target_tp):
            raise InvalidConfig(f"draft_tensor_parallel_size={draft_tp} must be 1 or the target's --{TP} ({target_tp})")
        return {FIELD_OF_KEY.get(key, DOTTED + key): value for key, value in sorted(spec.items())}

    # -- 3. argv -----------------------------------------------------------------------------------

    def build_argv(self, launcher: list[str], *, model: str, plan: LaunchPlan, host: str, port: int) -> list[str]:
        """``LAUNCHER MODEL --host H --port P FLAGS [--speculative-config JSON]``."""
        argv = [*launcher, model, "--host", host, "--port", str(port)]
        spec: dict[str, FlagValue] = {}
        for name, value in plan.flags.items():
            if name in SPEC_FIELDS:
                spec[SPEC_FIELDS[name]] = value
            elif name == DOTTED + PER_BATCH_KEY:  # kept as JSON text in the plan; vLLM reads the list
                spec[PER_BATCH_KEY] = json.loads(str(value))
            elif name.startswith(DOTTED):
                spec[name[len(DOTTED) :]] = value
            elif value is False:
                if name in NEGATIONS:
                    argv.append(f"--{NEGATIONS[name]}")
            else:
                argv.append(f"--{name}")
                if value is not True:
                    argv.append(str(value))
        if spec:
            argv += [f"--{SPEC_CONFIG}", json.dumps(spec, sort_keys=True, separators=(",", ":"))]
            known = self._flag_set is None or SPEC_METRICS in self._flag_set.flags
            if SPEC_METRICS not in plan.flags and known:
                argv += [f"--{SPEC_METRICS}", "summary"]  # per-request accept length in every response
        return argv

    # -- 4./5. readiness, effective config ---------------------------------------------------------

    # Readiness: the port refuses connections until the engine is ready, then /health answers 200,
    # which is the base class's probe.

    def effective_config(self, client: httpx.Client, base_url: str, plan: LaunchPlan) -> base.EffectiveConfig:
        """``max-model-len`` from ``/v1/models`` (auto-fit shrinks it silently), the cache config from
        the labels of ``vllm:cache_config_info``, the version from ``/version``."""
        import httpx  # here, not at import: reading a study loads the engines for their models only

        try:
            models = client.get(f"{base_url}/v1/models", timeout=30.0).raise_for_status().json()
            metrics = client.get(f"{base_url}/metrics", timeout=30.0).raise_for_status().text
            version_reply = client.get(f"{base_url}/version", timeout=30.0)
        except (httpx.HTTPError, ValueError) as exc:
            raise MeasurementError(f"cannot read the effective config from /v1/models and /metrics: {exc}") from None
        values: dict[str, FlagValue | None] = {}
        cards = models.get("data") or []
        if cards and isinstance(cards[0].get("max_model_len"), int):
            values[MAX_MODEL_LEN] = cards[0]["max_model_len"]
        for label, value in (info_labels(metrics, "vllm:cache_config_info") or {}).items():
            if label in _CACHE_LABELS:
                values[_CACHE_LABELS[label]] = scalar(value)
        version = None
        if version_reply.status_code == 200:
            try:
                version = version_reply.json().get("version")
            except ValueError:
                version = None
        return base.EffectiveConfig(version=str(version) if version is not None else None, values=values)

    # -- 6. failures: the base class's classifier, with FAILURES ------------------------------------

    def memory_facts(self, log_text: str) -> base.MemoryFacts | None:
        """``Model loading took``, ``Available KV cache memory``, ``GPU KV cache size``, ``Graph
        capturing finished`` (the first rank's, per GPU); V0's profile line where those are missing."""
        weights, kv, tokens, graph = (
            first_rank_search(p, log_text) for p in (_WEIGHTS_LINE, _KV_MEMORY_LINE, _KV_TOKENS_LINE, _GRAPH_LINE)
        )
        if weights is None and kv is None and tokens is None and graph is None:
            return None
        return base.MemoryFacts(
            weights_bytes=float(weights["gib"]) * _GIB if weights else None,
            kv_pool_bytes=float(kv["gib"]) * _GIB if kv else None,
            kv_tokens=int(tokens["tokens"].replace(",", "")) if tokens else None,
            graph_bytes=float(graph["gib"]) * _GIB if graph else None,
        )

    # -- 7. requests -------------------------------------------------------------------------------

    async def stream_generate(
        self, client: httpx.AsyncClient, base_url: str, prompt: Prompt, *, max_tokens: int, ignore_eos: bool
    ) -> AsyncIterator[base.StreamChunk]:
        """OpenAI ``/v1/completions`` (``/v1/chat/completions`` for a messages prompt), streamed with
        ``stream_options`` ``include_usage`` and ``continuous_usage_stats``: every chunk carries the
        cumulative completion tokens (a chunk is one engine step, so several tokens with speculative
        decoding); the final usage chunk carries ``metrics.speculative_decoding`` when the server runs
        with ``--per-request-spec-decode-metrics``."""
        body: dict[str, Any] = {
            "max_tokens": max_tokens,
            "temperature": prompt.temperature,
            "ignore_eos": ignore_eos,
            "stream": True,
            "stream_options": {"include_usage": True, "continuous_usage_stats": True},
        }
        if prompt.messages is not None:
            path = "/v1/chat/completions"
            body["messages"] = [m.model_dump() for m in prompt.messages]
        else:
            path = "/v1/completions"
            body["prompt"] = prompt.text
        tokens = 0
        finish: str | None = None
        async for event in sse_events(client, f"{base_url}{path}", server="vLLM", body=body):
            choices = event.get("choices") or []
            usage = event.get("usage") or {}
            for choice in choices:
                finish = choice.get("finish_reason") or finish
            if "completion_tokens" in usage:
                tokens = int(usage["completion_tokens"])
            elif any((c.get("text") or (c.get("delta") or {}).get("content")) for c in choices):
                tokens += 1  # a server without continuous usage: count steps
            spec = ((event.get("metrics") or {}).get("speculative_decoding")) or {}
            accept = spec.get("mean_acceptance_length")
            yield base.StreamChunk(
                completion_tokens=tokens,
                prompt_tokens=usage.get("prompt_tokens"),
                finished=finish is not None,
                accept_length=float(accept) if accept is not None else None,
                finish_reason=finish,
            )

    # -- 8. server-side figures --------------------------------------------------------------------

    def log_figures(self, log_window: str) -> base.LogFigures:
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
        return base.LogFigures(
            gen_tok_s=engines, accept_lengths=accepts, accept_weights=weights if all(weights) else None
        )
