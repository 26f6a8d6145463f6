"""What one decode pass reads of a model's weights, from the model's ``config.json``.

A dense model reads every weight each pass (the embedding table aside: a pass looks up a few rows
of it, unless the output head shares it). A mixture-of-experts model reads its attention, router,
shared experts and dense layers, and in each MoE layer only the experts its tokens route to: with
``k`` of ``E`` experts per token and ``n`` tokens in the pass (the batch times the tokens each
sequence verifies), ``E * (1 - (1 - k/E) ** n)`` distinct experts are expected. The parameter counts
give the share of the weights a pass reads; the weight bytes (from the files or the server's log)
give the bytes, so a quantized checkpoint is weighed as it is stored.

The config is found in a local model folder, or in the Hugging Face cache when the model is a hub
name (no network), or where the space names it (``model_config``). A hybrid of linear (gated delta
net) and full attention counts each kind of layer's projections. A structure this module cannot count
(sliding-window layers, a config it does not find) is unknown, and so is any ceiling built on it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ModelStructure(BaseModel):
    """Parameter counts of a transformer, as one decode pass reads them."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    total_params: float = Field(gt=0, description="every parameter in the checkpoint")
    always_read_params: float = Field(ge=0, description="read by every pass: attention, router, dense MLPs, head")
    moe_layers: int = Field(default=0, ge=0)
    experts: int = Field(default=0, ge=0, description="routed experts per MoE layer")
    experts_per_token: int = Field(default=0, ge=0)
    expert_params: float = Field(default=0.0, ge=0, description="parameters of one routed expert")

    def experts_touched(self, tokens: float) -> float:
        """Expected distinct experts per MoE layer that ``tokens`` routed tokens reach."""
        if not self.experts:
            return 0.0
        missed: float = (1 - self.experts_per_token / self.experts) ** max(tokens, 1.0)
        return self.experts * (1 - missed)

    def read_params(self, tokens: float) -> float:
        """Parameters one pass over ``tokens`` tokens reads."""
        return self.always_read_params + self.moe_layers * self.experts_touched(tokens) * self.expert_params

    def read_share(self, tokens: float) -> float:
        """The share of the checkpoint's weight bytes one pass over ``tokens`` tokens reads."""
        return min(1.0, self.read_params(tokens) / self.total_params)


