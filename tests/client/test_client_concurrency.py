"""The concurrent latency path against a stand-in server with a known schedule (benchmarks/sse_truth_server.py).

The server, in a process of its own, sends each stream's tokens on a fixed schedule and records
when it wrote each one on the machine's monotonic clock; the client's TTFT and inter-token gaps
are compared with those writes chunk by chunk. A client slowed on purpose must be flagged as
saturated. The HTTP/1.1 response reader (httptools) is also fed responses cut at every byte.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import httpx
import pytest

from suite.site import charts
from suite.client import ClientError, OpenAIClient, StreamState
from suite.client.aio import _SSEProtocol
from suite.client.wire import _Response
from suite.stages.latency.view import latency_sweep
from suite.definitions import RuntimeDefinition
import suite.stages.latency.run as lat  # the run half: the requests it sends, timed

SERVER = Path(__file__).resolve().parents[2] / "benchmarks" / "sse_truth_server.py"
TTFT_S, GAP_S, TOKENS, STREAMS = 0.02, 0.02, 24, 32


# A runtime whose definition declares no timings of its own (the latency stage reads none).
PLAIN = RuntimeDefinition(name="plain", description="an OpenAI-compatible server")


@pytest.fixture(scope="module")
def truth_url() -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, str(SERVER), "--port", "0", "--ttft-ms", str(TTFT_S * 1000),
                             "--gap-ms", str(GAP_S * 1000), "--tokens", str(TOKENS)], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline() if proc.stdout else ""
        assert line.startswith("port "), line
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        proc.terminate()
        proc.wait(10)


def _truth(url: str) -> dict[int, dict[str, Any]]:
    return {r["id"]: r for r in httpx.get(f"{url}/truth", timeout=10).json()["requests"]}


def _errors(run: lat.ConcurrentRun, truth: dict[int, dict[str, Any]], sent_at: dict[int, float]
            ) -> tuple[list[float], list[float], list[float]]:
    """Per stream, on the one monotonic clock both processes read: how late the client saw its first
    token after the server wrote it, and how long the request took to reach the server (connect and
    send: part of the TTFT a user sees, but the machine's scheduling rather than the client's timing);
    per gap, the client's error on the inter-token time."""
    read_err, transit, itl_err = [], [], []
    for c in run.results:
        assert not isinstance(c, str), c
        rid = int(c.text.split(">", 1)[0][2:])  # the stream's id is its first token: "<r17>"
        sends, t = truth[rid]["sends"], truth[rid]
        assert len(c.chunk_times_s) == len(sends) == TOKENS
        assert c.ttft_s is not None
        read_err.append(sent_at[rid] + c.ttft_s - sends[0])
        transit.append(t["t_recv"] - sent_at[rid])
        # the two parts add up to the TTFT's error against the server's own first-token time
        assert abs((c.ttft_s - (sends[0] - t["t_recv"])) - (read_err[-1] + transit[-1])) < 1e-9
        times = c.chunk_times_s
        itl_err += [abs((b - a) - (sb - sa)) for a, b, sa, sb in zip(times, times[1:], sends, sends[1:])]
    return sorted(read_err), sorted(transit), sorted(itl_err)


def _q(xs: list[float], q: float) -> float:
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def _spy_sends(monkeypatch: pytest.MonkeyPatch) -> dict[int, float]:
    """Each stream's send time (perf_counter, before connecting), by the stream's id in its text."""
    sent_at: dict[int, float] = {}
    finish = StreamState.finish

    def spy(self: StreamState, t_close: float, t_enter: float, t_send: float) -> Any:
        c = finish(self, t_close, t_enter, t_send)
        if c.text.startswith("<r"):
            sent_at[int(c.text.split(">", 1)[0][2:])] = t_send
        return c

    monkeypatch.setattr(StreamState, "finish", spy)
    return sent_at


