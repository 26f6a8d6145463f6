"""vLLM's speculative decoding: the fields folded into one ``--speculative-config`` JSON object, the
rules its SpeculativeConfig applies to them, and its per-batch schedule (docs/how-it-works.md, "vLLM")."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from autotune.engines.base import InvalidConfig
from autotune.engines.speculation import ScheduleForm
from autotune.engines.vllm_flags import (
    DATA_PARALLEL,
    DOTTED,
    DRAFT_MODEL,
    DRAFT_TP,
    LOOKUP_MAX,
    LOOKUP_MIN,
    MAX_SEQS,
    METHOD,
    PER_BATCH,
    PER_BATCH_KEY,
    REJECTION,
    TOKENS,
    TP,
    integer,
)
from autotune.space import FlagValue

# Field -> JSON key of --speculative-config.
SPEC_FIELDS: dict[str, str] = {
    METHOD: "method",
    TOKENS: "num_speculative_tokens",
    DRAFT_MODEL: "model",
    LOOKUP_MIN: "prompt_lookup_min",
    LOOKUP_MAX: "prompt_lookup_max",
    DRAFT_TP: "draft_tensor_parallel_size",
    REJECTION: "rejection_sample_method",
}
FIELD_OF_KEY = {key: field for field, key in SPEC_FIELDS.items()}
SPEC_SHORTHANDS: dict[str, str] = {
    "spec-method": "method",
    "spec-model": "model",
    "spec-tokens": "num_speculative_tokens",
}
# vLLM's MTPModelTypes other than "mtp": rewritten to "mtp" with a warning (0.34 adds
# nemotron3_5_transcribe_mtp, which 0.33 refuses as an unknown method).
MTP_ALIASES = frozenset(
    (
        "deepseek_mtp dots3_note_mtp mimo_mtp mimo_v2_mtp glm4_moe_mtp glm4_moe_lite_mtp glm_ocr_mtp ernie_mtp "
        "nemotron_h_mtp exaone_moe_mtp exaone4_5_mtp qwen3_next_mtp qwen4_exp_mtp qwen3_5_mtp longcat_flash_mtp "
        "bailing_hybrid_v3_mtp minimax_m3_mtp bailing_hybrid_mtp kimi_k3_mtp pangu_ultra_moe_mtp step3p5_mtp "
        "step5_mtp hy_v3_mtp hy_v4_mtp gemma4_mtp inkling_mtp glm5_next_mtp nemotron3_5_transcribe_mtp"
    ).split()
)
NEEDS_DRAFT_MODEL = frozenset({"draft_model", "eagle", "eagle3", "dflash"})
NGRAM = frozenset({"ngram", "ngram_gpu"})
DEFAULT_LOOKUP = 5
# vLLM 0.33's vllm/config/vllm.py _maybe_disable_dynamic_sd_for_v1: Model Runner V1 runs the per-batch
# k for these (others fall back to static k there, with a warning). 0.34 has no V1 runner, so the
# limit is 0.33's; autotune keeps it, as it cannot tell the two apart before a launch.
PER_BATCH_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")
# SpeculativeConfig.rejection_sample_method (0.33 and 0.34): how the target verifies a draft.
# standard: token by token (the default); block: the draft verified jointly (Sun et al., lossless,
# never accepts fewer); synthetic: drafts accepted at a set rate whatever the models say (a
# benchmark of the pass cost, its outputs are not the target's); fly: FLy's entropy-gated window,
# lossy (vLLM warns that outputs may degrade).
REJECTION_KEY = "rejection_sample_method"
REJECTION_METHODS = ("standard", "block", "synthetic", "fly")
LOSSY_METHODS = frozenset({"synthetic", "fly"})
RATES_KEY = "synthetic_acceptance_rates"
LENGTH_KEY = "synthetic_acceptance_length"
FLY_KEYS = ("fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k")
LIST_KEYS = frozenset({PER_BATCH_KEY, RATES_KEY})  # kept as JSON text in a plan; vLLM reads the list


def spec_key(name: str) -> str | None:
    """The ``--speculative-config`` key a flag in vLLM's spelling sets (a field, a shorthand or a
    dotted key), or None for any other flag."""
    if name.startswith(DOTTED):
        return name[len(DOTTED) :].replace("-", "_")
    return SPEC_FIELDS.get(name) or SPEC_SHORTHANDS.get(name)


def speculative_config(flags: Mapping[str, FlagValue]) -> dict[str, Any]:
    """The ``--speculative-config`` object a plan's speculative fields fold into (empty: no speculation)."""
    config: dict[str, Any] = {}
    for name, value in flags.items():
        if name in SPEC_FIELDS:
            config[SPEC_FIELDS[name]] = value
        elif name.startswith(DOTTED):
            key = name[len(DOTTED) :]
            config[key] = json.loads(str(value)) if key in LIST_KEYS and isinstance(value, str) else value
    return config


