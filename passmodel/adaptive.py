"""Adaptive speculative decoding (``--speculative-adaptive``) as SGLang 0.5.23 has it.

Read off ``sglang/srt/speculative/adaptive_spec_params.py`` and ``arg_groups/speculative_hook.py``
(0.5.23): the config is a JSON object whose integer-string keys are batch-size slots, each with its
``candidate_steps`` (0 = no drafting) and EMA knobs; every candidate step is a runtime state with its
own CUDA graphs. After each verify pass the slot of the batch's size feeds the batch's mean accepted
draft count into an EMA and, after a warm-up and every few passes, moves one tier down when the EMA
falls below the tier beneath, or up while it exceeds the current tier. 0.5.23 reads no ``strategy``
key (``throughput_aware`` came later); unknown keys are ignored.
"""

from __future__ import annotations

import bisect
import json
from dataclasses import dataclass
from pathlib import Path


class Refused(Exception):
    """SGLang would die on this adaptive setting (``launch`` turns it into its LaunchError)."""

    def __init__(self, exc_type: str, message: str) -> None:
        super().__init__(message)
        self.exc_type = exc_type
        self.message = message


# DEFAULT_ADAPTIVE_CONFIG of 0.5.23: batch-size slot -> (candidate steps, down hysteresis).
_DEFAULT_SLOTS = {1: ((1, 3, 5, 7), -0.25), 8: ((0, 1, 3), 0.0), 32: ((0, 1), 0.0), 64: ((0,), 0.0)}


@dataclass(frozen=True)
class Slot:
    """One batch-size slot's candidate steps and EMA knobs (SGLang's defaults where the config is silent)."""

    batch_size: int
    candidate_steps: tuple[int, ...]
    ema_alpha: float = 0.2
    update_interval: int = 5
    warmup_batches: int = 10
    down_hysteresis: float = -0.25
    up_hysteresis: float = 0.0


@dataclass(frozen=True)
class AdaptiveConfig:
    slots: tuple[Slot, ...]

    @property
    def candidate_steps(self) -> tuple[int, ...]:
        """The union over slots: every tier SGLang builds a runtime state (and CUDA graphs) for."""
        return tuple(sorted({s for slot in self.slots for s in slot.candidate_steps}))

    def slot_for(self, batch_size: int) -> Slot:
        """The slot with the largest key <= the batch size (the smallest slot below all keys)."""
        keys = [slot.batch_size for slot in self.slots]
        return self.slots[max(0, bisect.bisect_right(keys, batch_size) - 1)]


DEFAULT_CONFIG = AdaptiveConfig(
    slots=tuple(Slot(bs, steps, down_hysteresis=down) for bs, (steps, down) in _DEFAULT_SLOTS.items())
)


def load_config(path: str | None) -> AdaptiveConfig:
    """``--speculative-adaptive-config``: SGLang's default without one.

    Raises:
        Refused: what SGLang raises reading it (a missing file, bad JSON, no batch-size key,
            bad candidate steps), with its exception type and message.
    """
    if path is None:
        return DEFAULT_CONFIG
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise Refused("FileNotFoundError", f"[Errno 2] No such file or directory: '{path}'") from None
    except json.JSONDecodeError as exc:
        raise Refused("json.decoder.JSONDecodeError", str(exc)) from None
    if not isinstance(data, dict):
        raise Refused("AttributeError", f"'{type(data).__name__}' object has no attribute 'items'")
    slots = []
    for key, entry in data.items():
        if not key.isdigit():
            continue
        steps = entry.get("candidate_steps") if isinstance(entry, dict) else None
        if not isinstance(steps, list) or not steps or not all(isinstance(s, int) and s >= 0 for s in steps):
            raise Refused("ValueError", f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}")
        knobs = {**data, **entry}
        slots.append(
            Slot(
                batch_size=int(key),
                candidate_steps=tuple(sorted(set(steps))),
                ema_alpha=float(knobs.get("ema_alpha", 0.2)),
                update_interval=int(knobs.get("update_interval", 5)),
                warmup_batches=int(knobs.get("warmup_batches", 10)),
                down_hysteresis=float(knobs.get("down_hysteresis", -0.25)),
                up_hysteresis=float(knobs.get("up_hysteresis", 0.0)),
            )
        )
    if not slots:
        raise Refused(
            "ValueError",
            "speculative_adaptive_config must contain at least one integer-string BS key, e.g. "
            f'{{"1": {{"candidate_steps": [1,3,7]}}}}. Got keys: {list(data)}',
        )
    return AdaptiveConfig(slots=tuple(sorted(slots, key=lambda s: s.batch_size)))


