"""Launch rules that autotune's engines apply as the real SGLang 0.5.23 / vLLM 0.34.0 code has them
(issue 17 item 3; the source lines are cited in the engines' normalise)."""

import pytest

from autotune.engines.base import InvalidConfig
from autotune.engines.sglang import SGLangEngine
from autotune.engines.vllm import VLLMEngine

SPEC = {"speculative-algorithm": "NEXTN", "speculative-num-steps": 3, "speculative-eagle-topk": 1}


def test_sglang_no_buffer_needs_the_overlap_scheduler_off():
    with pytest.raises(InvalidConfig, match="disable-overlap-schedule"):
        SGLangEngine().normalise({**SPEC, "mamba-radix-cache-strategy": "no_buffer"})
    plan = SGLangEngine().normalise(
        {**SPEC, "mamba-radix-cache-strategy": "no_buffer", "disable-overlap-schedule": True}
    )
    assert plan.flags["mamba-radix-cache-strategy"] == "no_buffer"


@pytest.mark.parametrize("strategy", ["auto", "extra_buffer", "extra_buffer_lazy"])
def test_sglang_extra_buffer_bounds_draft_tokens_by_the_track_interval(strategy):
    wide = {"speculative-algorithm": "EAGLE", "speculative-num-steps": 4, "speculative-eagle-topk": 4}
    flags = {**wide, "speculative-num-draft-tokens": 12, "mamba-radix-cache-strategy": strategy}
    with pytest.raises(InvalidConfig, match="at most 8 draft tokens"):
        SGLangEngine().normalise({**flags, "mamba-track-interval": 8})
    assert SGLangEngine().normalise({**flags, "mamba-track-interval": 16}).flags["speculative-num-draft-tokens"] == 12
    # the default interval is 256, not a fixed cap: a larger interval admits more draft tokens
    SGLangEngine().normalise({**flags, "speculative-num-draft-tokens": 300, "mamba-track-interval": 512})
    with pytest.raises(InvalidConfig):
        SGLangEngine().normalise({**flags, "speculative-num-draft-tokens": 300})


def _vllm(**flags):
    return VLLMEngine().normalise({"max-num-seqs": 8, "max-num-batched-tokens": 4096, **flags})


def test_vllm_without_chunked_prefill_a_batch_holds_the_whole_context():
    with pytest.raises(InvalidConfig, match="smaller than max_model_len"):
        _vllm(**{"max-model-len": 8192, "enable-chunked-prefill": False})
    with pytest.raises(InvalidConfig, match="smaller than max_model_len"):
        _vllm(**{"max-model-len": "8k", "disable-chunked-prefill": True})
    assert _vllm(**{"max-model-len": 4096, "enable-chunked-prefill": False}).flags["max-num-batched-tokens"] == 4096
    _vllm(**{"max-model-len": 8192})  # chunked prefill on (vLLM's default): allowed


ADAPTIVE = {"speculative-algorithm": "NEXTN", "speculative-adaptive": True}


def test_sglang_adaptive_fills_topk_one_and_the_middle_candidate_step():
    """arg_groups/speculative_hook.py:1392-1426 (0.5.23): topk 1, steps = the middle of the default
    candidates (0, 1, 3, 5, 7), draft tokens = steps + 1 even when given otherwise."""
    flags = SGLangEngine().normalise(ADAPTIVE).flags
    assert (flags["speculative-num-steps"], flags["speculative-eagle-topk"], flags["speculative-num-draft-tokens"]) == (
        3, 1, 4)  # fmt: skip
    flags = SGLangEngine().normalise({**ADAPTIVE, "speculative-num-steps": 5, "speculative-num-draft-tokens": 9}).flags
    assert flags["speculative-num-draft-tokens"] == 6 and flags["speculative-adaptive"] is True
    with pytest.raises(InvalidConfig, match=r"not one of the adaptive candidate steps \[0, 1, 3, 5, 7\]"):
        SGLangEngine().normalise({**ADAPTIVE, "speculative-num-steps": 4})


