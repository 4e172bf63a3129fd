"""The gate against a real llama-server on the tiny model: counting, recording, and its faults
(runtime errors, empty answers, a runtime that dies mid-gate), plus the gate prompt files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite.client import GenerationParams, OpenAIClient
from suite.errors import SuiteError
from suite.stages.gate_models import GatePrompt, load_gate_prompt, load_gate_prompts, select_prompts
from suite.stages.repeat import MAX_CONSECUTIVE_ERRORS, run_gate
from tests.conftest import start_local


@pytest.fixture(scope="module")
def client(llamacpp_server):
    definition_body = {"return_tokens": True}
    with OpenAIClient(llamacpp_server.base_url, "tiny", params=GenerationParams(extra_body=definition_body)) as c:
        yield c


def short() -> GatePrompt:
    return select_prompts(["short-open"])[0]


class Recorder:
    def __init__(self) -> None:
        self.lines: list[dict] = []

    def __call__(self, kind: str, **fields) -> None:
        self.lines.append({"kind": kind, **json.loads(json.dumps(fields, default=str))})


# -- prompt files ---------------------------------------------------------------------------------

def test_shipped_gate_prompts_are_versioned_and_hashed():
    prompts = load_gate_prompts()
    assert {"short-open", "long-open", "document-4k"} <= set(prompts)
    for p in prompts.values():
        assert p.version >= 1 and len(p.sha256) == 64 and p.kind in ("completion", "chat")
    assert len({p.sha256 for p in prompts.values()}) == len(prompts)


def test_document_prompt_and_its_answer_fit_the_tiny_context(client):
    doc = load_gate_prompts()["document-4k"]
    n = len(client.tokenize(doc.prompt) or [])
    assert 2500 <= n <= 4096 - doc.max_tokens, n


@pytest.mark.parametrize("body, message", [
    ('id = "bad"\nversion = 1\nmax_tokens = 8\n', "missing required key: prompt"),
    ('id = "bad"\nversion = 1\nmax_tokens = 8\nprompt = "x"\ncolour = "red"\n', "unknown key: colour"),
    ('id = "bad"\nversion = 1\nmax_tokens = 0\nprompt = "x"\n', "max_tokens"),
    ('id = "other"\nversion = 1\nmax_tokens = 8\nprompt = "x"\n', "differs from the file name"),
    ('id = "bad"\nversion = 1\nmax_tokens = 8\nprompt = "x"\nkind = "poem"\n', "kind"),
])
def test_bad_gate_prompt_is_one_line_naming_file_and_key(tmp_path: Path, body: str, message: str):
    path = tmp_path / "bad.toml"
    path.write_text(body)
    with pytest.raises(SuiteError) as err:
        load_gate_prompt(path)
    assert str(path) in str(err.value) and message in str(err.value)
    assert "\n" not in str(err.value)


def test_unknown_prompt_id_lists_the_known_ones():
    with pytest.raises(SuiteError, match="unknown gate prompt 'nope'; known: .*short-open"):
        select_prompts(["nope"])


# -- the gate on a real runtime -------------------------------------------------------------------

def test_gate_counts_what_the_runtime_answered(client):
    rec = Recorder()
    result = run_gate(client, [short()], 4, max_tokens_cap=12, logprobs=True,
                      record=rec)
    assert [ln["index"] for ln in rec.lines] == [0, 1, 2, 3]
    assert all(ln["kind"] == "gate" and ln["prompt_id"] == "short-open" and ln["seed"] == 42 for ln in rec.lines)
    ids = [tuple(ln["token_ids"]) for ln in rec.lines]
    assert all(len(t) == 12 for t in ids), "llama-server returns the generated token ids"
    assert all(len(ln["logprobs"]) == len(ln["token_ids"]) for ln in rec.lines)
    p = result.prompts[0]
    assert p.compared_by == "token_ids"
    assert p.requests == p.answered == 4
    assert p.distinct_answers == len(set(ids))
    assert p.lengths_text == "12 ×4"
    assert result.reproducible is (len(set(ids)) == 1)
    assert p.cold_warm is not None and p.cold_warm.warm_count == 3
    assert result.overhead_ms_per_request is not None and result.http_s > 0


def test_runtime_errors_are_recorded_per_request(client):
    too_long = GatePrompt(id="too-long", version=1, max_tokens=8, prompt="lighthouse " * 6000)
    rec = Recorder()
    result = run_gate(client, [too_long], 3, record=rec)
    p = result.prompts[0]
    assert p.errors == 3 and p.answered == 0 and p.distinct_answers == 0
    assert all(ln["error"] and "HTTP 400" in ln["error"] for ln in rec.lines)
    assert p.error_messages and result.stopped_reason is None
    assert result.reproducible is None and result.verdict.startswith("undetermined")


def test_a_prompt_the_runtime_refuses_is_named_and_the_next_prompt_runs(client):
    """llama-server (context 4,096 tokens) answers a prompt longer than its context with HTTP 400:
    the runtime is up and refusing that prompt, so its series ends after MAX_CONSECUTIVE_ERRORS
    refusals with the reason, and the next prompt's series still runs (stopping the whole gate
    there once hid every other prompt of a GPU run). Failures that are not refusals still stop
    the gate (tests/test_faults_*)."""
    too_long = GatePrompt(id="too-long", version=1, max_tokens=8, prompt="lighthouse " * 6000)
    rec = Recorder()
    result = run_gate(client, [short(), too_long, short()], 8, max_tokens_cap=4, record=rec)
    assert [p.prompt_id for p in result.prompts] == ["short-open", "too-long", "short-open"]
    first, refused, last = result.prompts
    assert first.answered == 8 and last.answered == 8 and last.stopped_reason is None
    assert refused.requests == MAX_CONSECUTIVE_ERRORS and refused.answered == 0
    assert refused.stopped_reason.startswith(f"the runtime refused {MAX_CONSECUTIVE_ERRORS} requests in a row of too-long (HTTP 400)")
    assert result.stopped_reason is None
    # undetermined: the refused prompt has none of the 8 answers it needed (a short-open series that
    # varied, llama-server's cold first answer, is a finding of its own and reads "not reproducible")
    varied = any(p.distinct_answers > 1 for p in (first, last))
    assert result.reproducible is (False if varied else None), result.verdict
    if not varied:
        assert "too-long: 0 of 8 answered (the runtime refused" in result.verdict
    assert len(rec.lines) == 16 + MAX_CONSECUTIVE_ERRORS


def test_empty_answers_are_answers(client):
    first = client.complete(short().prompt, max_tokens=4)
    stop = first.text[:1]
    result = run_gate(client, [short()], 3, max_tokens_cap=4, extra={"stop": [stop]})
    p = result.prompts[0]
    assert p.answered == 3 and p.empty_answers == 3
    assert all(a.text == "" for a in p.answers)


def test_runtime_dying_mid_gate_stops_with_its_reason(tiny_gguf, tmp_path):
    rt = start_local("llamacpp", tiny_gguf, tmp_path)
    rec = Recorder()

    def record_then_kill(kind: str, **fields) -> None:
        rec(kind, **fields)
        if fields["index"] == 1:
            rt.kill()

    with rt, OpenAIClient(rt.base_url, "tiny", timeout_s=30) as c:
        from suite.stages.repeat import death_reason_of

        result = run_gate(c, [short(), short()], 5, max_tokens_cap=4,
                          record=record_then_kill, alive=rt.alive, death_reason=death_reason_of(rt))
    assert len(result.prompts) == 1
    p = result.prompts[0]
    assert p.answered == 2 and p.errors == 1
    # how it ended, by its signal, and the answers it gave before (not the request that failed)
    assert result.stopped_reason == ("the runtime was killed by SIGKILL during short-open after 2 of 5 requests; "
                                     "no error line in its log")
    assert [ln["index"] for ln in rec.lines] == [0, 1, 2]
    assert rec.lines[2]["error"]
    assert result.reproducible is None or result.reproducible is False


def test_concurrent_gate_sends_waves(client):
    rec = Recorder()
    result = run_gate(client, [short()], 6, max_tokens_cap=6, concurrency=3, record=rec)
    assert sorted(ln["index"] for ln in rec.lines) == list(range(6))
    assert {ln["wave"] for ln in rec.lines} == {0, 1}
    p = result.prompts[0]
    assert p.cold_warm.cold_indices == [0, 1, 2]
    assert p.answered == 6
    assert result.overhead_ms_per_request is None  # not meaningful with concurrent requests


# -- through the bench ----------------------------------------------------------------------------

def test_gate_stage_through_the_bench(tmp_path):
    from suite.bench import BenchRequest, run_bench
    from suite.records import load_summary

    (summary,) = run_bench(BenchRequest.build(model="tiny", arms=["llamacpp"], launcher="local", profile="quick", stages=["gate"], results=tmp_path))
    assert summary.status == "complete", summary.reason
    gate = summary.gate
    assert [p.prompt_id for p in gate.prompts] == ["short-open"]
    assert gate.prompts[0].requests == 5 and gate.n_requests == 5
    assert gate.reproducible in (True, False)
    run_dir = next(tmp_path.glob("tiny/llamacpp/*"))
    lines = [json.loads(x) for x in (run_dir / "requests.jsonl").read_text().splitlines()]
    assert len(lines) == 5 and all(ln["kind"] == "gate" and ln["signature_digest"] for ln in lines)
    assert load_summary(run_dir / "summary.json").gate == gate

