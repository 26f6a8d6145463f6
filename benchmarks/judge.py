"""Judging nights: the regret of each method's answer over members or seeds (median, 90th percentile,
mean, shares within 2 % and 5 %, harmful answers, false claims), launches to 2 %, and each row
against autotune's, paired over the same members with a bootstrap interval.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Sequence
from typing import Any

from benchmarks.runs import PREDICTED_AFTER, WITHIN

BOOTSTRAP = 2000  # resamples of the members for each interval


def quantile(values: Sequence[float], q: float) -> float:
    """Nearest-rank quantile (``math.inf`` stands for not reached)."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def paired_interval(
    row: Sequence[float], full: Sequence[float], q: float, rng: random.Random, *, resamples: int = BOOTSTRAP
) -> tuple[float, float]:
    """95 % bootstrap interval of quantile ``q`` of ``row`` minus that of ``full``, members resampled
    in pairs (each member's two runs stay together: the member's difficulty cancels)."""
    n = len(row)
    diffs = []
    for _ in range(resamples):
        picks = [rng.randrange(n) for _ in range(n)]
        diffs.append(quantile([row[i] for i in picks], q) - quantile([full[i] for i in picks], q))
    diffs.sort()
    return diffs[int(0.025 * resamples)], diffs[int(0.975 * resamples) - 1]


def aggregate(rows: list[dict[str, Any]], budget: int) -> dict[str, Any]:
    """Median and worst over seeds; a seed that never got within 2 % counts as not reached."""

    def stat(key: str) -> dict[str, Any]:
        values = [r[key] for r in rows]
        reached = [v for v in values if v is not None]
        ordered = sorted(values, key=lambda v: math.inf if v is None else v)
        median = ordered[(len(ordered) - 1) // 2] if len(ordered) % 2 else None
        if len(ordered) % 2 == 0:
            a, b = ordered[len(ordered) // 2 - 1], ordered[len(ordered) // 2]
            median = None if a is None or b is None else (a + b) / 2
        return {"median": median, "worst": None if len(reached) < len(values) else max(values), "reached": len(reached)}

    return {
        "seeds": len(rows),
        "budget": budget,
        "launches_to_2pct": stat("launches_to_2pct"),
        "trials_to_2pct": stat("trials_to_2pct"),
        "gpu_hours_to_2pct": stat("gpu_hours_to_2pct"),
        "memory_deaths": {"median": statistics.median(r["memory_deaths"] for r in rows),
                          "worst": max(r["memory_deaths"] for r in rows)},
        "memory_death_rate": {"median": statistics.median(r["memory_death_rate"] for r in rows),
                              "worst": max(r["memory_death_rate"] for r in rows)},
        "final_gap": {"median": statistics.median(r["final_gap"] for r in rows),
                      "worst": max(r["final_gap"] for r in rows)},
        "launches": {"median": statistics.median(r["launches"] for r in rows)},
        "gpu_hours": {"median": statistics.median(r["gpu_hours"] for r in rows)},
        "wall_s": {"median": statistics.median(r["wall_s"] for r in rows)},
    }  # fmt: skip


REFERENCE = "autotune (TPE)"  # the row every other is paired with
TPE_NIGHT = "autotune-tpe (--sampler tpe)"  # the same night named: the reference where the default's row is not run
MODEL_NIGHT = "autotune-model (--sampler model)"


def regret_summary(rows: Sequence[dict[str, Any]], budget: int) -> dict[str, Any]:
    """The answer a night ends with, over runs: regret (percent below the optimum) median, 90th
    percentile (nearest rank) and mean; shares within 2 % and 5 %; harmful answers (truly slower than
    the engine's defaults); the race's claims and false claims; the night's launches against ``budget``."""
    regrets = [r["regret_pct"] for r in rows]
    nights = [r["night_launches"] for r in rows]
    return {
        "median": quantile_reached(regrets, 0.5), "p90": quantile_reached(regrets, 0.9),
        "mean": statistics.fmean(regrets),
        "within_2pct": sum(v <= 100 * WITHIN for v in regrets) / len(regrets),
        "within_5pct": sum(v <= 5.0 for v in regrets) / len(regrets),
        "harmful": sum(bool(r["harmful"]) for r in rows),
        "claims": sum(r["claims"] for r in rows), "false_claims": sum(r["false_claims"] for r in rows),
        "night_launches_max": max(nights), "within_budget": all(n <= budget for n in nights),
        "predicted_error_after": predicted_error_spread(rows),
    }  # fmt: skip


def predicted_error_spread(rows: Sequence[dict[str, Any]]) -> dict[str, dict[str, float | int | None]]:
    """Per k of :data:`~benchmarks.runs.PREDICTED_AFTER`: the median and 90th percentile (nearest rank),
    over the runs that predicted it, of the error of the launch predicted after k measured launches,
    and how many runs did (a night without a model predicts none)."""
    spread: dict[str, dict[str, float | int | None]] = {}
    for k in PREDICTED_AFTER:
        errors = [e for r in rows if (e := r.get("predicted_error_after", {}).get(str(k))) is not None]
        spread[str(k)] = {"median": statistics.median(errors) if errors else None,
                          "p90": quantile(errors, 0.9) if errors else None, "runs": len(errors)}  # fmt: skip
    return spread


def paired_regret(by_method: dict[str, list[dict[str, Any]]], *, seed: int = 0) -> dict[str, Any]:
    """Each row's regret median and 90th percentile minus :data:`REFERENCE`'s (else :data:`TPE_NIGHT`'s),
    with the 95 % bootstrap interval (runs resampled in pairs: the same member or seed in both rows)."""
    name_of_reference = REFERENCE if REFERENCE in by_method else TPE_NIGHT
    reference = by_method.get(name_of_reference)
    if reference is None:
        return {}
    mine = [r["regret_pct"] for r in reference]
    paired: dict[str, Any] = {}
    for name, rows in by_method.items():
        if name == name_of_reference:
            continue
        theirs = [r["regret_pct"] for r in rows]
        rng = random.Random(seed)
        paired[name] = {
            label: {"difference": quantile(theirs, q) - quantile(mine, q),
                    "interval": paired_interval(theirs, mine, q, rng)}
            for label, q in (("median", 0.5), ("p90", 0.9))
        }  # fmt: skip
    return paired


def quantile_reached(values: Sequence[float | None], q: float) -> float | None:
    """Nearest-rank quantile; a member that never got within 2 % is larger than any number (None)."""
    ordered = sorted(values, key=lambda v: math.inf if v is None else v)
    return ordered[max(0, math.ceil(q * len(ordered)) - 1)]


def spread(values: Sequence[float | None]) -> dict[str, float | None]:
    """Median, 90th percentile and worst over members (None: not reached)."""
    return {"median": quantile_reached(values, 0.5), "p90": quantile_reached(values, 0.9),
            "worst": quantile_reached(values, 1.0)}  # fmt: skip
