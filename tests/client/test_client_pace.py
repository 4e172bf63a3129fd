"""Bounds above one request's deadline: a minimum byte rate within a piece of a reply, a number of
stream lines from `max_tokens`, and a stage's time budget over all of its requests.

Scripted servers (tests/faults/test_faults_inputs.py's `RawServer`): no real runtime trickles
bytes or streams without end on demand. Every client path the suite itself uses is tried.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import pytest

from suite.client import ClientError, OpenAIClient, event_loop_factory, wire
from suite.stages.gate_models import select_prompts
from suite.stages.repeat import run_gate
from tests.faults.test_faults_inputs import CHUNKED_SSE_HEAD, SYNC_PATHS, _call, _Counting, endless, raw_server

__all__ = ["raw_server"]  # the fixture, used by name below

SUITE_PATHS = SYNC_PATHS + ["sync-stream", "sync-stream-chat", "async-httptools"]


def trickle(path: str, gap_s: float = 0.1) -> Any:
    """A reply whose head comes at once, then a piece (a JSON body, one stream line) a byte at a time."""
    if path in SYNC_PATHS:
        start = b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 100000\r\n\r\n{"
    else:
        start = CHUNKED_SSE_HEAD + b"data: {"
    return endless(start, b" ", gap_s=gap_s)


@pytest.mark.fault
@pytest.mark.parametrize("path", SUITE_PATHS)
def test_a_reply_trickled_a_byte_at_a_time_is_cut_off_at_the_minimum_rate(
        raw_server: Any, monkeypatch: pytest.MonkeyPatch, fault_report: Any, path: str) -> None:
    """A byte every 0.1 s (every stall timeout met) within one piece: cut off once the grace is
    over, not at the request's deadline (8 s here; 600 s by default)."""
    monkeypatch.setattr(wire, "TRICKLE_GRACE_S", 1.0)
    srv = raw_server(trickle(path))
    t0 = time.perf_counter()
    out = _call(srv.url, path, timeout_s=8.0, stall_s=5.0)
    took = time.perf_counter() - t0
    fault_report(tracebacks=int(isinstance(out, BaseException) and not isinstance(out, ClientError)))
    assert isinstance(out, ClientError) and "trickles" in str(out), repr(out)
    assert took < 4.0, took


