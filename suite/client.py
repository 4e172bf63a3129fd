"""Client for the OpenAI-compatible HTTP API that every runtime speaks (httpx).

`OpenAIClient.complete` (/v1/completions) and `.chat` (/v1/chat/completions), streamed or not,
with a per-request seed, max tokens, logprobs where the runtime offers them cheaply, and the
runtime's own extra request fields (token ids, cache flags). A `Completion` carries the text, the
generated token ids where the runtime returns them, the chosen-token logprobs, the finish reason,
token counts, timings (TTFT, end to end, a timestamp per streamed chunk) and the suite's own
overhead outside the HTTP exchange. HTTP and protocol errors raise `ClientError` with a clear
message; `Completion.error` is never set by the client itself (stages use it to record failures).
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

import httpx
from pydantic import BaseModel, Field

from suite.errors import SuiteError

log = logging.getLogger(__name__)


class ClientError(SuiteError):
    """The runtime answered with an HTTP error, a malformed reply, or not at all."""


class Completion(BaseModel):
    text: str = ""
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None  # chosen-token logprob per generated token
    top_logprobs: list[list[float]] | None = None  # per generated token, the top-k logprobs, best first
    finish_reason: str | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None  # streamed: request sent -> first token chunk (see `is_token_choice`), else None
    e2e_s: float = 0.0  # request sent -> last token chunk (streamed) or last byte received (not streamed)
    chunk_times_s: list[float] = Field(default_factory=list)  # offsets of token chunks (streamed)
    stream_close_s: float | None = None  # streamed: request sent -> end of the stream ([DONE] or close)
    overhead_s: float = 0.0  # the suite's own time outside the HTTP exchange
    parse_s: float = 0.0  # time spent parsing streamed chunks (inside the exchange, overlapping it)
    server_timings: dict[str, Any] | None = None  # llama-server's `timings`
    system_fingerprint: str | None = None
    error: str | None = None

    @property
    def n_tokens(self) -> int:
        if self.token_ids is not None:
            return len(self.token_ids)
        if self.completion_tokens is not None:
            return self.completion_tokens
        return len(self.logprobs or [])


def _parse_token_ids(choice: dict[str, Any]) -> list[int] | None:
    """Generated token ids, from whichever field the runtime uses."""
    ids = choice.get("token_ids")  # vLLM with return_token_ids
    if isinstance(ids, list) and all(isinstance(i, int) for i in ids):
        return ids
    toks = choice.get("tokens")  # llama-server with return_tokens
    if isinstance(toks, list) and all(isinstance(i, int) for i in toks):
        return toks
    lp = choice.get("logprobs")
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
        content = lp["content"]
        if content and all(isinstance(c, dict) and isinstance(c.get("id"), int) for c in content):
            return [c["id"] for c in content]
    return None


def _parse_logprobs(choice: dict[str, Any]) -> list[float] | None:
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None
    if isinstance(lp.get("token_logprobs"), list):  # completions format
        return [float(x) if x is not None else float("nan") for x in lp["token_logprobs"]]
    if isinstance(lp.get("content"), list):  # chat format (and llama-server completions)
        return [float(c.get("logprob", float("nan"))) for c in lp["content"] if isinstance(c, dict)]
    return None


def is_token_choice(choice: dict[str, Any], chat: bool) -> bool:
    """Whether a streamed choice carries a generated token (the chunks TTFT, ITL and e2e are timed on).

    As `vllm bench serve` does, a chunk counts when it carries a choice with generated output,
    even output that decodes to an empty string (a special token, half of a UTF-8 character).
    It does not count when it has no choice (a usage-only or timings-only chunk), when its only
    content is the role announcement of a chat stream (`{"role": "assistant", "content": ""}`),
    or when it is the closing chunk that carries a finish reason and no text.
    """
    if _parse_token_ids(choice) or _parse_logprobs(choice):
        return True
    if chat:
        delta = choice.get("delta") or {}
        pieces = [delta.get(k) for k in ("content", "reasoning_content", "reasoning")]
        if any(isinstance(p, str) and p for p in pieces):
            return True
        empty = any(p == "" for p in pieces)
        return empty and "role" not in delta and not choice.get("finish_reason")
    text = choice.get("text")
    if isinstance(text, str) and text:
        return True
    return text == "" and not choice.get("finish_reason")


def _parse_top_logprobs(choice: dict[str, Any]) -> list[list[float]] | None:
    """Per generated token, the logprobs of the runtime's top-k candidates, best first."""
    lp = choice.get("logprobs")
    if not isinstance(lp, dict):
        return None
    rows: list[Any] | None = None
    if isinstance(lp.get("top_logprobs"), list):  # completions format: [{token: logprob}, ...]
        rows = [list(r.values()) if isinstance(r, dict) else [] for r in lp["top_logprobs"]]
    elif isinstance(lp.get("content"), list):  # chat format: content[i].top_logprobs[j].logprob
        rows = [[t.get("logprob") for t in (c.get("top_logprobs") or []) if isinstance(t, dict)]
                for c in lp["content"] if isinstance(c, dict)]
    if rows is None or not any(rows):
        return None
    return [sorted((float(x) for x in r if isinstance(x, (int, float))), reverse=True) for r in rows]


