"""Percentiles, means, standard errors and bootstrap intervals on constructed inputs."""

import math

import pytest

from suite import stats


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
