"""The reproducibility analysis on constructed answers: counting, divergence, cold/warm, bootstrap."""

from __future__ import annotations

import math

import pytest

from suite.analysis.repro import (
    Sample,
    across_agreement,
    analyse,
    analyse_launches,
    jackknife_pair_sums,
    analyse_runs,
    count_projection,
    launch_permutation_p,
    order_floor,
    format_lengths,
    LengthCount,
    MIN_LAUNCHES_FOR_CI,
    unseen_share_bound,
)


def ids(*xs: int) -> list[int]:
    return list(xs)


def s(index: int, token_ids: list[int] | None = None, text: str | None = None, logprobs: list[float] | None = None,
      error: str | None = None, finish_reason: str | None = None,
      top_logprobs: list[list[float]] | None = None) -> Sample:
    if text is None:
        text = "".join(chr(97 + (t % 26)) for t in (token_ids or []))
    return Sample(index=index, text=text, token_ids=token_ids, logprobs=logprobs, error=error,
                  finish_reason=finish_reason, top_logprobs=top_logprobs)


def test_one_answer_twenty_times_is_one_distinct_answer():
    a = analyse([s(i, ids(1, 2, 3)) for i in range(20)])
    assert a.distinct_answers == 1
    assert a.modal_share == 1.0
    assert a.lengths_text == "3 ×20"
    assert a.divergences == []
    assert a.cold_warm.cold_is_modal is True
    assert a.cold_warm.warm_distinct == 1
    assert a.compared_by == "token_ids"


def test_lengths_are_formatted_with_counts_in_length_order():
    samples = [s(i, list(range(993))) for i in range(11)] + [s(11 + i, list(range(973))) for i in range(9)]
    a = analyse(samples)
    assert a.lengths_text == "973 ×9, 993 ×11"
    assert [(lc.tokens, lc.count) for lc in a.lengths] == [(973, 9), (993, 11)]
    assert format_lengths([LengthCount(tokens=None, count=2)]) == "? ×2"


def test_cold_request_differs_from_the_warm_ones():
    samples = [s(0, ids(5, 6, 7))] + [s(i, ids(5, 6, 8)) for i in range(1, 20)]
    a = analyse(samples)
    assert a.distinct_answers == 2
    assert a.modal_share == pytest.approx(19 / 20)
    assert a.cold_warm.cold_is_modal is False
    assert a.cold_warm.cold_in_warm is False
    assert a.cold_warm.warm_distinct == 1
    assert a.answers[0].indices == list(range(1, 20))


def test_tie_goes_to_the_answer_seen_first():
    samples = [s(0, ids(9, 9)), s(1, ids(1, 1)), s(2, ids(1, 1)), s(3, ids(9, 9))]
    a = analyse(samples)
    assert a.distinct_answers == 2
    assert a.modal_tied is True
    assert a.answers[0].first_index == 0
    assert a.answers[0].count == a.answers[1].count == 2


def test_divergence_token_and_top2_margin():
    top = [[-0.1, -3.0], [-0.2, -2.5], [-0.30, -0.32], [-0.4, -1.0]]
    modal = s(1, ids(10, 11, 12, 13), logprobs=[-0.1, -0.2, -0.30, -0.4], top_logprobs=top)
    other = s(0, ids(10, 11, 99, 13), logprobs=[-0.1, -0.25, -0.35, -0.5])
    a = analyse([other, modal, modal.model_copy(update={"index": 2})])
    (d,) = a.divergences
    assert d.token_index == 2
    assert (d.modal_token, d.other_token) == (12, 99)
    # The margin is the modal answer's own top-1 minus top-2 there: how close it was to a tie.
    assert d.modal_margin == pytest.approx(0.02)
    assert d.other_margin is None  # no top-2 logprobs on that answer
    # Over the two shared tokens the logprobs differ by up to 0.05.
    assert d.prefix_logprob_diff == pytest.approx(0.05)
    assert d.count == 1


def test_answer_that_is_a_prefix_of_the_modal_one():
    full = ids(1, 2, 3, 4, 5)
    samples = [s(i, full, logprobs=[-0.1] * 5) for i in range(3)] + [s(3, ids(1, 2, 3), logprobs=[-0.1] * 3)]
    a = analyse(samples)
    (d,) = a.divergences
    assert d.token_index == 3
    assert d.modal_token == 4 and d.other_token is None
    assert d.other_logprob is None and d.other_margin is None  # the other answer ended there
    assert a.lengths_text == "3 ×1, 5 ×3"