def test_sglang_adaptive_reads_the_candidate_steps_of_its_config(tmp_path):
    config = tmp_path / "adaptive.json"
    config.write_text('{"1": {"candidate_steps": [2, 4]}, "8": {"candidate_steps": [1]}}')
    flags = SGLangEngine().normalise({**ADAPTIVE, "speculative-adaptive-config": str(config)}).flags
    assert flags["speculative-num-steps"] == 2  # the middle of (1, 2, 4)
    with pytest.raises(InvalidConfig, match="candidate steps"):
        SGLangEngine().normalise({**ADAPTIVE, "speculative-adaptive-config": str(config), "speculative-num-steps": 3})
    # a config that cannot be read here is left to the launch
    unread = {**ADAPTIVE, "speculative-adaptive-config": str(tmp_path / "elsewhere.json")}
    assert "speculative-num-steps" not in SGLangEngine().normalise(unread).flags


@pytest.mark.parametrize(
    "flags",
    [
        {"speculative-algorithm": "DFLASH", "speculative-draft-model-path": "d", "speculative-num-draft-tokens": 8},
        {**SPEC, "speculative-eagle-topk": 2, "speculative-num-draft-tokens": 6},
    ],
)
def test_sglang_adaptive_where_sglang_ignores_it_is_the_static_config(flags):
    """SGLang warns and serves static steps (speculative_hook.py:1374), so both are one effective config."""
    plan = SGLangEngine().normalise({**flags, "speculative-adaptive": True, "speculative-adaptive-config": "a.json"})
    assert plan.flags == SGLangEngine().normalise(flags).flags
    assert any("speculative-adaptive" in note for note in plan.notes)


def test_sglang_dflash_without_a_block_size_takes_the_drafters_own():
    """SGLang 0.5.23 reads the block size from the drafter's config (else 16) when neither is given."""
    plan = SGLangEngine().normalise({"speculative-algorithm": "DFLASH", "speculative-draft-model-path": "d"})
    assert "speculative-num-draft-tokens" not in plan.flags and "speculative-dflash-block-size" not in plan.flags
    assert any("drafter's own" in note for note in plan.notes)


def test_sglang_rate_key_ignores_memory_sizing_that_still_admits_one_stream():
    engine = SGLangEngine()
    base = {**SPEC, "mem-fraction-static": 0.88, "max-running-requests": 16, "cuda-graph-max-bs-decode": 8}
    key = engine.rate_key(engine.normalise(base))
    resized = {**base, "mem-fraction-static": 0.8, "max-running-requests": 4, "chunked-prefill-size": 4096}
    assert engine.rate_key(engine.normalise(resized)) == key
    assert engine.rate_key(engine.normalise({**base, "cuda-graph-max-bs-decode": 0})) != key  # no graph for bs 1
    assert engine.rate_key(engine.normalise({**base, "speculative-num-steps": 4})) != key
    assert engine.rate_key(engine.normalise({**base, "context-length": 4096})) != key  # a prompt may not fit


@pytest.mark.parametrize("engine", [SGLangEngine(), VLLMEngine()], ids=["sglang", "vllm"])
def test_an_explicit_auto_kv_cache_dtype_is_the_unset_default(engine):
    # Both read an unset --kv-cache-dtype as auto: the same launch, so the same config (and rate).
    base = {"max-num-seqs": 8, "max-num-batched-tokens": 4096} if isinstance(engine, VLLMEngine) else {}
    unset = engine.normalise(base)
    explicit = engine.normalise({**base, "kv-cache-dtype": "auto"})
    assert explicit.config_key == unset.config_key and "kv-cache-dtype" not in explicit.flags
    assert engine.normalise({**base, "kv-cache-dtype": "fp8_e4m3"}).config_key != unset.config_key
