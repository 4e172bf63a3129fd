"""Streams that go wrong, against a scripted stand-in server: each must end as a clear per-request error.

The stand-in (here, not in the product) streams OpenAI-style completions over HTTP/1.1 with
chunked encoding and keep-alive, and misbehaves on the requests whose prompt nonce
(`Request 0007: `, see `suite.stages.latency.prompt_for`) the test names: it stops sending
mid-stream without closing (a stall), sends a chunk that is not JSON, breaks the chunked framing,
closes the connection in the middle of a chunk, answers HTTP 500, or closes a connection it
announced as kept alive once its answer is sent. A stall must end after the client's `stall_timeout_s`
with "no data for N s", on the synchronous path and the concurrent one, and the latency stage
must record every such request as failed, with its message, while the level's other requests
are measured as usual.
"""

from __future__ import annotations

import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import pytest

from conftest import send_body
from suite.client import ClientError, OpenAIClient
from suite.definitions import RuntimeDefinition
import suite.stages.latency.run as lat  # the run half: the requests it sends, timed

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from client_transports import BACKENDS  # noqa: E402  (the transports only the benchmarks compare)

STALL_S = 1.0  # the client's stall timeout in these tests
TOKENS = 6


# A runtime whose definition declares no timings of its own (the latency stage reads none).
PLAIN = RuntimeDefinition(name="plain", description="an OpenAI-compatible server")