def test_empty_answers_count_as_answers_and_are_reported():
    samples = [s(0, [], text=""), s(1, ids(1)), s(2, ids(1)), s(3, [], text="")]
    a = analyse(samples)
    assert a.distinct_answers == 2
    assert a.empty_answers == 2
    assert a.modal_tied and a.answers[0].n_tokens == 0  # tie: the empty answer came first
    d = a.divergences[0]
    assert d.token_index == 0 and d.modal_token is None and d.other_token == 1


def test_errors_are_left_out_of_the_counts():
    samples = [s(0, error="HTTP 500"), s(1, ids(1, 2)), s(2, ids(1, 2))]
    a = analyse(samples)
    assert a.errors == 1 and a.answered == 2
    assert a.distinct_answers == 1 and a.modal_share == 1.0
    assert a.cold_warm.cold_is_modal is None  # the cold request failed


def test_all_requests_failed():
    a = analyse([s(0, error="x"), s(1, error="y")])
    assert a.distinct_answers == 0 and a.modal_share is None and a.lengths == []


def test_text_comparison_when_token_ids_are_missing():
    samples = [Sample(index=0, text="Paris is", completion_tokens=2),
               Sample(index=1, text="Paris is", completion_tokens=2),
               Sample(index=2, text="Paris was", completion_tokens=2)]
    a = analyse(samples)
    assert a.compared_by == "text"
    assert a.distinct_answers == 2
    (d,) = a.divergences
    assert d.token_index is None and d.char_index == 6
    assert a.lengths_text == "2 ×3"


def test_mixed_token_ids_fall_back_to_text():
    a = analyse([s(0, ids(1, 2), text="ab"), Sample(index=1, text="ab")])
    assert a.compared_by == "text" and a.distinct_answers == 1


def test_same_text_different_token_ids_are_different_answers():
    a = analyse([s(0, ids(1, 2), text="ab"), s(1, ids(3), text="ab")])
    assert a.distinct_answers == 2


def test_concurrent_first_wave_is_cold():
    samples = [s(i, ids(1)) for i in range(4)] + [s(4 + i, ids(2)) for i in range(8)]
    a = analyse(samples, cold_count=4)
    assert a.cold_warm.cold_indices == [0, 1, 2, 3]
    assert a.cold_warm.cold_is_modal is False
    assert a.cold_warm.warm_count == 8


def test_nan_logprobs_give_no_logprob():
    modal = s(0, ids(1, 2), logprobs=[-0.1, float("nan")])
    a = analyse([modal, modal.model_copy(update={"index": 1}), s(2, ids(1, 3), logprobs=[-0.1, -1.0])])
    assert a.divergences[0].modal_logprob is None


def test_across_agreement_counts_pairs_between_launches():
    assert across_agreement([["a", "a"], ["a", "a"], ["a"]]) == 1.0
    assert across_agreement([["a"], ["b"]]) == 0.0
    # pairs: (l0,l1): a-a, a-b, b-a, b-b -> 2 of 4 agree
    assert across_agreement([["a", "b"], ["a", "b"]]) == 0.5
    assert across_agreement([["a"]]) is None


def test_jackknife_over_sessions_brackets_the_estimate_and_needs_three_sessions():
    # a graded measure pooled over pairs of runs from different sessions: session i's runs agree
    # with session j's at share v[i] * v[j]
    v = [1.0, 0.9, 0.5, 0.8, 1.0, 0.7]
    k = len(v)
    sums = [[0.0 if i == j else 9 * v[i] * v[j] for j in range(k)] for i in range(k)]
    counts = [[0 if i == j else 9 for j in range(k)] for i in range(k)]
    est = sum(sums[i][j] for i in range(k) for j in range(i + 1, k)) / (9 * k * (k - 1) / 2)
    lo, hi = jackknife_pair_sums(sums, counts)
    assert 0.0 <= lo < est < hi <= 1.0
    assert jackknife_pair_sums(sums, counts) == (lo, hi)  # no randomness
    assert jackknife_pair_sums([row[:2] for row in sums[:2]], [row[:2] for row in counts[:2]]) is None
    alike = [[0.0 if i == j else 9.0 for j in range(k)] for i in range(k)]
    assert jackknife_pair_sums(alike, counts) == (1.0, 1.0)  # every pair alike: no spread to show