def test_concurrent_client_matches_the_truth_and_keeps_up(truth_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    sent_at = _spy_sends(monkeypatch)
    client = OpenAIClient(truth_url, "truth", timeout_s=30)
    # measured on 2 idle cores: read error p50 ~1 ms, ITL error p50 ~0.02 ms, p99 < 1 ms; with a runtime
    # busy on both cores the ITL p50 went to 1.6 ms. The machine is shared with whatever else runs, so a
    # run is repeated once when its figures miss: a defect of the client misses every time.
    misses: list[str] = []
    for _attempt in range(2):
        _truth(truth_url)
        sent_at.clear()
        run = lat.run_concurrent(client, STREAMS, STREAMS, lat.prompt_for, max_tokens=TOKENS)
        read_err, transit, itl_err = _errors(run, _truth(truth_url), sent_at)
        assert all(c.finish_reason == "length" and c.completion_tokens == TOKENS for c in run.results
                   if not isinstance(c, str))
        # causality, whatever the load: no token is seen before it was written, no request arrives before it was sent
        assert min(read_err) > -0.001, read_err
        assert min(transit) > -0.001, transit
        load = run.client_load(GAP_S)
        # Whether the client kept up depends on what else the machine runs; the flag must match its figures.
        lagging = load.loop_lag_ms.p99 is not None and load.loop_lag_ms.p99 > load.lag_threshold_ms
        assert load.saturated == (lagging or (load.cpu_share or 0) > 0.9), load.reason
        assert load.loop_lag_ms.n and load.cpu_share is not None
        figures = (f"read error p50 {_q(read_err, 0.5) * 1e3:.2f} ms, ITL error p50 {_q(itl_err, 0.5) * 1e3:.3f} ms"
                   f" p99 {_q(itl_err, 0.99) * 1e3:.3f} ms, transit p50 {_q(transit, 0.5) * 1e3:.2f} ms")
        if _q(read_err, 0.5) < 0.010 and _q(itl_err, 0.5) < 0.002 and _q(itl_err, 0.99) < 0.010:
            return
        misses.append(figures)
    pytest.fail("the client's timestamps missed the server's writes twice: " + "; ".join(misses))


def test_a_slow_client_is_flagged_saturated(truth_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    event = StreamState.event

    def slow_event(self: StreamState, payload: bytes | str, t: float) -> bool:
        end = time.perf_counter() + 0.002  # 2 ms of work per line: 16 streams x 50 lines/s = 160% of a core
        while time.perf_counter() < end:
            pass
        return event(self, payload, t)

    monkeypatch.setattr(StreamState, "event", slow_event)
    _truth(truth_url)
    client = OpenAIClient(truth_url, "truth", timeout_s=30)
    run = lat.run_concurrent(client, 16, 16, lat.prompt_for, max_tokens=8)
    load = run.client_load(GAP_S)
    assert load.saturated
    assert load.reason and "event-loop lag" in load.reason
    assert load.loop_lag_ms.p99 is not None and load.loop_lag_ms.p99 > load.lag_threshold_ms


def test_latency_stage_records_the_client_load_per_level(truth_url: str) -> None:
    recorded: list[dict[str, Any]] = []
    client = OpenAIClient(truth_url, "truth", timeout_s=30)
    ctx = SimpleNamespace(client=client, runtime=PLAIN, base_url=truth_url,
                          sampling=SimpleNamespace(seed=42, temperature=0.0),
                          record_request=lambda kind, **f: recorded.append(dict(f, kind=kind)))
    level = lat.run_level(ctx, 8, lat.level_requests(4, 8), 6, first_index=10)  # type: ignore[arg-type]
    assert level.requests == 8 and level.failed == 0 and level.output_tokens.p50 == 6
    assert level.client is not None and level.client.loop_lag_ms.n > 0
    assert level.client.saturated == bool(level.client.reason)
    assert sorted(r["prompt_index"] for r in recorded) == list(range(10, 18))
    assert all(len(r["chunk_times_s"]) == 6 for r in recorded)
    one = lat.run_level(ctx, 1, 2, 6, first_index=20)  # type: ignore[arg-type]
    assert one.client is None  # one at a time: the synchronous client, nothing to saturate
    with pytest.raises(Exception, match="1 to 256"):
        lat.run_level(ctx, 257, 257, 6)  # type: ignore[arg-type]
    client.close()


# -- the response reader and the asyncio transport, fed by hand ------------------------------------

class _Transport:
    def __init__(self) -> None:
        self.written = b""
        self.closed = False

    def write(self, data: bytes) -> None:
        self.written += data

    def close(self) -> None:
        self.closed = True

    def is_closing(self) -> bool:
        return self.closed


def _sse(*events: str) -> bytes:
    return b"".join(b"data: " + e.encode() + b"\n\n" for e in events)


EVENTS = ('{"choices":[{"index":0,"text":"Hel","finish_reason":null}]}',
          '{"choices":[{"index":0,"text":"lo","finish_reason":"length"}]}',
          '{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":2}}', "[DONE]")


def _chunked(body: bytes, size: int) -> bytes:
    out = b""
    for i in range(0, len(body), size):
        part = body[i:i + size]
        out += b"%x;ext=1\r\n" % len(part) + part + b"\r\n"
    return out + b"0\r\n\r\n"


@pytest.mark.parametrize("step", [1, 2, 7, 10_000])
@pytest.mark.parametrize("framing", ["chunked", "length"])
def test_httptools_transport_parses_any_cut(step: int, framing: str) -> None:
    import asyncio

    body = _sse(*EVENTS)
    if framing == "chunked":
        response = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(body, 13)
    else:
        response = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body

    async def text() -> str:
        owner = OpenAIClient("http://127.0.0.1:9", "m").async_client()
        proto = _SSEProtocol(owner)
        proto.connection_made(_Transport())  # type: ignore[arg-type]
        state = StreamState("test", chat=False)
        future = proto.start(b"POST ...", state, time.perf_counter())
        for i in range(0, len(response), step):
            proto.data_received(response[i:i + step])
        await future
        c = state.finish(0.1, 0.0, 0.0)
        assert c.text == "Hello" and c.finish_reason == "length" and c.completion_tokens == 2
        assert len(c.chunk_times_s) == 2
        assert owner._idle == [proto]  # the body ended: the connection is kept for the next request
        return c.text

    asyncio.run(text())


def test_httptools_transport_reports_http_errors_and_cut_streams() -> None:
    import asyncio

    async def go(response: bytes, close: bool) -> Any:
        owner = OpenAIClient("http://127.0.0.1:9", "m").async_client()
        proto = _SSEProtocol(owner)
        proto.connection_made(_Transport())  # type: ignore[arg-type]
        future = proto.start(b"POST ...", StreamState("POST x", chat=False), time.perf_counter())
        proto.data_received(response)
        if close:
            proto.connection_lost(None)
        with pytest.raises(ClientError) as exc:
            await future
        return str(exc.value)

    msg = asyncio.run(go(b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nno model!", False))
    assert "HTTP 404" in msg and "no model!" in msg
    cut = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(_sse(EVENTS[0]), 100)[:-5]
    assert "closed before the response ended" in asyncio.run(go(cut, True))
    bad = b"HTTP/1.1 200 OK\r\nContent-Length: 20\r\n\r\ndata: {not json}\n\n  "
    assert "malformed stream chunk" in asyncio.run(go(bad, False))


CHUNKED = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + _chunked(_sse(*EVENTS), 13)


def _read(pieces: list[bytes]) -> tuple[_Response, StreamState]:
    state = StreamState("POST x", chat=False)
    response = _Response(state, 0.0)
    for k, piece in enumerate(pieces):
        response.feed(piece, float(k + 1))
    return response, state


@pytest.mark.parametrize("cut", range(1, len(CHUNKED)))
def test_response_reader_takes_a_chunked_stream_cut_at_any_byte(cut: int) -> None:
    """Two reads, split at every byte boundary (inside a size line, a chunk's CRLF, a data line, the terminator)."""
    response, state = _read([CHUNKED[:cut], CHUNKED[cut:]])
    assert response.ended and response.keep_alive and response.done_at in (1.0, 2.0)
    c = state.finish(0.1, 0.0, 0.0)
    assert c.text == "Hello" and c.finish_reason == "length" and c.completion_tokens == 2
    # a token is timed by the read that completed its line: never before its bytes came
    assert len(c.chunk_times_s) == 2 and c.chunk_times_s == sorted(c.chunk_times_s)
    assert set(c.chunk_times_s) <= {1.0, 2.0}
    if cut <= CHUNKED.index(b"\r\n\r\n") + 4:  # the first read ended in the head: every token came in the second
        assert c.chunk_times_s == [2.0, 2.0]
    if cut >= len(CHUNKED) - 5:  # the first read had every event
        assert c.chunk_times_s == [1.0, 1.0] and response.done_at == 1.0


def test_response_reader_skips_a_continue_head_and_reads_a_close_delimited_body() -> None:
    body = _sse(*EVENTS[:3])  # no [DONE]: the stream ends with the body, at the connection's close
    response, state = _read([b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",
                             body])
    assert response.done_at is None and not response.ended
    response.eof(5.0)
    assert response.done_at == 5.0 and not response.keep_alive
    c = state.finish(5.0, 0.0, 0.0)
    assert c.text == "Hello" and c.chunk_times_s == [2.0, 2.0]


@pytest.mark.parametrize("reply, message", [
    (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\ndata: {}\r\n", "malformed HTTP response"),
    (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", "malformed HTTP response"),
    (b"HTTP/1.1 200 OK\r\nContent-Length: 18\r\n\r\ndata: {not json}\n\n", "malformed stream chunk"),
    (b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\n\r\nbusy", "HTTP 503: b'busy'"),
])
def test_response_reader_refuses_a_malformed_reply(reply: bytes, message: str) -> None:
    with pytest.raises(ClientError, match=message) as exc:
        _read([reply])
    assert str(exc.value).startswith("POST x: ")  # which request


def test_response_reader_says_a_cut_response_is_cut() -> None:
    response, _ = _read([CHUNKED[:60]])
    with pytest.raises(ClientError, match="closed before the response ended"):
        response.eof(2.0)


# -- the page ---------------------------------------------------------------------------------------

def test_sweep_rows_and_chart_mark_a_saturated_level() -> None:
    dist = {"n": 3, "mean": 0.01, "p50": 0.01, "p90": 0.02, "p99": 0.03, "min": 0.0, "max": 0.04}
    common = {"failed": 0, "wall_s": 1.0, "ttft_s": dist, "itl_s": dist, "tpot_s": dist, "e2e_s": dist,
              "output_tokens": dist, "output_tokens_per_s": dist, "overhead_ms": dist}
    latency = lat.LatencyResult(prompt_id="p", endpoint="/v1/completions", max_tokens=8, warmup=0,
                                signature_digest="x", levels=[
        lat.LatencyLevel(concurrency=1, requests=20, throughput_tokens_per_s=90.0, **common),
        lat.LatencyLevel(concurrency=64, requests=64, throughput_tokens_per_s=900.0, **common,
                         client={"loop_lag_ms": dict(dist, p99=9.0), "cpu_share": 0.97, "lag_threshold_ms": 2.0,
                                 "saturated": True, "reason": "event-loop lag p99 9.00 ms > 2.00 ms"})])
    rows = latency_sweep(latency)
    assert [r["concurrency"] for r in rows] == [1, 64]
    assert rows[0]["saturated"] is None and rows[1]["saturated"] is True and rows[1]["ttft_p50_ms"] == 10.0
    svg = charts.concurrency_sweep({"arm": rows})
    assert svg and svg.startswith("<svg") and "saturated" in svg
    assert charts.concurrency_sweep({"arm": rows[:1]}) is None
