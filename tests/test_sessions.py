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
from suite.stages.sessions import SessionsConfiguration, SessionsResult, summarise_prompt, table_lines


def runs(*answers: tuple[int, ...]) -> list[Sample]:
    return [Sample(index=i, text=str(a), token_ids=list(a)) for i, a in enumerate(answers)]


def test_the_base_model_one_answer_in_24_runs():
    p = summarise_prompt("p", [runs((1, 2), (1, 2), (1, 2)) for _ in range(8)])
    assert (p.distinct, p.runs) == (1, 24)
    assert p.within_agreement == 1.0 and p.across_agreement == 1.0
    # eight alike sessions: no zero-width interval; what they bound is said instead
    assert p.across_ci95 is None and "bounds how often one would differ" in p.ci_note
    assert p.first_run_differs == 0 and p.distinct_after_first == 1
    assert p.line == "1 distinct in 24 runs; agreement 1.000"


def test_the_adapter_24_answers_in_24_runs():
    sessions = [runs((i, 0), (i, 1), (i, 2)) for i in range(8)]
    p = summarise_prompt("p", sessions)
    assert (p.distinct, p.runs) == (24, 24)
    assert p.within_agreement == 0.0 and p.across_agreement == 0.0
    assert p.first_run_differs == 8  # every first run differs, and so does every other: not a transient
    assert p.distinct_after_first == 16


def test_a_caching_transient_is_confined_to_each_sessions_first_run():
    p = summarise_prompt("p", [runs((9,), (1,), (1,)) for _ in range(8)])
    assert p.distinct == 2
    assert p.first_run_differs == 8 and p.distinct_after_first == 1
    assert p.within_agreement == pytest.approx(1 / 3)


def test_few_sessions_give_no_interval_and_say_why():
    p = summarise_prompt("p", [runs((1,), (1,)), runs((2,), (2,))])
    assert p.across_ci95 is None and "at least 6" in p.ci_note
    assert p.across_agreement == 0.0 and p.within_agreement == 1.0


def test_table_lines_read_like_the_study():
    base = SessionsConfiguration(label="base", prompts=[summarise_prompt("p", [runs((1,), (1,), (1,))] * 8)])
    adapter = SessionsConfiguration(label="adapter", status="skipped", reason="no per-request selection")
    r = SessionsResult(sessions=8, replicates=3, launched=8, lora=True, configurations=[base, adapter], verdict="")
    lines = table_lines(r)
    assert lines[0].startswith("base p: 1 distinct in 24 runs; agreement 1.000")
    assert lines[1] == "adapter: skipped (no per-request selection)"


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
