"""Restarts: within-launch and across-launch answers reported separately, on constructed launches
and on real llama-server processes started one after another."""

from __future__ import annotations

import pytest

from suite.analysis.repro import Sample, analyse
from suite.stages.gate import GatePromptResult, GateResult
from suite.stages.restarts import LaunchOutcome, RestartsResult, summarise


def gate_of(answers: list[list[int]], errors: int = 0) -> GateResult:
    samples = [Sample(index=i, text=str(a), token_ids=a) for i, a in enumerate(answers)]
    samples += [Sample(index=len(answers) + k, error="HTTP 500") for k in range(errors)]
    a = analyse(samples)
    p = GatePromptResult.from_analysis(a, prompt_id="short-open", prompt_sha256="x", max_tokens=8)
    return GateResult(n_requests=len(answers), seed=42, temperature=0.0, logprobs=False, prompts=[p],
                      reproducible=a.distinct_answers == 1, verdict="", wall_s=0.0, http_s=0.0)


def test_stable_within_but_not_across_launches():
    outcomes = [LaunchOutcome(index=0, status="ok", gate=gate_of([[1, 2]] * 3)),
                LaunchOutcome(index=1, status="ok", gate=gate_of([[1, 3]] * 3))]
    r = summarise(outcomes, ["short-open"], 2, 3)
    (p,) = r.prompts
    assert p.within_distinct == [1, 1] and p.across_distinct == 2
    assert p.agreement == 0.0 and p.agreement_ci95 is None  # two launches: too few for an interval
    assert r.stable_within is True and r.consistent_across is False
    assert p.same_sequence is False
    assert r.across_verdict.startswith("NOT consistent across launches")
    assert r.within_verdict.startswith("stable within every launch")


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
    assert p.agreement == 1.0 and r.consistent_across is True


def test_one_launch_is_not_enough_to_judge():
    r = summarise([LaunchOutcome(index=0, status="ok", gate=gate_of([[1]] * 3))], ["short-open"], 3, 3)
    assert r.consistent_across is None and r.verdict.startswith("undetermined: 1 of 3")


def test_restarts_on_real_llama_servers(tmp_path):
    from suite.bench import run_bench

    (summary,) = run_bench("tiny", ["llamacpp"], "local", "quick", ["restarts"], results=tmp_path)
    assert summary.status == "complete", summary.reason
    r = summary.restarts
    assert isinstance(r, RestartsResult)
    assert r.launches == 2 and r.launched == 2 and r.requests_per_launch == 3
    assert [o.status for o in r.launch_outcomes] == ["ok", "ok"]
    assert all(o.startup_s and o.startup_s > 0 for o in r.launch_outcomes)
    (p,) = r.prompts
    assert p.compared_by == "token_ids" and len(p.within_distinct) == 2
    assert p.agreement is not None and 0.0 <= p.agreement <= 1.0
    # Two launches are too few for a bootstrap over launches: no interval, the pair instead.
    assert p.agreement_ci95 is None and "at least 6" in p.ci_note
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
    outcomes = [LaunchOutcome(index=i, status="ok", gate=_gate_two([[1]] * 3, [[9], [2], [2]])) for i in range(2)]
    r = summarise(outcomes, ["short-open", "long-open"], 2, 3)
    assert [p.process_cold for p in r.prompts] == [True, False]
    assert "cold-start transient within launches (long-open" in r.within_verdict
    assert "only the prompt's first request differs (the runtime had served other prompts before it)" \
        in r.within_verdict
    assert "first request after the start" not in r.within_verdict


def test_truncation_and_controls_reach_the_restarts_page_figures():
    from suite.site.figures import restarts_view

    outcomes = [LaunchOutcome(index=i, status="ok", gate=_gate_two([[1]] * 3, [[2]] * 3, cut=True))
                for i in range(2)]
    r = summarise(outcomes, ["short-open", "long-open"], 2, 3)
    r.controls = ["no-prompt-cache"]
    v = restarts_view(r)
    assert v is not None and v["controls"] == ["no-prompt-cache"]
    p = v["by_prompt"]["short-open"]
    assert (p["truncated"], p["answered"], p["max_tokens"]) == (6, 6, 8)
