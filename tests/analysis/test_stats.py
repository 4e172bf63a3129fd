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
    # Student's t-interval: mean -/+ t(7, 0.975) * SE, t(7, 0.975) = 2.3646 (8 sections: below
    # MIN_PAIRED_FOR_SKEW, so not widened for skew); the differences lie on a lattice of step 0.1,
    # so each end reaches half a step of the mean further (0.1 / (2 * 8))
    half = 0.1 / 16
    assert (d.ci_low, d.ci_high) == pytest.approx((d.mean - 2.3646 * d.se - half, d.mean + 2.3646 * d.se + half),
                                                  abs=1e-4)
    assert stats.lattice_step(diffs) == pytest.approx(0.1) and stats.lattice_step([0.1, 0.25, 0.33]) == 0.0
    assert d.method == "t" and d.verdict == "no detectable difference"  # the interval reaches below 0
    # deterministic, and independent of the order of the mappings
    assert stats.paired_difference(dict(reversed(list(a.items()))), b) == d
    # the reverse comparison is the mirror image
    r = stats.paired_difference(b, a)
    assert r.mean == pytest.approx(-d.mean) and r.n == 8


def test_paired_difference_degenerate_cases():
    same = {"s1": 0.5, "s2": 0.5, "s3": 1.0}
    tie = stats.paired_difference(same, dict(same))
    # all alike: "no detectable difference", never "tie", and never a zero-width interval
    assert tie.verdict == "no detectable difference" and tie.mean == 0.0 and (tie.ci_low, tie.ci_high) == (None, None)
    assert tie.n == 3 and tie.zero_spread and tie.sign_p is None
    # a constant non-zero difference: SE 0, no spread to estimate; 3 of one sign is no direction
    # (sign test p = 0.25), 6 of one sign is (p = 0.031)
    up = stats.paired_difference(same, {k: v - 0.25 for k, v in same.items()})
    assert up.verdict == "no detectable difference" and up.ci_high is None and up.sign_p == pytest.approx(0.25)
    six = {f"s{i}": 0.5 for i in range(6)}
    down = stats.paired_difference(six, {k: v - 0.25 for k, v in six.items()})
    assert down.verdict == "lower" and down.zero_spread and down.sign_p == pytest.approx(2 / 64)
    # an interval never leaves the range a difference of shares can take
    wide = stats.paired_difference({"a": 0.0, "b": 0.0, "c": 0.0}, {"a": 1.0, "b": 0.0, "c": 1.0})
    assert wide.ci_low >= -1.0 and wide.ci_high == 1.0
    # two sections, both +1: below the minimum n no direction and no interval (was "higher")
    two = stats.paired_difference({"a": 0.0, "b": 0.0}, {"a": 1.0, "b": 1.0})
    assert two.verdict == "too few" and two.ci_low is None and two.min_n == stats.MIN_PAIRED_FOR_VERDICT == 3
    # only sections both arms answered are paired; None is not an answer
    one = stats.paired_difference({"s1": 0.5, "s2": 0.7}, {"s1": 1.0, "s2": None, "s3": 0.0})
    assert one.n == 1 and one.mean == pytest.approx(0.5) and one.verdict == "too few" and one.ci_low is None
    none = stats.paired_difference({}, {"s1": 1.0})
    assert none.n == 0 and none.mean is None and none.verdict == "too few" and none.se is None


def test_t_quantiles_and_the_t_interval_match_the_tables():
    assert stats.t_quantile(0.975, 1) == pytest.approx(12.7062, abs=1e-4)
    assert stats.t_quantile(0.975, 2) == pytest.approx(4.3027, abs=1e-4)
    assert stats.t_quantile(0.975, 23) == pytest.approx(2.0687, abs=1e-4)
    assert stats.t_quantile(0.025, 5) == pytest.approx(-2.5706, abs=1e-4)
    assert stats.t_interval([1.0]) is None
    lo, hi = stats.t_interval([0.1, 0.2, 0.3])
    assert (lo, hi) == pytest.approx((0.2 - 4.3027 * 0.1 / 3 ** 0.5, 0.2 + 4.3027 * 0.1 / 3 ** 0.5), abs=1e-4)


