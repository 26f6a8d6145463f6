"""The order the baselines are measured in: the least estimated memory need first.

The baselines run before anything is measured, so the first has only the model's files to go by. Measured
least hungry first, the first launch's figures (the free memory the engine measured, the weights it loaded,
the tokens its pool held) reach the memory rules before the hungrier baselines, which those rules may then
skip as any proposal (``context-fit``, ``memory``). A baseline's need is its weights per GPU (the model's
files over its tensor-parallel size) and one request's KV at its context by the model's ``config.json``
(:mod:`autotune.kv_layout`); a drafter's weights and KV are not counted. Where any baseline's need cannot
be estimated (no layout, no context, an unknown KV dtype or weights), the space's order stands.
"""

from __future__ import annotations

from collections.abc import Mapping

from autotune.engines import get_engine
from autotune.feasibility import model_weight_bytes
from autotune.kv_layout import KvLayout, kv_layout
from autotune.memory_types import MemoryRules, flag_number
from autotune.space import ENGINE_PARAM, Baseline, FlagValue, SearchSpace
from autotune.study.pool_tokens import kv_scale, needed_tokens


def memory_need(
    rules: MemoryRules, layout: KvLayout, flags: Mapping[str, FlagValue], *, weight_bytes: float
) -> float | None:
    """Bytes per GPU a plan with ``flags`` needs for its weights and one request of its context; None
    where its context or KV dtype is unknown."""
    context, element = needed_tokens(rules, flags), kv_scale(rules, flags)
    if context is None or element is None:
        return None
    tp = int(flag_number(flags.get(rules.tp_flag)) or 1)
    return weight_bytes / tp + context * layout.bytes_per_token(element_bytes=element, tp=tp)


def in_memory_order(space: SearchSpace) -> list[Baseline]:
    """The space's baselines, the least estimated memory need first (ties in the space's order); the
    space's order where any need is unknown."""
    layout = kv_layout(space.model, space.named_config())
    weight_bytes = space.gpus.model_bytes or model_weight_bytes(space.model)
    if layout is None or weight_bytes is None:
        return list(space.baselines)
    needs = []
    for baseline in space.baselines:
        if space.engines is not None and ENGINE_PARAM not in baseline.flags:
            return list(space.baselines)
        engine, flags = space.split_engine({**space.fixed, **baseline.flags})
        rules = get_engine(engine).memory_rules
        need = memory_need(rules, layout, flags, weight_bytes=weight_bytes) if rules is not None else None
        if need is None:
            return list(space.baselines)
        needs.append(need)
    order = sorted(range(len(needs)), key=lambda i: needs[i])
    return [space.baselines[i] for i in order]
