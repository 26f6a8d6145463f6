"""vLLM (``vllm serve MODEL``): the engine behind autotune's interface.

Its flags, launch rules and protocol as vLLM 0.34 and 0.33 have them (read off their wheels; their
``--help=all`` are tests/fixtures/vllm-0.34.0-serve-help.txt and vllm-0.33.0-serve-help.txt; what moved:
docs/vllm-0.34.md). The launcher is the ``serve`` command itself; speculative
settings are fields folded into one ``--speculative-config`` JSON object when the command line is
built (:mod:`autotune.engines.vllm_speculation`). The rules: docs/how-it-works.md, "vLLM".
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import TYPE_CHECKING, Any

from autotune.engines import base
from autotune.engines.base import (
    Engine,
    FlagSet,
    InvalidConfig,
    LaunchPlan,
    parse_help_flags,
    run_help,
    scalar,
    sse_events,
)
from autotune.engines.speculation import SpeculationFlags
from autotune.engines.vllm_flags import (
    DISABLE_LOG_STATS,
    DOTTED,
    DRAFT_MODEL,
    KV_DTYPE,
    MAX_BATCHED,
    MAX_MODEL_LEN,
    MAX_SEQS,
    METHOD,
    NEGATIONS,
    POSITIVE_OF,
    SPEC_CONFIG,
    SPEC_METRICS,
    TOKENS,
    TP,
    UTILIZATION,
    canonical_name,
    integer,
    parse_max_model_len,
)
from autotune.engines.vllm_logs import FAILURES, info_labels, kv_shortfall, log_figures_of, memory_facts_of
from autotune.engines.vllm_speculation import (
    LOSSY_METHODS,
    REJECTION_KEY,
    SPEC_FIELDS,
    SPEC_SHORTHANDS,
    PerBatchSchedule,
    spec_key,
    speculative_config,
    speculative_rules,
    synthetic_accept_length,
)
from autotune.errors import FlagError, LauncherError, MeasurementError
from autotune.measure.suites import Prompt
from autotune.memory_types import MemoryRules
from autotune.space import FlagValue

if TYPE_CHECKING:
    import httpx

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


class VLLMEngine(Engine):
    name = "vllm"
    speculation = SpeculationFlags(method=METHOD, depth=TOKENS, draft_model=DRAFT_MODEL, unit="token")
    schedule_form = PerBatchSchedule()
    verdict_memory_flag = UTILIZATION  # a fraction of the GPU's memory, as SGLang's mem-fraction-static
    # In vLLM these size the KV budget, the sequence pool and the prefill batch; one
    # stream decodes alike under any of them that still admits it (max-model-len is not among them:
    # a prompt beyond it is refused).
    memory_sizing_flags = {UTILIZATION: 0, MAX_SEQS: 1, MAX_BATCHED: 1}
    # vLLM 0.33's memory split (0.34's too with --disable-extensible-kv-cache; its default extensible KV
    # cache only caps the budget, so these rules are conservative there): the budget is utilization x
    # TOTAL memory (it must be free at start); the
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
        pool_scale={
            KV_DTYPE: {"auto": 2.0, "bfloat16": 2.0, "float16": 2.0, "fp8": 1.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0}
        },
        headroom_demand=frozenset({MAX_SEQS, TOKENS, MAX_BATCHED, "max-cudagraph-capture-size"}),
        headroom_irrelevant=_LOG_NOISE | {MAX_MODEL_LEN},
        weights_flags=frozenset({SPEC_CONFIG, "quantization", "dtype", "load-format"}),
        context_flag=MAX_MODEL_LEN,
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
        """``LAUNCHER --help=all`` (vLLM groups its plain ``--help``); the launcher ends in ``serve``."""
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
        """vLLM's flags (aliases and underscores allowed), plus the speculative fields, given one way
        each: as fields, shorthands or dotted keys, or as one ``--speculative-config`` JSON."""
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
            key = spec_key(name)
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
        """vLLM's launch rules (0.34 and 0.33); refuses what vLLM refuses at parse or config time."""
        notes: list[str] = []
        out, spec = self._split_flags(flags)
        if spec:
            out.update(speculative_rules(spec, out, notes))
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
            key = spec_key(name)
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
            level = integer(out["optimization-level"], "--optimization-level")
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
        seqs, batched = integer(out[MAX_SEQS], f"--{MAX_SEQS}"), integer(out[MAX_BATCHED], f"--{MAX_BATCHED}")
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

    # -- 3. argv -----------------------------------------------------------------------------------

    def build_argv(self, launcher: list[str], *, model: str, plan: LaunchPlan, host: str, port: int) -> list[str]:
        """``LAUNCHER MODEL --host H --port P FLAGS [--speculative-config JSON]``."""
        argv = [*launcher, model, "--host", host, "--port", str(port)]
        spec = speculative_config(plan.flags)
        for name, value in plan.flags.items():
            if name in SPEC_FIELDS or name.startswith(DOTTED):
                continue
            if value is False:
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

    def calibration_flags(self, flags: Mapping[str, FlagValue]) -> dict[str, Any]:
        """The ``--speculative-config`` object the launch ran, as one mapping (from its fields, or the
        JSON where a record kept it whole)."""
        config = speculative_config(flags)
        if SPEC_CONFIG in flags:
            given = self._json_object(flags[SPEC_CONFIG])
            config = {str(key).replace("-", "_"): value for key, value in given.items()} | config
        return {SPEC_CONFIG: {key: base.as_number(value) for key, value in config.items()}} if config else {}

    def set_accept_length(self, flags: Mapping[str, FlagValue]) -> float | None:
        """A ``rejection_sample_method`` synthetic launch's set accept length (its
        ``synthetic_acceptance_length``, or 1 + the sum of its ``synthetic_acceptance_rates``)."""
        config = self.calibration_flags(flags).get(SPEC_CONFIG, {})
        return synthetic_accept_length(config)

    def lossy_speculation(self, flags: Mapping[str, FlagValue]) -> str | None:
        """``rejection_sample_method`` fly (FLy accepts tokens the target would reject) or synthetic
        (drafts accepted at a set rate), given as a field, a dotted key or in the JSON."""
        try:
            _, spec = self._split_flags(flags)
        except InvalidConfig:
            return None  # the engine's own rules refuse these flags with their reason
        method = spec.get(REJECTION_KEY)
        if method in LOSSY_METHODS:
            return f"{REJECTION_KEY} {method} changes the model's outputs"
        return None

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

    def pool_shortfall(self, reason: str) -> base.PoolShortfall | None:
        """A refusal to start because one request of the max seq len does not fit the KV cache: the
        GiB needed and available, and in tokens the longest request that fits against the max seq len."""
        return kv_shortfall(reason)

    def memory_facts(self, log_text: str) -> base.MemoryFacts | None:
        return memory_facts_of(log_text)

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
        return log_figures_of(log_window)
