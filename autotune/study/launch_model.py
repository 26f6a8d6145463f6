"""A model of the objective over the configurations a study launched: each configuration's posterior mean.

The race's finalists are the search's best few; ranked by their single launches, a lucky draw of a
middling configuration displaces a truly good one. A Gaussian process over every served launch's log
value pools each configuration's launches with those of configurations like it: the prior mean is the
launches' mean, the covariance decays with the distance between flag settings (a categorical flag
that differs counts 1, a number the share of its launched range it moved), and the length scale and
the noise's share of the variance are those of highest marginal likelihood on a small grid (a study
has tens of launches: exact inference in pure Python is cheap).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from itertools import product

from autotune.space import FlagValue

# The grid the fit chooses from: length scales in flags changed, and the noise's share of the variance.
LENGTH_SCALES = (0.5, 1.0, 2.0, 4.0)
NOISE_SHARES = (0.1, 0.25, 0.5, 0.75)

Config = Mapping[str, FlagValue]


def _number(value: FlagValue | None) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _spans(configs: Sequence[Config]) -> dict[str, float]:
    """Each numeric flag's launched range (a flag that is ever not a number is categorical)."""
    spans: dict[str, float] = {}
    for name in {k for c in configs for k in c}:
        values = [c.get(name) for c in configs if name in c]
        numbers = [n for n in map(_number, values) if n is not None]
        if len(numbers) == len(values) and numbers:
            spans[name] = max(numbers) - min(numbers)
    return spans


def distance(a: Config, b: Config, spans: Mapping[str, float]) -> float:
    """Flags changed between ``a`` and ``b``: a categorical flag (or one set in only one) counts 1, a
    number the share of its launched range it moved."""
    total = 0.0
    for name in a.keys() | b.keys():
        x, y = a.get(name), b.get(name)
        if x == y:
            continue
        span = spans.get(name)
        nx, ny = _number(x), _number(y)
        total += abs(nx - ny) / span if span and nx is not None and ny is not None else 1.0
    return total


def _cholesky(matrix: list[list[float]]) -> list[list[float]] | None:
    size = len(matrix)
    low = [[0.0] * size for _ in range(size)]
    for i in range(size):
        for j in range(i + 1):
            s = matrix[i][j] - sum(low[i][k] * low[j][k] for k in range(j))
            if i == j:
                if s <= 0:
                    return None
                low[i][i] = math.sqrt(s)
            else:
                low[i][j] = s / low[j][j]
    return low


def _solve(low: list[list[float]], rhs: list[float]) -> list[float]:
    """(L Lᵀ)⁻¹ rhs by forward and back substitution."""
    size = len(low)
    z = [0.0] * size
    for i in range(size):
        z[i] = (rhs[i] - sum(low[i][k] * z[k] for k in range(i))) / low[i][i]
    x = [0.0] * size
    for i in reversed(range(size)):
        x[i] = (z[i] - sum(low[k][i] * x[k] for k in range(i + 1, size))) / low[i][i]
    return x


def posterior_means(launches: Sequence[tuple[Config, float]]) -> list[float]:
    """The model's mean log value at each distinct configuration of ``launches`` (configuration,
    objective > 0), in the order each first appears; each configuration's own mean where the launches
    are too few or all alike to fit a model."""
    configs: list[Config] = []
    index: list[int] = []
    for config, _ in launches:
        if config not in configs:
            configs.append(config)
        index.append(configs.index(config))
    y = [math.log(value) for _, value in launches]
    own = [statistics.fmean([v for i, v in zip(index, y, strict=True) if i == c]) for c in range(len(configs))]
    if len(configs) < 3 or statistics.pvariance(y) <= 0:
        return own
    prior, variance = statistics.fmean(y), statistics.pvariance(y)
    spans = _spans(configs)
    apart = [[distance(a, b, spans) for b in configs] for a in configs]
    centred = [v - prior for v in y]
    best: tuple[float, list[list[float]], float, float] | None = None
    for scale, share in product(LENGTH_SCALES, NOISE_SHARES):
        signal, noise = (1 - share) * variance, share * variance
        covariance = [
            [signal * math.exp(-apart[a][b] / scale) + (noise if i == j else 0.0) for j, b in enumerate(index)]
            for i, a in enumerate(index)
        ]
        low = _cholesky(covariance)
        if low is None:
            continue
        alpha = _solve(low, centred)
        evidence = -0.5 * sum(c * a for c, a in zip(centred, alpha, strict=True)) - sum(
            math.log(low[i][i]) for i in range(len(y))
        )
        if best is None or evidence > best[0]:
            best = (evidence, low, scale, signal)
    if best is None:
        return own
    _, low, scale, signal = best
    alpha = _solve(low, centred)
    return [
        prior + sum(signal * math.exp(-apart[c][i] / scale) * a for i, a in zip(index, alpha, strict=True))
        for c in range(len(configs))
    ]
