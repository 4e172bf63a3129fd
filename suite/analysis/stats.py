"""Small statistics used by every stage: percentiles, mean, standard error, bootstrap intervals,
Cohen's kappa, paired differences.

Pure Python (no numpy), deterministic: the bootstrap uses its own `random.Random` with a fixed
seed, so the same inputs always give the same interval. Empty inputs give `None`, never an
exception, because a stage with no successful request still writes a summary.
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from typing import Literal

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


def cohen_kappa(a: Sequence[Hashable], b: Sequence[Hashable]) -> float | None:
    """Cohen's kappa of two raters' labels for the same items: agreement corrected for chance.

    kappa = (p_o - p_e) / (1 - p_e), with p_o the observed share of agreeing items and p_e the
    agreement expected from each rater's own label frequencies. None for no items, and where
    p_e is 1 (both raters used one and the same label throughout): chance then explains all
    agreement and kappa is undefined, whatever the raw agreement says.
    """
    if len(a) != len(b):
        raise ValueError(f"cohen_kappa: {len(a)} labels against {len(b)}")
    n = len(a)
    if n == 0:
        return None
    observed = sum(x == y for x, y in zip(a, b)) / n
    count_a, count_b = Counter(a), Counter(b)
    expected = math.fsum((count_a[c] / n) * (count_b[c] / n) for c in set(count_a) | set(count_b))
    if math.isclose(expected, 1.0):
        return None
    return (observed - expected) / (1.0 - expected)


class PairedDifference(BaseModel):
    """The difference of two arms over the units both answered (b minus a), with its uncertainty."""

    n: int = Field(description="paired units (sections both arms answered)")
    mean: float | None = Field(default=None, description="mean of the per-unit differences, b - a")
    se: float | None = Field(default=None, description="standard error of that mean (None when n < 2)")
    ci_low: float | None = Field(default=None, description="bootstrap interval, lower end (None when n < 2)")
    ci_high: float | None = Field(default=None, description="bootstrap interval, upper end (None when n < 2)")
    confidence: float = Field(default=0.95, description="coverage of the interval")
    verdict: Literal["tie", "higher", "lower", "too few"] = Field(
        description="tie: the interval covers 0; higher/lower: b above/below a; too few: fewer than 2 paired units")


def paired_difference(
    a: Mapping[str, float | None],
    b: Mapping[str, float | None],
    *,
    confidence: float = 0.95,
    resamples: int = 2000,
    seed: int = BOOTSTRAP_SEED,
) -> PairedDifference:
    """The paired difference b - a over the keys both map to a number (per-section scores).

    The differences are taken in sorted key order, so the (seeded) bootstrap interval does not
    depend on the order of the mappings. "tie" only where the interval covers 0 (a constant
    difference of 0 is a tie, a constant non-zero difference is not); with fewer than two pairs
    there is no interval and the verdict says "too few".
    """
    keys = sorted(k for k in a if k in b and a[k] is not None and b[k] is not None
                  and not math.isnan(float(a[k])) and not math.isnan(float(b[k])))  # type: ignore[arg-type]
    diffs = [float(b[k]) - float(a[k]) for k in keys]  # type: ignore[arg-type]
    m = mean(diffs)
    if len(diffs) < 2:
        return PairedDifference(n=len(diffs), mean=m, confidence=confidence, verdict="too few")
    ci = bootstrap_ci(diffs, confidence=confidence, resamples=resamples, seed=seed)
    assert ci is not None and m is not None
    lo, hi = ci
    verdict: Literal["tie", "higher", "lower"] = "tie" if lo <= 0.0 <= hi else ("higher" if lo > 0.0 else "lower")
    return PairedDifference(n=len(diffs), mean=m, se=standard_error(diffs), ci_low=lo, ci_high=hi,
                            confidence=confidence, verdict=verdict)
