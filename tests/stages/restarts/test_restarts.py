"""Restarts: within-launch and across-launch answers reported separately, on constructed launches
and on real llama-server processes started one after another."""

from __future__ import annotations

import pytest

from suite.analysis.repro import Sample, analyse
from suite.stages.gate_models import GatePromptResult, GateResult
from suite.stages.restarts import LaunchOutcome, RestartsResult, summarise


def gate_of(answers: list[list[int]], errors: int = 0, truncated: bool = False) -> GateResult:
    samples = [Sample(index=i, text=str(a), token_ids=a, finish_reason="length" if truncated else "stop")
               for i, a in enumerate(answers)]
    samples += [Sample(index=len(answers) + k, error="HTTP 500") for k in range(errors)]
    a = analyse(samples)
    p = GatePromptResult.from_analysis(a, prompt_id="short-open", prompt_sha256="x", max_tokens=8)
    return GateResult(n_requests=len(answers), seed=42, temperature=0.0, logprobs=False, prompts=[p],
                      reproducible=a.distinct_answers == 1, verdict="", wall_s=0.0, http_s=0.0)


def test_stable_within_but_not_across_launches():
    # 2 launches x 20 requests, each launch its own answer: dealing the 40 answers back at random
    # gives this split 2 times in C(40, 20): the launches differ
    outcomes = [LaunchOutcome(index=0, status="ok", gate=gate_of([[1, 2]] * 20)),
                LaunchOutcome(index=1, status="ok", gate=gate_of([[1, 3]] * 20))]
    r = summarise(outcomes, ["short-open"], 2, 20)
    (p,) = r.prompts
    assert p.within_distinct == [1, 1] and p.across_distinct == 2
    assert p.agreement == 0.0 and p.agreement_ci95 is None  # two launches: too few for an interval
    assert p.within_agreement == 1.0
    # no launch varied inside, so nothing tells launches that differ from answers that keep one state
    # for a whole launch (the same law in every launch): the claim names both readings
    assert r.stable_within is True and r.consistent_across is None
    assert p.same_sequence is False and p.permutation_p is not None and p.permutation_p < 0.05
    assert p.across == "differ or persist" and p.order_floor is None
    assert r.across_verdict.startswith("NOT the same answers across launches")
    assert "permutation test over launch labels" in r.across_verdict and "no launch varied inside" in r.across_verdict
    assert r.within_verdict.startswith("stable within every launch")
    # launches that vary inside in random order, at different rates: the launch test's assumption holds
    # where the order test could see persistence, and the launches differ
    mixed = [LaunchOutcome(index=i, status="ok", gate=gate_of(
        [[1, 2] if (j * 7 + i) % 10 < (2 if i % 2 else 8) else [1, 3] for j in range(20)])) for i in range(4)]
    m = summarise(mixed, ["short-open"], 4, 20)
    assert m.prompts[0].order_floor is not None and m.prompts[0].order_floor <= 0.05
    assert m.prompts[0].across == "differ" and m.consistent_across is False
    assert m.across_verdict.startswith("NOT consistent across launches")
    # at 5 requests a launch (p ~ 0.008 for the same split) the claim names both readings
    short = summarise([LaunchOutcome(index=i, status="ok", gate=gate_of([[1, 2 + i]] * 5)) for i in range(2)],
                      ["short-open"], 2, 5)
    assert short.prompts[0].across == "differ or persist" and short.consistent_across is None
    assert short.across_verdict.startswith("NOT the same answers across launches")


def test_two_short_launches_that_differ_cannot_tell_chance_from_a_difference():
    # the same split at 3 requests each: p = 2 / C(6, 3) = 0.1, not a verdict (was "NOT consistent")
    outcomes = [LaunchOutcome(index=0, status="ok", gate=gate_of([[1, 2]] * 3)),
                LaunchOutcome(index=1, status="ok", gate=gate_of([[1, 3]] * 3))]
    r = summarise(outcomes, ["short-open"], 2, 3)
    (p,) = r.prompts
    assert p.permutation_p == pytest.approx(0.1, abs=0.03)
    assert r.consistent_across is None
    assert r.across_verdict.startswith("no detectable difference across launches")