def test_a_slow_stream_of_whole_lines_is_not_a_trickle(raw_server: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A stream that pauses between its lines (a long prefill, a slow model) is fine: the rate
    holds within a line only."""
    monkeypatch.setattr(wire, "TRICKLE_GRACE_S", 0.3, raising=False)

    def script(c: _Counting, req: dict[str, Any]) -> None:
        c.send(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n")
        for word in ("a", " b", " c", " d"):
            time.sleep(0.5)
            c.send(b'data: {"choices": [{"index": 0, "text": "%s", "finish_reason": null}]}\n\n' % word.encode())
        c.send(b"data: [DONE]\n\n")
        req["_close"] = True

    srv = raw_server(script)
    out = _call(srv.url, "sync-stream", timeout_s=10.0, stall_s=5.0)
    assert not isinstance(out, BaseException), repr(out)
    assert out.text == "a b c d"


def endless_tokens() -> Any:
    chunk = b'data: {"choices": [{"index": 0, "text": "x", "finish_reason": null}]}\n\n'
    return endless(CHUNKED_SSE_HEAD, chunk * 64)


@pytest.mark.fault
def test_endless_event_streams_on_the_async_client_end_at_the_line_bound(raw_server: Any, fault_report: Any) -> None:
    """Four endless token streams at once (never [DONE]): each ends as soon as it has said more
    than its max_tokens allows, in moments and little CPU, not at its deadline."""
    srv = raw_server(endless_tokens())
    client = OpenAIClient(srv.url, "m", timeout_s=10.0, stall_timeout_s=5.0)

    async def four() -> list[Any]:
        async with client.async_client() as ac:
            return await asyncio.gather(*(ac.complete_stream("p", max_tokens=16) for _ in range(4)),
                                        return_exceptions=True)

    loop = event_loop_factory()()
    t0, cpu0 = time.perf_counter(), time.process_time()
    try:
        outs = loop.run_until_complete(four())
    finally:
        loop.close()
        client.close()
    took, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    fault_report(tracebacks=sum(1 for o in outs if isinstance(o, BaseException) and not isinstance(o, ClientError)))
    assert all(isinstance(o, ClientError) and "max_tokens allows" in str(o) for o in outs), outs
    assert took < 3.0 and cpu < 3.0, (took, cpu)


@pytest.mark.parametrize("path", ["sync-stream", "sync-stream-chat"])
def test_an_endless_stream_ends_at_the_line_bound_on_the_sync_client(raw_server: Any, path: str) -> None:
    srv = raw_server(endless_tokens())
    t0 = time.perf_counter()
    out = _call(srv.url, path, timeout_s=10.0, stall_s=5.0)
    assert isinstance(out, ClientError) and "max_tokens allows" in str(out), repr(out)
    assert time.perf_counter() - t0 < 3.0


def comments_forever() -> Any:
    """An event stream that sends a comment line every 0.2 s and never an event: each line whole
    and on time, so neither the rate nor (for many seconds) the line bound ends it."""
    return endless(CHUNKED_SSE_HEAD, b": ping\n", gap_s=0.2)


@pytest.mark.fault
def test_a_stage_budget_ends_a_gate_whose_every_request_runs_to_its_deadline(raw_server: Any,
                                                                              fault_report: Any) -> None:
    """A gate on a server whose every reply runs to its deadline (4 s here, 600 s by default): five
    failures in a row would take 20 s; the stage's budget of 2 s ends the gate at 2 s, with a
    reason that names the budget."""
    from suite.client.budget import budget

    srv = raw_server(comments_forever())
    client = OpenAIClient(srv.url, "m", timeout_s=4.0, stall_timeout_s=3.0)
    prompts = select_prompts(["short-open"])
    t0 = time.perf_counter()
    try:
        with budget(2.0, "stage gate"):
            result = run_gate(client, [p.model_copy(update={"kind": "completion"}) for p in prompts], 5,
                              max_tokens_cap=256)
    finally:
        client.close()
    took = time.perf_counter() - t0
    fault_report()
    assert result.stopped_reason and "time budget of 2 s is spent" in result.stopped_reason, result.stopped_reason
    assert took < 4.0, took


def test_the_budget_of_a_stage_follows_its_planned_requests(monkeypatch: pytest.MonkeyPatch) -> None:
    from suite.client import budget as b

    monkeypatch.delenv(b.BUDGET_ENV, raising=False)
    assert b.stage_budget_s(5) == b.STAGE_MIN_S and b.stage_budget_s(1000) == 1000 * b.PER_REQUEST_S
    assert b.stage_budget_s(None) == b.UNPLANNED_S
    monkeypatch.setenv(b.BUDGET_ENV, "30")
    assert b.stage_budget_s(1000) == 30.0
    for bad in ("nan", "-5", "soon", "inf"):
        monkeypatch.setenv(b.BUDGET_ENV, bad)
        with pytest.raises(ValueError, match=b.BUDGET_ENV):
            b.stage_budget_s(5)


@pytest.mark.fault
def test_a_bench_stage_on_a_runtime_that_never_answers_ends_at_its_budget(tmp_path, fault_report: Any) -> None:
    """A real bench (the local launcher, a stand-in runtime process that trickles comment lines to
    every completion) with a stage budget of 4 s: the gate ends at its budget, the arm is recorded
    with the budget named, the bench exits cleanly (the request deadline alone would hold each of
    five requests for 600 s)."""
    import json

    from tests.launchers.test_crash_naming import run_suite, standin_card, standin_images, suite_env

    images = standin_images(tmp_path / "images", {"trickler": ["--mode", "trickle"]})
    cards = standin_card(tmp_path / "cards", "slowcard", ["trickler"])
    env = {**suite_env(tmp_path, images, cards), "SUITE_STAGE_BUDGET_S": "4"}
    results = tmp_path / "results"
    t0 = time.perf_counter()
    bench = run_suite(["bench", "--model", "slowcard", "--profile", "quick", "--stages", "gate", "--launcher",
                       "local", "--results", str(results)], env, timeout=240)
    took = time.perf_counter() - t0
    errors = [json.loads(line).get("error") or "" for p in results.glob("slowcard/trickler/*/requests.jsonl")
              for line in p.read_text().splitlines() if line.strip()]
    fault_report(tracebacks=int("Traceback" in bench.stdout + bench.stderr))
    # nothing answered: the gate is undetermined and the bench never reads as a pass (exit 3)
    assert bench.returncode == 3, bench.stdout + bench.stderr
    assert "not measured: slowcard/trickler: gate undetermined" in " ".join(bench.stderr.split())
    assert errors and all("time budget of 4 s is spent" in e for e in errors), errors
    assert took < 90, took
