"""Small statistics used by every stage: percentiles, mean, standard error, bootstrap intervals,
Cohen's kappa, paired differences, and the exact distributions behind them (Student's t,
the hypergeometric of Fisher's exact test).

Pure Python (no numpy, no scipy), deterministic: the bootstrap uses its own `random.Random` with a
fixed seed, so the same inputs always give the same interval. Empty inputs give `None`, never an
exception, because a stage with no successful request still writes a summary.

Calibration (benchmarks/bench_calibration.py, 1,000 simulated runs per scenario, results in
benchmarks/results/): the paired difference of two arms uses Student's t-interval over the paired
sections, which covered the true difference in 94.6-97.0 % of runs from n = 3 on, where the percentile
bootstrap it replaced covered 60 % at n = 2, 81 % at n = 3 and 86 % at n = 6. Below
`MIN_PAIRED_FOR_VERDICT` (3) sections neither an interval nor a direction is given: at n = 2 two
equal differences of discrete scores give a zero-width interval away from 0 (the t-interval
covered 92 % there in 200 runs), and "higher"/"lower" was false in 22 % / 18 % of runs with no true difference.
"""

from __future__ import annotations

import logging
import math
import random
from collections import Counter
from collections.abc import Callable, Hashable, Mapping, Sequence
from itertools import pairwise
from typing import Literal

from pydantic import BaseModel, Field

from suite.analysis.levels import ALPHA, CONFIDENCE

log = logging.getLogger(__name__)

BOOTSTRAP_SEED = 42
# Fewer paired sections than this never say "higher" or "lower" (the benchmark's paired scenarios:
# at n = 2 two equal differences of a few discrete scores give a zero-width interval away from 0).
MIN_PAIRED_FOR_VERDICT = 3
# From this many paired units on, the interval's ends also reach Hall's skewness-corrected interval's
# (`hall_interval`): below it the sample's skewness says little and the t-interval alone covered
# (0.93-0.95 at 3-8 sections, benchmarks/results/calibration-paired-skew-before.txt), while the
# widening cost power (0.43 -> 0.37); at 24-40 sections the t-interval alone covered 0.90.
MIN_PAIRED_FOR_SKEW = 10


# -- exact distributions ----------------------------------------------------------------------------

