"""The reproducibility verdicts on constructed series: each case the studies' designs depend on.

Synthetic answers through the real analysis and the real stage summaries: launches resampled as
units, within- and across-launch verdicts apart, a cold-start transient named as one, truncation
at max_tokens visible, text and token-id counts side by side, logprobs compared, every headline
with the count of answers behind it.
"""

from __future__ import annotations

import pytest

from suite.analysis.repro import Sample, analyse, analyse_launches, jackknife_pair_sums, unseen_share_bound
from suite.stages.gate_models import GatePromptResult, GateResult, verdict_of
from suite.stages.restarts import LaunchOutcome, summarise


def series(*answers: tuple[int, ...] | None, finish: str | None = "stop",
           logprobs: list[list[float]] | None = None) -> list[Sample]:
    """One request per answer (token ids); None is a failed request."""
    out = []
    for i, ids in enumerate(answers):
        if ids is None:
            out.append(Sample(index=i, error="HTTP 500"))
            continue
        out.append(Sample(index=i, text=" ".join(map(str, ids)), token_ids=list(ids), finish_reason=finish,
                          logprobs=logprobs[i] if logprobs else None))
    return out


A, B, X = (1, 2, 3), (1, 2, 4), (9, 9)


def gate_of(samples: list[Sample], prompt_id: str = "p", max_tokens: int = 64, cold_count: int = 1) -> GateResult:
    p = GatePromptResult.from_analysis(analyse(samples, cold_count=cold_count), prompt_id=prompt_id,
                                       max_tokens=max_tokens)
    reproducible, verdict = verdict_of([p], None)
    return GateResult(n_requests=len(samples), seed=42, temperature=0.0, logprobs=False, prompts=[p],
                      reproducible=reproducible, verdict=verdict, wall_s=1.0, http_s=1.0)


def restarts_of(launches: list[list[Sample]]):
    outcomes = [LaunchOutcome(index=i, status="ok", gate=gate_of(l)) for i, l in enumerate(launches)]
    return summarise(outcomes, ["p"], len(launches), len(launches[0]))


# -- 1. across-launch agreement resamples launches ----------------------------------------------

def test_three_stable_launches_two_agreeing_give_no_fake_interval():
    """A×5, A×5, B×5: agreement 1/3; the old within-launch bootstrap printed [0.333, 0.333]."""
    r = analyse_launches([series(*[A] * 5), series(*[A] * 5), series(*[B] * 5)])
    assert r.agreement == pytest.approx(1 / 3)
    assert r.agreement_ci95 is None
    assert "3 launches" in r.ci_note and "at least 6" in r.ci_note
    assert [f.modal_answer for f in r.per_launch] == [0, 0, 1]


def test_interval_over_launches_is_wide_when_launches_disagree():
    launches = [series(*[A] * 5)] * 4 + [series(*[B] * 5)] * 3
    r = analyse_launches(launches)
    lo, hi = r.agreement_ci95
    assert lo < r.agreement < hi
    assert hi - lo > 0.2  # seven launches, two camps: the interval must say how little that is


def test_a_transient_repeated_in_every_launch_is_alike_with_a_bound_not_a_point_interval():
    """X A A A A in every launch: the launches are identical; that bounds how often one would differ
    (no zero-width interval, which claimed more than six launches know)."""
    launches = [series(X, A, A, A, A) for _ in range(6)]
    r = analyse_launches(launches)
    assert r.agreement == pytest.approx(17 / 25)
    assert r.agreement_ci95 is None and r.across == "alike" and r.consistent_across is True
    assert r.alike_bound == pytest.approx(0.40, abs=0.005)


def test_a_session_is_never_compared_with_itself():
    # Three sessions that never agree with each other: every leave-one-out value is 0, never 1 from
    # a session paired with itself.
    sums = [[0.0] * 3 for _ in range(3)]
    counts = [[0 if i == j else 9 for j in range(3)] for i in range(3)]
    assert jackknife_pair_sums(sums, counts) == (0.0, 0.0)


# -- 2. within and across are separate verdicts ---------------------------------------------------

def test_repeated_transient_is_consistent_across_and_a_transient_within():
    r = restarts_of([series(X, A, A, A, A) for _ in range(6)])
    assert r.consistent_across is True
    assert "consistent across launches" in r.across_verdict and "NOT" not in r.across_verdict
    assert "6 of 6 launches alike (the same answer sequence)" in r.across_verdict
    assert r.stable_within is False
    assert "cold-start transient" in r.within_verdict


