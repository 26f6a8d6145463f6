"""A best that survives a second look: the noise of the objective, finalists, and the confirmed best.

The highest of many noisy measurements is biased upward. So the top few distinct configurations
(and the best baseline) are measured again on fresh launches, interleaved so drift hits all alike,
and the best is chosen from the mean over every launch of each. Finalists whose means lie within
each other's noise, and apart by no more than the precision the study measures to, are a tie,
resolved toward the engine's defaults: fewer changed flags, then less memory. (Within the noise
alone is not enough: with a noisy objective a config 30 % slower can be, and the higher mean is
then the better bet.) Pure functions over :class:`~autotune.records.TrialRecord`; the runner launches.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pydantic import Field

from autotune.measure.client import t95
from autotune.models import Frozen
from autotune.outcomes import OutcomeKind
from autotune.records import TrialRecord

# Relaunching the same configuration moved a real H200's decode figure by 1-5 % (up to 19 % for
# long drafts; shared/real-gpu.md): the prior for the between-launch noise until a study measures it.
PRIOR_LAUNCH_NOISE = 0.05
MEMORY_FLAG = "mem-fraction-static"


class Noise(Frozen):
    """The relative noise of a configuration's objective value, as measured in this study."""

    within_launch: float | None = Field(default=None, description="relative sd between rounds of one launch")
    between_launches: float | None = Field(default=None, description="relative sd between launches")
    launches: int = Field(default=0, description="relaunches the between-launch figure rests on")

    @property
    def total(self) -> float:
        """Relative sd of one launch's value: both parts, the prior standing in for what is unmeasured."""
        between = self.between_launches if self.between_launches is not None else PRIOR_LAUNCH_NOISE
        return math.hypot(self.within_launch or 0.0, between)


class Finalist(Frozen):
    trial: int = Field(description="the trial that first measured this configuration")
    label: str
    config_key: str | None
    values: list[float] = Field(description="the objective of every launch of it, first measurement included")
    mean: float
    ci95: float | None = None
    changed_flags: int
    memory: float | None = Field(default=None, description="mem-fraction-static, or peak GiB where logged")


class Confirmation(Frozen):
    """The finalists re-measured and the best chosen from them."""

    launches: int = Field(description="fresh launches per finalist")
    finalists: list[Finalist] = Field(description="highest mean first")
    best: int = Field(description="trial number of the confirmed best configuration")
    tied_with: list[int] = Field(default_factory=list, description="finalists within the best's noise")
    first_best: int | None = Field(default=None, description="the best by single first measurement")
    note: str
    noise: Noise


def _objective_runs(records: Sequence[TrialRecord]) -> list[TrialRecord]:
    """Launched, measured trials (duplicates borrow a measurement, so they are not launches)."""
    return [r for r in records if r.outcome == OutcomeKind.OK.value and r.reused_from is None and r.value]


def measure_noise(records: Sequence[TrialRecord], objective: str) -> Noise:
    """Within-launch noise from each launch's CI; between-launch noise from configurations launched
    more than once (finalists' confirmations), pooled over configurations."""
    within: list[float] = []
    groups: dict[str, list[float]] = {}
    for record in _objective_runs(records):
        metric = record.metrics.get(objective)
        if metric is not None and metric.ci95 and metric.n and metric.n >= 2 and metric.value:
            within.append(metric.ci95 / t95(metric.n - 1) * math.sqrt(metric.n) / metric.value)
        if record.config_key and record.value:
            groups.setdefault(record.config_key, []).append(record.value)
    squares, dof = 0.0, 0
    for values in groups.values():
        if len(values) >= 2:
            mean = statistics.fmean(values)
            squares += sum((v / mean - 1) ** 2 for v in values)
            dof += len(values) - 1
    return Noise(
        within_launch=statistics.median(within) if within else None,
        between_launches=math.sqrt(squares / dof) if dof else None,
        launches=dof,
    )


def best_first_measured(records: Sequence[TrialRecord]) -> TrialRecord | None:
    """The best by single measurement, as an unconfirmed study reports it."""
    feasible = [
        r for r in records if r.state == "COMPLETE" and r.feasible and r.value is not None and r.confirm_of is None
    ]
    return max(feasible, key=lambda r: r.value or 0.0) if feasible else None


