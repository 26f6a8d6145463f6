"""vLLM's flag names and spellings (0.34 and 0.33 alike), and how it reads their values
(docs/how-it-works.md, "vLLM")."""

from __future__ import annotations

import re

from autotune.engines.base import InvalidConfig
from autotune.space import FlagValue

SPEC_CONFIG = "speculative-config"
DOTTED = SPEC_CONFIG + "."
METHOD = "speculative-method"
TOKENS = "num-speculative-tokens"
DRAFT_MODEL = "speculative-model"
LOOKUP_MIN = "prompt-lookup-min"
LOOKUP_MAX = "prompt-lookup-max"
DRAFT_TP = "draft-tensor-parallel-size"
REJECTION = "rejection-sample-method"
PER_BATCH_KEY = "num_speculative_tokens_per_batch_size"
PER_BATCH = DOTTED + PER_BATCH_KEY
MAX_SEQS = "max-num-seqs"
MAX_BATCHED = "max-num-batched-tokens"
MAX_MODEL_LEN = "max-model-len"
KV_DTYPE = "kv-cache-dtype"
UTILIZATION = "gpu-memory-utilization"
TP = "tensor-parallel-size"
DATA_PARALLEL = "data-parallel-size"
SPEC_METRICS = "per-request-spec-decode-metrics"
DISABLE_LOG_STATS = "disable-log-stats"

ALIASES: dict[str, str] = {
    "tp": TP,
    "sc": SPEC_CONFIG,
    "cc": "compilation-config",
    "O": "optimization-level",
    "device-memory-utilization": UTILIZATION,
}
# Switches vLLM (0.33 and 0.34) turns on by default (or decides at run time): false -> the negative spelling.
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


def canonical_name(name: str) -> str:
    """vLLM's spelling of a flag name: aliases resolved, underscores read as dashes (before a dot)."""
    head, dot, tail = name.partition(".")
    head = ALIASES.get(head, head)
    head = ALIASES.get(head.replace("_", "-"), head.replace("_", "-"))
    return head + dot + tail


def integer(value: FlagValue, what: str) -> int:
    """``value`` as an integer, or InvalidConfig naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise InvalidConfig(f"{what} must be an integer, not {value!r}")
    try:
        return int(value)
    except ValueError:
        raise InvalidConfig(f"{what} must be an integer, not {value!r}") from None


_SUFFIX = re.compile(r"^(?P<number>\d+(?:\.\d+)?)(?P<suffix>[kKmMgGtT])?$")


def parse_max_model_len(value: FlagValue) -> int | str:
    """vLLM's ``--max-model-len``: ``32k`` = 32000, ``32K`` = 32768 (no decimals with binary
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