def test_stable_launches_that_differ_are_stable_within_and_not_the_same_across():
    r = restarts_of([series(*[A] * 20), series(*[B] * 20)])
    assert r.stable_within is True
    # no launch varied inside: launches that differ, or one state kept for a whole launch
    assert r.consistent_across is None
    assert r.within_verdict.startswith("stable within every launch")
    assert r.across_verdict.startswith("NOT the same answers across launches")
    # at 4 requests a launch the data cannot tell that from answers that persist inside a launch
    few = restarts_of([series(*[A] * 4), series(*[B] * 4)])
    assert few.consistent_across is None
    assert few.across_verdict.startswith("NOT the same answers across launches")


def test_kernel_order_noise_with_the_same_answers_is_no_difference_across_but_not_stable_within():
    r = restarts_of([series(A, B, A, B, A, A), series(B, A, A, B, A, A)])
    # the same answers in another order: the permutation test finds nothing between launches,
    # and two launches prove no consistency either
    assert r.consistent_across is None and r.across_verdict.startswith("no detectable difference")
    assert "NOT stable within" in r.within_verdict


# -- 3. a cold-start transient is named as one ---------------------------------------------------

def test_cold_start_transient_is_its_own_pattern():
    a = analyse(series(X, *[A] * 19))
    assert a.pattern == "cold-transient"
    assert "only the first request" in a.pattern_text and "19" in a.pattern_text


def test_random_order_is_not_a_transient():
    a = analyse(series(A, B, A, A, B, A, B))
    assert a.pattern == "varies"
    # no test of the order ran, so none is claimed: the words say how often the answer changed
    assert "vary from request to request" in a.pattern_text and "their order is not tested" in a.pattern_text
    assert "random order" not in a.pattern_text


def test_one_switch_that_stays():
    assert analyse(series(A, A, A, B, B, B)).pattern == "switch"


def test_a_tie_leaves_the_cold_comparison_empty():
    a = analyse(series(X, A, X, A))
    assert a.modal_tied is True
    assert a.cold_warm.cold_is_modal is None  # not "the cold answer is modal" by seniority
    assert a.cold_warm.modal_tied is True


def test_only_the_first_prompt_is_process_cold():
    a = analyse(series(A, A), process_cold=False)
    assert a.cold_warm.process_cold is False


# -- 4. truncation -------------------------------------------------------------------------------

def test_answers_cut_at_max_tokens_are_counted_and_the_verdict_says_so():
    g = gate_of(series(*[A] * 20, finish="length"), max_tokens=256)
    assert g.prompts[0].truncated == 20
    assert "20 of 20 cut at 256 tokens: answers may differ past the cap" in g.verdict


def test_answers_that_ended_on_their_own_are_not_truncated():
    g = gate_of(series(*[A] * 5, finish="stop"))
    assert g.prompts[0].truncated == 0 and "cut at" not in g.verdict


def test_full_profile_takes_each_prompt_files_cap_and_standard_caps_them():
    from suite.profiles import get_profile
    from suite.stages.gate_models import select_prompts

    assert get_profile("full").gate_max_tokens is None
    caps = {p.id: p.max_tokens for p in select_prompts(None)}
    assert caps["long-open"] == 1024
    assert get_profile("standard").gate_max_tokens == 64 and get_profile("standard").gate_requests == 20


def test_gate_requests_and_restarts_from_the_command_line():
    from suite.bench import plan_arms
    from suite.errors import SuiteError

    from suite.stages.restarts import settings

    (plan, *_) = plan_arms("tiny", None, "local", "quick", gate_requests=200,
                           overrides={"stage_settings": {"restarts": {"launches": 8}}})
    assert plan.profile.gate_requests == 200 and settings(plan.profile).launches == 8
    assert settings(plan.profile).requests == 3  # the quick profile's own value for the rest
    with pytest.raises(SuiteError, match="stage 'restarts', profile 'quick': setting launches = 1"):
        plan_arms("tiny", None, "local", "quick", overrides={"stage_settings": {"restarts": {"launches": 1}}})


# -- 6. text and token ids -----------------------------------------------------------------------