def test_a_cold_warm_split_repeated_in_every_launch_is_the_same_sequence():
    outcomes = [LaunchOutcome(index=i, status="ok", gate=gate_of([[1], [2], [2]])) for i in range(2)]
    (p,) = summarise(outcomes, ["short-open"], 2, 3).prompts
    assert p.within_distinct == [2, 2] and p.across_distinct == 2
    assert p.agreement == pytest.approx(5 / 9)
    assert p.same_sequence is True


def test_a_launch_that_refused_is_recorded_and_the_rest_counted():
    outcomes = [LaunchOutcome(index=0, status="ok", gate=gate_of([[7]] * 3)),
                LaunchOutcome(index=1, status="refused", reason="out of memory"),
                LaunchOutcome(index=2, status="ok", gate=gate_of([[7]] * 2, errors=1))]
    r = summarise(outcomes, ["short-open"], 3, 3)
    assert r.launched == 2 and r.launch_outcomes[1].reason == "out of memory"
    (p,) = r.prompts
    assert p.within_distinct == [1, 1] and p.errors == 1
    assert p.agreement == 1.0
    # two alike launches bound nothing below a 50 % share of differing launches: not "consistent"
    assert r.consistent_across is None and p.alike_bound is None and p.across == "too few"
    assert "6 alike launches would bound it below 40%" in r.across_verdict


def test_one_launch_is_not_enough_to_judge():
    r = summarise([LaunchOutcome(index=0, status="ok", gate=gate_of([[1]] * 3))], ["short-open"], 3, 3)
    assert r.consistent_across is None and r.verdict.startswith("undetermined: 1 of 3")


@pytest.mark.live
def test_restarts_on_real_llama_servers(tmp_path):
    from suite.bench import BenchRequest, run_bench

    (summary,) = run_bench(BenchRequest.build(model="tiny", arms=["llamacpp"], launcher="local", profile="quick", stages=["restarts"], results=tmp_path))
    assert summary.status == "complete", summary.reason
    r = summary.restarts
    assert isinstance(r, RestartsResult)
    assert r.launches == 2 and r.launched == 2 and r.requests_per_launch == 3
    assert [o.status for o in r.launch_outcomes] == ["ok", "ok"]
    assert all(o.startup_s and o.startup_s > 0 for o in r.launch_outcomes)
    (p,) = r.prompts
    assert p.compared_by == "token_ids" and len(p.within_distinct) == 2
    assert p.agreement is not None and 0.0 <= p.agreement <= 1.0
    # Two launches are too few for an interval over launches: none, the pair instead (and why).
    assert p.agreement_ci95 is None and p.ci_note
    assert [x.agreement for x in p.pairs] == [p.agreement]
    logs = list(tmp_path.glob("tiny/llamacpp/*/logs/runtime-default-*.log"))
    assert len(logs) == 2, "each launch is a fresh process with its own log"


def _gate_two(first: list[list[int]], second: list[list[int]], cut: bool = False) -> GateResult:
    prompts = []
    for pid, answers, cold in (("short-open", first, True), ("long-open", second, False)):
        samples = [Sample(index=i, text=str(a), token_ids=a, finish_reason="length" if cut else "stop")
                   for i, a in enumerate(answers)]
        prompts.append(GatePromptResult.from_analysis(analyse(samples, process_cold=cold), prompt_id=pid,
                                                      prompt_sha256="x", max_tokens=8))
    return GateResult(n_requests=len(first), seed=42, temperature=0.0, logprobs=False, prompts=prompts,
                      reproducible=False, verdict="", wall_s=0.0, http_s=0.0)


def test_only_the_process_cold_prompt_is_called_first_after_the_start():
    # long-open's first request came after short-open's: the runtime was not fresh for it
    # (3 launches of 6 requests: random order would put the odd answer first (1/6)^3 of the time)
    outcomes = [LaunchOutcome(index=i, status="ok", gate=_gate_two([[1]] * 6, [[9]] + [[2]] * 5)) for i in range(3)]
    r = summarise(outcomes, ["short-open", "long-open"], 3, 6)
    assert [p.process_cold for p in r.prompts] == [True, False]
    assert "cold-start transient within launches (long-open" in r.within_verdict
    assert "only the prompt's first request differs (the runtime had served other prompts before it)" \
        in r.within_verdict
    assert "first request after the start" not in r.within_verdict


