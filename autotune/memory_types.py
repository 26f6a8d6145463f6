"""What memory feasibility reads and writes, as data: an engine's memory rules, what one trial
taught, and a prediction and its parts (the model that uses them: :mod:`autotune.feasibility`)."""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from autotune.outcomes import MemorySide as Side
from autotune.space import FlagValue


def flag_number(value: FlagValue | None) -> float | None:
    """A flag's value as a number; None for a switch, a string or no value."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


class MemoryRules(BaseModel):
    """An engine's memory monotonicity, as data: which flags are its fraction, its pool's and its
    headroom's demands, and which do not matter to either (docs/how-it-works.md, "Memory")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    fraction_flag: str
    default_fraction: float | None = Field(default=None, description="fraction assumed when the flag is unset")
    budget_of: Literal["free", "total"] = Field(
        default="free",
        description="what the fraction is of: the free memory at start (SGLang), or the GPU's total memory, "
        "which must then be free at start (vLLM)",
    )
    tp_flag: str = "tp-size"
    pool_demand: frozenset[str] = frozenset()
    pool_irrelevant: frozenset[str] = frozenset()
    pool_scale: dict[str, dict[str, float]] = Field(
        default_factory=dict,
        description="flags whose values scale the pool each token needs by a known factor (KV cache dtype: "
        "value -> relative bytes); values not listed are compared as unordered",
    )
    headroom_demand: frozenset[str] = frozenset()
    headroom_irrelevant: frozenset[str] = frozenset()
    graph_batch_flag: str | None = Field(default=None, description="captured batch size of the decode graphs")
    graph_batch_cap_flag: str | None = Field(
        default=None,
        description="flag whose value caps the captured graph batch, an explicit one included (SGLang captures "
        "graphs only up to the request-pool size, --max-running-requests)",
    )
    graph_width_flag: str | None = Field(default=None, description="tokens per sequence in a graph (draft tokens)")
    graph_ignored: frozenset[str] = Field(
        default=frozenset(), description="flags that do not change the headroom once the graph tokens are known"
    )
    activation_demand: frozenset[str] = Field(
        default=frozenset(), description="flags whose larger values need more run-time memory outside the graphs"
    )
    headroom_added: frozenset[str] = Field(
        default=frozenset(),
        description="flags that, set where a headroom death left them unset, only add to the headroom's need at "
        "as many graph tokens (SGLang's drafter: its graphs and buffers come on top of the target's, whose "
        "verify graphs hold batch x draft tokens as decode graphs of as many tokens do)",
    )
    weights_flags: frozenset[str] = Field(
        default=frozenset(), description="flags that choose which weights load (a drafter): never presumed alike"
    )
    per_token_neutral: frozenset[str] = Field(
        default=frozenset(),
        description="flags that change neither the pool's bytes per token nor the tokens one request needs, "
        "so a pool death's printed figures speak across their values (SGLang: the draft's shape, the running "
        "requests, the graph batch; the pool is the fraction's budget less the weights, over the KV cell)",
    )
    per_token_coupled: frozenset[str] = Field(
        default=frozenset(),
        description="flags under which those are no longer neutral (SGLang's explicit mamba cache size: its "
        "slots take pool room per running request and draft token)",
    )
    context_flag: str | None = Field(default=None, description="the context length: tokens one request may need")
    kv_share_flag: str | None = Field(
        default=None,
        description="the hybrid state ratio r: the full-attention KV gets 1 / (1 + r) of the pool (SGLang's "
        "mamba ratio; a model without linear attention ignores it, and a space should not tune it there)",
    )
    kv_share_default: float | None = Field(default=None, description="the ratio when the flag is unset")
    state_short: tuple[str, ...] = Field(
        default=(),
        description="messages (regexes) by which a pool death says a hybrid model's state cache ran short, not "
        "the KV: its slots are the state share of the pool (larger with the fraction and the ratio) over the "
        "state each request needs (larger with the state demands)",
    )
    state_demand: frozenset[str] = Field(
        default=frozenset(),
        description="flags whose larger values need more of the state cache (SGLang: the speculative "
        "intermediate state per draft token, per running request)",
    )
    state_kept: frozenset[str] = Field(
        default=frozenset(),
        description="other flags that size the state cache, compared as equal; besides these, the state "
        "demands, the weights, the tensor-parallel size, the fraction and the ratio, none matters to it",
    )

    def state_ran_short(self, reason: str | None) -> bool:
        """Whether a pool death's message says the hybrid state cache ran short."""
        return bool(reason) and any(re.search(pattern, reason or "") for pattern in self.state_short)

    def state_no_roomier(
        self, failed: Mapping[str, FlagValue], candidate: Mapping[str, FlagValue], *, relevant: Collection[str]
    ) -> bool:
        """Whether ``candidate`` leaves a hybrid's state cache no more room per request than ``failed``, whose
        state cache ran short (the fraction aside): a state ratio no larger, state demands no smaller, a
        tensor-parallel size no larger, the same weights and other state flags. Flags that do not size the
        state cache are not compared, unless a served launch showed one to matter (``relevant``)."""
        ratio, tp = self.kv_share_flag, self.tp_flag
        if ratio is not None:
            ratios = [flag_number(flags.get(ratio, self.kv_share_default)) for flags in (failed, candidate)]
            if ratios[0] is None or ratios[1] is None or ratios[1] > ratios[0]:
                return False
        if (flag_number(candidate.get(tp)) or 1.0) > (flag_number(failed.get(tp)) or 1.0):
            return False
        equal = self.state_kept | self.weights_flags | set(relevant)
        for name in (set(failed) | set(candidate)) - {ratio, tp, self.fraction_flag}:
            a, b = failed.get(name), candidate.get(name)
            numbers = flag_number(a), flag_number(b)
            if name in self.state_demand and numbers[0] is not None and numbers[1] is not None:
                if numbers[1] < numbers[0]:
                    return False
            elif (name in self.state_demand or name in equal) and a != b:
                return False
        return True