def _betacf(a: float, b: float, x: float) -> float:
    """Continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        aa = m * (b - m) * x / ((qam + m2) * (a + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        h *= d * c
        aa = -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))
        d = 1.0 + aa * d
        d = 1.0 / (d if abs(d) > tiny else tiny)
        c = 1.0 + aa / c
        c = c if abs(c) > tiny else tiny
        delta = d * c
        h *= delta
        if abs(delta - 1.0) < 1e-15:
            break
    return h


def betainc(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function I_x(a, b)."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    front = math.exp(math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x))
    if x < (a + 1.0) / (a + b + 2.0):
        return front * _betacf(a, b, x) / a
    return 1.0 - front * _betacf(b, a, 1.0 - x) / b


def t_cdf(t: float, df: float) -> float:
    """Student's t distribution function with `df` degrees of freedom."""
    x = df / (df + t * t)
    tail = 0.5 * betainc(df / 2.0, 0.5, x)
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The p-quantile of Student's t (bisection on `t_cdf`; 1e-10 close)."""
    if not 0.0 < p < 1.0:
        raise ValueError(f"t_quantile: p must be within (0, 1), got {p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    lo, hi = 0.0, 1.0
    while t_cdf(hi, df) < p:
        hi *= 2.0
    for _ in range(200):
        mid = (lo + hi) / 2.0
        if t_cdf(mid, df) < p:
            lo = mid
        else:
            hi = mid
        if hi - lo < 1e-10:
            break
    return (lo + hi) / 2.0


def lattice_step(values: Sequence[float]) -> float:
    """The step of the lattice the values lie on, as far as the sample shows it: the smallest gap
    between two distinct values, where every value is a whole number of such gaps from the
    smallest; 0 where all are equal or they lie on no lattice."""
    distinct = sorted({round(float(v), 12) for v in values})
    step = min((b - a for a, b in pairwise(distinct)), default=0.0)
    if step <= 0.0:
        return 0.0
    # a lattice only where every value is a whole number of steps from the smallest: measured
    # values (latencies, any continuous score) have none, and no correction
    on = all(abs((v - distinct[0]) / step - round((v - distinct[0]) / step)) < 1e-6 for v in distinct)
    return step if on else 0.0


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Student's t-interval of the mean: mean -/+ t(n-1) * SE; None for fewer than two values."""
    xs = [float(v) for v in values]
    m, se = mean(xs), standard_error(xs)
    if m is None or se is None:
        return None
    t = t_quantile(1.0 - (1.0 - confidence) / 2.0, len(xs) - 1)
    return m - t * se, m + t * se


def hall_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Hall's (1992) skewness-corrected interval of the mean: the t statistic passed through the
    monotone cubic transformation g(T) = T + γT²/3 + γ²T³/27 + γ/(6n), whose law is nearly free of
    the skewness γ (the sample's third standardised moment), inverted at Student's t(n-1) quantiles.
    With γ = 0 it is the t-interval. None for fewer than three values or no spread."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n < 3:
        return None
    m = sum(xs) / n
    sd = math.sqrt(sum((x - m) ** 2 for x in xs) / (n - 1))
    if sd <= 1e-12 * max(1.0, abs(m)):
        return None
    gamma = (sum((x - m) ** 3 for x in xs) / n) / sd ** 3
    t = t_quantile(1.0 - (1.0 - confidence) / 2.0, n - 1) / math.sqrt(n)

    def inverse(z: float) -> float:  # g's inverse: the T whose transform is z
        if abs(gamma) < 1e-12:
            return z
        inner = 1.0 + gamma * (z - gamma / (6.0 * n))
        return 3.0 / gamma * (math.copysign(abs(inner) ** (1.0 / 3.0), inner) - 1.0)

    return m - sd * inverse(t), m - sd * inverse(-t)


def _beta_quantile(q: float, a: float, b: float) -> float:
    lo, hi = 0.0, 1.0
    for _ in range(100):
        mid = (lo + hi) / 2.0
        if betainc(a, b, mid) < q:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2.0


def clopper_pearson(k: int, n: int, confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """The exact (Clopper-Pearson) interval of a binomial share k/n, from beta quantiles."""
    if n <= 0 or not 0 <= k <= n:
        return None
    alpha = 1.0 - confidence
    lo = 0.0 if k == 0 else _beta_quantile(alpha / 2.0, k, n - k + 1)
    hi = 1.0 if k == n else _beta_quantile(1.0 - alpha / 2.0, k + 1, n - k)
    return lo, hi


def fisher_fewer_others(others_row: int, n_row: int, others_base: int, n_base: int) -> float | None:
    """One-sided Fisher's exact test: does a row give fewer other-than-modal answers than its base?

    The 2x2 table (row, base) x (other, modal) with its margins fixed: the probability that the
    base row holds at least `others_base` of the `others_row + others_base` other answers (the
    hypergeometric upper tail). Small: the row's answers vary less than the base's beyond chance.
    None when a row has no answer.
    """
    if n_row <= 0 or n_base <= 0:
        return None
    total, others = n_row + n_base, others_row + others_base
    if others == 0:
        return 1.0
    denom = math.comb(total, others)
    tail = sum(math.comb(n_base, x) * math.comb(n_row, others - x)
               for x in range(others_base, min(others, n_base) + 1))
    return min(1.0, tail / denom)


def holm(ps: Sequence[float | None]) -> list[float | None]:
    """Holm's step-down adjusted p-values of one family of tests (None stays None and is not
    counted in the family): the i-th smallest of m is multiplied by m - i, made monotone, capped at
    1. A test holds at level alpha for the whole family where its adjusted p is at most alpha."""
    known = sorted((p, i) for i, p in enumerate(ps) if p is not None)
    m = len(known)
    out: list[float | None] = [None] * len(ps)
    running = 0.0
    for rank, (p, i) in enumerate(known):
        running = max(running, min(1.0, (m - rank) * p))
        out[i] = running
    return out


def fisher_combined_p(ps: Sequence[float]) -> float:
    """Fisher's combination of independent p-values: the chance under every null of -2 sum(ln p) at
    least as large, chi-square with 2k degrees of freedom (closed form for even degrees). Valid for
    discrete tests whose p-values are conservative, as the suite's exact tests are."""
    if not ps:
        return 1.0
    x = -2.0 * math.fsum(math.log(max(p, 1e-300)) for p in ps)
    half = x / 2.0
    term, total = 1.0, 1.0
    for j in range(1, len(ps)):
        term *= half / j
        total += term
    return min(1.0, math.exp(-half) * total)


def closed_fisher(ps: Sequence[float], alpha: float = ALPHA) -> list[bool]:
    """Which of a family's hypotheses are rejected with the family's error rate held at alpha: the
    closed testing procedure, each intersection tested by Fisher's combination. A hypothesis is
    rejected where every subset of the family that contains it is. With more than 12 members, Holm."""
    k = len(ps)
    if k > 12:
        return [adj is not None and adj <= alpha for adj in holm(list(ps))]
    out = []
    for i in range(k):
        others = [j for j in range(k) if j != i]
        ok = True
        for mask in range(1 << len(others)):
            subset = [ps[i]] + [ps[others[b]] for b in range(len(others)) if mask >> b & 1]
            if fisher_combined_p(subset) > alpha * (1 + 1e-9):
                ok = False
                break
        out.append(ok)
    return out


def sign_test_p(positive: int, negative: int) -> float | None:
    """Two-sided exact sign test of paired differences (ties left out): the chance of a split at
    least this uneven between positive and negative differences when each sign is a coin flip."""
    n = positive + negative
    if n == 0:
        return None
    k = min(positive, negative)
    tail = math.fsum(math.comb(n, x) for x in range(k + 1)) / 2 ** n
    return min(1.0, 2.0 * tail)


def requests_needed(base_share: float, alpha: float = ALPHA, limit: int = 100_000) -> int | None:
    """Requests per row after which a row of one answer differs from a base row that keeps its
    share of other answers (`base_share`), by `fisher_fewer_others` at `alpha`; None: no share to
    compare with, or more than `limit`."""
    if base_share <= 0.0:
        return None
    n = 2
    while n <= limit:
        others = round(base_share * n)
        if others >= 1 and (p := fisher_fewer_others(0, n, others, n)) is not None and p <= alpha:
            return n
        n = n + 1 if n < 200 else int(n * 1.05) + 1
    return None


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
    confidence: float = CONFIDENCE,
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


def mean_se_of(v: MeanSE | None) -> tuple[float | None, float | None, int | None]:
    """(mean, standard error, n) of a MeanSE; all None when it is absent."""
    return (None, None, None) if v is None else (v.mean, v.se, v.n)


def distribution_fields(model: BaseModel | None, prefix: str = "") -> dict[str, tuple[Distribution, str]]:
    """Every Distribution field of a model, nested models included, by dotted field name, in the
    model's field order, with the unit its field declares (its `unit` metadata; "" without)."""
    out: dict[str, tuple[Distribution, str]] = {}
    if model is None:
        return out
    for name, info in type(model).model_fields.items():
        value = getattr(model, name)
        if isinstance(value, Distribution):
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            out[prefix + name] = (value, str(extra.get("unit", "")))
        elif isinstance(value, BaseModel):
            out.update(distribution_fields(value, f"{prefix}{name}."))
    return out


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
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
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
    ci_low: float | None = Field(default=None, description="t-interval, lower end, clipped to the possible "
                                                            "range (None when n < 2 or every difference is equal)")
    ci_high: float | None = Field(default=None, description="t-interval, upper end, clipped likewise")
    confidence: float = Field(default=CONFIDENCE, description="coverage of the interval")
    method: str = Field(default="t", description="how the interval was made: 't+hall', each end the further of "
                                                 "Student's t-interval and Hall's skewness-corrected interval over "
                                                 "the paired units ('t': the t-interval alone, records before "
                                                 "2026-12-06); 'sign' where every difference is equal (no spread to "
                                                 "estimate)")
    min_n: int = Field(default=MIN_PAIRED_FOR_VERDICT, description="paired units needed to name a direction")
    # Every paired difference is the same value: no spread to estimate, so no interval; the direction
    # is then the exact sign test's (two-sided, at 1 - confidence).
    zero_spread: bool = Field(default=False, description="every paired difference is equal: no interval")
    sign_p: float | None = Field(default=None, description="two-sided exact sign test where the spread is zero")
    family: int = Field(default=1, description="comparisons in the family this one was corrected for "
                                               "(Bonferroni: confidence 1 - 0.05 / family)")
    verdict: Literal["no detectable difference", "higher", "lower", "too few"] = Field(
        description="higher/lower: the interval excludes 0 with at least min_n units (or, with zero spread, "
                    "the sign test rejects); no detectable difference: it covers 0 (not a proof of equality); "
                    "too few: fewer units than min_n")


def paired_difference(
    a: Mapping[str, float | None],
    b: Mapping[str, float | None],
    *,
    confidence: float = CONFIDENCE,
    min_n: int = MIN_PAIRED_FOR_VERDICT,
    bounds: tuple[float, float] = (-1.0, 1.0),
    family: int = 1,
) -> PairedDifference:
    """The paired difference b - a over the keys both map to a number (per-section scores).

    Student's t-interval over the per-key differences (in sorted key order), from
    `MIN_PAIRED_FOR_SKEW` keys on each end widened to Hall's skewness-corrected interval's where that
    reaches further (`hall_interval`), clipped to `bounds`
    (a difference of two shares lies within -1..1). "higher"/"lower" only where the interval
    excludes 0; an interval that covers 0 is "no detectable difference" (the data do not tell the
    arms apart; it does not show them equal). Below `min_n` pairs neither an interval nor a
    direction: "too few". Where every difference is the same value the standard error is 0 and a
    t-interval would be a point: none is given ("no spread to estimate"), and the direction is the
    exact sign test's (all n of one sign: p = 2 * 0.5^n). `family`: how many comparisons the
    caller makes together; `confidence` is then already corrected (Bonferroni) and the record says so.
    """
    pairs: dict[str, tuple[float, float]] = {}
    for k, x in a.items():
        y = b.get(k)
        if x is not None and y is not None and not math.isnan(float(x)) and not math.isnan(float(y)):
            pairs[k] = (float(x), float(y))
    keys = sorted(pairs)
    diffs = [pairs[k][1] - pairs[k][0] for k in keys]
    m = mean(diffs)
    if len(diffs) < max(2, min_n):
        return PairedDifference(n=len(diffs), mean=m, se=standard_error(diffs), confidence=confidence,
                                min_n=min_n, family=family, verdict="too few")
    assert m is not None
    se = standard_error(diffs)
    verdict: Literal["no detectable difference", "higher", "lower", "too few"]
    if se is not None and se <= 1e-12 * max(1.0, abs(m)):
        sign = sign_test_p(sum(1 for d in diffs if d > 0), sum(1 for d in diffs if d < 0))
        verdict = ("no detectable difference" if sign is None or sign > 1.0 - confidence
                   else ("higher" if m > 0 else "lower"))
        return PairedDifference(n=len(diffs), mean=m, se=0.0, confidence=confidence, method="sign", min_n=min_n,
                                zero_spread=True, sign_p=sign, family=family, verdict=verdict)
    ci = t_interval(diffs, confidence)
    assert ci is not None
    # Per-unit differences near the floor or the ceiling are skewed (most units 0, a few far off):
    # there the t-interval alone covered 0.87-0.92 at 24-40 units. Each end reaches as far as the
    # t-interval's or Hall's skewness-corrected interval's, whichever is further
    # (benchmarks/bench_calibration.py, family paired-edges).
    skew = hall_interval(diffs, confidence) if len(diffs) >= MIN_PAIRED_FOR_SKEW else None
    if skew is not None:
        ci = (min(ci[0], skew[0]), max(ci[1], skew[1]))
    # The differences of per-part shares lie on a lattice (one fact a part: -1, 0 or 1), so their mean
    # moves in steps of step / n: each end widened by half a step (a continuity correction). With one
    # fact a part at 24 parts, most differences 0, the interval covered 0.915 over 20,000 runs without
    # it (a single -1 among 23 zeros puts the t-interval's upper end at (t - 1) / n, under a true 0.05).
    half = lattice_step(diffs) / (2 * len(diffs))
    ci = (ci[0] - half, ci[1] + half)
    lo, hi = max(bounds[0], ci[0]), min(bounds[1], ci[1])
    verdict = "no detectable difference" if lo <= 0.0 <= hi else ("higher" if lo > 0.0 else "lower")
    return PairedDifference(n=len(diffs), mean=m, se=se, ci_low=lo, ci_high=hi,
                            method="t+hall" if skew is not None else "t",
                            confidence=confidence, min_n=min_n, family=family, verdict=verdict)