def choose_finalists(records: Sequence[TrialRecord], *, top: int) -> list[TrialRecord]:
    """The ``top`` best distinct configurations by first measurement, plus the best baseline."""
    candidates = sorted(
        (r for r in _objective_runs(records) if r.confirm_of is None and r.feasible),
        key=lambda r: -(r.value or 0.0),
    )
    chosen: list[TrialRecord] = []
    keys: set[str | None] = set()
    for record in candidates:
        if record.config_key in keys:
            continue
        if len(chosen) < top:
            chosen.append(record)
            keys.add(record.config_key)
    baseline = next((r for r in candidates if r.baseline is not None), None)
    if baseline is not None and baseline.config_key not in keys:
        chosen.append(baseline)
    return chosen


def _changed_flags(record: TrialRecord, fixed: Sequence[str]) -> int:
    return len([name for name in record.flags if name not in fixed])


def _memory(record: TrialRecord) -> float | None:
    peak = record.readings.get("gpu_peak_used_gib")
    if isinstance(peak, (int, float)):
        return float(peak)
    fraction = record.flags.get(MEMORY_FLAG)
    return float(fraction) if isinstance(fraction, (int, float)) else None


def confirm(
    records: Sequence[TrialRecord],
    finalists: Sequence[TrialRecord],
    *,
    objective: str,
    fixed: Sequence[str],
    launches: int,
    negligible: float,
) -> Confirmation | None:
    """Choose the best from every launch of each finalist (None when no finalist was measured).

    A finalist's CI uses the between-launch sd pooled over all finalists (relative to each mean), so
    a few launches each still give a usable interval; finalists whose means differ by less than the
    combined CIs and by at most ``negligible`` (relative: the measurement's precision target) are
    tied, and the tie goes to the fewest changed flags, then the least memory.
    """
    by_key: dict[str | None, list[float]] = {}
    for record in _objective_runs(records):
        by_key.setdefault(record.config_key, []).append(record.value or 0.0)
    rows = [(f, by_key.get(f.config_key, [])) for f in finalists]
    rows = [(f, values) for f, values in rows if values]
    if not rows:
        return None
    squares = sum(sum((v / statistics.fmean(vs) - 1) ** 2 for v in vs) for _, vs in rows)
    dof = sum(len(vs) - 1 for _, vs in rows)
    pooled = math.sqrt(squares / dof) if dof else None
    built = sorted(
        (
            Finalist(
                trial=f.number,
                label=f.baseline or f"trial {f.number}",
                config_key=f.config_key,
                values=values,
                mean=statistics.fmean(values),
                ci95=t95(dof) * pooled * statistics.fmean(values) / math.sqrt(len(values)) if pooled else None,
                changed_flags=_changed_flags(f, fixed),
                memory=_memory(f),
            )
            for f, values in rows
        ),
        key=lambda f: -f.mean,
    )
    top = built[0]
    within_noise = [f for f in built[1:] if top.ci95 is not None and f.ci95 is not None
                    and top.mean - f.mean <= math.hypot(top.ci95, f.ci95)]  # fmt: skip
    tied = [f for f in within_noise if top.mean - f.mean <= negligible * top.mean]
    unclear = [f for f in within_noise if f not in tied]
    group = [top, *tied]
    chosen = min(group, key=lambda f: (f.changed_flags, f.memory if f.memory is not None else math.inf, -f.mean))
    first = best_first_measured(records)
    if not tied:
        note = f"{top.label} is best: {top.mean:.4g}" + (f" ± {top.ci95:.2g}" if top.ci95 else "")
        note += f" over {len(top.values)} launches, "
        if unclear:  # ahead by more than the precision asked for, yet within the noise: the better bet only
            names = ", ".join(f"{f.label} ({1 - f.mean / top.mean:.0%} behind)" for f in unclear)
            note += f"the highest mean but within the noise of {names}: more launches would settle it"
        else:
            note += "clear of the other finalists"
    else:
        names = ", ".join(f.label for f in group)
        note = (
            f"tie within the noise between {names}; chose {chosen.label} as nearest the engine's defaults "
            f"({chosen.changed_flags} flags changed"
            + (f", memory {chosen.memory:g}" if chosen.memory is not None else "")
            + ")"
        )
    noise = measure_noise(records, objective)
    return Confirmation(
        launches=launches,
        finalists=built,
        best=chosen.trial,
        tied_with=[f.trial for f in group if f.trial != chosen.trial],
        first_best=first.number if first else None,
        note=note,
        noise=noise,
    )
