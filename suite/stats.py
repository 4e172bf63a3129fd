"""Small statistics used by every stage: percentiles, mean, standard error, bootstrap intervals.

Pure Python (no numpy), deterministic: the bootstrap uses its own `random.Random` with a fixed
seed, so the same inputs always give the same interval. Empty inputs give `None`, never an
exception, because a stage with no successful request still writes a summary.
"""

from __future__ import annotations

import logging
import math
import random
from collections.abc import Callable, Sequence

from pydantic import BaseModel, Field

log = logging.getLogger(__name__)

BOOTSTRAP_SEED = 42


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0..100) with linear interpolation between closest ranks.

    The same definition as numpy's default (`method="linear"`): position (n-1)*q/100 in the
    sorted values. None for an empty input.
    """
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q must be within 0..100, got {q}")
    xs = sorted(float(v) for v in values)
    if not xs:
        return None
    if len(xs) == 1:
        return xs[0]
    pos = (len(xs) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    frac = pos - lo
    return xs[lo] + (xs[hi] - xs[lo]) * frac


def mean(values: Sequence[float]) -> float | None:
    """Arithmetic mean; None for an empty input."""
    xs = [float(v) for v in values]
    return math.fsum(xs) / len(xs) if xs else None


def stdev(values: Sequence[float]) -> float | None:
    """Sample standard deviation (n-1 in the denominator); None for fewer than two values."""
    xs = [float(v) for v in values]
    if len(xs) < 2:
        return None
    m = math.fsum(xs) / len(xs)
    return math.sqrt(math.fsum((x - m) ** 2 for x in xs) / (len(xs) - 1))


def standard_error(values: Sequence[float]) -> float | None:
    """Standard error of the mean, s / sqrt(n); None for fewer than two values."""
    s = stdev(values)
    return None if s is None else s / math.sqrt(len(values))


def bootstrap_ci(
    values: Sequence[float],
    statistic: Callable[[Sequence[float]], float | None] = mean,
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = BOOTSTRAP_SEED,
) -> tuple[float, float] | None:
    """Percentile bootstrap interval of `statistic`, with a fixed seed (reproducible).

    None for fewer than two values.
    """
    xs = [float(v) for v in values]
    if len(xs) < 2:
        return None
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be within (0, 1), got {confidence}")
    rng = random.Random(seed)
    stats: list[float] = []
    n = len(xs)
    for _ in range(resamples):
        sample = [xs[rng.randrange(n)] for _ in range(n)]
        value = statistic(sample)
        if value is not None:
            stats.append(value)
    alpha = (1.0 - confidence) / 2.0
    lo = percentile(stats, 100.0 * alpha)
    hi = percentile(stats, 100.0 * (1.0 - alpha))
    assert lo is not None and hi is not None
    return lo, hi


class Distribution(BaseModel):
    """Summary of one measured quantity over n observations (seconds, tokens/s, ...)."""

    n: int = Field(description="number of observations behind the figures")
    mean: float | None = Field(default=None, description="arithmetic mean")
    p50: float | None = Field(default=None, description="median (linear interpolation)")
    p90: float | None = Field(default=None, description="90th percentile")
    p99: float | None = Field(default=None, description="99th percentile")
    min: float | None = Field(default=None, description="smallest observation")
    max: float | None = Field(default=None, description="largest observation")


def summarize(values: Sequence[float]) -> Distribution:
    """n, mean, p50/p90/p99, min and max of `values` (all None but n when empty)."""
    xs = [float(v) for v in values if v is not None and not math.isnan(float(v))]
    if not xs:
        return Distribution(n=0)
    return Distribution(
        n=len(xs),
        mean=mean(xs),
        p50=percentile(xs, 50),
        p90=percentile(xs, 90),
        p99=percentile(xs, 99),
        min=min(xs),
        max=max(xs),
    )


class MeanSE(BaseModel):
    """A mean with its standard error over n units (sections, repeats, gradings)."""

    n: int = Field(description="number of units averaged")
    mean: float | None = Field(default=None, description="mean over the units")
    se: float | None = Field(default=None, description="standard error of the mean (None when n < 2)")


def mean_se(values: Sequence[float]) -> MeanSE:
    """Mean and standard error of `values`."""
    xs = [float(v) for v in values if v is not None]
    return MeanSE(n=len(xs), mean=mean(xs), se=standard_error(xs))
