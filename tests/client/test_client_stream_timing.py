"""Where the streaming client takes TTFT and end-to-end, against a scripted stand-in SSE server.

Each script is a list of (delay before the line in seconds, SSE payload). TTFT must be taken at
the first chunk that carries a generated token (not a usage-only, timings-only or role-only
chunk), and end-to-end at the last token chunk, not when the stream closes.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from suite.client import OpenAIClient, is_token_choice
from suite.stages.latency.run import run_concurrent

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from client_transports import BACKENDS  # noqa: E402  (the transports only the benchmarks compare)

Script = list[tuple[float, str]]
GAP = 0.4  # seconds between scripted events: large against a busy machine's jitter


def _chunk(**fields: Any) -> str:
    return "data: " + json.dumps(fields)


def _serve(script: Script, tail_s: float = 0.0) -> tuple[ThreadingHTTPServer, str]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 (http.server's name)
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()  # HTTP/1.0: the body ends when the connection closes
            for delay, line in script:
                time.sleep(delay)
                self.wfile.write(line.encode() + b"\n\n")
                self.wfile.flush()
            time.sleep(tail_s)

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}"


@pytest.fixture
def stand_in() -> Iterator[Any]:
    servers: list[ThreadingHTTPServer] = []

    def start(script: Script, tail_s: float = 0.0) -> OpenAIClient:
        server, url = _serve(script, tail_s)
        servers.append(server)
        return OpenAIClient(url, "m", timeout_s=30)

    yield start
    for s in servers:
        s.shutdown()
        s.server_close()


def test_usage_only_first_chunk_is_not_the_first_token(stand_in: Any) -> None:
    client = stand_in([
        (0.0, _chunk(choices=[], usage={"prompt_tokens": 5, "completion_tokens": 0})),
        (0.0, _chunk(timings={"prompt_n": 5})),  # a timings-only chunk, no choices key at all
        (GAP, _chunk(choices=[{"index": 0, "text": "Hello", "finish_reason": None}])),
        (GAP, _chunk(choices=[{"index": 0, "text": " world", "finish_reason": "length"}])),
        (0.0, "data: [DONE]"),
    ])
    c = client.complete("p", max_tokens=2, stream=True)
    assert c.text == "Hello world" and c.finish_reason == "length"
    assert c.ttft_s is not None and c.ttft_s >= GAP * 0.9
    assert len(c.chunk_times_s) == 2
    assert c.chunk_times_s[1] - c.chunk_times_s[0] >= GAP * 0.9


def test_chat_role_only_first_chunk_is_not_the_first_token(stand_in: Any) -> None:
    client = stand_in([
        (0.0, _chunk(choices=[{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])),
        (GAP, _chunk(choices=[{"index": 0, "delta": {"content": "Hi"}, "finish_reason": None}])),
        (0.05, _chunk(choices=[{"index": 0, "delta": {}, "finish_reason": "stop"}])),
        (0.0, "data: [DONE]"),
    ])
    c = client.chat([{"role": "user", "content": "x"}], max_tokens=4, stream=True)
    assert c.text == "Hi" and c.finish_reason == "stop"
    assert c.ttft_s is not None and c.ttft_s >= GAP * 0.9
    assert len(c.chunk_times_s) == 1  # the closing finish-only chunk is no token either


def test_a_token_that_decodes_to_nothing_is_the_first_token(stand_in: Any) -> None:
    """As in `vllm bench serve`: a chunk with a choice counts even when its text is empty."""
    client = stand_in([
        (GAP, _chunk(choices=[{"index": 0, "text": "", "finish_reason": None}])),  # e.g. a special token
        (GAP * 2, _chunk(choices=[{"index": 0, "text": "a", "finish_reason": "length"}])),
        (0.0, "data: [DONE]"),
    ])
    c = client.complete("p", max_tokens=2, stream=True)
    assert c.ttft_s is not None and GAP * 0.9 <= c.ttft_s < GAP * 2.5
    assert len(c.chunk_times_s) == 2


def test_end_to_end_is_the_last_token_not_the_stream_close(stand_in: Any) -> None:
    client = stand_in([
        (0.0, _chunk(choices=[{"index": 0, "text": "a", "finish_reason": None}])),
        (0.0, _chunk(choices=[{"index": 0, "text": "b", "finish_reason": None}])),
        # llama-server style: the closing chunk carries no text, a finish reason and timings, late
        (GAP, _chunk(choices=[{"index": 0, "text": "", "finish_reason": "stop"}], timings={"predicted_n": 2})),
        (GAP, _chunk(choices=[], usage={"prompt_tokens": 1, "completion_tokens": 2})),
    ], tail_s=GAP)  # no [DONE]: the connection closes long after the last token
    c = client.complete("p", max_tokens=4, stream=True)
    assert c.text == "ab" and c.finish_reason == "stop" and c.completion_tokens == 2
    assert c.stream_close_s is not None and c.stream_close_s >= GAP * 2.7
    assert c.e2e_s == c.chunk_times_s[-1]
    assert c.e2e_s < GAP  # the second token came at once; the close came ~3 gaps later
    assert c.stream_close_s - c.e2e_s >= GAP * 2.5


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_concurrent_path_times_a_stream_alike(stand_in: Any, backend: str) -> None:
    """The same script on every concurrent transport: a body that ends at the connection's close, no [DONE]."""
    client = stand_in([
        (0.0, _chunk(choices=[], usage={"prompt_tokens": 5, "completion_tokens": 0})),
        (GAP, _chunk(choices=[{"index": 0, "text": "a", "finish_reason": None}])),
        (0.0, _chunk(choices=[{"index": 0, "text": "", "finish_reason": "stop"}], timings={"predicted_n": 1})),
        (0.0, _chunk(choices=[], usage={"prompt_tokens": 5, "completion_tokens": 1})),
    ], tail_s=GAP)
    (c,) = run_concurrent(client, 1, 1, lambda i: "p", max_tokens=4, backend=BACKENDS[backend]).results
    assert not isinstance(c, str), c
    assert c.text == "a" and c.finish_reason == "stop" and c.completion_tokens == 1
    assert c.server_timings == {"predicted_n": 1}
    assert len(c.chunk_times_s) == 1 and c.ttft_s is not None and c.ttft_s >= GAP * 0.9
    assert c.stream_close_s is not None and c.stream_close_s - c.e2e_s >= GAP * 0.9  # closed a gap after the token


@pytest.mark.parametrize("choice, chat, expected", [
    ({"text": "x"}, False, True),
    ({"text": "", "finish_reason": None}, False, True),
    ({"text": "", "finish_reason": "stop"}, False, False),
    ({"text": None}, False, False),
    ({"delta": {"role": "assistant", "content": ""}}, True, False),
    ({"delta": {"role": "assistant"}}, True, False),
    ({"delta": {"role": "assistant", "content": "Hi"}}, True, True),
    ({"delta": {"content": ""}}, True, True),
    ({"delta": {"reasoning_content": "think"}}, True, True),
    ({"delta": {}, "finish_reason": "stop"}, True, False),
    ({"delta": {}, "token_ids": [5]}, True, True),
])
def test_which_choices_carry_a_token(choice: dict[str, Any], chat: bool, expected: bool) -> None:
    assert is_token_choice(choice, chat) is expected
