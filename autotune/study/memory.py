"""Memory learning: one feasibility model per engine, taught by every trial's :class:`MemoryLesson`.

A live trial's lesson is built from its outcome, stored with it (exact bytes) and learned; a
resumed study learns the same stored lessons in trial order. One path, nothing rounded.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from functools import partial

from autotune.engines.base import Engine
from autotune.feasibility import FeasibilityModel, MemoryLesson, model_weight_bytes
from autotune.gpu import GpuInventory, Roofline, roofline
from autotune.headroom_figures import headroom_use
from autotune.model_reads import ModelStructure
from autotune.outcomes import OutcomeKind
from autotune.records import TrialRecord
from autotune.space import SearchSpace
from autotune.trial import TrialOutcome


def feasibility_models(
    space: SearchSpace, engines: Mapping[str, Engine], inventory: GpuInventory
) -> dict[str, FeasibilityModel]:
    """A fresh model per engine from the GPUs' memory and the model's weight bytes."""
    weight_bytes = space.gpus.model_bytes or model_weight_bytes(space.model)
    free = min((g.memory_free_bytes for g in inventory.gpus), default=None)
    total = min((g.memory_total_bytes for g in inventory.gpus), default=None)
    return {
        name: FeasibilityModel(
            engine.memory_rules,
            free_bytes=free,
            total_bytes=total,
            weight_bytes=weight_bytes,
            unset_graph_tokens=partial(engine.graph_tokens_captured, gpu_total_bytes=total),
        )
        for name, engine in engines.items()
    }


def replay(models: Mapping[str, FeasibilityModel], records: Iterable[TrialRecord], *, default_engine: str) -> None:
    """A resumed study predicts with what its earlier trials taught (in the order they ran)."""
    for record in records:
        model = models.get(record.engine or default_engine)
        if model is not None and record.lessons.memory is not None and record.state == "COMPLETE":
            model.learn(record.lessons.memory)


def lesson_of(outcome: TrialOutcome, *, trial: int, inventory: GpuInventory, engine: Engine) -> MemoryLesson:
    """What a launch taught: its memory failure side, logged weights/graphs/free memory, the tokens its
    pool held (logged, or printed by a death, from its log or else its reason) and, for a launch that
    served, its run-time memory outside the graphs (log against the NVML peak)."""
    facts = outcome.memory
    side = outcome.kind.memory_side if outcome.kind.is_memory else None
    runtime = None
    totals = [g.memory_total_bytes for g in inventory.gpus]
    peak = outcome.gpu_peak_used_bytes
    if (
        outcome.kind is OutcomeKind.OK
        and facts is not None
        and peak is not None
        and totals
        and facts.free_at_start_bytes is not None
        and facts.avail_after_pools_bytes is not None
        and facts.graph_bytes is not None
    ):
        runtime = headroom_use(
            outcome.plan.flags,
            server_free_bytes=facts.free_at_start_bytes,
            avail_after_pools_bytes=facts.avail_after_pools_bytes,
            graph_bytes=facts.graph_bytes,
            free_at_peak_bytes=min(totals) - peak,
            trial=trial,
        ).runtime_bytes
    shortfall = facts.shortfall if facts is not None else None
    if shortfall is None and outcome.kind.is_memory:
        shortfall = engine.pool_shortfall(outcome.reason or "")
    return MemoryLesson(
        flags=outcome.plan.flags,
        trial=trial,
        side=side,
        state_short=side == "too-low"
        and engine.memory_rules is not None
        and engine.memory_rules.state_ran_short(outcome.reason),
        weights_bytes=facts.weights_bytes if facts else None,
        graph_bytes=facts.graph_bytes if facts else None,
        graph_batch=facts.graph_batch if facts else None,
        server_free_bytes=facts.free_at_start_bytes if facts else None,
        runtime_bytes=runtime,
        served=outcome.kind is OutcomeKind.OK,
        pool_tokens=(shortfall.pool_tokens if shortfall else None) or (facts.kv_tokens if facts else None),
        pool_fraction=shortfall.fraction if shortfall else None,
        needed_tokens=shortfall.needed_tokens if shortfall else None,
        kv_cell_bytes=(shortfall.cell_bytes if shortfall else None) or (facts.kv_bytes_per_token if facts else None),
        headroom_shortfall_bytes=facts.oom_shortfall_bytes if facts and side == "too-high" else None,
    )


def roofline_of(
    outcome: TrialOutcome,
    *,
    inventory: GpuInventory,
    model: FeasibilityModel,
    engine: Engine,
    structure: ModelStructure | None,
) -> Roofline | None:
    """The measured decode speed against the memory-bandwidth ceiling: the weights one verify pass reads
    (``structure``: the experts its tokens reach; unknown: every weight, and the ceiling is unknown) and
    the KV it attends to, plus the separate draft model's weights times its passes per verify (an upper
    bound)."""
    measurement = outcome.measurement
    bandwidth = min((g.bandwidth_bytes_per_s or 0 for g in inventory.gpus), default=0)
    weights = outcome.memory.weights_bytes if outcome.memory else None
    weights = weights or model.weights_per_gpu(outcome.plan.flags)
    if measurement is None or not bandwidth or not weights:
        return None
    speed = measurement.metric("decode_tok_s")
    accept = measurement.metric("accept_length")
    contexts = [(r.prompt_tokens or 0) + r.completion_tokens / 2 for r in measurement.requests if r.round >= 0]
    if speed is None or not contexts:
        return None
    draft = engine.draft_reads(outcome.plan.flags)
    draft_bytes = model_weight_bytes(draft.model) if draft is not None else None
    tokens = measurement.concurrency * engine.verify_tokens(outcome.plan.flags)
    return roofline(
        draft_bytes_per_pass=draft_bytes * draft.passes_per_verify if draft is not None and draft_bytes else 0.0,
        decode_tok_s=speed.value,
        accept_length=accept.value if accept else None,
        weights_bytes_per_gpu=weights * structure.read_share(tokens) if structure is not None else weights,
        kv_bytes_per_token_per_gpu=outcome.memory.kv_bytes_per_token if outcome.memory else None,
        mean_context_tokens=sum(contexts) / len(contexts),
        bandwidth_bytes_per_s=bandwidth,
        unknown=None if structure is not None else UNKNOWN_STRUCTURE,
    )


UNKNOWN_STRUCTURE = "the model's config.json was not found or its layers are not counted: what a pass reads is unknown"
