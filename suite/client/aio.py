"""The asyncio client: many streamed completions at once on one event loop (the latency and batch stages).

`AsyncOpenAIClient` is the synchronous client's twin (`OpenAIClient.async_client`): same URL,
model, headers and request fields. Its transport is HTTP/1.1 on the event loop's own transports
(`_SSEProtocol`), each read timestamped as the loop hands it over and read by httptools
(`_Response`) and the same `StreamState` as the synchronous path. `event_loop_factory` gives the
loop to run it on (uvloop's where it is installed). The other transports that
benchmarks/bench_client_concurrency.py compares it with (aiohttp's, httpx's) are subclasses in
benchmarks/client_transports.py: the suite itself streams only on this one.
"""

from __future__ import annotations

import asyncio
import json
import ssl
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

from suite.client.budget import request_window
from suite.client.params import GenerationParams
from suite.client.replies import _MALFORMED, ClientError, Completion, _malformed
from suite.client.stream import StreamState
from suite.client.wire import _request, _Response


class _Stalled(ClientError):
    """No bytes for the stall timeout: never sent again."""


class _Parent(Protocol):
    """What an `AsyncOpenAIClient` takes from its synchronous parent (`suite.client.sync.OpenAIClient`,
    which imports this module to make its twin, so this one names only what it reads)."""

    base_url: str
    model: str
    params: GenerationParams
    timeout_s: float
    stall_timeout_s: float
    _headers: dict[str, str]
    _scheme: str
    _host: str
    _port: int
    _prefix: str
    _host_header: str


def event_loop_factory() -> Callable[[], asyncio.AbstractEventLoop]:
    """The event loop for many streams at once: uvloop's where it is installed (less CPU per read), else asyncio's."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop
    return uvloop.new_event_loop


class _SSEProtocol(asyncio.Protocol):
    """One HTTP/1.1 connection on the event loop that streams responses (`_Response`) one after another.

    The loop calls `data_received` as soon as bytes arrive and they are timestamped there; the
    parsing waits for `AsyncOpenAIClient._parse_reads`, which runs once the loop has handed over
    every read that was ready, so one stream's parsing never delays another stream's timestamp.
    Keep-alive: a connection whose response ended goes back to its client's idle pool.
    """

    def __init__(self, owner: AsyncOpenAIClient):
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.last_read = 0.0  # when bytes last came (perf_counter), for the client's stall watchdog
        self.response: _Response | None = None
        self.future: asyncio.Future[float] | None = None
        self.reads: list[tuple[bytes, float]] = []  # reads not parsed yet, with their arrival times

    def start(self, request: bytes, state: StreamState, t_send: float) -> asyncio.Future[float]:
        """Send `request`; the future gets the time the stream ended (perf_counter) or a ClientError."""
        self.response = _Response(state, t_send)
        self.future = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.last_read = t_send
        self.transport.write(request)
        return self.future

    @property
    def answered(self) -> bool:
        return self.response is not None and self.response.answered

    # -- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # a stream connection's is a Transport

    def data_received(self, data: bytes) -> None:
        t = self.last_read = time.perf_counter()
        if not self.reads:
            unparsed = self.owner._unparsed
            unparsed.append(self)
            if len(unparsed) == 1:
                self.owner._loop.call_soon(self.owner._parse_reads)
        self.reads.append((data, t))

    def connection_lost(self, exc: Exception | None) -> None:
        self.parse()  # what came before the close
        self.closed = True
        future, response = self.future, self.response
        if future is not None and not future.done() and response is not None:
            try:
                response.eof(time.perf_counter(), exc)
                if response.done_at is None:  # it ended on an error: never a time of None for the waiter
                    raise ClientError(f"{response.state.where}: the connection closed before the response ended")
                future.set_result(response.done_at)
            except ClientError as err:
                future.set_exception(err)

    # -- parsing --------------------------------------------------------------------------------
    def parse(self) -> None:
        """Feed the reads that came since the last call to the response, each with its arrival time."""
        reads, self.reads = self.reads, []
        response, future = self.response, self.future
        if response is None or future is None:
            return
        for data, t in reads:
            if self.closed:
                return
            try:
                response.feed(data, t)
            except ClientError as exc:
                self.fail(exc)
                return
            if response.done_at is not None and not future.done():
                future.set_result(response.done_at)
            if response.ended:
                self._recycle()
                return

    def fail(self, exc: ClientError) -> None:
        if self.transport is not None:
            self.transport.close()
        if self.future is not None and not self.future.done():
            self.future.set_exception(exc)

    def _recycle(self) -> None:
        """The response ended: keep the connection for the client's next request, or close it."""
        keep = self.response is not None and self.response.keep_alive
        self.response, self.future = None, None
        if keep and not self.closed:
            self.owner._idle.append(self)
        elif self.transport is not None:
            self.transport.close()


