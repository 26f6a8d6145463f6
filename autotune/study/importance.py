"""Which tuned flags mattered: Optuna's parameter importance (PED-ANOVA, its default).

Computing it imports Optuna and numpy (about half a second before ``show`` could print), so the
runner keeps the result in the study (:func:`~autotune.study.attrs.record_importance`) and ``show``
computes it only when that copy is missing or older than the study's completed trials.
"""

from __future__ import annotations

import re
import warnings
from typing import TYPE_CHECKING

from pydantic import Field

from autotune.models import Frozen

if TYPE_CHECKING:
    import optuna


class Importance(Frozen):
    """Which tuned flags mattered for the objective, as shares that add up to 1."""

    method: str = "PED-ANOVA"
    values: dict[str, float] = Field(default_factory=dict, description="flag -> share, largest first")
    trials_used: int = 0
    note: str | None = Field(default=None, description="why there are no values, or a caveat about them")


def compute_importance(study: optuna.Study, *, levels: int) -> Importance:
    """Optuna's parameter importance over the completed trials; infeasible ones count as 0.

    ``levels``: the study's load levels (0 for a study of one level); a levels study is judged on
    its primary level. Optuna's warnings (e.g. too few trials in some regime) become the note
    instead of going to stderr.
    """
    import optuna

    complete = [t for t in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.COMPLETE,)) if t.params]
    if len(study.directions) != max(levels, 1):
        return Importance(note="importance is computed for single-objective studies only")
    if len(complete) < 2:
        return Importance(trials_used=len(complete), note="needs at least 2 completed trials")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            # A levels study: importance for its primary level (the first value).
            primary = (lambda t: t.values[0]) if levels else None
            values = optuna.importance.get_param_importances(study, target=primary)
        except (ValueError, RuntimeError) as exc:
            return Importance(trials_used=len(complete), note=f"Optuna could not compute it: {exc}")
    note = None
    if caught:
        named = sorted({m for w in caught for m in re.findall(r"`([^`]+)`", str(w.message))})
        where = f" of {', '.join('--' + n for n in named)}" if named else ""
        note = (
            f"a rough estimate from {len(complete)} completed trials: Optuna warns that some value ranges{where} "
            "hold fewer than 2 trials"
            if named
            else f"a rough estimate from {len(complete)} completed trials (Optuna: {caught[0].message})"
        )
    # Ties (shares equal to 9 places, e.g. flags that never mattered) by name, so every reading of a
    # study lists them alike.
    ordered = dict(sorted(((k, float(v)) for k, v in values.items()), key=lambda kv: (-round(kv[1], 9), kv[0])))
    return Importance(values=ordered, trials_used=len(complete), note=note)
