"""The vLLM twin's rejection_sample_method: block verification accepts a little more than token by
token (the figure's source: passmodel/physics.py, BLOCK_VERIFICATION_GAIN), synthetic acceptance
is the set rate whatever the prompt, as vLLM's SpeculativeConfig resolves it."""

from __future__ import annotations

import json

import pytest

from autotune_twin.vllm.config import VllmConfig, resolve_config
from autotune_twin.vllm.flags import parse_args
from passmodel import physics
from passmodel.profile import load_profile

PROFILE = load_profile()
CODE = physics.PromptClass(category="code", prompt_tokens=200, long=False)
CHAT = physics.PromptClass(category="chat", prompt_tokens=200, long=False)


def config(k: int, **keys: object) -> VllmConfig:
    spec = json.dumps({"method": "mtp", "num_speculative_tokens": k, **keys})
    args, _ = parse_args(["Qwen/Qwen3.6-27B", "-tp", "2", "--max-num-seqs", "8", "--max-num-batched-tokens",
                          "2048", "--speculative-config", spec])  # fmt: skip
    return resolve_config(args, PROFILE)


def accept_length(vc: VllmConfig, prompt: physics.PromptClass) -> float:
    return physics.expected_accept_length(physics.acceptance_probs(PROFILE, vc.cfg, prompt))


@pytest.mark.parametrize("k", [2, 3, 5])
def test_block_verification_accepts_a_little_more_the_longer_the_draft(k: int) -> None:
    standard, block = config(k), config(k, rejection_sample_method="block")
    for prompt in (CODE, CHAT):
        drafts, more = accept_length(standard, prompt) - 1, accept_length(block, prompt) - 1
        gain = more / drafts - 1
        assert 0 < gain <= physics.BLOCK_VERIFICATION_GAIN * (1 - 1 / k) + 1e-9
    assert not standard.cfg.spec.block_verification and block.cfg.spec.block_verification


def test_one_draft_token_gains_nothing_from_block_verification() -> None:
    assert accept_length(config(1, rejection_sample_method="block"), CODE) == accept_length(config(1), CODE)


def test_synthetic_acceptance_is_the_set_length_whatever_the_prompt() -> None:
    by_length = config(4, rejection_sample_method="synthetic", synthetic_acceptance_length=2.5)
    assert by_length.speculative is not None
    # vLLM's minimum-variance schedule: whole positions always, then the fraction, then none
    assert by_length.speculative["synthetic_acceptance_rates"] == [1.0, 0.5, 0.0, 0.0]
    assert accept_length(by_length, CODE) == accept_length(by_length, CHAT) == 2.5
    by_rates = config(3, rejection_sample_method="synthetic", synthetic_acceptance_rates=[0.9, 0.6, 0.3])
    assert accept_length(by_rates, CODE) == pytest.approx(2.8)