def hub_cache() -> Path:
    """The Hugging Face hub cache, where its own variables put it."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"])
    home = Path(os.environ["HF_HOME"]) if os.environ.get("HF_HOME") else Path.home() / ".cache" / "huggingface"
    return home / "hub"


def find_config(model: str) -> Path | None:
    """The model's ``config.json``: in a local folder, else in the hub cache's snapshot that ``refs/main``
    names (any snapshot when that ref is absent); None when neither holds one."""
    folder = Path(model).expanduser()
    if folder.is_dir():
        found = folder / "config.json"
        return found if found.is_file() else None
    if model.count("/") != 1 or folder.exists():
        return None
    repo = hub_cache() / f"models--{model.replace('/', '--')}"
    ref = repo / "refs" / "main"
    if ref.is_file():
        found = repo / "snapshots" / ref.read_text().strip() / "config.json"
        if found.is_file():
            return found
    return next(iter(sorted((repo / "snapshots").glob("*/config.json"))), None)


def config_int(config: dict[str, Any], *names: str) -> int | None:
    """The first of ``names`` that a config gives as an integer."""
    for name in names:
        value = config.get(name)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _attention_params(c: dict[str, Any], hidden: int, heads: int) -> int | None:
    """One layer's attention projections: multi-head latent attention (DeepSeek) or grouped-query."""
    if "kv_lora_rank" in c:
        rank, rope, nope, v_dim = (
            config_int(c, n) for n in ("kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
        )
        if rank is None or rope is None or nope is None or v_dim is None:
            return None
        q_rank = config_int(c, "q_lora_rank")
        q = hidden * q_rank + q_rank * heads * (nope + rope) if q_rank else hidden * heads * (nope + rope)
        return q + hidden * (rank + rope) + rank * heads * (nope + v_dim) + heads * v_dim * hidden
    kv_heads = config_int(c, "num_key_value_heads") or heads
    head_dim = config_int(c, "head_dim") or hidden // heads
    return 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim


KNOWN_LAYERS = {"full_attention", "linear_attention"}


def _linear_attention_params(c: dict[str, Any], hidden: int) -> int | None:
    """One gated-delta-net layer's projections (Qwen3.5's linear attention): query, key, value and gate
    in, the per-head decay and beta, and out."""
    key_heads, key_dim, value_heads, value_dim = (
        config_int(c, n)
        for n in ("linear_num_key_heads", "linear_key_head_dim", "linear_num_value_heads", "linear_value_head_dim")
    )
    if key_heads is None or key_dim is None or value_heads is None or value_dim is None:
        return None
    keys, values = key_heads * key_dim, value_heads * value_dim
    return hidden * (2 * keys + 2 * values) + hidden * 2 * value_heads + values * hidden


def _moe_layers(c: dict[str, Any], layers: int) -> int:
    """How many layers route to experts: DeepSeek's first dense layers, Qwen's sparse step and
    MLP-only layers; every layer otherwise."""
    first_dense = config_int(c, "first_k_dense_replace") or 0
    step = config_int(c, "decoder_sparse_step") or 1
    only_mlp = set(c.get("mlp_only_layers") or [])
    return sum(1 for i in range(first_dense, layers) if i not in only_mlp and (i + 1) % step == 0)


def structure_of(config: dict[str, Any]) -> ModelStructure | None:
    """The parameter counts of a decoder-only transformer's config (a multimodal one's text part);
    None where the config does not describe one this module can count."""
    c = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    assert isinstance(c, dict)
    hidden, layers, heads, vocab = (
        config_int(c, n) for n in ("hidden_size", "num_hidden_layers", "num_attention_heads", "vocab_size")
    )
    types = list(c.get("layer_types") or [])
    if hidden is None or layers is None or heads is None or vocab is None or set(types) - KNOWN_LAYERS:
        return None  # sliding attention layers: another count, not guessed
    full = _attention_params(c, hidden, heads)
    linear_layers = types.count("linear_attention")
    linear = _linear_attention_params(c, hidden) if linear_layers else 0
    if full is None or linear is None:
        return None
    # Every layer's attention, as the mean layer's (the counts below multiply it by the layers).
    attention = ((layers - linear_layers) * full + linear_layers * linear) / layers
    experts = config_int(c, "num_experts", "n_routed_experts", "num_local_experts") or 0
    per_token = config_int(c, "num_experts_per_tok") or 0
    dense_mlp = 3 * hidden * (config_int(c, "intermediate_size") or 0)  # gate, up and down projections
    embedding = vocab * hidden
    head = 0 if c.get("tie_word_embeddings") else embedding
    if not experts:
        if not dense_mlp:
            return None
        total = embedding + head + layers * (attention + dense_mlp)
        return ModelStructure(total_params=total, always_read_params=total - (embedding if head else 0))
    moe_width = config_int(c, "moe_intermediate_size") or (
        config_int(c, "intermediate_size") if "num_local_experts" in c else None
    )
    if not moe_width or not per_token:
        return None
    expert = 3 * hidden * moe_width
    shared_width = config_int(c, "shared_expert_intermediate_size") or 0
    shared = (config_int(c, "n_shared_experts") or 0) * expert + 3 * hidden * shared_width
    moe_layers = _moe_layers(c, layers)
    router = hidden * experts
    always = head + layers * attention + moe_layers * (router + shared) + (layers - moe_layers) * dense_mlp
    total = always + embedding + moe_layers * experts * expert
    if not head:  # a tied table is the output head, read whole each pass; an untied one only for a few rows
        always += embedding
    return ModelStructure(
        total_params=total,
        always_read_params=always,
        moe_layers=moe_layers,
        experts=experts,
        experts_per_token=per_token,
        expert_params=expert,
    )


def read_config(path: Path | None) -> dict[str, Any] | None:
    """A config.json's object; None where there is no path, or it cannot be read as one."""
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def model_structure(model: str, config: Path | None = None) -> ModelStructure | None:
    """The structure of ``model`` (a local folder or a hub name in the cache; ``config``: its config.json
    where the space names one); None when unknown."""
    found = read_config(config or find_config(model))
    return structure_of(found) if found is not None else None
