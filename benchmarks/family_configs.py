"""What the family draws of a model and its drafters: a Hugging Face ``config.json`` of a dense, hybrid
or MoE model of a given size, an EAGLE3 head's and a DFlash drafter's config on its width, and
acceptance curves of three shapes per prompt category (:mod:`benchmarks.family` builds members from
them, through the same builder a user's ``SETUP.yaml`` takes).
"""

from __future__ import annotations

import math
import random
from typing import Any, Literal

from passmodel.profile import CATEGORIES

ModelKind = Literal["dense", "hybrid", "moe"]
CurveShape = Literal["geometric", "plateau", "steep"]


VOCAB = 152_064


def target_config(rng: random.Random, kind: ModelKind, params: float, *, mtp: bool) -> dict[str, Any]:
    """A Hugging Face config.json of a ``kind`` model of about ``params`` parameters."""
    layers = int(min(96, max(16, round(8 * math.log2(params / 1e8)))))
    hidden = int(max(1024, round(math.sqrt(params / (12 * layers)) / 256) * 256))
    kv_heads, head_dim = rng.choice([2, 4, 8]), rng.choice([128, 256])
    heads = max(kv_heads, hidden // head_dim // kv_heads * kv_heads)
    attention = 2 * hidden * (heads + kv_heads) * head_dim
    mlp = max((params - 2 * VOCAB * hidden) / layers - attention, 3 * hidden * 256)  # one layer's MLP parameters
    config: dict[str, Any] = {
        "architectures": ["FamilyForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": int(mlp / (3 * hidden)),
        "vocab_size": VOCAB,
        "max_position_embeddings": rng.choice([32768, 131072, 262144]),
        "eos_token_id": 2,
    }
    if kind == "moe":  # routed experts only; a token uses 2-12 % of them
        experts, top = rng.choice([64, 128, 256]), rng.choice([4, 8])
        config |= {"num_experts": experts, "num_experts_per_tok": top,
                   "moe_intermediate_size": max(64, int(mlp / (3 * hidden * experts)))}  # fmt: skip
    if kind == "hybrid":  # every fourth layer full attention, the rest linear attention with a recurrent state
        config |= {"layer_types": ["full_attention" if i % 4 == 3 else "linear_attention" for i in range(layers)],
                   "linear_num_value_heads": hidden // 128 // rng.choice([1, 2]),
                   "linear_key_head_dim": 128, "linear_value_head_dim": 128}  # fmt: skip
    if mtp:
        config["num_nextn_predict_layers"] = 1
    return config


def eagle_config(rng: random.Random, target: dict[str, Any]) -> dict[str, Any]:
    """An EAGLE3 head's config.json: one decoder layer on the target's width, its own (often smaller)
    draft vocabulary."""
    return {
        "architectures": ["LlamaForCausalLMEagle3"],
        "hidden_size": target["hidden_size"],
        "num_hidden_layers": 1,
        "num_attention_heads": target["num_attention_heads"],
        "num_key_value_heads": target["num_key_value_heads"],
        "head_dim": target["head_dim"],
        "intermediate_size": int(target["hidden_size"] * rng.uniform(2.5, 4.0)),
        "vocab_size": VOCAB,
        "draft_vocab_size": rng.choice([32000, VOCAB]),
    }


def dflash_config(rng: random.Random, target: dict[str, Any]) -> dict[str, Any]:
    """A DFlash drafter's config.json: a few layers on the target's width (its embeddings and lm_head
    are the target's)."""
    return {
        "architectures": ["DFlashDraftModel"],
        "hidden_size": target["hidden_size"],
        "num_hidden_layers": rng.randint(1, 6),
        "num_attention_heads": target["num_attention_heads"],
        "num_key_value_heads": target["num_key_value_heads"],
        "head_dim": target["head_dim"],
        "intermediate_size": int(target["hidden_size"] * rng.uniform(2.5, 4.0)),
        "vocab_size": VOCAB,
        "block_size": 16,
    }


def acceptance_curves(rng: random.Random, length: int) -> dict[str, list[float]]:
    """Absolute acceptance per position for each prompt category, from one of three shapes."""
    shape: CurveShape = rng.choice(["geometric", "plateau", "steep"])
    first = rng.uniform(0.6, 0.92)
    if shape == "geometric":
        code = [first * rng.uniform(0.8, 0.92) ** i for i in range(length)]
    elif shape == "plateau":  # good for a few positions, then falls off a cliff
        knee = rng.randint(2, max(3, length // 2))
        code = [first * 0.97**i if i < knee else first * 0.97**knee * 0.55 ** (i - knee + 1) for i in range(length)]
    else:
        code = [first * rng.uniform(0.45, 0.65) ** i for i in range(length)]
    table = {
        "repetitive": [1 - (1 - p) * 0.25 for p in code],
        "code": code,
        "math": [p * 0.96**i for i, p in enumerate(code)],
        "chat": [p**1.4 for p in code],
    }
    return {c: _non_increasing(table[c]) for c in CATEGORIES}


def _non_increasing(probs: list[float]) -> list[float]:
    out: list[float] = []
    for p in probs:
        p = min(1.0, max(0.0, round(p, 4)))
        out.append(min(p, out[-1]) if out else p)
    return out