class Prediction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    feasible: bool
    side: Side | None = None
    reason: str | None = None
    pool_bytes: float | None = Field(default=None, description="predicted static pool per GPU")


class Observation(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    flags: dict[str, FlagValue]
    side: Side
    trial: int | None = None
    state_short: bool = Field(default=False, description="a pool death of a hybrid model's state cache")
    shortfall_bytes: float | None = Field(
        default=None, description="a headroom death: the least its need exceeded its headroom by, as its message showed"
    )


class HeadroomUse(BaseModel):
    """How much of its headroom a launch that served used, per GPU."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flags: dict[str, FlagValue]
    server_free_bytes: float = Field(description="free memory the server measured before loading")
    runtime_bytes: float = Field(description="headroom used besides the CUDA graphs (activations, workspaces)")
    trial: int | None = None


class MemoryLesson(BaseModel):
    """What one trial taught about memory, in exact bytes: stored with the trial, and learned from
    the same way whether the trial just ran or a resumed study reads it back."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    flags: dict[str, FlagValue]
    trial: int
    side: Side | None = Field(default=None, description="the launch died of memory on this side")
    state_short: bool = Field(default=False, description="a pool death whose message says the state cache ran short")
    weights_bytes: float | None = None
    graph_bytes: float | None = None
    graph_batch: int | None = None
    server_free_bytes: float | None = Field(default=None, description="free memory the server logged before loading")
    runtime_bytes: float | None = Field(default=None, description="headroom used besides the graphs (served launches)")
    served: bool = Field(default=False, description="the launch started and served")
    pool_tokens: int | None = Field(
        default=None, description="tokens the KV pool held, as the engine logged (served) or printed (a death)"
    )
    pool_fraction: float | None = Field(default=None, description="the fraction the engine printed it sized it at")
    needed_tokens: int | None = Field(default=None, description="tokens one request needed, as a death printed")
    kv_cell_bytes: float | None = Field(default=None, description="KV bytes per token, as logged or printed")
    headroom_shortfall_bytes: float | None = Field(
        default=None, description="a headroom death: the least its need exceeded what was free, as its message showed"
    )


class FractionWindow(BaseModel):
    """The fractions that deaths of alike launches leave open (:meth:`FeasibilityModel.fraction_window`)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    low: float | None = Field(default=None, description="the highest fraction that ran out of pool memory")
    low_trial: int | None = None
    high: float | None = Field(default=None, description="the lowest fraction that ran out of headroom")
    high_trial: int | None = None

    def open(self, fraction: float) -> bool:
        """Whether ``fraction`` lies strictly between the deaths (no death bounds it on its side)."""
        return (self.low is None or fraction > self.low) and (self.high is None or fraction < self.high)

    def open_above(self, fraction: float) -> bool:
        """Whether ``fraction`` lies above the pool deaths (the headroom side left to a prediction)."""
        return self.low is None or fraction > self.low

    def middle(self, low: float, high: float, step: float | None) -> float | None:
        """The middle of the window within a tuned range ``low``..``high`` (on its ``step`` grid):
        each death there halves what is left. None when no value of the range lies inside."""
        mid = ((self.low if self.low is not None else low) + (self.high if self.high is not None else high)) / 2
        if step:
            mid = low + round((mid - low) / step) * step
        mid = round(mid, 10)
        return mid if low <= mid <= high and self.open(mid) else None


class GraphPoint(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: float
    bytes: float