def speculative_rules(
    spec: dict[str, FlagValue], flags: Mapping[str, FlagValue], notes: list[str]
) -> dict[str, FlagValue]:
    """vLLM's SpeculativeConfig rules on the keys ``spec`` (in place); returns the fields the plan keeps."""
    method = _method(spec, notes)
    model, k = spec.get("model"), spec.get("num_speculative_tokens")
    if k is not None:
        k = spec["num_speculative_tokens"] = integer(k, "num_speculative_tokens")
        if k < 1:
            raise InvalidConfig(f"num_speculative_tokens must be at least 1, got {k}")
    if method is None and model is None:
        raise InvalidConfig("speculative settings without a method or a draft model")
    if method == "mtp" and k is None:
        raise InvalidConfig("speculative method mtp needs num_speculative_tokens")
    if method in NEEDS_DRAFT_MODEL and model is None:
        raise InvalidConfig(f"speculative method {method} needs a draft model ({DRAFT_MODEL})")
    _lookup_rules(spec, method, notes)
    _verification_rules(spec, k, notes)
    if spec.get(PER_BATCH_KEY) is not None:
        spec[PER_BATCH_KEY] = json.dumps(batch_ranges(spec[PER_BATCH_KEY]), separators=(",", ":"))
        if method not in PER_BATCH_METHODS:
            notes.append(
                f"{PER_BATCH_KEY} runs with Model Runner V2 only for method {method}: "
                "on vLLM 0.33's V1 runner it falls back to static num_speculative_tokens (0.34 has only V2)"
            )
        dp = flags.get(DATA_PARALLEL, 1)
        if isinstance(dp, int) and dp > 1:
            notes.append(f"{PER_BATCH_KEY} is off under data parallelism (vLLM falls back to static k)")
    draft_tp = spec.get("draft_tensor_parallel_size")
    target_tp = integer(flags.get(TP, 1), f"--{TP}")
    if draft_tp is not None and integer(draft_tp, "draft_tensor_parallel_size") not in (1, target_tp):
        raise InvalidConfig(f"draft_tensor_parallel_size={draft_tp} must be 1 or the target's --{TP} ({target_tp})")
    return {FIELD_OF_KEY.get(key, DOTTED + key): value for key, value in sorted(spec.items())}


def _method(spec: dict[str, FlagValue], notes: list[str]) -> FlagValue | None:
    """The method, inferred from the draft model where it is not given, an MTP alias read as ``mtp``."""
    method = spec.get("method")
    if method is None and spec.get("model") is not None:
        method = spec["method"] = "ngram" if spec["model"] in ("ngram", "[ngram]") else "draft_model"
        notes.append(f"speculative method {method} inferred from the draft model (vLLM's rule)")
    if isinstance(method, str) and method in MTP_ALIASES:
        notes.append(f"speculative method {method} is replaced by mtp (vLLM rewrites it)")
        method = spec["method"] = "mtp"
    return method


def _lookup_rules(spec: dict[str, FlagValue], method: FlagValue | None, notes: list[str]) -> None:
    """ngram's prompt lookup window: default 5, one bound mirrors the other; dropped for other methods."""
    if method in NGRAM:
        low, high = spec.get("prompt_lookup_min"), spec.get("prompt_lookup_max")
        if low is None and high is None:
            low = high = DEFAULT_LOOKUP
        low, high = (high if low is None else low), (low if high is None else high)
        low, high = integer(low, "prompt_lookup_min"), integer(high, "prompt_lookup_max")  # type: ignore[arg-type]
        if low > high:
            raise InvalidConfig(f"prompt_lookup_min={low} must be <= prompt_lookup_max={high}")
        spec["prompt_lookup_min"], spec["prompt_lookup_max"] = low, high
        return
    dropped = [key for key in ("prompt_lookup_min", "prompt_lookup_max") if spec.pop(key, None) is not None]
    if dropped:
        notes.append(f"{', '.join(dropped)} dropped: vLLM ignores them for method {method}")