def _event(obj: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(obj).encode() + b"\n\n"


class _StandIn:
    """Mode per request index: ok, stall, malformed, badchunk, cut, http500, oneshot (closes a kept-alive
    connection after its answer), slow (a gap under the stall timeout)."""

    def __init__(self, modes: dict[int, str], slow_gap_s: float = 0.0):
        self.modes = modes
        self.slow_gap_s = slow_gap_s
        self.release = threading.Event()  # set at teardown: a stalled handler lets go
        stand_in = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                stand_in.handle(self)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.handle_error = lambda *a: None  # type: ignore[method-assign]  # a client that hung up on a fault
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.server.shutdown()
        self.server.server_close()

    def handle(self, h: BaseHTTPRequestHandler) -> None:
        body = json.loads(h.rfile.read(int(h.headers.get("Content-Length") or 0)) or b"{}")
        m = re.match(r"Request (\d+)", str(body.get("prompt", "")))
        mode = self.modes.get(int(m.group(1)) if m else -1, "ok")
        if mode == "http500":
            send_body(h, 500, "application/json", b'{"error": "scripted failure"}')
            return
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()

        def send(data: bytes) -> None:
            h.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
            h.wfile.flush()

        n = int(body.get("max_tokens") or TOKENS)
        for k in range(n):
            if k == 2 and mode == "stall":  # stop sending, keep the connection open
                self.release.wait(30)
                h.close_connection = True
                return
            if k == 2 and mode == "malformed":
                send(b'data: {"choices": [{"text": "t2", \n\n')
                continue
            if k == 2 and mode == "badchunk":  # a chunk size that is not hexadecimal
                h.wfile.write(b"zz\r\n" + _event({"choices": []}) + b"\r\n")
                h.wfile.flush()
                h.close_connection = True
                return
            if k == 2 and mode == "cut":  # a chunk's size line, half its data, then the connection closes
                h.wfile.write(b"40\r\ndata: {\"cho")
                h.wfile.flush()
                h.close_connection = True
                return
            if k and mode == "slow":
                time.sleep(self.slow_gap_s)
            send(_event({"choices": [{"index": 0, "text": f" t{k}",
                                      "finish_reason": "length" if k == n - 1 else None}]}))
        send(_event({"choices": [], "usage": {"prompt_tokens": 8, "completion_tokens": n}}) + b"data: [DONE]\n\n")
        h.wfile.write(b"0\r\n\r\n")
        h.wfile.flush()
        if mode == "oneshot":
            h.close_connection = True


@pytest.fixture
def stand_in() -> Iterator[Callable[..., _StandIn]]:
    started: list[_StandIn] = []

    def start(modes: dict[int, str], slow_gap_s: float = 0.0) -> _StandIn:
        s = _StandIn(modes, slow_gap_s)
        started.append(s)
        return s

    yield start
    for s in started:
        s.close()


def _ctx(client: OpenAIClient, recorded: list[dict[str, Any]]) -> SimpleNamespace:
    return SimpleNamespace(client=client, runtime=PLAIN, base_url=client.base_url,
                           sampling=SimpleNamespace(seed=42, temperature=0.0),
                           record_request=lambda kind, **f: recorded.append(dict(f, kind=kind)))


# -- the synchronous client --------------------------------------------------------------------------

def test_sync_stream_that_stops_sending_fails_after_the_stall_timeout(stand_in: Any) -> None:
    srv = stand_in({0: "stall"})
    client = OpenAIClient(srv.url, "m", timeout_s=30, stall_timeout_s=STALL_S)
    t0 = time.perf_counter()
    with pytest.raises(ClientError, match=r"no data for 1 s \(stall timeout\)"):
        client.complete(lat.prompt_for(0), max_tokens=TOKENS, stream=True)
    assert STALL_S * 0.9 < time.perf_counter() - t0 < STALL_S + 5  # the stall timeout, not the request's 30 s
    c = client.complete(lat.prompt_for(1), max_tokens=TOKENS, stream=True)  # the client is still usable
    assert c.finish_reason == "length" and len(c.chunk_times_s) == TOKENS
    client.close()


def test_sync_stall_timeout_is_per_read_not_per_stream(stand_in: Any) -> None:
    """Gaps under the stall timeout, a stream longer than it: no error."""
    srv = stand_in({0: "slow"}, slow_gap_s=STALL_S * 0.4)
    client = OpenAIClient(srv.url, "m", timeout_s=30, stall_timeout_s=STALL_S)
    c = client.complete(lat.prompt_for(0), max_tokens=5, stream=True)
    assert c.finish_reason == "length" and c.e2e_s > STALL_S
    client.close()


@pytest.mark.parametrize("mode, message", [("malformed", "malformed stream chunk"), ("http500", "HTTP 500"),
                                           ("cut", "closed before the response ended"),
                                           ("badchunk", "malformed HTTP response")])
def test_sync_broken_streams_are_clear_errors(stand_in: Any, mode: str, message: str) -> None:
    srv = stand_in({0: mode})
    client = OpenAIClient(srv.url, "m", timeout_s=30, stall_timeout_s=STALL_S)
    with pytest.raises(ClientError, match=message) as exc:
        client.complete(lat.prompt_for(0), max_tokens=TOKENS, stream=True)
    assert srv.url in str(exc.value)  # which endpoint
    client.close()


# -- the concurrent client ---------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_faults_are_per_request_errors(stand_in: Any, backend: str) -> None:
    modes = {1: "stall", 2: "malformed", 3: "cut", 4: "http500"}
    if backend != "aiohttp":  # aiohttp, at times, waits for the request's whole timeout after a broken chunk size
        modes[5] = "badchunk"
    srv = stand_in(modes)
    client = OpenAIClient(srv.url, "m", timeout_s=30, stall_timeout_s=STALL_S)
    t0 = time.perf_counter()
    run = lat.run_concurrent(client, 12, 6, lat.prompt_for, max_tokens=TOKENS, backend=BACKENDS[backend])
    assert time.perf_counter() - t0 < STALL_S + 5
    errors = {i: r for i, r in enumerate(run.results) if isinstance(r, str)}
    assert sorted(errors) == sorted(modes), errors
    assert "no data for 1 s" in errors[1]
    assert "malformed stream chunk" in errors[2]
    assert "HTTP 500" in errors[4] and "scripted failure" in errors[4]
    assert errors[3] and "malformed" not in errors[3]  # the cut: the transport's own words
    if 5 in modes:
        assert re.search(r"malformed HTTP response|chunk (size|header)", errors[5]), errors[5]  # the framing
    for i, c in enumerate(run.results):
        if i not in errors:
            assert not isinstance(c, str)
            assert c.finish_reason == "length" and len(c.chunk_times_s) == TOKENS and c.completion_tokens == TOKENS
    client.close()


def test_sync_stream_keeps_its_connection_and_retries_one_the_server_closed(stand_in: Any) -> None:
    srv = stand_in({1: "oneshot"})
    client = OpenAIClient(srv.url, "m", timeout_s=30, stall_timeout_s=STALL_S)
    client.complete(lat.prompt_for(0), max_tokens=TOKENS, stream=True)
    assert len(client._idle_socks) == 1
    kept = client._idle_socks[0]
    client.complete(lat.prompt_for(1), max_tokens=TOKENS, stream=True)  # on the kept connection, which then closes
    assert client._idle_socks == [kept]  # still announced as kept alive
    time.sleep(0.2)  # the server has closed it by now
    c = client.complete(lat.prompt_for(2), max_tokens=TOKENS, stream=True)  # refused on it: once more, on a new one
    assert c.finish_reason == "length" and len(c.chunk_times_s) == TOKENS
    assert len(client._idle_socks) == 1 and client._idle_socks[0] is not kept
    client.close()


@pytest.mark.parametrize("backend", ["httptools", "httpx"])  # aiohttp does not: "Can not write request body"
def test_concurrent_stream_retries_a_kept_connection_the_server_closed(stand_in: Any, backend: str) -> None:
    srv = stand_in({0: "oneshot", 1: "oneshot", 2: "oneshot"})
    client = OpenAIClient(srv.url, "m", timeout_s=30, stall_timeout_s=STALL_S)
    run = lat.run_concurrent(client, 4, 1, lat.prompt_for, max_tokens=TOKENS, backend=BACKENDS[backend])
    assert all(not isinstance(c, str) and len(c.chunk_times_s) == TOKENS for c in run.results), run.results
    client.close()


# -- the latency stage -------------------------------------------------------------------------------

def test_latency_stage_records_a_stalled_and_a_malformed_request(stand_in: Any) -> None:
    """One at a time (synchronous client) and concurrent (the default transport): failed, recorded, level goes on."""
    srv = stand_in({1: "stall", 2: "malformed", 11: "stall", 12: "malformed", 13: "cut"})
    client = OpenAIClient(srv.url, "m", timeout_s=30, stall_timeout_s=STALL_S)
    recorded: list[dict[str, Any]] = []
    ctx = _ctx(client, recorded)

    one = lat.run_level(ctx, 1, 4, TOKENS, first_index=0)  # type: ignore[arg-type]
    assert one.requests == 4 and one.failed == 2 and one.output_tokens.p50 == TOKENS
    errs = {r["prompt_index"]: r["error"] for r in recorded if r.get("error")}
    assert set(errs) == {1, 2}
    assert "no data for 1 s" in errs[1] and "malformed stream chunk" in errs[2]

    recorded.clear()
    many = lat.run_level(ctx, 8, 8, TOKENS, first_index=10)  # type: ignore[arg-type]
    assert many.requests == 8 and many.failed == 3 and many.output_tokens.n == 5
    errs = {r["prompt_index"]: r["error"] for r in recorded if r.get("error")}
    assert set(errs) == {11, 12, 13}
    assert "no data for 1 s" in errs[11] and "malformed stream chunk" in errs[12]
    assert all(r["kind"] == "latency" and r["warmup"] is False for r in recorded)
    assert sorted(r["prompt_index"] for r in recorded) == list(range(10, 18))
    client.close()


def test_a_cache_reset_that_hangs_ends_with_the_stage_budget() -> None:
    """A runtime's reset endpoint (vLLM's /reset_prefix_cache) that never answers: the POST ends when
    the stage's time budget is spent, with a line naming the budget, not after the client's timeout."""
    from suite.client.budget import budget

    class Hang(BaseHTTPRequestHandler):
        def log_message(self, *a: Any) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802
            time.sleep(30)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Hang)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        client = OpenAIClient(f"http://127.0.0.1:{server.server_address[1]}", "m", timeout_s=600)
        t0 = time.monotonic()
        with budget(1.5, "stage batch"), pytest.raises(ClientError, match="stage batch: its time budget of 1.5 s"):
            client.post_empty("/reset_prefix_cache")
        assert time.monotonic() - t0 < 5
        client.close()
    finally:
        server.shutdown()
