"""Sessions x replicates (study 2's design): K processes, R runs each, figures per configuration.

The summary on constructed sessions (the study's own outcomes: one answer in 24 runs for the base
model, 24 in 24 for the adapter, a transient confined to each session's first run), then the
stage for real: independent llama-server processes of the tiny model through `suite study`.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from suite.analysis.repro import Sample
from suite.stages.sessions import (SessionsConfiguration, SessionsResult, summarise_configuration, summarise_prompt,
                                  table_lines)


def runs(*answers: tuple[int, ...]) -> list[Sample]:
    return [Sample(index=i, text=str(a), token_ids=list(a)) for i, a in enumerate(answers)]


def test_the_base_model_one_answer_in_24_runs():
    p = summarise_prompt("p", [runs((1, 2), (1, 2), (1, 2)) for _ in range(8)])
    assert (p.distinct, p.runs) == (1, 24)
    assert p.within_agreement == 1.0 and p.across_agreement == 1.0
    # eight alike sessions: no zero-width interval; what they bound is said instead
    assert p.across_ci95 is None and "bounds how often one would differ" in p.ci_note
    assert p.first_run_differs == 0 and p.distinct_after_first == 1
    assert p.line == ("1 distinct in 24 runs; identical answer pairs across sessions 1.000 (no interval: every "
                      "pair alike), within sessions 1.000")


def test_the_adapter_24_answers_in_24_runs():
    sessions = [runs((i, 0), (i, 1), (i, 2)) for i in range(8)]
    p = summarise_prompt("p", sessions)
    assert (p.distinct, p.runs) == (24, 24)
    assert p.within_agreement == 0.0 and p.across_agreement == 0.0
    assert p.first_run_differs == 8  # every first run differs, and so does every other: not a transient
    assert p.distinct_after_first == 16
    assert not p.transient_only  # so no "first run differs" note
    r = SessionsResult(sessions=8, replicates=3, launched=8, lora=True, verdict="",
                       configurations=[SessionsConfiguration(label="adapter", prompts=[p])])
    assert not any("first run" in line for line in table_lines(r))


def test_a_caching_transient_is_confined_to_each_sessions_first_run():
    p = summarise_prompt("p", [runs((9,), (1,), (1,)) for _ in range(8)])
    assert p.distinct == 2
    assert p.first_run_differs == 8 and p.distinct_after_first == 1
    assert p.within_agreement == pytest.approx(1 / 3)
    assert p.transient_only
    r = SessionsResult(sessions=8, replicates=3, launched=8, lora=False, verdict="",
                       configurations=[SessionsConfiguration(label="base", prompts=[p])])
    assert table_lines(r)[1].endswith("the first run differs in 8 of 8 sessions and is the only difference: "
                                      "1 distinct without it")


def test_a_first_run_that_differs_beside_other_differences_is_not_called_a_transient():
    # Every first run differs, but the sessions also disagree among their later runs.
    p = summarise_prompt("p", [runs((9,), (i,), (i,)) for i in range(8)])
    assert p.first_run_differs == 8 and p.distinct_after_first == 8
    assert not p.transient_only


def test_few_sessions_give_no_interval_and_say_why():
    p = summarise_prompt("p", [runs((1,), (1,)), runs((2,), (2,))])
    assert p.across_ci95 is None and "at least 6" in p.ci_note
    assert p.across_agreement == 0.0 and p.within_agreement == 1.0


def test_table_lines_read_like_the_study():
    base = SessionsConfiguration(label="base", prompts=[summarise_prompt("p", [runs((1,), (1,), (1,))] * 8)])
    adapter = SessionsConfiguration(label="adapter", status="skipped", reason="no per-request selection")
    r = SessionsResult(sessions=8, replicates=3, launched=8, lora=True, configurations=[base, adapter], verdict="")
    lines = table_lines(r)
    assert lines[1] == "adapter: skipped (no per-request selection)"
    assert lines[2].startswith("base p: 1 distinct in 24 runs; identical answer pairs across sessions 1.000")


# -- the study's unit: a run is one pass over the prompt set ---------------------------------------

def study_sessions(adapter: bool) -> list[dict[str, list[Sample]]]:
    """8 sessions x 3 replicates over three prompts, as study 2 describes them.

    Base: every run gives the same answers (1 output hash in 24 runs). Adapter: prompt `a` is
    always answered alike; `b` differs in every run (it shares its first 3 of 5 tokens with a
    run of another session, 4 of 5 with a run of its own session); `c` follows the session's
    parity (alike between sessions of the same parity, apart from its first token otherwise).
    So every run has its own hash (24 in 24) while runs still agree in part.
    """
    sessions = []
    for s in range(8):
        session: dict[str, list[Sample]] = {"a": [], "b": [], "c": []}
        for r in range(3):
            answers = {"a": (1, 2, 3, 4), "b": (7, 7, 7, 7, 7), "c": (0, 1, 1, 1)}
            if adapter:
                answers["b"] = (7, 7, 7, 10 + s, 20 + r)
                answers["c"] = (s % 2, 1, 1, 1)
            for pid, ids in answers.items():
                session[pid].append(Sample(index=r, text=" ".join(map(str, ids)), token_ids=list(ids)))
        sessions.append(session)
    return sessions


def test_study_2s_table_comes_out_of_its_runs():
    base = summarise_configuration("base", ["a", "b", "c"], study_sessions(adapter=False))
    adapter = summarise_configuration("adapter", ["a", "b", "c"], study_sessions(adapter=True))
    r = SessionsResult(sessions=8, replicates=3, launched=8, lora=True, configurations=[base, adapter], verdict="")
    base_line, adapter_line = table_lines(r)[:2]

    assert base.runs is not None and (base.runs.distinct_runs, base.runs.runs) == (1, 24)
    assert base_line.startswith("base: 1 distinct output hash in 24 runs (3 prompts each, 8 sessions)")
    assert "identical runs 1.000 (no interval)" in base_line  # every pair alike: no [1.000, 1.000]
    assert "within sessions: identical runs 1.000, items 1.000, tokens 1.000" in base_line

    a = adapter.runs
    assert a is not None and (a.distinct_runs, a.runs, a.sessions) == (24, 24, 8)
    identical, items, tokens = (a.agreement(m) for m in ("identical runs", "items", "tokens"))
    assert identical is not None and items is not None and tokens is not None
    same_parity = 12 / 28  # pairs of sessions (of 28) with the same parity; every pair has 3 x 3 runs
    assert identical.across == 0.0 and identical.within == 0.0
    assert items.across == pytest.approx((1 + 0 + same_parity) / 3)
    assert items.within == pytest.approx(2 / 3)
    assert tokens.across == pytest.approx((1 + 3 / 5 + same_parity) / 3)
    assert tokens.within == pytest.approx((1 + 4 / 5 + 1) / 3)
    for m in (items, tokens):  # an interval over the 8 sessions, around its figure, not collapsed
        assert m.across_ci95 is not None
        assert m.across_ci95[0] < m.across < m.across_ci95[1]
        assert m.across_pairs == 28 * 9 and m.within_pairs == 8 * 3
    lo, hi = items.across_ci95
    assert adapter_line == (
        f"adapter: 24 distinct output hashes in 24 runs (3 prompts each, 8 sessions); across sessions (95% interval "
        f"over sessions): identical runs 0.000 (no interval), items {items.across:.3f} [{lo:.3f}, {hi:.3f}], "
        f"tokens {tokens.across:.3f} [{tokens.across_ci95[0]:.3f}, {tokens.across_ci95[1]:.3f}]; "
        f"within sessions: identical runs 0.000, items 0.667, tokens {tokens.within:.3f}")
    assert "first run" not in adapter_line  # every run differs: not a transient


def test_runs_degenerate_cases():
    # Every request failed: no hash, no agreement, nothing invented.
    failed = [{"a": [Sample(index=r, error="boom") for r in range(3)]} for _ in range(8)]
    c = summarise_configuration("base", ["a"], failed)
    assert c.runs is None or (c.runs.runs == 0 and all(x.across is None for x in c.runs.agreements))
    # One prompt of one run failed: that run has no hash, the rest are counted; items still compare.
    sessions = study_sessions(adapter=False)
    sessions[0]["b"][1] = Sample(index=1, error="timeout")
    c = summarise_configuration("base", ["a", "b", "c"], sessions)
    assert c.runs is not None and (c.runs.runs, c.runs.incomplete_runs, c.runs.distinct_runs) == (23, 1, 1)
    assert "1 run(s) with a failed prompt left out of the hashes" in c.line
    assert c.runs.agreement("items").across == 1.0
    # Empty answers alike are identical (to the token); answers cut at the cap are counted.
    empty = [{"a": [Sample(index=r, text="", token_ids=[], finish_reason="length") for r in range(2)]}
             for _ in range(2)]
    c = summarise_configuration("base", ["a"], empty)
    assert c.runs is not None and c.runs.agreement("tokens").across == 1.0 and c.runs.truncated == 4
    assert "4 answers cut at max_tokens" in c.line and "no interval" in c.line
    assert "2 of 4 cut" not in c.line
    assert c.prompts[0].truncated == 4 and "4 of 4 cut at max_tokens" in c.prompts[0].line
    # A transient confined to each session's first run, at the run level.
    t = [{"a": [Sample(index=0, text="x", token_ids=[9])] + [Sample(index=r, text="y", token_ids=[1])
                                                            for r in (1, 2)]} for _ in range(8)]
    c = summarise_configuration("base", ["a"], t)
    assert c.runs is not None and c.runs.transient_only and c.runs.first_run_differs == 8
    assert c.line.endswith("the first run differs in 8 of 8 sessions and is the only difference: "
                           "1 output hash without it")


@pytest.mark.live
def test_study_sessions_on_real_llama_servers(tmp_path: Path, tiny_gguf: Path) -> None:
    from conftest import installed_definition

    installed_definition("llamacpp")
    env = {**os.environ, "RESULTS": str(tmp_path / "results")}
    out = subprocess.run([sys.executable, "-m", "suite.cli", "study", "sessions", "--model", "tiny", "--arms",
                          "llamacpp", "--sessions", "2", "--replicates", "2"],
                         capture_output=True, text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "llamacpp: base short-open:" in out.stdout and "runs" in out.stdout
    (summary,) = (tmp_path / "results").glob("tiny/llamacpp/*/summary.json")
    s = json.loads(summary.read_text())
    sessions = s["sessions"]
    assert sessions["launched"] == 2 and sessions["replicates"] == 2
    (p,) = sessions["configurations"][0]["prompts"]
    assert p["runs"] == 4 and p["sessions_with_answers"] == 2
    kinds = [json.loads(ln)["kind"] for ln in (summary.parent / "requests.jsonl").read_text().splitlines()]
    assert kinds.count("sessions") == 4


# -- what alike sessions could have missed ----------------------------------------------------------

def alike_sessions(k: int, r: int = 3, *, truncated: bool = False) -> SessionsConfiguration:
    one = [Sample(index=i, text="1 2", token_ids=[1, 2], finish_reason="length" if truncated else "stop")
           for i in range(r)]
    return summarise_configuration("base", ["p"], [{"p": list(one)} for _ in range(k)])


def test_alike_sessions_say_what_they_could_have_missed():
    """A session is a fresh process: K sessions with one output hash bound how often a session
    would differ, as K alike launches do (about 40 % at 6, 31 % at 8), and say so on the line."""
    six = alike_sessions(6)
    assert six.alike == ("6 of 6 sessions alike (one output hash in 18 runs): a session that differs in more "
                         "than 40% of starts would likely have shown")
    assert six.line.endswith("; " + six.alike)
    assert "more than 31% of starts" in (alike_sessions(8).alike or "")
    # five alike sessions cannot bound it: they say how many would
    assert alike_sessions(5).alike == ("5 of 5 sessions alike, too few to bound how often a session differs: "
                                       "6 alike sessions would bound it below 40%")
    # answers cut at the cap: alike only up to it, and the bound holds only before it
    capped = alike_sessions(6, truncated=True).alike
    assert capped is not None and capped.startswith("6 of 6 sessions alike up to the cap (18 of 18 answers cut")
    assert capped.endswith("before the cap, a session that differs in more than 40% of starts would likely have shown")


def test_sessions_that_differ_or_failed_claim_no_bound():
    differ = summarise_configuration("base", ["p"], [{"p": runs((s,), (s,), (s,))} for s in range(6)])
    assert differ.alike is None and "sessions alike" not in differ.line
    one = summarise_configuration("base", ["p"], [{"p": runs((1,), (1,), (1,))}])
    assert one.alike is None  # one session: nothing to compare it with
    failed = [{"p": runs((1,), (1,), (1,))} for _ in range(5)] + [{"p": [
        Sample(index=0, text="", token_ids=None, error="HTTP 500"), *runs((1,), (1,))[1:]]}]
    assert summarise_configuration("base", ["p"], failed).alike is None  # a run with a failed prompt
    skipped = SessionsConfiguration(label="adapter", status="skipped", reason="no LoRA")
    assert skipped.alike is None
