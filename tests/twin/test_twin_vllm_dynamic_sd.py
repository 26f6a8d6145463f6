"""The vLLM twin's speculation per batch size (num_speculative_tokens_per_batch_size): the dense
batch-size -> k table vLLM 0.33's scheduler builds at engine start, its refusals, and the decode
pass of a batch running its range's k."""

from __future__ import annotations

import pytest

from autotune_twin.launch import LaunchError
from autotune_twin.vllm import dynamic_sd


def test_ranges_expand_to_k_per_batch_size_capped_with_gaps_and_tail_carrying_the_k_before() -> None:
    table = dynamic_sd.lookup([[1, 2, 7], [5, 6, 1]], max_num_seqs=8, num_speculative_tokens=5)
    # index 0 unused; 7 capped at 5; 3-4 (a gap) and 7-8 (the tail) carry the k before them
    assert table == (0, 5, 5, 5, 5, 1, 1, 1, 1)


def test_a_zero_k_range_drafts_nothing_there() -> None:
    assert dynamic_sd.lookup([[1, 1, 3], [2, 4, 0]], max_num_seqs=4, num_speculative_tokens=3) == (0, 3, 0, 0, 0)


@pytest.mark.parametrize(
    ("ranges", "says"),
    [
        ([[2, 4, 1]], "must start at 1"),
        ([[1, 4, 1], [3, 8, 2]], "non-overlapping and sorted"),
        ([[1, 0, 1]], "must be positive"),
        ([[3, 2, 1]], "start must be <= end"),
        ([[1, 4, -1]], ">= 0"),
        ([], "must not be empty"),
    ],
)
def test_schedules_vllm_refuses_at_engine_start(ranges: list[list[int]], says: str) -> None:
    with pytest.raises(LaunchError, match=says) as refused:
        dynamic_sd.lookup(ranges, max_num_seqs=8, num_speculative_tokens=3)
    assert refused.value.exc_type == "ValueError"


def test_a_value_not_a_list_of_triples_is_refused_when_the_flags_parse() -> None:
    with pytest.raises(LaunchError, match="valid list"):
        dynamic_sd.check_type([[1, 2]])
    dynamic_sd.check_type([[1, 2, 3]])
