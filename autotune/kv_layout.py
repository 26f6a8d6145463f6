"""The KV cache a model needs per token, from its ``config.json``: before any launch, the pool's tokens
at a fraction follow from the GPUs' free memory, the weights and these bytes.

Full-attention layers keep a key and a value per KV head per token; tensor parallelism splits the KV
heads over the GPUs (a head is never split: fewer heads than GPUs are replicated). A hybrid model's
linear-attention layers keep a fixed state per request instead, not per token, so only its
full-attention layers count (``layer_types``, or every ``full_attention_interval``-th layer).
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from pydantic import Field

from autotune.model_reads import config_int, find_config, read_config
from autotune.models import Frozen


class KvLayout(Frozen):
    """The full-attention KV of one token, as the config states it."""

    full_attention_layers: int = Field(gt=0)
    kv_heads: int = Field(gt=0)
    head_dim: int = Field(gt=0)
    hybrid: bool = Field(description="some layers hold a fixed state per request (linear attention) instead")

    def bytes_per_token(self, *, element_bytes: float, tp: int) -> float:
        """KV bytes of one token on one GPU, at ``element_bytes`` per stored value and TP size ``tp``."""
        heads = math.ceil(self.kv_heads / max(tp, 1))
        return 2.0 * self.full_attention_layers * heads * self.head_dim * element_bytes


def kv_layout_of(config: dict[str, Any]) -> KvLayout | None:
    """The KV layout of a decoder's config (a multimodal one's text part); None where it states too little
    (or uses attention this module does not count, such as sliding windows or latent KV)."""
    c = config.get("text_config") if isinstance(config.get("text_config"), dict) else config
    assert isinstance(c, dict)
    layers, heads, hidden = (config_int(c, n) for n in ("num_hidden_layers", "num_attention_heads", "hidden_size"))
    kv_heads = config_int(c, "num_key_value_heads") or heads
    if layers is None or kv_heads is None or "kv_lora_rank" in c:
        return None
    head_dim = config_int(c, "head_dim") or (hidden // heads if hidden and heads else None)
    if head_dim is None:
        return None
    kinds = c.get("layer_types")
    interval = config_int(c, "full_attention_interval")
    if isinstance(kinds, list) and kinds:
        if set(kinds) - {"full_attention", "linear_attention"}:
            return None
        full, hybrid = kinds.count("full_attention"), "linear_attention" in kinds
    elif interval:
        full, hybrid = layers // interval, interval > 1
    else:
        full, hybrid = layers, False
    if not full:
        return None
    return KvLayout(full_attention_layers=full, kv_heads=kv_heads, head_dim=head_dim, hybrid=hybrid)


def kv_layout(model: str, config: Path | None = None) -> KvLayout | None:
    """The KV layout of ``model`` (a local folder, or a hub name in the cache; ``config``: its config.json
    where the space names one); None when unknown."""
    found = read_config(config or find_config(model))
    return kv_layout_of(found) if found is not None else None
