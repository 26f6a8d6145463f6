"""The statistics a measurement rests on: means with their 95 % intervals, percentiles, and the test
for a trend across rounds. Pure functions over numbers; the race's and the schedule's intervals use
the same t quantiles."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from pydantic import Field

from autotune.models import Frozen


class Metric(Frozen):
    """A number with its unit, direction and uncertainty."""

    name: str
    unit: str
    value: float
    ci95: float | None = Field(default=None, description="half width of the 95% confidence interval")
    n: int
    higher_is_better: bool = True

    @property
    def rel_ci95(self) -> float | None:
        return self.ci95 / abs(self.value) if self.ci95 is not None and self.value else None


class Steadiness(Frozen):
    early: float
    late: float
    drift: float = Field(description="(late - early) / early")
    steady: bool


def t95(dof: int) -> float:
    """Two-sided 95% Student t quantile."""
    table = {
        1: 12.71,
        2: 4.303,
        3: 3.182,
        4: 2.776,
        5: 2.571,
        6: 2.447,
        7: 2.365,
        8: 2.306,
        9: 2.262,
        10: 2.228,
        12: 2.179,
        15: 2.131,
        20: 2.086,
        25: 2.060,
        30: 2.042,
        60: 2.000,
    }
    for limit in sorted(table):
        if dof <= limit:
            return table[limit]
    return 1.96


def mean_metric(name: str, unit: str, values: Sequence[float], *, higher_is_better: bool = True) -> Metric:
    n = len(values)
    mean = statistics.fmean(values)
    ci = t95(n - 1) * statistics.stdev(values) / math.sqrt(n) if n >= 2 else None
    return Metric(name=name, unit=unit, value=mean, ci95=ci, n=n, higher_is_better=higher_is_better)


def relative_ci95(values: Sequence[float]) -> float:
    """The 95 % interval's half width relative to the mean; infinite while it cannot be estimated."""
    metric = mean_metric("x", "", values)
    return metric.rel_ci95 if metric.rel_ci95 is not None else math.inf


def percentile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated percentile, q in [0, 100]."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("no values")
    position = (len(ordered) - 1) * q / 100
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def steadiness(round_values: Sequence[float], *, tolerance: float) -> Steadiness | None:
    """Is there a trend across the rounds? A least-squares line through the round values: drift is
    its relative change from the first round to the last, flagged when beyond ``tolerance`` and
    beyond the noise (the slope's 95% interval excludes zero)."""
    n = len(round_values)
    if n < 3:
        return None
    half = n // 2
    early = statistics.fmean(round_values[:half])
    late = statistics.fmean(round_values[-half:])
    xs = range(n)
    x_mean, y_mean = (n - 1) / 2, statistics.fmean(round_values)
    sxx = sum((x - x_mean) ** 2 for x in xs)
    slope = sum((x - x_mean) * (y - y_mean) for x, y in zip(xs, round_values, strict=True)) / sxx
    residual = sum((y - (y_mean + slope * (x - x_mean))) ** 2 for x, y in zip(xs, round_values, strict=True))
    slope_se = math.sqrt(residual / (n - 2) / sxx)
    drift = slope * (n - 1) / y_mean if y_mean else 0.0
    significant = abs(slope) > t95(n - 2) * slope_se
    return Steadiness(early=early, late=late, drift=drift, steady=not (significant and abs(drift) > tolerance))
