"""The asyncio client on other transports than the suite's own, for benchmarks/bench_client_concurrency.py.

The suite streams many completions at once on `AsyncOpenAIClient` (HTTP/1.1 on the event loop's
own transports, read by httptools: suite/client/aio.py). The benchmark compares it with two
other transports, timed alike, each a subclass that overrides `_stream` (and `aclose` for what
it holds):

- `AiohttpClient`: aiohttp's ClientSession (the library `vllm bench serve` uses), each line
  timestamped as `resp.content.readline()` hands it over, then parsed;
- `HttpxClient`: httpx's async client (h11 and anyio: several times the httptools transport's
  CPU per read).

Each stream waits at most the parent's `stall_timeout_s` for its next bytes ("no data for N s")
and `timeout_s` for the whole stream; aiohttp's uses no proxy. `BACKENDS` maps each
transport's name to its class, the suite's own first: `OpenAIClient.async_client(backend=...)`
and `suite.stages.latency.run_concurrent(backend=...)` take the class. The benchmarks and the
tests import this module with benchmarks/ on `sys.path`.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

import httpx

from suite.client import (MAX_BODY_BYTES, MAX_LINE_BYTES, AsyncOpenAIClient, ClientError, Completion, OpenAIClient,
                          StreamState)
from suite.client.replies import _MALFORMED, _malformed
from suite.client.wire import _SSE_HEADERS


class AiohttpClient(AsyncOpenAIClient):
    """Streamed completions on aiohttp's ClientSession, one connection per stream in flight."""

    backend = "aiohttp"

    def __init__(self, parent: OpenAIClient, max_connections: int = 256):
        super().__init__(parent, max_connections)
        self._session: Any = self._aiohttp_session(max_connections)  # aiohttp.ClientSession

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None
        await super().aclose()

    def _aiohttp_session(self, max_connections: int) -> Any:
        import aiohttp  # here, not on the streams' clock: importing it costs ~0.1 s of CPU

        # one connection per stream in flight, kept alive between a stream's requests; the idle
        # ones are dropped after 3 s, before uvicorn's (vLLM's) and llama-server's 5 s, so a
        # request does not go out on a connection the server is closing
        connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, keepalive_timeout=3.0)
        timeout = aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=30.0, sock_read=self.stall_timeout_s)
        headers = {**self._headers, **_SSE_HEADERS}
        return aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers,
                                     read_bufsize=MAX_LINE_BYTES // 2)  # readline takes lines up to MAX_LINE_BYTES

    async def _stream(self, path: str, body: dict[str, Any], t_enter: float) -> Completion:
        """One stream on aiohttp: each SSE line timestamped as `resp.content` hands it over, then parsed.

        The stream ends at `[DONE]` (or the body's end); the rest of the body (the chunked
        terminator, as a rule already read) is drained after the completion is built, so the
        connection goes back to the pool.
        """
        import aiohttp

        session = self._session
        where = f"POST {self.base_url}{path}"
        state = StreamState(where, chat=False)
        clock = time.perf_counter
        payload = json.dumps(body).encode()
        t_send = clock()  # before connecting, as the synchronous path (and vllm bench) time it
        try:
            async with session.post(self.base_url + path, data=payload,
                                    headers={"Content-Type": "application/json"}) as r:
                if r.status != 200:
                    raise ClientError(f"{where}: HTTP {r.status}: {(await r.read())[:300]!r}", status=r.status)
                content = r.content
                t_close = None
                size = 0
                while True:
                    raw = await content.readline()
                    t = clock() - t_send
                    if not raw:  # the body ended without [DONE]
                        t_close = t
                        break
                    size += len(raw)
                    if size > MAX_BODY_BYTES:
                        raise ClientError(f"{where}: a reply body longer than {MAX_BODY_BYTES >> 20} MiB")
                    if raw[:5] == b"data:" and state.event(raw[5:], t):
                        t_close = t
                        break
                try:
                    out = state.finish(t_close, t_enter, t_send)
                except _MALFORMED as exc:
                    raise _malformed(where, exc, b"", "stream") from None
                if not content.at_eof():
                    try:
                        async with asyncio.timeout(1.0):  # a server that holds the body open after [DONE]
                            await content.read()
                    except (TimeoutError, aiohttp.ClientError):
                        r.close()  # that connection is not reused
                return out
        except aiohttp.SocketTimeoutError:
            raise ClientError(f"{where}: no data for {self.stall_timeout_s:g} s (stall timeout)") from None
        except aiohttp.ConnectionTimeoutError as exc:
            raise ClientError(f"{where}: cannot connect: {exc}") from None
        except aiohttp.ClientError as exc:
            raise ClientError(f"{where}: {type(exc).__name__}: {exc}") from None
        except TimeoutError:
            raise ClientError(f"{where}: no end of the stream after {self.timeout_s:g} s") from None
        except aiohttp.http_exceptions.HttpProcessingError as exc:  # readline: LineTooLong
            raise ClientError(f"{where}: malformed stream: {type(exc).__name__}: {exc}") from None
        except ValueError as exc:  # readline: "Chunk too big", a line past the read buffer's high-water mark
            raise ClientError(f"{where}: a stream line longer than {MAX_LINE_BYTES >> 20} MiB ({exc})") from None


class HttpxClient(AsyncOpenAIClient):
    """Streamed completions on httpx's async client."""

    backend = "httpx"

    def __init__(self, parent: OpenAIClient, max_connections: int = 256):
        super().__init__(parent, max_connections)
        limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
        self._http: httpx.AsyncClient | None = httpx.AsyncClient(
            base_url=self.base_url, headers=parent._headers, limits=limits,
            timeout=httpx.Timeout(parent.timeout_s, connect=30.0, pool=None, read=parent.stall_timeout_s))

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()
        await super().aclose()

    async def _stream(self, path: str, body: dict[str, Any], t_enter: float) -> Completion:
        assert self._http is not None
        where = f"POST {self.base_url}{path}"
        state = StreamState(where, chat=False)
        clock = time.perf_counter
        t_send = clock()
        try:
            async with asyncio.timeout(self.timeout_s), \
                    self._http.stream("POST", path, json=body, headers=_SSE_HEADERS) as r:
                if r.status_code != 200:
                    raise ClientError(f"{where}: HTTP {r.status_code}: {(await r.aread())[:300]!r}", status=r.status_code)
                size = 0
                async for data in r.aiter_bytes():
                    size += len(data)
                    if size > MAX_BODY_BYTES:
                        raise ClientError(f"{where}: a reply body longer than {MAX_BODY_BYTES >> 20} MiB")
                    if state.feed(data, clock() - t_send):
                        break
                else:
                    state.end(clock() - t_send)
        except httpx.ReadTimeout:
            raise ClientError(f"{where}: no data for {self.stall_timeout_s:g} s (stall timeout)") from None
        except httpx.HTTPError as exc:
            raise ClientError(f"{where}: {type(exc).__name__}: {exc}") from None
        except TimeoutError:
            raise ClientError(f"{where}: no end of the stream after {self.timeout_s:g} s") from None
        try:
            return state.finish(clock() - t_send, t_enter, t_send)
        except _MALFORMED as exc:
            raise _malformed(where, exc, b"", "stream") from None


BACKENDS: dict[str, type[AsyncOpenAIClient]] = {
    cls.backend: cls for cls in (AsyncOpenAIClient, AiohttpClient, HttpxClient)}  # the suite's own first