def unsupported_reason(algorithm: str, topk: int | None) -> str | None:
    """Why SGLang turns adaptive off (with a warning, not an error); None when it runs.
    NEXTN has become EAGLE by then."""
    resolved = "EAGLE" if algorithm == "NEXTN" else algorithm
    if resolved not in ("EAGLE", "EAGLE3"):
        return f"speculative_algorithm={resolved} (only EAGLE/EAGLE3 are supported)"
    if topk is not None and topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    return None


def initial_steps(config: AdaptiveConfig, steps: int | None) -> int:
    """The starting tier: the given steps, which must be a candidate, else the middle candidate.

    Raises:
        Refused: SGLang's ValueError for steps outside the candidates.
    """
    candidates = list(config.candidate_steps)
    chosen = candidates[len(candidates) // 2] if steps is None else steps
    if chosen not in candidates:
        raise Refused(
            "ValueError",
            f"--speculative-num-steps={chosen} is not in the adaptive config candidate_steps {candidates}. "
            "Pass one of those values.",
        )
    return chosen


def tier_graph_batches(config: AdaptiveConfig, capture_sizes: list[int]) -> dict[int, int]:
    """The largest captured batch of each tier: a tier's graphs cover the batch sizes whose slot lists it."""
    largest: dict[int, int] = {}
    for size in capture_sizes:
        for step in config.slot_for(size).candidate_steps:
            largest[step] = max(largest.get(step, 0), size)
    return largest


class _SlotState:
    def __init__(self, slot: Slot, steps: int) -> None:
        self.slot = slot
        self.steps = steps if steps in slot.candidate_steps else slot.candidate_steps[len(slot.candidate_steps) // 2]
        self.ema = float(self.steps - 1)
        self.batches = 0

    def observe(self, accepted_drafts: list[int]) -> None:
        slot = self.slot
        if self.steps > 0:
            mean = sum(accepted_drafts) / len(accepted_drafts)
            self.ema = (1 - slot.ema_alpha) * self.ema + slot.ema_alpha * mean
        self.batches += 1
        if self.batches <= slot.warmup_batches or (self.batches - slot.warmup_batches) % slot.update_interval:
            return
        self.steps = self._target()

    def _target(self) -> int:
        candidates = self.slot.candidate_steps
        index = candidates.index(self.steps)
        if self.steps == 0:  # after a no-drafting interval, probe the smallest positive tier
            target = candidates[min(index + 1, len(candidates) - 1)]
            if target > 0 and self.ema < 0:
                self.ema = float(target - 1)
            return target
        start = index
        while index > 0:
            below = candidates[index - 1]
            threshold = (0.5 if below == 0 else below - 0.5) + self.slot.down_hysteresis
            if self.ema > threshold:
                break
            index -= 1
        if index == start:
            while index < len(candidates) - 1 and self.ema > candidates[index] - 0.5 + self.slot.up_hysteresis:
                index += 1
        return candidates[index]


class StepController:
    """The run-time tier choice: one EMA per batch-size slot, fed after every verify pass. A batch is
    padded to the next captured CUDA-graph size before it is routed to a slot (``graph_sizes``;
    None: graphs off, the batch's own size routes)."""

    def __init__(self, config: AdaptiveConfig, steps: int, graph_sizes: list[int] | None = None) -> None:
        self._config = config
        self._slots = {slot.batch_size: _SlotState(slot, steps) for slot in config.slots}
        self._graph_sizes = sorted(graph_sizes) if graph_sizes else None

    def _slot(self, batch_size: int) -> _SlotState:
        sizes = self._graph_sizes
        if sizes is not None and (index := bisect.bisect_left(sizes, batch_size)) < len(sizes):
            batch_size = sizes[index]
        return self._slots[self._config.slot_for(batch_size).batch_size]

    def steps_for(self, batch_size: int) -> int:
        return self._slot(batch_size).steps

    def observe(self, batch_size: int, accepted_drafts: list[int]) -> None:
        """One verify pass gave each request of the batch these accepted draft tokens."""
        if accepted_drafts:
            self._slot(batch_size).observe(accepted_drafts)
