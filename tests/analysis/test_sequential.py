"""The exact sequential test of a control tried inside one launch: its boundaries, its degenerate
cases, and its error rates by simulation with a known truth."""

from __future__ import annotations

import random

import pytest

from suite.analysis.sequential import _crossing, decide, fewest_pairs_to_credit, nominal_level


def test_no_pair_and_all_alike_pairs():
    empty = decide([], 0.05)
    assert empty.decision == "continue" and empty.pairs == 0 and empty.p_value is None
    # every pair alike: no discordant pair, no p, and nothing compared: nothing ruled out either
    alike = decide(["C"] * 30, 0.05)
    assert alike.decision == "undecided" and alike.p_value is None and alike.concordant == alike.pairs == 24


def test_every_pair_for_the_control_credits_it_at_the_boundary_and_not_before():
    for level in (0.05, 0.01, 0.01 / 6):
        d = fewest_pairs_to_credit(level)
        assert d is not None
        at = decide(["F"] * 40, level)
        assert at.decision == "credit" and at.pairs == d and at.p_value is not None and at.p_value <= level
        assert decide(["F"] * (d - 1), level).decision == "continue"
    # a stricter level needs more pairs
    assert fewest_pairs_to_credit(0.05) < fewest_pairs_to_credit(0.01) < fewest_pairs_to_credit(0.001)


def test_pairs_both_ways_do_not_credit_and_stop_undecided_at_the_cap():
    mixed = decide(["F", "U"] * 12, 0.05, max_pairs=24)
    assert mixed.decision in ("undecided", "rule-out") and mixed.favourable == 12 or mixed.decision == "rule-out"
    assert decide(["F", "U"] * 12, 0.05, max_pairs=24, effect=0.9).decision == "rule-out"


@pytest.mark.parametrize("alpha", [0.05, 0.01])
def test_the_boundary_is_crossed_with_no_effect_at_most_alpha_exactly(alpha):
    c = nominal_level(alpha, 24)
    assert _crossing(c, 24, 0.5, True) <= alpha
    # and it is the largest such level: a little more would exceed alpha
    assert _crossing(c * 1.5, 24, 0.5, True) > alpha or c * 1.5 >= alpha


def _simulate(p_f: float, p_u: float, level: float, trials: int, seed: int) -> tuple[float, float, float]:
    """Credit rate, rule-out rate and the rate of p <= level over simulated series."""
    rng = random.Random(seed)
    credit = rule_out = small_p = 0
    for _ in range(trials):
        outcomes = []
        for _ in range(24):
            u = rng.random()
            outcomes.append("F" if u < p_f else "U" if u < p_f + p_u else "C")
        r = decide(outcomes, level)
        credit += r.decision == "credit"
        rule_out += r.decision == "rule-out"
        small_p += r.p_value is not None and r.p_value <= level
    return credit / trials, rule_out / trials, small_p / trials


@pytest.mark.parametrize("p_discordant", [0.02, 0.3, 1.0])
def test_no_effect_credits_at_most_alpha(p_discordant):
    # with no effect a discordant pair goes either way with probability one half
    credit, _, small_p = _simulate(p_discordant / 2, p_discordant / 2, 0.05, 3000, 1)
    # 3000 trials: the simulation's own error at 5 % is about 0.4 points; allow three of them
    assert credit <= 0.05 + 0.012 and small_p <= 0.05 + 0.012


@pytest.mark.parametrize("q", [0.05, 0.3, 1.0])
def test_an_effect_of_the_stated_size_is_ruled_out_at_most_alpha_and_a_full_effect_is_found(q):
    # the control removes half the default's odd answers (the stated size): odd at q without it,
    # q / 2 with it, independently in each request of a pair
    p_f, p_u = q * (1 - q / 2), (q / 2) * (1 - q)
    _, rule_out, _ = _simulate(p_f, p_u, 0.05, 3000, 2)
    assert rule_out <= 0.05 + 0.012
    credit, _, _ = _simulate(1.0, 0.0, 0.01, 200, 3)
    assert credit == 1.0


@pytest.mark.parametrize("q", [0.05, 0.1, 0.2, 0.3])
def test_a_true_intermittent_cause_is_never_ruled_out(q):
    """The default gives its odd answer in q of requests (the usual "2 of 20"); the control removes
    every one: F at rate q, never U. A rule-out needs discordant U pairs, so it never comes,
    however few pairs the odd answers leave to compare (the old test ruled such a cause out in
    30-99.9 % of runs, F being rarer than half of all pairs)."""
    credit, rule_out, _ = _simulate(q, 0.0, 0.01 / 6, 2000, 5)
    assert rule_out == 0.0


def test_a_cause_whose_effect_lasts_into_the_next_request_is_never_ruled_out():
    """Carryover: the control's effect reaches the request after it, so a request without it that
    follows one with it is treated too; the odd answers come only on untreated requests."""
    rng = random.Random(7)
    ruled = 0
    for _ in range(2000):
        outcomes, treated = [], False
        for _ in range(24):
            with_first = rng.random() < 0.5
            odd = {}
            for side in ((True, False) if with_first else (False, True)):
                odd[side] = (not side) and not treated and rng.random() < 0.3
                treated = side
            outcomes.append("F" if odd[False] and not odd[True] else "U" if odd[True] and not odd[False] else "C")
        ruled += decide(outcomes, 0.01 / 6).decision == "rule-out"
    assert ruled == 0


def test_a_launch_where_the_default_does_not_vary_rules_nothing_out():
    """The variation shows in some launches only: in this one the requests without the control never
    varied, so the pairs compare nothing."""
    assert decide(["C"] * 24, 0.05).decision == "undecided"