def test_one_rare_differing_answer_gets_an_interval_that_reaches_the_ceilings_truth():
    # 12 sessions x 3 runs over 10 prompts; prompt 0 gave another answer once in 36 runs. Truth for
    # a prompt that varies 10 % of the time: items 0.982; the jackknife alone said [0.9822, 1.0]
    sessions = [[{f"p{j}": s(r, ids(j, 7, 7, 7, 7, 7, 7, 7)) for j in range(10)} for r in range(3)] for _ in range(12)]
    sessions[4][1]["p0"] = s(1, ids(0, 7, 7, 7, 101, 101, 101, 101))
    res = analyse_runs(sessions)
    items, tokens = res.agreement("items"), res.agreement("tokens")
    assert items.across == pytest.approx(1 - 0.1 * 33 / 594)
    assert items.across_ci95[0] <= 0.982 and items.across_ci95[1] >= items.across
    assert tokens.across_ci95[0] <= 0.991 <= tokens.across_ci95[1]
    # the count's exact interval, scaled: one unlike answer in 360 reaches 5.6 in 360
    lo, hi = count_projection(0.99, 1, 360)
    assert lo == pytest.approx(1 - 0.01 * 5.57, abs=0.002) and 0.99 < hi <= 1.0
    assert count_projection(0.99, 0, 360) is None


def test_the_permutation_test_depends_on_the_table_not_on_what_the_answers_are():
    groups = [["a"] * 7 + ["b"] * 3, ["a"] * 9 + ["b"], ["a"] * 4 + ["b"] * 4, ["a"] * 8 + ["b"] * 2]
    p = launch_permutation_p(groups)
    assert p == launch_permutation_p(groups)  # the same answers, the same p
    assert p == launch_permutation_p([[{"a": "x", "b": "y"}[a] for a in g] for g in groups])
    assert 0.0 < p <= 1.0


def test_launches_within_and_across_separately():
    l0 = [s(i, ids(1, 2)) for i in range(3)]
    l1 = [s(i, ids(1, 2)) for i in range(3)]
    l2 = [s(0, ids(1, 3))] + [s(i, ids(1, 2)) for i in range(1, 3)]
    r = analyse_launches([l0, l1, l2], resamples=300)
    assert r.within_distinct == [1, 1, 2]
    assert r.across_distinct == 2
    assert r.modal_per_launch_distinct == 1
    assert r.agreement == pytest.approx((9 + 6 + 6) / 27)
    # Three launches are too few for a bootstrap over launches: no interval, and why.
    assert r.agreement_ci95 is None and "at least 6" in r.ci_note
    assert [p.agreement for p in r.pairs] == [1.0, pytest.approx(2 / 3), pytest.approx(2 / 3)]


def test_launches_each_stable_but_different_from_each_other():
    r = analyse_launches([[s(i, ids(1)) for i in range(20)], [s(i, ids(2)) for i in range(20)]], resamples=100)
    assert r.within_distinct == [1, 1]
    assert r.across_distinct == 2
    assert r.agreement == 0.0 and r.agreement_ci95 is None
    assert r.modal_per_launch_distinct == 2
    # no launch varied inside: launches that differ cannot be told from answers that keep one state for
    # a whole launch (the same law in every launch: six launches of 20 "differed" in 11 % of runs)
    assert r.consistent_across is None and r.stable_within is True and r.across == "differ or persist"
    assert r.order_floor is None and "no launch varied inside" in r.across_text
    # at 5 answers a launch the same split cannot tell launches that differ from answers that persist
    # for several requests inside a launch (the same law in every launch): the claim says both
    few = analyse_launches([[s(i, ids(1)) for i in range(5)], [s(i, ids(2)) for i in range(5)]], resamples=100)
    assert few.across == "differ or persist" and few.consistent_across is None
    assert "5 answers a launch cannot tell launches that differ from answers that persist" in few.across_text


def test_launch_with_only_errors():
    r = analyse_launches([[s(0, error="dead")], [s(0, ids(1))]], resamples=50)
    assert r.errors == 1
    assert r.agreement is None and r.agreement_ci95 is None
    assert not math.isnan(r.within_distinct[1])


def test_logprob_gaps_are_checked_for_every_pair_of_launches():
    # Launches 1 and 2 give the same tokens with logprobs 0.5 apart; each is within 1e-4 of...
    # nothing: launch 0 has other tokens (no shared prefix), so comparing only against launch 0
    # never saw the gap.
    launch0 = [s(0, ids(9, 9), logprobs=[-0.1, -0.1])]
    launch1 = [s(0, ids(1, 2), logprobs=[-0.1, -0.2])]
    launch2 = [s(0, ids(1, 2), logprobs=[-0.1, -0.7])]
    a = analyse_launches([launch0, launch1, launch2])
    assert a.same_tokens_logprobs_apart
    assert a.across_logprob_diff == pytest.approx(0.5)


