"""vLLM 0.33's speculation per batch size (``--speculative-config``'s
``num_speculative_tokens_per_batch_size``), as ``vllm/v1/spec_decode/dynamic/utils.py`` reads it.

The schedule is a list of inclusive batch ranges ``[start, end, k]``. The scheduler expands it once,
at engine start, into a dense lookup ``batch size -> k`` up to ``max_num_seqs``: each k capped at
``num_speculative_tokens``, a gap and the tail after the last range carrying the k before them. Every
step it drafts ``lookup[number of scheduled requests]`` tokens (the batch's own count: no padding to a
graph size, unlike SGLang's adaptive slots). Data parallelism turns it off (ranks could pick
different k and deadlock); Model Runner V1 runs it for ngram, eagle, eagle3, mtp, draft_model and
dflash, the twin simulates mtp only.
"""

from __future__ import annotations

from typing import Any

from autotune_twin.launch import LaunchError

KEY = "num_speculative_tokens_per_batch_size"
DP_WARNING = (
    "Dynamic speculative decoding is not supported with data parallelism because data-parallel ranks can "
    "select different speculative-token counts, causing DP divergence and deadlocks. Disabling "
    "num_speculative_tokens_per_batch_size and falling back to static num_speculative_tokens={k}."
)


def check_type(value: Any) -> None:
    """The config class's field type (``list[tuple[int, int, int]] | None``), checked when the flags parse.

    Raises:
        LaunchError: pydantic's refusal of a value of another shape.
    """
    if value is None:
        return
    entries = value if isinstance(value, list) else None
    if entries is None or not all(
        isinstance(e, list) and len(e) == 3 and all(isinstance(v, int) and not isinstance(v, bool) for v in e)
        for e in entries
    ):
        raise LaunchError(
            "pydantic_core._pydantic_core.ValidationError",
            f"1 validation error for SpeculativeConfig\n{KEY}\n  Input should be a valid list of "
            f"(int, int, int) tuples [type=list_type, input_value={value!r}]",
        )


def _validated(schedule: list[list[int]]) -> list[tuple[int, int, int]]:
    if not schedule:
        raise LaunchError("ValueError", f"{KEY} must not be empty.")
    parsed: list[tuple[int, int, int]] = []
    for start, end, k in schedule:
        if start <= 0 or end <= 0:
            raise LaunchError("ValueError", f"Batch-size range ({start}, {end}) must be positive.")
        if start > end:
            raise LaunchError("ValueError", f"Batch-size range start must be <= end for ({start}, {end}, {k}).")
        if k < 0:
            raise LaunchError("ValueError", f"{KEY} values must be >= 0.")
        parsed.append((start, end, k))
    parsed.sort(key=lambda entry: entry[0])
    previous_end = 0
    for start, end, _ in parsed:
        if start <= previous_end:
            raise LaunchError("ValueError", "Batch-size ranges must be non-overlapping and sorted.")
        previous_end = end
    if parsed[0][0] != 1:
        raise LaunchError(
            "ValueError",
            "The first batch-size range must start at 1 so every runtime batch size has a defined schedule.",
        )
    return parsed


def lookup(schedule: list[list[int]], max_num_seqs: int, num_speculative_tokens: int) -> tuple[int, ...]:
    """The dense table the scheduler runs on: index = batch size (0 unused), value = k.

    Raises:
        LaunchError: vLLM's ValueError for a schedule its rules refuse (at engine start).
    """
    dense = [0] * (max_num_seqs + 1)
    following, last = 1, None
    for start, end, k in _validated(schedule):
        if start > following and last is not None:  # a gap carries the k before it
            for size in range(following, min(start, max_num_seqs + 1)):
                dense[size] = min(num_speculative_tokens, last)
        for size in range(max(start, following), min(end, max_num_seqs) + 1):
            dense[size] = min(num_speculative_tokens, k)
        following, last = max(following, end + 1), k
        if following > max_num_seqs:
            break
    assert last is not None  # _validated refuses an empty schedule
    for size in range(following, max_num_seqs + 1):
        dense[size] = min(num_speculative_tokens, last)
    return tuple(dense)
