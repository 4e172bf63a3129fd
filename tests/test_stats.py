"""Percentiles, means, standard errors and bootstrap intervals on constructed inputs."""

import math

import pytest

from suite.analysis import stats


def test_percentiles_match_linear_interpolation():
    xs = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]
    assert stats.percentile(xs, 50) == pytest.approx(5.5)
    assert stats.percentile(xs, 90) == pytest.approx(9.1)
    assert stats.percentile(xs, 99) == pytest.approx(9.91)
    assert stats.percentile(xs, 0) == 1
    assert stats.percentile(xs, 100) == 10
    # order of the input does not matter
    assert stats.percentile(list(reversed(xs)), 90) == pytest.approx(9.1)


def test_percentile_edge_cases():
    assert stats.percentile([], 50) is None
    assert stats.percentile([7.0], 99) == 7.0
    with pytest.raises(ValueError):
        stats.percentile([1, 2], 101)


def test_mean_stdev_standard_error():
    xs = [2, 4, 4, 4, 5, 5, 7, 9]
    assert stats.mean(xs) == 5
    assert stats.stdev(xs) == pytest.approx(math.sqrt(32 / 7))
    assert stats.standard_error(xs) == pytest.approx(math.sqrt(32 / 7) / math.sqrt(8))
    assert stats.standard_error([3.0]) is None
    assert stats.mean([]) is None


def test_standard_error_of_a_share():
    # 43 clean sections of 48: a 0/1 variable; SE = sqrt(p(1-p)/(n-1)) with the sample variance
    xs = [1.0] * 43 + [0.0] * 5
    p = 43 / 48
    expected = math.sqrt(p * (1 - p) * 48 / 47) / math.sqrt(48)
    got = stats.mean_se(xs)
    assert got.n == 48 and got.mean == pytest.approx(p) and got.se == pytest.approx(expected)


def test_summarize():
    d = stats.summarize([0.3, 0.1, 0.2, float("nan")])
    assert d.n == 3
    assert d.mean == pytest.approx(0.2)
    assert d.p50 == pytest.approx(0.2)
    assert d.min == 0.1 and d.max == 0.3
    assert stats.summarize([]).model_dump() == {
        "n": 0, "mean": None, "p50": None, "p90": None, "p99": None, "min": None, "max": None
    }


def test_bootstrap_is_reproducible_and_covers_the_mean():
    xs = [0.9, 1.1, 1.0, 1.3, 0.7, 1.2, 0.8, 1.0, 1.05, 0.95]
    a = stats.bootstrap_ci(xs, resamples=500)
    b = stats.bootstrap_ci(xs, resamples=500)
    assert a == b
    assert a is not None and a[0] < stats.mean(xs) < a[1]
    other_seed = stats.bootstrap_ci(xs, resamples=500, seed=7)
    assert other_seed != a
    assert stats.bootstrap_ci([1.0]) is None
    # a constant sample has a zero-width interval
    assert stats.bootstrap_ci([2.0, 2.0, 2.0]) == (2.0, 2.0)


def test_cohen_kappa_known_values_and_degenerate_cases():
    # 2x2 table: both yes 20, a yes/b no 5, a no/b yes 10, both no 15 (n=50): p_o=0.7, p_e=0.5 -> 0.4
    a = [True] * 25 + [False] * 25
    b = [True] * 20 + [False] * 5 + [True] * 10 + [False] * 15
    assert stats.cohen_kappa(a, b) == pytest.approx(0.4)
    assert stats.cohen_kappa(a, a) == pytest.approx(1.0)
    assert stats.cohen_kappa(a, [not x for x in a]) == pytest.approx(-1.0)
    # raw agreement 100 %, but both raters used one label: chance explains it all, kappa undefined
    assert stats.cohen_kappa([True] * 10, [True] * 10) is None
    # one rater constant, the other not: agreement no better than chance
    assert stats.cohen_kappa([True] * 4, [True, True, True, False]) == pytest.approx(0.0)
    assert stats.cohen_kappa([], []) is None
    with pytest.raises(ValueError):
        stats.cohen_kappa([True], [True, False])


def test_paired_difference_mean_se_interval_and_verdict():
    a = {f"s{i}": v for i, v in enumerate([0.5, 0.6, 0.7, 0.4, 0.9, 1.0, 0.3, 0.8])}
    b = {k: v + d for (k, v), d in zip(a.items(), [0.1, 0.0, 0.2, 0.1, -0.1, 0.0, 0.3, 0.1])}
    d = stats.paired_difference(a, b)
    diffs = [b[k] - a[k] for k in sorted(a)]
    assert d.n == 8 and d.mean == pytest.approx(stats.mean(diffs)) and d.se == pytest.approx(stats.standard_error(diffs))
    assert (d.ci_low, d.ci_high) == stats.bootstrap_ci(diffs)
    assert d.verdict == ("tie" if d.ci_low <= 0 <= d.ci_high else "higher")
    # deterministic, and independent of the order of the mappings
    assert stats.paired_difference(dict(reversed(list(a.items()))), b) == d
    # the reverse comparison is the mirror image
    r = stats.paired_difference(b, a)
    assert r.mean == pytest.approx(-d.mean) and r.n == 8


def test_paired_difference_degenerate_cases():
    same = {"s1": 0.5, "s2": 0.5, "s3": 1.0}
    tie = stats.paired_difference(same, dict(same))
    assert tie.verdict == "tie" and tie.mean == 0.0 and (tie.ci_low, tie.ci_high) == (0.0, 0.0) and tie.n == 3
    # a constant non-zero difference: SE 0, the interval is one point away from 0, not a tie
    up = stats.paired_difference(same, {k: v - 0.25 for k, v in same.items()})
    assert up.verdict == "lower" and up.se == pytest.approx(0.0) and up.ci_high == pytest.approx(-0.25)
    assert stats.paired_difference({"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 1.0}).verdict == "higher"
    # only sections both arms answered are paired; None is not an answer
    one = stats.paired_difference({"s1": 0.5, "s2": 0.7}, {"s1": 1.0, "s2": None, "s3": 0.0})
    assert one.n == 1 and one.mean == pytest.approx(0.5) and one.verdict == "too few" and one.ci_low is None
    none = stats.paired_difference({}, {"s1": 1.0})
    assert none.n == 0 and none.mean is None and none.verdict == "too few" and none.se is None