def test_truncation_and_controls_reach_the_restarts_page_figures():
    from suite.stages.restarts.view import restarts_view

    outcomes = [LaunchOutcome(index=i, status="ok", gate=_gate_two([[1]] * 3, [[2]] * 3, cut=True))
                for i in range(2)]
    r = summarise(outcomes, ["short-open", "long-open"], 2, 3)
    r.controls = ["no-prompt-cache"]
    v = restarts_view(r)
    assert v is not None and v["controls"] == ["no-prompt-cache"]
    p = v["by_prompt"]["short-open"]
    assert (p["truncated"], p["answered"], p["max_tokens"]) == (6, 6, 8)


def _launches(series: list[list[list[int]]]) -> RestartsResult:
    outcomes = [LaunchOutcome(index=i, status="ok", gate=gate_of(answers)) for i, answers in enumerate(series)]
    return summarise(outcomes, ["short-open"], len(series), len(series[0]))


def test_six_alike_launches_say_what_they_bound_not_a_zero_width_interval():
    r = _launches([[[1, 2]] * 20] * 6)
    (p,) = r.prompts
    assert p.agreement == 1.0 and p.agreement_ci95 is None  # was [1.000, 1.000]
    assert p.alike_bound == pytest.approx(0.40, abs=0.005)
    assert r.consistent_across is True
    assert "6 of 6 launches alike" in r.across_verdict and "more than 40% of starts" in r.across_verdict
    # 24 alike launches bound it much lower
    (p24,) = _launches([[[1, 2]] * 5] * 24).prompts
    assert p24.alike_bound == pytest.approx(0.117, abs=0.002)


def test_one_launch_in_six_differing_gets_an_interval_that_reaches_the_truth():
    # one of 6 launches gave another answer throughout (truth for a 1-in-10 launch: 0.82); the
    # percentile bootstrap printed an interval that excluded 0.82 in over half such runs
    r = _launches([[[1, 2]] * 20] * 5 + [[[1, 3]] * 20])
    (p,) = r.prompts
    assert p.agreement == pytest.approx(10 / 15)
    lo, hi = p.agreement_ci95
    assert lo <= 0.82 <= hi and hi == 1.0
    # one launch all B in 120 answers (p tiny), but no launch varied inside: launches that differ, or
    # answers that keep one state for a whole launch
    assert r.consistent_across is None and p.across == "differ or persist"


def test_a_transient_in_one_launch_is_chance_inside_a_launch_not_a_difference_between_launches():
    series = [[[1, 2]] * 20 for _ in range(6)]
    series[0] = [[9]] + [[1, 2]] * 19
    r = _launches(series)
    (p,) = r.prompts
    assert p.permutation_p == 1.0 and r.consistent_across is None  # was "NOT consistent"
    assert r.across_verdict.startswith("no detectable difference across launches")
    assert p.within_agreement is not None and p.within_agreement < 1.0


def test_a_cold_start_transient_needs_enough_requests_to_be_told_from_chance():
    # one odd first answer in a launch of 5: random order puts it first 1 time in 5
    short = _launches([[[9]] + [[1, 2]] * 4] + [[[1, 2]] * 5] * 2)
    assert short.within_verdict.startswith("undetermined within launches")
    assert "20 requests per launch would tell" in short.within_verdict
    # the first answer odd in each of 3 launches of 5: (1/5)^3 = 0.008 -> a transient
    every = _launches([[[9]] + [[1, 2]] * 4] * 3)
    assert every.within_verdict.startswith("cold-start transient within launches")


def test_a_switch_right_after_the_first_request_in_two_launches_is_not_yet_a_transient():
    # two launches of 5 that both change after their first request and stay: random order does
    # that (1/5)^2 = 4 % of the time, one switch placed at random in each (1/4)^2 = 6 %
    two = _launches([[[9]] + [[1, 2]] * 4] * 2)
    assert two.within_verdict.startswith("undetermined within launches")
    assert "one switch placed at random in each" in two.within_verdict
    assert "6 requests per launch would tell, 5 were sent" in two.within_verdict
    # at 6 requests each: (1/5)^2 = 4 % under switches as well
    six = _launches([[[9]] + [[1, 2]] * 5] * 2)
    assert six.within_verdict.startswith("cold-start transient within launches")
    assert "p = 0.04" in six.within_verdict
    # one launch of 20 alone is held to random order, as the gate is: 1/20
    one = _launches([[[9]] + [[1, 2]] * 19] + [[[1, 2]] * 20] * 2)
    assert one.within_verdict.startswith("cold-start transient within launches")


