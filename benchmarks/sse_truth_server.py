"""A stand-in streaming server with a known schedule: the ground truth for client timing.

It answers `POST /v1/completions` (and `/v1/chat/completions`) with OpenAI-style SSE chunks on a
fixed schedule: the first token `--ttft-ms` after the request arrived, then one token every
`--gap-ms`, `max_tokens` tokens (or `--tokens` when the request names none), then a usage chunk
and `[DONE]`; HTTP/1.1 with chunked encoding and keep-alive, any number of streams at once (one
asyncio task each, plain asyncio streams, no web framework). It records, per request, when the
request arrived and when it wrote each token chunk to the socket, on `time.perf_counter()`: on
Linux that is CLOCK_MONOTONIC, the same clock in every process of the machine, so a client in
another process can subtract its own receive times chunk by chunk.

Every stream carries its id in its first token's text (`<r17>`), so a client that keeps only the
generated text (`vllm bench serve --save-detailed`) can still be matched to the truth.

    GET  /truth          the records so far, as JSON ({"requests": [...]}), then forgets them
    GET  /v1/models      one model, so readiness checks pass
    python benchmarks/sse_truth_server.py --port 0 --ttft-ms 20 --gap-ms 5 [--ready-file F]

It prints `port N` on its first line of stdout once it listens. Run it in a process of its
own: it must not share an interpreter (or a core's time slice) with the client it measures.
The lag of each write behind its schedule is recorded too, so a benchmark can say whether the
server itself kept up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from typing import Any

CHUNK_END = b"\r\n"


class TruthServer:
    def __init__(self, ttft_s: float, gap_s: float, tokens: int, model: str = "truth"):
        self.ttft_s = ttft_s
        self.gap_s = gap_s
        self.tokens = tokens
        self.model = model
        self.records: list[dict[str, Any]] = []
        self.next_id = 0
        self.active = 0
        self.max_active = 0

    # -- HTTP ---------------------------------------------------------------------------------
    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        sock = writer.get_extra_info("socket")
        if sock is not None:
            import socket
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                t_recv = time.perf_counter()
                lines = head.decode("latin-1").split("\r\n")
                method, path, _ = lines[0].split(" ", 2)
                headers = {k.strip().lower(): v.strip() for k, _, v in (ln.partition(":") for ln in lines[1:] if ln)}
                body = await reader.readexactly(int(headers.get("content-length") or 0))
                if method == "POST" and path.startswith("/v1/"):
                    await self.stream(writer, body, t_recv, chat="chat" in path)
                elif path.startswith("/truth"):
                    records, self.records = self.records, []
                    self.send_json(writer, {"requests": records, "max_active": self.max_active})
                    self.max_active = self.active
                elif path.startswith("/v1/models"):
                    self.send_json(writer, {"object": "list", "data": [{"id": self.model, "object": "model"}]})
                else:
                    writer.write(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n")
                await writer.drain()
                if headers.get("connection", "").lower() == "close":
                    break
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    def send_json(self, writer: asyncio.StreamWriter, obj: Any) -> None:
        data = json.dumps(obj).encode()
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n" % len(data)
                     + data)

    # -- one stream ---------------------------------------------------------------------------
    async def stream(self, writer: asyncio.StreamWriter, body: bytes, t_recv: float, chat: bool) -> None:
        req = json.loads(body or b"{}")
        n = int(req.get("max_tokens") or self.tokens)
        rid = self.next_id
        self.next_id += 1
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
                     b"transfer-encoding: chunked\r\n\r\n")
        sends: list[float] = []
        lags: list[float] = []
        created = int(time.time())
        head = '{"id":"cmpl-%d","object":"%s","created":%d,"model":"%s","choices":[{"index":0,' % (
            rid, "chat.completion.chunk" if chat else "text_completion", created, self.model)
        try:
            for k in range(n):
                due = t_recv + self.ttft_s + k * self.gap_s
                delay = due - time.perf_counter()
                if delay > 0:
                    await asyncio.sleep(delay)
                text = f"<r{rid}>" if k == 0 else f" t{k}"
                finish = '"length"' if k == n - 1 else "null"
                if chat:
                    payload = head + '"delta":{"content":"%s"},"logprobs":null,"finish_reason":%s}]}' % (text, finish)
                else:
                    payload = head + '"text":"%s","logprobs":null,"finish_reason":%s,"stop_reason":null}],"usage":null}' % (
                        text, finish)
                event = b"data: " + payload.encode() + b"\n\n"
                writer.write(b"%x\r\n" % len(event) + event + CHUNK_END)
                t = time.perf_counter()
                sends.append(t)
                lags.append(t - due)
                if writer.transport.get_write_buffer_size() > 1 << 16:
                    await writer.drain()  # a client that does not read: do not buffer without end
            usage = ('{"id":"cmpl-%d","object":"text_completion","created":%d,"model":"%s","choices":[],'
                     '"usage":{"prompt_tokens":8,"completion_tokens":%d,"total_tokens":%d}}') % (
                rid, created, self.model, n, n + 8)
            tail = b"data: " + usage.encode() + b"\n\n" + b"data: [DONE]\n\n"
            writer.write(b"%x\r\n" % len(tail) + tail + CHUNK_END + b"0\r\n\r\n")
        finally:
            self.active -= 1
            self.records.append({"id": rid, "t_recv": t_recv, "ttft_s": self.ttft_s, "gap_s": self.gap_s,
                                 "sends": sends, "lag_s": lags, "complete": len(sends) == n})


async def serve(args: argparse.Namespace) -> None:
    server = TruthServer(args.ttft_ms / 1000.0, args.gap_ms / 1000.0, args.tokens, args.model)
    srv = await asyncio.start_server(server.handle, args.host, args.port, backlog=1024)
    port = srv.sockets[0].getsockname()[1]
    print(f"port {port}", flush=True)
    if args.ready_file:
        with open(args.ready_file, "w") as f:
            f.write(str(port))
    async with srv:
        await srv.serve_forever()


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--ttft-ms", type=float, default=20.0)
    p.add_argument("--gap-ms", type=float, default=5.0)
    p.add_argument("--tokens", type=int, default=64, help="tokens per stream when the request names no max_tokens")
    p.add_argument("--model", default="truth")
    p.add_argument("--ready-file", default=None)
    args = p.parse_args()
    try:
        import uvloop  # type: ignore[import-not-found]
        uvloop.install()
    except ImportError:
        pass
    if hasattr(os, "sched_setaffinity") and os.environ.get("TRUTH_SERVER_CPU"):
        os.sched_setaffinity(0, {int(os.environ["TRUTH_SERVER_CPU"])})
    try:
        asyncio.run(serve(args))
    except KeyboardInterrupt:
        pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
