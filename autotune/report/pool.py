"""What a person reads about KV pools: what one launch's pool held against what one request needed, and
which contexts a study's space can hold (the figures: :mod:`autotune.study.pool_tokens`)."""

from __future__ import annotations

from collections.abc import Sequence

from rich.text import Text

from autotune.engines import DEFAULT_ENGINE, get_engine
from autotune.records import TrialRecord
from autotune.study.pool_tokens import ContextFit


def pool_text(record: TrialRecord) -> str | None:
    """What a launch's KV pool held, in tokens, and what one request needed, where the engine said."""
    lesson = record.lessons.memory
    if lesson is None or (lesson.pool_tokens is None and lesson.needed_tokens is None):
        return None
    rules = get_engine(record.engine or DEFAULT_ENGINE).memory_rules
    fraction = lesson.pool_fraction
    if fraction is None and rules is not None:
        given = record.flags.get(rules.fraction_flag)
        fraction = float(given) if isinstance(given, (int, float)) and not isinstance(given, bool) else None
    held = "held an unstated number of tokens" if lesson.pool_tokens is None else f"held {lesson.pool_tokens} tokens"
    at = f" at {rules.fraction_flag if rules else 'fraction'} {fraction:g}" if fraction is not None else ""
    cell = f" ({lesson.kv_cell_bytes / 1024:.1f} KiB of KV per token)" if lesson.kv_cell_bytes else ""
    if lesson.needed_tokens is None:
        return f"{held}{at}{cell}"
    short = ""
    if lesson.pool_tokens is not None and lesson.pool_tokens < lesson.needed_tokens:
        short = f", {lesson.needed_tokens - lesson.pool_tokens} short"
    return f"{held}{at}; one request needed {lesson.needed_tokens}{short}{cell}"


def context_fit_text(fits: Sequence[ContextFit]) -> Text | None:
    """Which tuned contexts can hold one request at the most room the space allows, and who said so."""
    if not fits:
        return None
    text = Text("contexts, at the largest fraction (and most KV room) the space allows:\n", style="bold")
    for fit in fits:
        if fit.fits is None or fit.estimate is None:
            text.append(f"  --{fit.flag} {fit.context}: unknown (no launch's pool speaks for it yet)\n")
            continue
        trials = ", ".join(str(n) for n in fit.estimate.trials)
        said = f"at most about {fit.estimate.tokens:.0f} tokens (the pools of trials {trials})"
        if fit.fits:
            text.append(f"  --{fit.flag} {fit.context}: fits, {said}\n")
        else:
            text.append(f"  --{fit.flag} {fit.context}: cannot fit, {said}; never launched\n", style="red")
    return text