class StreamState:
    """What a streamed completion has said so far: one SSE line at a time, the sync and async paths alike.

    `line(text, t)` takes one line of the event stream and the offset `t` (seconds since the
    request was sent) at which the client received it; it returns True at `[DONE]`. A chunk that
    carries a generated token (`is_token_choice`) is timed at `t`: the first one is TTFT, the
    last one end-to-end. `finish` builds the `Completion`.
    """

    __slots__ = ("where", "chat", "parts", "token_ids", "logprobs", "chunk_times", "finish_reason", "usage",
                 "timings", "fingerprint", "parse_s")

    def __init__(self, where: str, chat: bool):
        self.where = where
        self.chat = chat
        self.parts: list[str] = []
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.chunk_times: list[float] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] = {}
        self.timings: dict[str, Any] | None = None
        self.fingerprint: str | None = None
        self.parse_s = 0.0

    def line(self, line: str, t: float) -> bool:
        if not line.startswith("data:"):
            return False
        t0 = time.perf_counter()
        payload = line[5:].strip()
        if payload == "[DONE]":
            return True
        try:
            data = json.loads(payload)
        except ValueError:
            raise ClientError(f"{self.where}: malformed stream chunk: {payload[:200]!r}") from None
        if not isinstance(data, dict):
            raise ClientError(f"{self.where}: malformed stream chunk: {payload[:200]!r}")
        if "error" in data and not data.get("choices"):
            raise ClientError(f"{self.where}: error in stream: {str(data['error'])[:200]}")
        self.usage = data.get("usage") or self.usage
        self.timings = data.get("timings") or self.timings
        self.fingerprint = data.get("system_fingerprint") or self.fingerprint
        token_chunk = False
        chat = self.chat
        for choice in data.get("choices") or []:
            if not isinstance(choice, dict):
                continue
            piece = ((choice.get("delta") or {}).get("content") if chat else choice.get("text")) or ""
            if piece:
                self.parts.append(piece)
            token_chunk = token_chunk or is_token_choice(choice, chat)
            ids = _parse_token_ids(choice)
            if ids:
                self.token_ids.extend(ids)
            lps = _parse_logprobs(choice)
            if lps:
                self.logprobs.extend(lps)
            self.finish_reason = choice.get("finish_reason") or self.finish_reason
        if token_chunk:
            self.chunk_times.append(t)
        self.parse_s += time.perf_counter() - t0
        return False

    def finish(self, t_close: float, t_enter: float, t_send: float) -> Completion:
        """The completion; `t_close` is the stream's end as an offset from the send."""
        chunk_times = self.chunk_times
        t_recv = t_send + t_close
        out = Completion(
            text="".join(self.parts),
            token_ids=self.token_ids or None,
            logprobs=self.logprobs or None,
            finish_reason=self.finish_reason,
            prompt_tokens=self.usage.get("prompt_tokens"),
            completion_tokens=self.usage.get("completion_tokens"),
            ttft_s=chunk_times[0] if chunk_times else None,
            # the last token chunk, not the stream's close: a runtime may send usage or timings,
            # or hold the connection, long after the last token
            e2e_s=chunk_times[-1] if chunk_times else t_close,
            chunk_times_s=chunk_times,
            stream_close_s=t_close,
            server_timings=self.timings,
            system_fingerprint=self.fingerprint,
        )
        out.parse_s = self.parse_s
        out.overhead_s = (t_send - t_enter) + (time.perf_counter() - t_recv)
        return out


