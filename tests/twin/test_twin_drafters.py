"""Separate draft models in the twin: EAGLE/EAGLE3 checkpoints under SGLang's step/topk/draft rules,
their memory and costs, and the drafter schema a generated profile must follow."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune_twin.launch import LaunchError, resolve_launch
from autotune_twin.sglang.flags import parse_args
from passmodel import physics
from passmodel.config import LaunchConfig
from passmodel.profile import PROFILE_DIR, ProfileError, TwinProfile, load_profile

LLAMA = "llama3.1-8b-1xh100"
EAGLE3 = "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
CODE = "Implement a function in Python that merges two sorted lists; write a pytest unit test for it."


@pytest.fixture(scope="module")
def llama() -> TwinProfile:
    return load_profile(LLAMA)


def launch(profile: TwinProfile, *flags: str) -> LaunchConfig:
    args, _ = parse_args(["--model-path", profile.model.name, *flags])
    return resolve_launch(args, profile)


def eagle3(*spec: int) -> list[str]:
    names = ("--speculative-num-steps", "--speculative-eagle-topk", "--speculative-num-draft-tokens")
    flags = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", EAGLE3]
    for name, value in zip(names, spec, strict=False):
        flags += [name, str(value)]
    return flags


def tok_s(profile: TwinProfile, cfg: LaunchConfig, text: str = CODE) -> float:
    prompt = physics.classify_prompt(profile, text)
    accept = physics.expected_accept_length(physics.acceptance_probs(profile, cfg, prompt))
    return accept / physics.decode_pass_seconds(profile, cfg, [prompt.prompt_tokens + 256])


def test_eagle3_checkpoint_launches_with_its_own_drafter(llama: TwinProfile) -> None:
    spec = launch(llama, *eagle3(3, 1, 4)).spec
    assert (spec.kind, spec.algorithm, spec.draft_model_path) == ("eagle", "EAGLE3", EAGLE3)
    assert spec.drafter is not None and spec.drafter.path == EAGLE3
    # the drafter's acceptance table, not an MTP head's (the model has none)
    prompt = physics.classify_prompt(llama, CODE)
    assert physics.acceptance_probs(llama, launch(llama, *eagle3(3, 1, 4)), prompt)[:3] == tuple(
        spec.drafter.acceptance["code"][:3]
    )


def test_eagle3_follows_sglangs_step_rules(llama: TwinProfile) -> None:
    rewritten = launch(llama, *eagle3(5, 1, 9))
    assert rewritten.spec.num_draft_tokens == 6  # topk 1: steps + 1
    assert launch(llama, *eagle3(4, 4)).spec.num_draft_tokens == 17  # steps + topk > 1: the full tree
    assert launch(llama, *eagle3()).spec.num_draft_tokens == 4  # none given: (3, 1, 4)
    with pytest.raises(LaunchError) as err:
        launch(llama, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", EAGLE3,
               "--speculative-eagle-topk", "1")  # fmt: skip
    assert (err.value.exc_type, err.value.message) == ("AssertionError", "")
    with pytest.raises(LaunchError) as err:
        launch(llama, *eagle3(3))
    assert err.value.exc_type == "TypeError"


def test_eagle3_needs_a_known_draft_model(llama: TwinProfile) -> None:
    with pytest.raises(LaunchError) as err:
        launch(llama, "--speculative-algorithm", "EAGLE3")
    assert err.value.exc_type == "ValueError"
    with pytest.raises(LaunchError) as err:
        launch(llama, "--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "other/eagle3")
    assert err.value.exc_type == "OSError" and "other/eagle3" in err.value.message
    # EAGLE (not EAGLE3) does not answer to an EAGLE3 checkpoint
    with pytest.raises(LaunchError):
        launch(llama, "--speculative-algorithm", "EAGLE", "--speculative-draft-model-path", EAGLE3)


def test_eagle3_pays_off_and_has_an_inner_optimum(llama: TwinProfile) -> None:
    plain = tok_s(llama, launch(llama))
    by_steps = {steps: tok_s(llama, launch(llama, *eagle3(steps, 1, steps + 1))) for steps in range(1, 9)}
    best = max(by_steps, key=lambda s: by_steps[s])
    assert by_steps[best] > 1.8 * plain
    assert 2 <= best <= 7


def test_eagle3_tree_costs_bookkeeping_and_branches(llama: TwinProfile) -> None:
    chain = launch(llama, *eagle3(3, 1, 4))
    tree = launch(llama, *eagle3(3, 4, 10))
    prompt = physics.classify_prompt(llama, CODE)
    assert physics.draft_seconds(llama, tree, 1) > physics.draft_seconds(llama, chain, 1)
    assert sum(physics.acceptance_probs(llama, tree, prompt)) > sum(physics.acceptance_probs(llama, chain, prompt))


def test_eagle3_drafter_weights_and_kv_count_in_memory(llama: TwinProfile) -> None:
    plain, drafted = launch(llama), launch(llama, *eagle3(3, 1, 4))
    drafter = drafted.spec.drafter
    assert drafter is not None
    weights = physics.weight_bytes_per_gpu(llama, drafted) - physics.weight_bytes_per_gpu(llama, plain)
    assert weights == drafter.weight_bytes
    assert physics.kv_cell_bytes(llama, drafted) - physics.kv_cell_bytes(llama, plain) == drafter.kv_bytes_per_token


def _with_drafter(tmp_path: Path, drafter: dict[str, object]) -> Path:
    data = yaml.safe_load((PROFILE_DIR / f"{LLAMA}.yaml").read_text())
    data["model"]["drafters"] = [drafter]
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


TABLE = {"repetitive": [0.9], "code": [0.8], "math": [0.7], "chat": [0.6]}


def test_a_drafter_takes_only_its_algorithms_cost_fields(tmp_path: Path) -> None:
    base = {"path": "a/b", "weight_bytes": 1, "kv_bytes_per_token": 0, "acceptance": TABLE}
    with pytest.raises(ProfileError, match=r"model\.drafters\.0.*block_fixed_ms.*EAGLE3"):
        load_profile(str(_with_drafter(tmp_path, {**base, "algorithm": "EAGLE3", "block_fixed_ms": 1.0})))
    with pytest.raises(ProfileError, match=r"step_ms.*DFLASH"):
        load_profile(str(_with_drafter(tmp_path, {**base, "algorithm": "DFLASH", "step_ms": 1.0})))
    with pytest.raises(ProfileError, match="unknown drafter algorithm"):
        load_profile(str(_with_drafter(tmp_path, {**base, "algorithm": "MEDUSA"})))
    eagle = load_profile(str(_with_drafter(tmp_path, {**base, "algorithm": "eagle", "step_ms": 0.2})))
    assert eagle.model.drafters[0].algorithm == "EAGLE" and eagle.model.drafters[0].step_bytes == 1


def test_the_27b_profile_weighs_two_dflash_checkpoints() -> None:
    """The public drafter reaches accept length 5-6 on code at its best block and beats the best MTP
    depth; the user's earlier checkpoint accepts less and loses to MTP."""
    qwen = load_profile()
    memory = ["--tp-size", "2", "--mem-fraction-static", "0.88", "--context-length", "131072"]

    def best(path: str) -> tuple[float, float]:
        rates = []
        for block in range(4, 17, 2):
            cfg = launch(qwen, *memory, "--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", path,
                         "--speculative-dflash-block-size", str(block))  # fmt: skip
            probs = physics.acceptance_probs(qwen, cfg, physics.classify_prompt(qwen, CODE))
            rates.append((tok_s(qwen, cfg), physics.expected_accept_length(probs)))
        return max(rates)

    mtp = max(
        tok_s(qwen, launch(qwen, *memory, "--speculative-algorithm", "NEXTN", "--speculative-num-steps", str(steps),
                           "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", str(steps + 1)))
        for steps in range(1, 7)
    )  # fmt: skip
    public, public_accept = best("z-lab/Qwen3.6-27B-DFlash")
    early, _ = best("/models/qwen3.6-27b-dflash/checkpoint-2000")
    assert 5.0 <= public_accept <= 6.0
    assert public > 1.05 * mtp > early