def test_same_text_different_ids_is_flagged():
    samples = [Sample(index=0, text="ab", token_ids=[1, 2]), Sample(index=1, text="ab", token_ids=[7]),
               Sample(index=2, text="ab", token_ids=[1, 2])]
    a = analyse(samples)
    assert a.compared_by == "token_ids"
    assert (a.distinct_by_ids, a.distinct_by_text) == (2, 1)
    assert a.ids_text_disagree is True


def test_an_empty_answer_does_not_switch_the_series_to_text():
    samples = series(A, A, A) + [Sample(index=3, text="", token_ids=None)]
    a = analyse(samples)
    assert a.compared_by == "token_ids"
    assert a.distinct_answers == 2 and a.empty_answers == 1


# -- 7. logprobs compared ------------------------------------------------------------------------

def test_same_tokens_with_drifting_logprobs_within_a_launch():
    lps = [[-0.1, -0.2, -0.3], [-0.1, -0.2, -0.3], [-0.1, -0.25, -0.3]]
    a = analyse(series(A, A, A, logprobs=lps))
    assert a.distinct_answers == 1
    assert a.max_logprob_diff == pytest.approx(0.05)


def test_launches_with_the_same_tokens_but_logprobs_apart_are_reported():
    l0 = series(A, A, logprobs=[[-0.1, -0.2, -0.3]] * 2)
    l1 = series(A, A, logprobs=[[-0.1, -5.45, -0.3]] * 2)
    r = analyse_launches([l0, l1])
    assert r.consistent_across is None and r.across == "too few"  # two alike launches bound nothing
    assert r.same_tokens_logprobs_apart is True
    assert r.across_logprob_diff == pytest.approx(5.25)
    rs = restarts_of([l0, l1])
    assert "logprobs apart by 5.25 nats" in rs.across_verdict


def test_identical_logprobs_are_not_apart():
    lp = [[-0.1, -0.2, -0.3]] * 2
    r = analyse_launches([series(A, A, logprobs=lp), series(A, A, logprobs=lp)])
    assert r.same_tokens_logprobs_apart is False and r.across_logprob_diff == 0.0


# -- 10. every headline carries its n ------------------------------------------------------------

def test_reproducible_after_failures_says_how_many_answered():
    g = gate_of(series(*[A] * 5, *[None] * 15))
    assert g.reproducible is True
    assert "5 answered of 20" in g.verdict


def test_one_answer_bounds_what_can_be_missed():
    assert unseen_share_bound(20) == pytest.approx(0.139, abs=0.001)
    g = gate_of(series(*[A] * 20))
    assert "rarer than 14%" in g.verdict


def test_all_failed_is_undetermined_not_reproducible():
    g = gate_of(series(None, None, None))
    assert g.reproducible is None and "0 answer(s) in 3 requests" in g.verdict


def test_logprob_drift_is_measured_among_requests_with_the_same_tokens():
    """A cold answer that parts at token 0 does not hide the warm repeats' identical logprobs."""
    lps = [[-2.0, -1.0], [-0.1, -0.2, -0.3], [-0.1, -0.2, -0.3], [-0.1, -0.2, -0.3]]
    a = analyse(series(X, A, A, A, logprobs=lps))
    # one odd first answer in 4: random order puts it first 1 time in 4, too often to name a transient
    assert a.pattern == "undetermined" and a.cold_transient_p == pytest.approx(0.25)
    assert a.max_logprob_diff == 0.0


def test_no_launch_answered_is_undetermined_everywhere():
    r = analyse_launches([series(None, None), series(None)])
    assert r.agreement is None and r.agreement_ci95 is None and r.consistent_across is None
    assert r.stable_within is None and "needs two" in r.ci_note
    rs = restarts_of([series(None, None), series(None, None)])
    assert rs.stable_within is None and rs.consistent_across is None
    assert rs.verdict.startswith("undetermined")


def test_one_launch_answering_gives_no_agreement():
    r = analyse_launches([series(A, A), series(None, None)])
    assert r.agreement is None and r.consistent_across is None and "1 launch(es) answered" in r.ci_note


def test_every_answer_empty_is_one_answer_by_ids():
    a = analyse([Sample(index=i, text="") for i in range(4)])
    assert a.compared_by == "token_ids" and a.distinct_answers == 1 and a.empty_answers == 4