class OpenAIClient:
    """One runtime's OpenAI-compatible endpoint, serving the model under `model`."""

    def __init__(self, base_url: str, model: str, timeout_s: float = 600.0,
                 extra_body: dict[str, Any] | None = None, api_key: str | None = None,
                 stall_timeout_s: float = 120.0):
        """`timeout_s`: a whole request; `stall_timeout_s`: a streamed request's longest wait for its next bytes."""
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.extra_body = dict(extra_body or {})
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.timeout_s = timeout_s
        self.stall_timeout_s = stall_timeout_s
        self._headers = headers
        self._http = httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(timeout_s, connect=10.0),
                                  headers=headers)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "OpenAIClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plain GETs -----------------------------------------------------------------------------
    def get_json(self, path: str) -> Any:
        try:
            r = self._http.get(path)
        except httpx.HTTPError as exc:
            raise ClientError(f"GET {self.base_url}{path}: {type(exc).__name__}: {exc}") from None
        if r.status_code != 200:
            raise ClientError(f"GET {self.base_url}{path}: HTTP {r.status_code}: {r.text[:200]}")
        try:
            return r.json()
        except ValueError:
            raise ClientError(f"GET {self.base_url}{path}: reply is not JSON: {r.text[:200]!r}") from None

    def models(self) -> list[dict[str, Any]]:
        data = self.get_json("/v1/models")
        return list(data.get("data", [])) if isinstance(data, dict) else []

    # -- generation -----------------------------------------------------------------------------
    def complete(self, prompt: str, *, max_tokens: int, seed: int | None = 42, temperature: float = 0.0,
                 logprobs: int | None = None, stream: bool = False,
                 extra: dict[str, Any] | None = None) -> Completion:
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                                "temperature": temperature}
        if seed is not None:
            body["seed"] = seed
        if logprobs is not None:
            body["logprobs"] = logprobs
        return self._generate("/v1/completions", body, stream, extra, chat=False)

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int, seed: int | None = 42,
             temperature: float = 0.0, logprobs: int | None = None, stream: bool = False,
             response_format: dict[str, Any] | None = None,
             extra: dict[str, Any] | None = None) -> Completion:
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": temperature}
        if seed is not None:
            body["seed"] = seed
        if logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = logprobs
        if response_format is not None:
            body["response_format"] = response_format
        return self._generate("/v1/chat/completions", body, stream, extra, chat=True)

    def _generate(self, path: str, body: dict[str, Any], stream: bool,
                  extra: dict[str, Any] | None, chat: bool) -> Completion:
        t_enter = time.perf_counter()
        body = {**body, **self.extra_body, **(extra or {})}
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
            return self._stream(path, body, chat, t_enter)
        request = self._http.build_request("POST", path, json=body)
        t_send = time.perf_counter()
        try:
            r = self._http.send(request)
            content = r.content
        except httpx.HTTPError as exc:
            raise ClientError(f"POST {self.base_url}{path}: {type(exc).__name__}: {exc}") from None
        t_recv = time.perf_counter()
        if r.status_code != 200:
            raise ClientError(f"POST {self.base_url}{path}: HTTP {r.status_code}: {content[:300]!r}")
        try:
            data = json.loads(content)
            choice = data["choices"][0]
        except (ValueError, KeyError, IndexError, TypeError):
            raise ClientError(f"POST {self.base_url}{path}: malformed reply: {content[:300]!r}") from None
        text = (choice.get("message") or {}).get("content") if chat else choice.get("text")
        usage = data.get("usage") or {}
        out = Completion(
            text=text or "",
            token_ids=_parse_token_ids(choice),
            logprobs=_parse_logprobs(choice),
            top_logprobs=_parse_top_logprobs(choice),
            finish_reason=choice.get("finish_reason"),
            prompt_tokens=usage.get("prompt_tokens"),
            completion_tokens=usage.get("completion_tokens"),
            e2e_s=t_recv - t_send,
            server_timings=data.get("timings"),
            system_fingerprint=data.get("system_fingerprint"),
        )
        out.overhead_s = (t_send - t_enter) + (time.perf_counter() - t_recv)
        return out

    def _stream(self, path: str, body: dict[str, Any], chat: bool, t_enter: float) -> Completion:
        where = f"POST {self.base_url}{path}"
        state = StreamState(where, chat)
        # each read waits at most stall_timeout_s (httpx's read timeout); the whole stream
        # timeout_s, checked at every line
        timeout = httpx.Timeout(self.timeout_s, connect=10.0, read=min(self.stall_timeout_s, self.timeout_s))
        t_send = time.perf_counter()
        try:
            with self._http.stream("POST", path, json=body, timeout=timeout) as r:
                if r.status_code != 200:
                    raise ClientError(f"{where}: HTTP {r.status_code}: {r.read()[:300]!r}")
                for line in r.iter_lines():
                    t = time.perf_counter() - t_send
                    if state.line(line, t):
                        break
                    if t > self.timeout_s:
                        raise ClientError(f"{where}: no end of the stream after {self.timeout_s:g} s")
        except httpx.ReadTimeout:
            raise ClientError(f"{where}: no data for {timeout.read:g} s (stall timeout)") from None
        except httpx.HTTPError as exc:
            raise ClientError(f"{where}: {type(exc).__name__}: {exc}") from None
        return state.finish(time.perf_counter() - t_send, t_enter, t_send)

    def async_client(self, max_connections: int = 256, backend: str = "raw") -> "AsyncOpenAIClient":
        """An asyncio twin of this client (same URL, model, headers, extra body) for many streams at once."""
        return AsyncOpenAIClient(self, max_connections=max_connections, backend=backend)

    def tokenize(self, text: str) -> list[int] | None:
        """Token ids of a prompt via the runtime's /tokenize endpoint (llama-server, vLLM), if any."""
        for path, body in (("/tokenize", {"content": text, "add_special": True}),
                           ("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": True})):
            try:
                r = self._http.post(path, json=body)
            except httpx.HTTPError:
                return None
            if r.status_code == 200:
                data = r.json()
                tokens = data.get("tokens")
                if isinstance(tokens, list):
                    return [t if isinstance(t, int) else t.get("id") for t in tokens]
        return None


