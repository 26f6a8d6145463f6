"""The bytes one decode pass reads, from the model's config.json (issue 46 item 4): a mixture of experts
reads the experts its tokens reach, and a ceiling whose structure is unknown is never shown as a share."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.engines.base import LaunchPlan
from autotune.gpu import roofline
from autotune.measure.client import RequestRecord
from autotune.measure.protocol import EarlyStop
from autotune.model_reads import find_config, model_structure, structure_of
from autotune.report.console import trial_detail
from autotune.space import load_space
from autotune.study import make_sampler
from autotune.testing import memory_as_logged, simulated_outcome, study_runner
from autotune.trial import TrialOutcome
from tests.conftest import ROOT, TWIN_SPACE, idle_gpus

GIB = 1 << 30
# Qwen3-30B-A3B's published config.json, as Hugging Face serves it.
QWEN3_MOE = Path(__file__).parent / "fixtures" / "qwen3-30b-a3b"
HIDDEN, LAYERS, EXPERT = 2048, 48, 3 * 2048 * 768  # gate, up and down projections of one expert
EMBEDDING = 151936 * HIDDEN
ATTENTION = 2 * HIDDEN * 32 * 128 + 2 * HIDDEN * 4 * 128  # q and o, k and v (4 KV heads)
ROUTER = HIDDEN * 128


def test_qwen3_30b_a3b_reads_its_eight_experts_per_token_not_its_thirty_billion_weights() -> None:
    moe = model_structure(str(QWEN3_MOE))
    assert moe is not None
    # 30.5 B parameters in all, as published
    assert moe.total_params == 2 * EMBEDDING + LAYERS * (ATTENTION + ROUTER + 128 * EXPERT)
    assert moe.total_params == pytest.approx(30.5e9, rel=0.005)
    # one token: the output head (untied: the embedding table is looked up, not read), attention, router, 8 experts
    one_token = EMBEDDING + LAYERS * (ATTENTION + ROUTER + 8 * EXPERT)
    assert moe.read_params(1) == one_token
    assert one_token == pytest.approx(3.04e9, rel=0.01)
    # in bf16 over TP 2: 61 GB of weights, 30.5 GB per GPU, of which a pass reads about 3 GB per GPU
    weights_per_gpu = moe.total_params * 2 / 2
    assert weights_per_gpu * moe.read_share(1) == pytest.approx(one_token * 2 / 2)
    # 16 tokens in the pass (16 streams, or one verifying 16 draft tokens): the distinct experts they reach
    touched = 128 * (1 - (1 - 8 / 128) ** 16)
    assert moe.experts_touched(16) == pytest.approx(touched) and 8 < touched < 128
    assert moe.read_params(16) == pytest.approx(EMBEDDING + LAYERS * (ATTENTION + ROUTER + touched * EXPERT))
    assert moe.read_share(100_000) == pytest.approx(1 - EMBEDDING / moe.total_params)  # every expert, at most all


def test_a_dense_model_reads_every_weight_but_an_untied_embedding_table() -> None:
    config = {"hidden_size": 4096, "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
              "intermediate_size": 14336, "vocab_size": 128256, "tie_word_embeddings": False}  # fmt: skip
    dense = structure_of(config)
    assert dense is not None and dense.total_params == pytest.approx(8.03e9, rel=0.005)  # Llama 3.1 8B
    assert dense.read_params(1) == dense.read_params(64) == dense.total_params - 128256 * 4096
    tied = structure_of({**config, "tie_word_embeddings": True})
    assert tied is not None and tied.read_share(1) == 1.0


def test_a_hybrid_of_linear_and_full_attention_counts_each_kind_of_layer() -> None:
    config = json.loads((ROOT / "search_spaces" / "configs" / "qwen3.6-27b.json").read_text())
    hybrid = structure_of(config)
    assert hybrid is not None and 26e9 < hybrid.total_params < 28e9  # Qwen3.6-27B: 48 linear, 16 full layers
    full = structure_of({**config, "layer_types": ["full_attention"] * 64})
    assert full is not None and full.total_params != hybrid.total_params  # a linear layer is not a full one


def test_a_structure_not_counted_is_unknown(tmp_path: Path) -> None:
    hybrid = json.loads((QWEN3_MOE / "config.json").read_text())
    hybrid["layer_types"] = ["linear_attention", "linear_attention", "linear_attention", "full_attention"] * 12
    assert structure_of(hybrid) is None  # linear layers without their dimensions
    assert structure_of({**hybrid, "layer_types": ["sliding_attention", "full_attention"] * 24}) is None
    assert structure_of({"model_type": "unknown"}) is None
    assert model_structure(str(tmp_path)) is None  # a folder without config.json
    assert model_structure("nobody/no-such-model") is None


def test_a_hub_name_is_read_from_the_hugging_face_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "hub" / "models--Qwen--Qwen3-30B-A3B"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    (repo / "snapshots" / "abc123" / "config.json").write_text((QWEN3_MOE / "config.json").read_text())
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    assert find_config("Qwen/Qwen3-30B-A3B") == repo / "snapshots" / "abc123" / "config.json"
    assert model_structure("Qwen/Qwen3-30B-A3B") == model_structure(str(QWEN3_MOE))
    assert find_config("Qwen/Qwen3-32B") is None


def test_a_rate_above_the_counted_ceiling_is_never_shown_as_a_share() -> None:
    above = roofline(decode_tok_s=120.0, accept_length=1.0, weights_bytes_per_gpu=1e9, kv_bytes_per_token_per_gpu=None,
                     mean_context_tokens=0, bandwidth_bytes_per_s=100e9)  # fmt: skip
    assert above.ceiling_tok_s == pytest.approx(100.0) and above.share is None
    below = above.model_copy(update={"decode_tok_s": 50.0})
    assert below.share == pytest.approx(0.5)
    assert below.model_copy(update={"unknown": "no config.json"}).share is None


def moe_study(tmp_path: Path, model: str | None, tok_s: float = 80.0) -> tuple[float, float, str]:
    """One launch of the twin space's study with ``model`` (None: the space's own, whose config.json it
    names), measured at ``tok_s`` with 30.5 GB of weights per GPU on two 768 GB/s GPUs (every weight read:
    at most 25 passes/s). (share or -1, draft tokens, detail)"""
    space = load_space(TWIN_SPACE).model_copy(update={"baselines": []})
    if model is not None:  # another model: the config the space names is not its
        space = space.model_copy(update={"model": model, "config_json": None})
    weights = 30.53e9

    def launcher(plan: LaunchPlan, log_path: Path, phase: object, early_stop: EarlyStop | None = None) -> TrialOutcome:
        memory = memory_as_logged(weights_bytes=weights, kv_pool_bytes=5 * GIB, kv_tokens=100_000)
        outcome = simulated_outcome(space, plan, tok_s=tok_s, rounds=2, ci95=1.0, memory=memory, accept_length=2.0)
        request = RequestRecord(prompt_id="c1", category="coding", round=0, prompt_tokens=0, completion_tokens=2,
                                ttft_s=0.1, e2e_s=0.2, decode_tok_s=tok_s, accept_length=2.0,
                                finish_reason="length")  # fmt: skip
        measured = [m.model_copy(update={"requests": [request]}) for m in outcome.measurements]  # fmt: skip
        return outcome.model_copy(update={"measurements": measured})

    runner = study_runner(space, tmp_path, inventory=idle_gpus(2), launcher=launcher, sampler=make_sampler("random", 1))
    runner.run(trials=1, timeout_s=None)
    (record,) = runner.records()
    assert record.outcome == "ok"
    detail = trial_detail(record).renderables[0]
    cells = [str(c) for column in detail.columns for c in column._cells]  # type: ignore[attr-defined]
    draft = float(record.flags.get("speculative-num-draft-tokens", 1))  # type: ignore[arg-type]
    share = record.measurement.roofline_share
    return (share if share is not None else -1.0), draft, " ".join(cells)


def test_a_moe_study_shows_its_share_of_what_a_pass_reads(tmp_path: Path) -> None:
    share, draft, detail = moe_study(tmp_path, str(QWEN3_MOE))
    # every weight read would be 80 / (2 x 25.2) = 159 %: the pass reads the experts its draft tokens reach
    moe = model_structure(str(QWEN3_MOE))
    assert moe is not None
    touched = 128 * (1 - (1 - 8 / 128) ** draft)
    read = 30.53e9 * (EMBEDDING + LAYERS * (ATTENTION + ROUTER + touched * EXPERT)) / moe.total_params
    logged = round(30.53e9 / GIB, 2) * GIB / 30.53e9  # the log's two decimals of GiB
    assert share == pytest.approx(80.0 / (768e9 / (read * logged) * 2.0), abs=0.001)
    assert 0 < share < 1 and f"{share:.0%} of the memory-bandwidth ceiling" in detail


def test_a_space_that_names_its_models_config_has_a_ceiling(tmp_path: Path) -> None:
    share, _, detail = moe_study(tmp_path, None, tok_s=30.0)  # Qwen/Qwen3.6-27B is not local: its config is named
    assert 0 < share < 1 and "ceiling unknown" not in detail


def test_a_study_of_a_model_without_its_config_says_the_ceiling_is_unknown(tmp_path: Path) -> None:
    share, _, detail = moe_study(tmp_path, "nobody/no-such-moe")
    assert share == -1.0 and "ceiling unknown: the model's config.json was not found" in detail
