"""Search-space loading: shipped files load, bad files fail naming file and field, suggest() rules."""

from __future__ import annotations

from pathlib import Path

import optuna
import pytest

from autotune.errors import SpaceError
from autotune.space import Condition, load_space, suggest
from tests.conftest import REAL_SPACE, TWIN_SPACE

MINIMAL = """\
version: 1
launcher: [python, -m, sglang.launch_server]
model: some/model
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "space.yaml"
    path.write_text(text)
    return path


def test_shipped_spaces_load_with_seed_baselines() -> None:
    for path in (REAL_SPACE, TWIN_SPACE):
        space = load_space(path)
        assert space.model == "Qwen/Qwen3.6-27B"
        assert space.fixed["tp-size"] == 2 and "speculative-algorithm" not in space.fixed
        assert set(space.tuned) == {
            "speculative-algorithm",
            "speculative-draft-model-path",
            "speculative-dflash-block-size",
            "speculative-adaptive",
            "speculative-num-steps",
            "speculative-eagle-topk",
            "speculative-num-draft-tokens",
            "mem-fraction-static",
            "mamba-full-memory-ratio",
            "max-running-requests",
            "cuda-graph-max-bs-decode",
        }
        names = [b.name for b in space.baselines]
        assert names == ["cautious", "hand-found"]
        hand = space.baselines[1].flags
        assert hand["mem-fraction-static"] == 0.88 and hand["speculative-num-draft-tokens"] == 4


@pytest.mark.parametrize(
    ("extra", "field", "message"),
    [
        ("colour: blue\n", "colour", "unknown key"),
        (
            "tuned:\n  mem-fraction-static: {type: float, low: 0.9, high: 0.8}\n",
            "tuned.mem-fraction-static",
            "low (0.9) is greater than high (0.8)",
        ),
        ("tuned:\n  x: {type: int, low: 1, high: 2, when: 'y > 1'}\n", "tuned.x", "condition refers to 'y'"),
        ("baselines:\n  - {name: a}\n  - {name: a}\n", "baselines", "names must be unique"),
        ("tuned:\n  x: {type: int, low: 1, high: 2, when: 'nonsense'}\n", "tuned.x.when", "cannot read condition"),
        (
            "tuned:\n  x: {type: integer, low: 1, high: 2}\n",
            "tuned.x",
            "unknown type 'integer'; the known types are int, float, categorical",
        ),
        ("tuned:\n  x: {tpye: int, low: 1, high: 2}\n", "tuned.x", "'type' is missing; give one of the known types"),
        (
            "tuned:\n  x: {type: int, low: 1, high: 4}\nbaselines:\n  - name: b\n    flags: {x: 9}\n",
            "baselines.b.x",
            "9 is outside the tuned range",
        ),
        ("fixed: {x: 1}\ntuned:\n  x: {type: int, low: 1, high: 4}\n", "tuned.x", "both fixed and tuned"),
    ],
)
def test_bad_space_names_file_and_field(tmp_path: Path, extra: str, field: str, message: str) -> None:
    path = write(tmp_path, MINIMAL + extra)
    with pytest.raises(SpaceError) as info:
        load_space(path)
    assert str(path) in info.value.message
    assert info.value.field == field
    assert message in info.value.message


def test_malformed_yaml_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, MINIMAL + "tuned: {a: [1, 2\n")
    with pytest.raises(SpaceError) as info:
        load_space(path)
    assert "malformed YAML" in info.value.message and "line" in (info.value.field or "")


def test_missing_file_and_missing_key(tmp_path: Path) -> None:
    with pytest.raises(SpaceError, match="file not found"):
        load_space(tmp_path / "nope.yaml")
    with pytest.raises(SpaceError) as info:
        load_space(write(tmp_path, "version: 1\nmodel: m\n"))
    assert info.value.field == "launcher" and "required key is missing" in info.value.message


def test_flag_spelling_with_dashes_is_accepted(tmp_path: Path) -> None:
    space = load_space(write(tmp_path, MINIMAL + "fixed: {--tp-size: 2}\n"))
    assert space.fixed == {"tp-size": 2}


def test_draft_tokens_only_sampled_when_topk_above_one() -> None:
    space = load_space(REAL_SPACE)
    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=3))
    seen_topk: set[object] = set()
    for _ in range(40):
        trial = study.ask()
        candidate = suggest(space, trial)
        topk = candidate.flags.get("speculative-eagle-topk", 0)  # only sampled for NEXTN, not DFLASH
        seen_topk.add(topk)
        assert ("speculative-num-draft-tokens" in candidate.params) == (topk > 1)  # type: ignore[operator]
        study.tell(trial, 1.0)
    assert seen_topk == {0, 1, 2, 4}


def test_baseline_keeps_engine_defaults_for_unnamed_flags() -> None:
    space = load_space(REAL_SPACE)
    study = optuna.create_study(direction="maximize")
    cautious = space.baselines[0]
    study.enqueue_trial({"speculative-algorithm": "NEXTN", "speculative-num-steps": 1, "speculative-eagle-topk": 1})
    candidate = suggest(space, study.ask(), cautious)
    assert candidate.baseline == "cautious"
    assert candidate.flags == {
        "tp-size": 2,
        "speculative-algorithm": "NEXTN",
        "context-length": 131072,
        "speculative-num-steps": 1,
        "speculative-eagle-topk": 1,
        "speculative-num-draft-tokens": 2,
    }
    assert "mem-fraction-static" not in candidate.flags


def test_condition_parsing() -> None:
    condition = Condition.parse("--speculative-eagle-topk >= 2")
    assert condition.holds({"speculative-eagle-topk": 2})
    assert not condition.holds({"speculative-eagle-topk": 1})
    assert not condition.holds({})


def test_environment_references_are_expanded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MY_SERVER", "/opt/llama/llama-server")
    text = MINIMAL.replace("[python, -m, sglang.launch_server]", '["${MY_SERVER}"]')
    assert load_space(write(tmp_path, text)).launcher == ["/opt/llama/llama-server"]
    monkeypatch.delenv("MY_SERVER")
    with pytest.raises(SpaceError) as info:
        load_space(write(tmp_path, text))
    assert info.value.field == "launcher.0" and "MY_SERVER is not set" in info.value.message


VLLM_MTP = """\
version: 1
engine: vllm
launcher: [vllm, serve]
model: some/model
fixed: {speculative-method: mtp, num-speculative-tokens: 3, max-num-seqs: 8, max-num-batched-tokens: 2048}
"""


def test_lossy_speculation_only_where_the_space_allows_it(tmp_path: Path) -> None:
    lossless = load_space(write(tmp_path, VLLM_MTP + "tuned: {rejection-sample-method: {type: categorical, "
                                "choices: [standard, block]}}\n"))  # fmt: skip
    assert not lossless.allow_lossy_speculation
    baseline = VLLM_MTP + "baselines: [{name: fast, flags: {speculative-config.rejection_sample_method: fly}}]\n"
    with pytest.raises(SpaceError, match="baselines.fast.speculative-config.rejection_sample_method: "
                                         "rejection_sample_method fly changes") as refused:  # fmt: skip
        load_space(write(tmp_path, baseline))
    assert refused.value.field == "baselines.fast.speculative-config.rejection_sample_method"
    allowed = load_space(write(tmp_path, "allow_lossy_speculation: true\n" + baseline))
    assert allowed.allow_lossy_speculation and allowed.baselines[0].name == "fast"