def test_fisher_exact_and_clopper_pearson_on_known_tables():
    # 0 of 20 against k of 20: C(20, k) / C(40, k)
    assert stats.fisher_fewer_others(0, 20, 5, 20) == pytest.approx(15504 / 658008)
    assert stats.fisher_fewer_others(0, 20, 1, 20) == pytest.approx(0.5)
    assert stats.fisher_fewer_others(0, 20, 0, 20) == 1.0  # no other answer anywhere: nothing to test
    assert stats.fisher_fewer_others(3, 20, 3, 20) > 0.5  # the same counts: no evidence
    assert stats.fisher_fewer_others(0, 0, 3, 20) is None
    assert stats.requests_needed(0.0) is None
    assert stats.requests_needed(0.5) == 7
    assert stats.clopper_pearson(0, 20) == pytest.approx((0.0, 0.16843), abs=1e-5)
    assert stats.clopper_pearson(10, 20) == pytest.approx((0.27196, 0.72804), abs=1e-5)
    assert stats.clopper_pearson(20, 20)[1] == 1.0 and stats.clopper_pearson(3, 0) is None


def test_paired_text_never_says_tie_and_shows_n():
    from suite.stages.extraction.view import extraction_pairs, multiplicity_note, paired_text

    none = stats.paired_difference({"a": 0.5, "b": 0.6, "c": 0.7}, {"a": 0.6, "b": 0.6, "c": 0.6})
    assert paired_text(none).endswith("(n = 3 paired document parts): no detectable difference (the interval covers 0)")
    few = stats.paired_difference({"a": 0.0, "b": 0.0}, {"a": 0.15, "b": 0.15})
    assert paired_text(few) == "+15.0 points (n = 2 paired document parts: too few for an interval)"
    assert multiplicity_note([{"against": "x", "rows": [1]}]) is None
    note = multiplicity_note([{"against": "x", "rows": [1, 2, 3]}, {"against": "x", "rows": [1, 2]}])
    assert note.startswith("The 5 comparisons against x are one family") and "99.0%" in note
    flat = stats.paired_difference({"a": 0.0, "b": 0.0, "c": 0.0}, {"a": 0.1, "b": 0.1, "c": 0.1})
    assert "no spread to estimate, no interval" in paired_text(flat) and "[" not in paired_text(flat)
    assert extraction_pairs([], []) == []


def test_holm_adjusts_one_family_and_leaves_none_out():
    assert stats.holm([]) == []
    assert stats.holm([None, 0.2]) == [None, 0.2]
    adj = stats.holm([0.01, 0.04, 0.03, None])
    # sorted 0.01, 0.03, 0.04 -> x3, x2, x1, made monotone
    assert adj[:3] == pytest.approx([0.03, 0.06, 0.06]) and adj[3] is None
    assert stats.holm([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_sign_test_on_known_splits():
    assert stats.sign_test_p(0, 0) is None
    assert stats.sign_test_p(3, 0) == pytest.approx(0.25)
    assert stats.sign_test_p(6, 0) == pytest.approx(2 / 64)
    assert stats.sign_test_p(5, 5) == 1.0


def test_closed_testing_by_fishers_combination():
    assert stats.fisher_combined_p([0.05]) == pytest.approx(0.05)
    assert stats.fisher_combined_p([0.05, 0.05]) == pytest.approx(0.0175, abs=5e-4)
    # three prompts each showing the transient at p = 0.05: each holds over the family
    assert stats.closed_fisher([0.05, 0.05, 0.05]) == [True, True, True]
    # one of three at p = 0.05, the others not of that shape: not over the family
    assert stats.closed_fisher([0.05, 1.0, 1.0]) == [False, False, False]
    assert stats.closed_fisher([0.001, 1.0, 1.0]) == [True, False, False]


def test_closed_fisher_holds_the_family_level_under_random_order():
    """Three prompts of 20 answers, each with one odd answer placed at random: a transient (the odd
    answer first) on some prompt by chance, at most 5 % of the time over the family."""
    import random

    rng = random.Random(1)
    false = 0
    runs = 20000
    for _ in range(runs):
        ps = [0.05 if rng.randrange(20) == 0 else 1.0 for _ in range(3)]
        false += any(stats.closed_fisher(ps))
    assert false / runs <= 0.05