class _SSEProtocol(asyncio.Protocol):
    """One HTTP/1.1 connection that streams a response into a `StreamState`, chunk by chunk.

    The event loop calls `data_received` as soon as bytes arrive; they are timestamped there,
    before any parsing, and the SSE lines are handed to the state at once, with no task switch
    per chunk. Content-Length, chunked and close-delimited bodies; keep-alive: a connection whose
    body ended goes back to its client's idle pool.
    """

    def __init__(self, owner: "AsyncOpenAIClient"):
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.state: StreamState | None = None
        self.t_send = 0.0
        self.future: asyncio.Future[float] | None = None
        self.head = b""
        self.in_body = False
        self.status = 0
        self.chunked = False
        self.remaining: int | None = None  # Content-Length bytes still to come
        self.chunk_left = 0  # chunked: data bytes left in the current chunk; 0: a size line comes next
        self.skip = 0  # chunked: bytes of the CRLF after a chunk's data still to skip
        self.raw = b""  # chunked framing not yet decoded (a size line cut in two)
        self.lines = b""  # body bytes not yet ended by a newline
        self.error_body = b""
        self.ended = False  # the body is complete
        self.keep_alive = True
        self.last_read = 0.0  # when bytes last came (perf_counter), for the client's stall watchdog

    # -- asyncio.Protocol -----------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if self.future is not None and not self.future.done():
            if self.in_body and self.remaining is None and not self.chunked and self.status == 200:
                self._end_body(time.perf_counter())  # a close-delimited body ends here
            else:
                self.future.set_exception(ClientError(
                    f"{self.state.where if self.state else 'stream'}: the connection closed before the "
                    f"response ended{f': {exc}' if exc else ''}"))

    def data_received(self, data: bytes) -> None:
        t = self.last_read = time.perf_counter()
        try:
            self._feed(data, t)
        except ClientError as exc:
            self._fail(exc)
        except (ValueError, IndexError) as exc:
            self._fail(ClientError(f"{self.state.where if self.state else 'stream'}: malformed HTTP response: {exc}"))

    # -- parsing --------------------------------------------------------------------------------
    def _fail(self, exc: ClientError) -> None:
        self.keep_alive = False
        if self.transport is not None:
            self.transport.close()
        if self.future is not None and not self.future.done():
            self.future.set_exception(exc)

    def _feed(self, data: bytes, t: float) -> None:
        if not self.in_body:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                if len(self.head) > 65536:
                    raise ValueError("response head over 64 KiB")
                return
            head, data = self.head[:end].decode("latin-1"), self.head[end + 4:]
            self.head = b""
            lines = head.split("\r\n")
            self.status = int(lines[0].split(" ", 2)[1])
            if self.status == 100:  # Continue: the real head follows
                self._feed(data, t) if data else None
                return
            headers = {k.strip().lower(): v.strip().lower() for k, _, v in (ln.partition(":") for ln in lines[1:])}
            self.chunked = "chunked" in headers.get("transfer-encoding", "")
            if not self.chunked and "content-length" in headers:
                self.remaining = int(headers["content-length"])
            self.keep_alive = headers.get("connection") != "close" and (self.chunked or self.remaining is not None)
            self.in_body = True
            if self.remaining == 0:
                self._end_body(t)
                return
        if not data or self.ended:
            return
        if self.chunked:
            self._dechunk(data, t)
        elif self.remaining is not None:
            take = data[:self.remaining]
            self.remaining -= len(take)
            self._body(take, t)
            if self.remaining <= 0:
                self._end_body(t)
        else:
            self._body(data, t)

    def _dechunk(self, data: bytes, t: float) -> None:
        raw = self.raw + data if self.raw else data
        self.raw = b""
        pos, n = 0, len(raw)
        while pos < n:
            if self.skip:  # the CRLF that ends a chunk's data
                k = min(self.skip, n - pos)
                pos += k
                self.skip -= k
                continue
            if self.chunk_left == 0:  # a size line
                eol = raw.find(b"\r\n", pos)
                if eol < 0:
                    self.raw = raw[pos:]
                    return
                size = int(raw[pos:eol].split(b";", 1)[0], 16)
                pos = eol + 2
                if size == 0:  # the last chunk (trailers, if any, are not read)
                    self._end_body(t)
                    return
                self.chunk_left = size
                continue
            take = min(self.chunk_left, n - pos)
            self._body(raw[pos:pos + take], t)
            pos += take
            self.chunk_left -= take
            if self.chunk_left == 0:
                self.skip = 2

    def _body(self, data: bytes, t: float) -> None:
        if self.status != 200:
            self.error_body += data
            return
        state = self.state
        if state is None or self.future is None or self.future.done():
            return  # after [DONE]: drain the rest of the body
        buf = self.lines + data if self.lines else data
        start = 0
        offset = t - self.t_send
        while True:
            eol = buf.find(b"\n", start)
            if eol < 0:
                break
            line = buf[start:eol]
            start = eol + 1
            if line.startswith(b"data:") and state.line(line.decode("utf-8", "replace").rstrip("\r"), offset):
                self.future.set_result(t)
                break
        self.lines = buf[start:] if start < len(buf) else b""

    def _end_body(self, t: float) -> None:
        self.ended = True
        if self.future is not None and not self.future.done():
            if self.status != 200:
                where = self.state.where if self.state else "stream"
                self.future.set_exception(ClientError(f"{where}: HTTP {self.status}: {self.error_body[:300]!r}"))
            else:
                if self.lines and self.state is not None:  # a last line without its newline
                    self.state.line(self.lines.decode("utf-8", "replace").rstrip("\r"), t - self.t_send)
                    self.lines = b""
                self.future.set_result(t)
        if self.keep_alive and not self.closed:
            self._reset()
            self.owner._idle.append(self)
        elif self.transport is not None:
            self.transport.close()

    def start(self, request: bytes, state: StreamState, t_send: float) -> "asyncio.Future[float]":
        self.state = state
        self.future = asyncio.get_running_loop().create_future()
        assert self.transport is not None
        self.t_send = self.last_read = t_send
        self.transport.write(request)
        return self.future