def test_stable_within_carries_its_bound_and_the_cap():
    r = _launches([[[1, 2]] * 20] * 6)
    # the bound is per launch (20 answers each), not pooled over the 120
    assert "inside a launch, an answer more common than 13.9% per request would likely have shown" in r.within_verdict
    one = _launches([[[1, 2]] * 1] * 6)
    assert "per request would likely have shown" not in one.within_verdict
    assert "1 answer per launch: too few to bound" in one.within_verdict
    outcomes = [LaunchOutcome(index=i, status="ok", gate=gate_of([[1, 2]] * 20, truncated=True)) for i in range(6)]
    capped = summarise(outcomes, ["short-open"], 6, 20)
    assert "cut at max_tokens" in capped.within_verdict
    assert capped.consistent_across is None and "alike up to the cap" in capped.across_verdict


def _gate_prompts(series: dict[str, list[list[int]]]) -> GateResult:
    prompts = []
    for pid, answers in series.items():
        samples = [Sample(index=i, text=str(a), token_ids=a, finish_reason="stop") for i, a in enumerate(answers)]
        prompts.append(GatePromptResult.from_analysis(analyse(samples), prompt_id=pid, prompt_sha256="x", max_tokens=8))
    n = max(len(a) for a in series.values())
    return GateResult(n_requests=n, seed=42, temperature=0.0, logprobs=False, prompts=prompts, reproducible=None,
                      verdict="", wall_s=0.0, http_s=0.0)


def test_the_launch_test_is_corrected_over_the_prompts_tested_together():
    """Three prompts whose launches were compared: each prompt's p is Holm-adjusted over the three,
    and the sentence names the family; a p of 0.03 alone is no longer 'differ' beside two others."""
    import random

    rng = random.Random(3)
    launches = []
    for k in range(6):
        # short-open: each launch its own answer (a real launch effect); the other two in random order
        series = {"short-open": [[1, k]] * 5,
                  "long-open": [[1] if rng.random() < 0.7 else [2] for _ in range(5)],
                  "document-4k": [[3] if rng.random() < 0.6 else [4] for _ in range(5)]}
        launches.append(LaunchOutcome(index=k, status="ok", gate=_gate_prompts(series)))
    r = summarise(launches, ["short-open", "long-open", "document-4k"], 6, 5)
    by = {p.prompt_id: p for p in r.prompts}
    tested = [p for p in r.prompts if p.permutation_p is not None]
    assert len(tested) == 3 and all(p.family == 3 for p in tested)
    assert by["short-open"].across == "differ or persist" and by["short-open"].permutation_p_adjusted <= 0.05
    assert "Holm-adjusted over the 3 prompts tested together" in by["short-open"].across_text
    for p in tested:
        assert p.permutation_p_adjusted >= p.permutation_p


def test_answers_that_persist_inside_launches_are_not_called_a_difference_between_launches():
    """A sticky state: every launch draws the same law, but an answer, once given, stays for a run of
    requests. The launch test alone says 'differ'; the order test inside launches finds the answers
    persisting, and the verdict says the order may explain it instead."""
    launches = [LaunchOutcome(index=k, status="ok", gate=gate_of(([[1]] * 10 + [[2]] * 10) if k % 2 else
                                                                  ([[2]] * 10 + [[1]] * 10))) for k in range(4)]
    launches += [LaunchOutcome(index=4 + k, status="ok", gate=gate_of([[1]] * 20)) for k in range(2)]
    r = summarise(launches, ["short-open"], 6, 20)
    (p,) = r.prompts
    assert p.order_p is not None and p.order_p <= 0.05
    assert p.across == "order inside launches" and r.consistent_across is None
    assert "the order inside launches may explain the difference" in p.across_text