def _verification_rules(spec: dict[str, FlagValue], k: int | None, notes: list[str]) -> None:
    """SpeculativeConfig's checks of ``rejection_sample_method`` and the keys that go with it, in
    place: ``standard`` (the default) left out, the synthetic rates kept as JSON text, FLy's keys
    dropped where FLy does not run (vLLM ignores them)."""
    method = spec.get(REJECTION_KEY, "standard")
    if method not in REJECTION_METHODS:
        raise InvalidConfig(f"{REJECTION_KEY} must be one of {', '.join(REJECTION_METHODS)}, got {method!r}")
    if method == "standard" and spec.pop(REJECTION_KEY, None) is not None:
        notes.append(f"{REJECTION_KEY} standard is vLLM's default: left out, one launch")
    if method == "synthetic":
        _synthetic_rules(spec, k)
    elif spec.get(RATES_KEY) is not None or spec.get(LENGTH_KEY) is not None:
        raise InvalidConfig(f"{RATES_KEY} / {LENGTH_KEY} are only valid with {REJECTION_KEY}='synthetic'")
    if method == "fly":
        if k is not None and k < 2:
            raise InvalidConfig("FLy requires num_speculative_tokens to be at least 2")
        window = spec.get("fly_window_size")
        if window is not None and k is not None and integer(window, "fly_window_size") >= k:
            raise InvalidConfig("FLy requires fly_window_size to be smaller than num_speculative_tokens")
        return
    dropped = [key for key in FLY_KEYS if spec.pop(key, None) is not None]
    if dropped:
        notes.append(f"{', '.join(dropped)} dropped: vLLM reads them only with {REJECTION_KEY} fly")


def _synthetic_rules(spec: dict[str, FlagValue], k: int | None) -> None:
    """Exactly one of the per-position rates (k entries in [0, 1], non-increasing) and the mean
    accept length (in [1, k + 1]), as SpeculativeConfig resolves them."""
    rates, length = spec.get(RATES_KEY), spec.get(LENGTH_KEY)
    if (rates is None) == (length is None):
        raise InvalidConfig(f"{REJECTION_KEY}='synthetic' requires exactly one of {RATES_KEY} or {LENGTH_KEY}")
    if length is not None:
        if isinstance(length, bool) or not isinstance(length, (int, float)):
            raise InvalidConfig(f"{LENGTH_KEY} must be a number, not {length!r}")
        if k is not None and not 1 <= length <= k + 1:
            raise InvalidConfig(f"{LENGTH_KEY} must be in [1, {k + 1}], got {length}")
        return
    values = synthetic_rates(rates)
    if k is not None and len(values) != k:
        raise InvalidConfig(f"{RATES_KEY} must have length {k}, got {values}")
    if not all(0.0 <= r <= 1.0 for r in values):
        raise InvalidConfig(f"{RATES_KEY} entries must be in [0, 1], got {values}")
    if any(later > earlier for earlier, later in zip(values, values[1:], strict=False)):
        raise InvalidConfig(f"{RATES_KEY} must be non-increasing, got {values}")
    spec[RATES_KEY] = json.dumps(values, separators=(",", ":"))


def synthetic_rates(value: object) -> list[float]:
    """``synthetic_acceptance_rates`` (a list, or its JSON text) as numbers, or InvalidConfig."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError as exc:
            raise InvalidConfig(f"{RATES_KEY} is not valid JSON: {exc}") from None
    if not isinstance(value, list) or not all(isinstance(r, (int, float)) and not isinstance(r, bool) for r in value):
        raise InvalidConfig(f"{RATES_KEY} must be a list of numbers, got {value!r}")
    return [float(r) for r in value]


def synthetic_accept_length(config: Mapping[str, Any]) -> float | None:
    """The mean accept length a synthetic launch was set to (from its length, or 1 + the sum of its
    unconditional per-position rates, as vLLM turns one into the other); None for other launches."""
    if config.get(REJECTION_KEY) != "synthetic":
        return None
    if config.get(LENGTH_KEY) is not None:
        return float(config[LENGTH_KEY])
    if config.get(RATES_KEY) is not None:
        return 1.0 + sum(synthetic_rates(config[RATES_KEY]))
    return None


def batch_ranges(value: object) -> list[list[int]]:
    """``num_speculative_tokens_per_batch_size`` (a list, or its JSON text) checked as vLLM's (0.33 and 0.34)
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
        would carry its k through the tail anyway; written out, the range says what runs). vLLM's
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