def test_one_change_at_the_last_request_is_not_a_switch_that_stayed():
    last = analyse([s(i, ids(1)) for i in range(4)] + [s(4, ids(2))])
    assert last.pattern == "varies" and "it stayed" not in last.pattern_text
    assert "only the last request (5) differs" in last.pattern_text
    stayed = analyse([s(i, ids(1)) for i in range(3)] + [s(3, ids(2)), s(4, ids(2))])
    assert stayed.pattern == "switch" and "it stayed (3 before, 2 after)" in stayed.pattern_text


def test_the_order_test_runs_where_the_launch_test_rejects_and_decides_there():
    """Answers that persist inside launches (AAAAABBBBB, BBBBBAAAAA, ...): the launch test rejects
    and the order test, run there, says the order may explain it; launches in random order that the
    launch test does not reject skip the order test (it could not change their verdict)."""
    runs = ["AAAAAAAAAABBBBBBBBBB", "BBBBBBBBBBAAAAAAAAAA", "AAAAAAAAAAAAAAAAAAAA", "BBBBBBBBBBBBBBBBBBBB",
            "AAAAAAAAAAAAAAABBBBB", "BBBBBBBBBBBBBBBBBAAA"]
    sticky = analyse_launches([[s(i, ids(1 if c == "A" else 2)) for i, c in enumerate(r)] for r in runs])
    assert sticky.permutation_p is not None and sticky.permutation_p <= 0.05
    assert sticky.order_p is not None and sticky.order_p <= 0.05
    assert sticky.across == "order inside launches" and sticky.consistent_across is None
    mixed = ["ABAABABBAA", "BAABABAABA", "AABBABABAB", "BABAABABBA", "ABABBAABAB", "BAABBAABAA"]
    random_order = analyse_launches([[s(i, ids(1 if c == "A" else 2)) for i, c in enumerate(r)] for r in mixed])
    assert random_order.permutation_p is not None and random_order.permutation_p > 0.05
    assert random_order.order_p is None and random_order.across == "no detectable difference"


def test_a_launch_that_switched_once_and_kept_it_stops_the_launch_test_from_saying_differ():
    """Five requests a launch are too few for the order test to see answers that persist; a launch
    whose answer changed once and stayed shows it. The launch test rejects here (four launches of one
    answer against four of the other), but two launches switched: the order inside launches may
    explain it, and the launches are not called inconsistent. Launches of one answer each, with no
    switch, differ or persist: nothing inside them tells which."""
    runs = ["AAAAA", "AAAAA", "AAAAA", "AAABB", "BBBBB", "BBBBB", "BBBBB", "BBAAA"]
    r = analyse_launches([[s(i, ids(1 if c == "A" else 2)) for i, c in enumerate(x)] for x in runs])
    assert r.permutation_p is not None and r.permutation_p <= 0.05
    assert [f.pattern for f in r.per_launch].count("switch") == 2
    assert r.across == "order inside launches" and r.consistent_across is None
    assert "2 of 8 launches switched answer once and kept it" in r.across_text
    fixed = ["A" * 20] * 4 + ["B" * 20] * 4
    r = analyse_launches([[s(i, ids(1 if c == "A" else 2)) for i, c in enumerate(x)] for x in fixed])
    assert r.across == "differ or persist" and r.consistent_across is None


def test_order_floor_is_the_order_tests_smallest_attainable_p():
    """One odd answer in a launch of 20 comes as one block wherever it falls (2 of 20 places put it
    at an end): the order test cannot go below 0.1 on it, and a launch test that rejects there is not
    "differ". Two launches each half one answer, half another, can show persistence (p far below)."""
    one_odd = ["A" * 19 + "B", "A" * 20, "B" * 20]
    assert order_floor(one_odd) == pytest.approx(0.1)
    assert order_floor(["A" * 20, "B" * 20]) is None
    halves = ["A" * 10 + "B" * 10, "B" * 10 + "A" * 10]
    assert order_floor(halves) == pytest.approx(1 / 1000)  # the Monte Carlo floor of 999 shuffles
    r = analyse_launches([[s(i, ids(1 if c == "A" else 2)) for i, c in enumerate(x)]
                          for x in ["A" * 19 + "B"] + ["A" * 20] * 3 + ["B" * 20] * 3])
    assert r.permutation_p is not None and r.permutation_p <= 0.05
    assert r.across == "differ or persist" and "smallest attainable p is 0.1" in r.across_text