class AsyncOpenAIClient:
    """Streamed completions on asyncio: many streams at once on one thread (the latency stage's concurrent path).

    Three transports, timed alike: `"raw"` (the default), HTTP/1.1 straight on the event loop's
    transports (`_SSEProtocol`): each read is timestamped when the loop hands it over and its SSE
    lines are parsed at once by `StreamState`, the parser the synchronous path uses; `"aiohttp"`,
    aiohttp's ClientSession (the library `vllm bench serve` uses), each line timestamped as
    `resp.content.readline()` hands it over, then parsed by `StreamState`: less CPU per token than
    vllm bench, but a longer ITL-error tail than it at 8-128 streams (benchmarks/bench_client_concurrency.py),
    so not the default; and `"httpx"`, httpx's async client, whose per-read cost (h11, anyio) is
    about three times the raw transport's. Each stream waits at most the parent's `stall_timeout_s`
    for its next bytes ("no data for N s") and `timeout_s` for the whole stream. No proxies on the
    raw and aiohttp transports. Create and use it inside one running event loop.
    """

    def __init__(self, parent: OpenAIClient, max_connections: int = 256, backend: str = "raw"):
        if backend not in ("raw", "aiohttp", "httpx"):
            raise SuiteError(f"AsyncOpenAIClient: unknown backend {backend!r} (raw, aiohttp, httpx)")
        self.base_url = parent.base_url
        self.model = parent.model
        self.extra_body = dict(parent.extra_body)
        self.timeout_s = parent.timeout_s
        self.stall_timeout_s = parent.stall_timeout_s
        self.backend = backend
        self._headers = dict(parent._headers)
        url = httpx.URL(self.base_url)
        self._scheme, self._host = url.scheme, url.host
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._prefix = url.raw_path.decode().rstrip("/")
        self._host_header = url.netloc.decode()
        self._idle: list[_SSEProtocol] = []
        self._open: set[_SSEProtocol] = set()
        self._watchdog: asyncio.Task[None] | None = None
        self._http: httpx.AsyncClient | None = None
        self._session: Any = None  # aiohttp.ClientSession
        if backend == "aiohttp":
            self._session = self._aiohttp_session(max_connections)
        if backend == "httpx":
            limits = httpx.Limits(max_connections=max_connections, max_keepalive_connections=max_connections)
            self._http = httpx.AsyncClient(base_url=self.base_url, headers=parent._headers, limits=limits,
                                           timeout=httpx.Timeout(parent.timeout_s, connect=30.0, pool=None,
                                                                 read=parent.stall_timeout_s))

    async def aclose(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            self._watchdog = None
        if self._http is not None:
            await self._http.aclose()
        if self._session is not None:
            await self._session.close()
            self._session = None
        for proto in list(self._open):
            if proto.transport is not None:
                proto.transport.close()
        self._open.clear()
        self._idle.clear()

    async def __aenter__(self) -> "AsyncOpenAIClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    def _body(self, prompt: str, max_tokens: int, seed: int | None, temperature: float,
              extra: dict[str, Any] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens,
                                "temperature": temperature}
        if seed is not None:
            body["seed"] = seed
        return {**body, **self.extra_body, **(extra or {}), "stream": True, "stream_options": {"include_usage": True}}

    async def complete_stream(self, prompt: str, *, max_tokens: int, seed: int | None = 42,
                              temperature: float = 0.0, extra: dict[str, Any] | None = None) -> Completion:
        """A streamed /v1/completions request, timed as `OpenAIClient.complete(..., stream=True)` times it."""
        t_enter = time.perf_counter()
        body = self._body(prompt, max_tokens, seed, temperature, extra)
        if self.backend == "aiohttp":
            return await self._stream_aiohttp("/v1/completions", body, t_enter)
        if self.backend == "httpx":
            return await self._stream_httpx("/v1/completions", body, t_enter)
        return await self._stream_raw("/v1/completions", body, t_enter)

    def _aiohttp_session(self, max_connections: int) -> Any:
        import aiohttp  # here, not on the streams' clock: importing it costs ~0.1 s of CPU

        # one connection per stream in flight, kept alive between a stream's requests; the idle
        # ones are dropped after 3 s, before uvicorn's (vLLM's) and llama-server's 5 s, so a
        # request does not go out on a connection the server is closing
        connector = aiohttp.TCPConnector(limit=max_connections, limit_per_host=0, keepalive_timeout=3.0)
        timeout = aiohttp.ClientTimeout(total=self.timeout_s, sock_connect=30.0, sock_read=self.stall_timeout_s)
        headers = {**self._headers, "Accept": "text/event-stream", "Accept-Encoding": "identity"}
        return aiohttp.ClientSession(connector=connector, timeout=timeout, headers=headers,
                                     read_bufsize=1 << 20)  # readline takes lines up to 2 MiB

    async def _stream_aiohttp(self, path: str, body: dict[str, Any], t_enter: float) -> Completion:
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
                    raise ClientError(f"{where}: HTTP {r.status}: {(await r.read())[:300]!r}")
                content = r.content
                t_close = None
                while True:
                    raw = await content.readline()
                    t = clock() - t_send
                    if not raw:  # the body ended without [DONE]
                        t_close = t
                        break
                    if raw[:5] == b"data:" and state.line(raw.decode("utf-8", "replace").rstrip("\r\n"), t):
                        t_close = t
                        break
                out = state.finish(t_close, t_enter, t_send)
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

    async def _watch_stalls(self) -> None:
        """The raw transport's stall timeout: one task for every stream, not a timer per read."""
        stall = self.stall_timeout_s
        while True:
            await asyncio.sleep(min(1.0, stall / 4))
            now = time.perf_counter()
            for proto in list(self._open):
                future = proto.future
                if future is not None and not future.done() and now - proto.last_read > stall:
                    where = proto.state.where if proto.state else "stream"
                    proto._fail(ClientError(f"{where}: no data for {stall:g} s (stall timeout)"))

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
            import ssl
            ssl_ctx = ssl.create_default_context()
        try:
            _, proto = await asyncio.wait_for(
                loop.create_connection(lambda: _SSEProtocol(self), self._host, self._port, ssl=ssl_ctx), 30.0)
        except (OSError, asyncio.TimeoutError) as exc:
            raise ClientError(f"{where}: cannot connect: {type(exc).__name__}: {exc}") from None
        self._open.add(proto)
        return proto

    async def _stream_raw(self, path: str, body: dict[str, Any], t_enter: float) -> Completion:
        where = f"POST {self.base_url}{path}"
        payload = json.dumps(body).encode()
        head = [f"POST {self._prefix}{path} HTTP/1.1", f"Host: {self._host_header}",
                "Content-Type: application/json", f"Content-Length: {len(payload)}",
                "Accept: text/event-stream", "Accept-Encoding: identity"]
        head += [f"{k}: {v}" for k, v in self._headers.items()]
        request = ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload
        for attempt in (0, 1):
            state = StreamState(where, chat=False)
            reused = bool(self._idle)
            t_send = time.perf_counter()  # before connecting, as the synchronous path (and vllm bench) time it
            proto = await self._connect(where)
            future = proto.start(request, state, t_send)
            try:
                t_end = await asyncio.wait_for(future, self.timeout_s)
                break
            except ClientError:
                # a kept-alive connection the server closed as the request went out: once more, on a new one
                if attempt == 0 and reused and proto.closed and not proto.in_body and not proto.head:
                    continue
                raise
            except asyncio.TimeoutError:
                if proto.transport is not None:
                    proto.transport.close()
                raise ClientError(f"{where}: no end of the stream after {self.timeout_s:g} s") from None
            except asyncio.CancelledError:
                if proto.transport is not None:
                    proto.transport.close()
                raise
        return state.finish(t_end - t_send, t_enter, t_send)

    async def _stream_httpx(self, path: str, body: dict[str, Any], t_enter: float) -> Completion:
        assert self._http is not None
        where = f"POST {self.base_url}{path}"
        state = StreamState(where, chat=False)
        clock = time.perf_counter
        t_send = clock()
        try:
            async with self._http.stream("POST", path, json=body) as r:
                if r.status_code != 200:
                    raise ClientError(f"{where}: HTTP {r.status_code}: {(await r.aread())[:300]!r}")
                rest = b""
                done = False
                async for data in r.aiter_bytes():
                    t = clock() - t_send
                    *lines, rest = (rest + data).split(b"\n")
                    for raw in lines:
                        if raw and state.line(raw.decode("utf-8", "replace").rstrip("\r"), t):
                            done = True
                            break
                    if done:
                        break
                if not done and rest:
                    state.line(rest.decode("utf-8", "replace").rstrip("\r"), clock() - t_send)
        except httpx.ReadTimeout:
            raise ClientError(f"{where}: no data for {self.stall_timeout_s:g} s (stall timeout)") from None
        except httpx.HTTPError as exc:
            raise ClientError(f"{where}: {type(exc).__name__}: {exc}") from None
        return state.finish(clock() - t_send, t_enter, t_send)