class AsyncOpenAIClient:
    """Streamed completions on asyncio: many streams at once on one thread (the latency stage's concurrent path).

    HTTP/1.1 on the event loop's own transports (`_SSEProtocol`): each read is timestamped when
    the loop hands it over, and parsed (`_Response`: httptools, then `StreamState`, as on the
    synchronous path) once the loop has handed over every read that was ready. Each stream waits
    at most the parent's `stall_timeout_s` for its next bytes ("no data for N s") and `timeout_s`
    for the whole stream (less where the stage's budget ends sooner: `suite.client.budget`); its
    reply keeps a minimum byte rate and its lines are bounded by its `max_tokens` (an endless
    event stream ends at once, not at its deadline). No proxies. Create and use it inside one running event loop
    (`event_loop_factory` makes one: uvloop's where it is installed).

    `backend` names the transport. benchmarks/client_transports.py subclasses it on other
    transports, timed alike (each overrides `_stream`, and `aclose` for what it holds);
    benchmarks/bench_client_concurrency.py compares them with `vllm bench serve`.
    """

    backend = "httptools"

    def __init__(self, parent: _Parent, max_connections: int = 256):
        """`max_connections`: the streams in flight at once (a subclass's pool size; this transport
        opens a connection per stream that has none idle)."""
        self.base_url = parent.base_url
        self.model = parent.model
        self.params = parent.params
        self.timeout_s = parent.timeout_s
        self.stall_timeout_s = parent.stall_timeout_s
        self._headers = dict(parent._headers)
        self._scheme, self._host, self._port = parent._scheme, parent._host, parent._port
        self._prefix, self._host_header = parent._prefix, parent._host_header
        self._loop = asyncio.get_running_loop()
        self._idle: list[_SSEProtocol] = []
        self._open: set[_SSEProtocol] = set()
        self._unparsed: list[_SSEProtocol] = []  # connections with reads not parsed yet
        self._watchdog: asyncio.Task[None] | None = None
        # applied to each streamed reply with its prompt before it is returned (None: as received);
        # a client that counts tokens itself where the server does not sets it (TokenizerClient)
        self.finish: Callable[[Completion, str], Completion] | None = None

    async def aclose(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        for proto in list(self._open):
            if proto.transport is not None:
                proto.transport.close()
        self._open.clear()
        self._idle.clear()

    async def __aenter__(self) -> AsyncOpenAIClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _body(self, prompt: str, max_tokens: int, extra: dict[str, Any] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens}
        return {**body, **self.params.fields(), **(extra or {}), "stream": True,
                "stream_options": {"include_usage": True}}

    async def complete_stream(self, prompt: str, *, max_tokens: int, extra: dict[str, Any] | None = None) -> Completion:
        """A streamed /v1/completions request, timed as `OpenAIClient.complete(..., stream=True)` times it."""
        t_enter = time.perf_counter()
        body = self._body(prompt, max_tokens, extra)
        out = await self._stream("/v1/completions", body, t_enter)
        return self.finish(out, prompt) if self.finish is not None else out

    def _parse_reads(self) -> None:
        """Parse every connection's reads since the last call (scheduled by the first read after it)."""
        protos, self._unparsed = self._unparsed, []
        for proto in protos:
            proto.parse()

    async def _watch_stalls(self) -> None:
        """The httptools transport's stall timeout: one task for every stream, not a timer per read."""
        stall = self.stall_timeout_s
        while True:
            await asyncio.sleep(min(1.0, stall / 4))
            now = time.perf_counter()
            for proto in list(self._open):
                future, response = proto.future, proto.response
                if future is not None and response is not None and not future.done() and now - proto.last_read > stall:
                    proto.fail(_Stalled(f"{response.state.where}: no data for {stall:g} s (stall timeout)"))

    async def _connect(self, where: str) -> _SSEProtocol:
        if self._watchdog is None:
            self._watchdog = asyncio.get_running_loop().create_task(self._watch_stalls())
        while self._idle:
            proto = self._idle.pop()
            if not proto.closed and proto.transport is not None and not proto.transport.is_closing():
                return proto
            self._open.discard(proto)
        loop = asyncio.get_running_loop()
        ssl_ctx = None
        if self._scheme == "https":
            ssl_ctx = ssl.create_default_context()
        try:
            _, proto = await asyncio.wait_for(
                loop.create_connection(lambda: _SSEProtocol(self), self._host, self._port, ssl=ssl_ctx), 30.0)
        except (TimeoutError, OSError) as exc:
            raise ClientError(f"{where}: cannot connect: {type(exc).__name__}: {exc}") from None
        self._open.add(proto)
        return proto

    async def _stream(self, path: str, body: dict[str, Any], t_enter: float) -> Completion:
        where = f"POST {self.base_url}{path}"
        request = _request(self._prefix, self._host_header, path, json.dumps(body).encode(), self._headers)
        for attempt in (0, 1):
            state = StreamState(where, chat=False, max_lines=StreamState.lines_for(body.get("max_tokens")))
            window, late = request_window(where, self.timeout_s)  # a stage's budget may end it sooner
            reused = bool(self._idle)
            t_send = time.perf_counter()  # before connecting, as the synchronous path (and vllm bench) time it
            proto = await self._connect(where)
            future = proto.start(request, state, t_send)
            try:
                t_end = await asyncio.wait_for(future, window)
                break
            except ClientError as exc:
                # a kept-alive connection the server closed as the request went out: once more, on a
                # new one (not a stall: that one waited its time already)
                if attempt == 0 and reused and proto.closed and not proto.answered and not isinstance(exc, _Stalled):
                    continue
                raise
            except TimeoutError:
                if proto.transport is not None:
                    proto.transport.close()
                raise ClientError(late.replace("no end of the reply", "no end of the stream")) from None
            except asyncio.CancelledError:
                if proto.transport is not None:
                    proto.transport.close()
                raise
        try:
            return state.finish(t_end - t_send, t_enter, t_send)
        except _MALFORMED as exc:
            raise _malformed(where, exc, b"", "stream") from None
