"""The synchronous client: one runtime's OpenAI-compatible endpoint, one request at a time per thread.

`OpenAIClient.complete` (/v1/completions) and `.chat` (/v1/chat/completions), streamed or not,
on a blocking socket (`_exchange`: the request built and the reply read by `suite.client.wire`,
a streamed one through a `StreamState`), with the connection kept alive for the thread's next
request; plain GETs and the runtime's own endpoints (/v1/models, /tokenize, a POST with no body)
on httpx. Every generation request, streamed or not, takes at most `timeout_s` in all, or the
time left of the stage's budget where that is less (`suite.client.budget`); a streamed one waits
at most `stall_timeout_s` for its next bytes, and every reply keeps a minimum byte rate
(`suite.client.wire`). `split_credentials` turns a
URL's `user:password@` part into a Basic authorization header, so the client's `base_url`, and
every message it raises, holds only the public URL. `async_client` makes the asyncio twin
(`suite.client.aio`).
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import ssl
import time
from typing import Any
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx

from suite.client.aio import AsyncOpenAIClient
from suite.client.budget import request_window
from suite.client.params import GenerationParams
from suite.client.replies import _MALFORMED, ClientError, Completion, _completion_from_reply, _malformed, _text
from suite.client.stream import StreamState
from suite.client.wire import MAX_BODY_BYTES, _Body, _request, _Response

log = logging.getLogger(__name__)

_READ_SIZE = 1 << 16


class OpenAIClient:
    """One runtime's OpenAI-compatible endpoint, serving the model under `model` with `params`."""

    def __init__(self, base_url: str, model: str, timeout_s: float = 600.0,
                 params: GenerationParams | None = None, api_key: str | None = None,
                 stall_timeout_s: float = 120.0):
        """`timeout_s`: a whole request; `stall_timeout_s`: a streamed request's longest wait for its next bytes."""
        self.base_url, auth = split_credentials(base_url.rstrip("/"))
        self.model = model
        self.params = params or GenerationParams()
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        if auth and not api_key:
            headers["Authorization"] = auth
        self.timeout_s = timeout_s
        self.stall_timeout_s = stall_timeout_s
        self._headers = headers
        self._http = httpx.Client(base_url=self.base_url, timeout=httpx.Timeout(timeout_s, connect=10.0),
                                  headers=headers)
        url = httpx.URL(self.base_url)
        self._scheme, self._host = url.scheme, url.host
        self._port = url.port or (443 if url.scheme == "https" else 80)
        self._prefix = url.raw_path.decode().rstrip("/")
        self._host_header = url.netloc.decode()
        self._idle_socks: list[socket.socket] = []  # connections kept alive for the next request

    def close(self) -> None:
        self._http.close()
        while self._idle_socks:
            self._idle_socks.pop().close()

    def __enter__(self) -> OpenAIClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plain GETs -----------------------------------------------------------------------------
    def get_json(self, path: str) -> Any:
        """A GET's JSON reply (its body bounded by `MAX_BODY_BYTES`, the request by `timeout_s`)."""
        where = f"GET {self.base_url}{path}"
        window, late = request_window(where, self.timeout_s)
        deadline = time.perf_counter() + window
        try:
            with self._http.stream("GET", path) as r:
                pieces, size = [], 0
                for piece in r.iter_bytes():
                    size += len(piece)
                    if size > MAX_BODY_BYTES:
                        raise ClientError(f"{where}: a reply body longer than {MAX_BODY_BYTES >> 20} MiB")
                    if time.perf_counter() > deadline:
                        raise ClientError(late)
                    pieces.append(piece)
        except httpx.HTTPError as exc:
            raise ClientError(f"{where}: {type(exc).__name__}: {exc}") from None
        content = b"".join(pieces)
        if r.status_code != 200:
            raise ClientError(f"{where}: HTTP {r.status_code}: {_text(content[:200])}", status=r.status_code)
        try:
            return json.loads(content)
        except (ValueError, RecursionError):
            raise ClientError(f"{where}: reply is not JSON: {_text(content)[:200]!r}") from None

    def post_empty(self, path: str) -> tuple[int, str]:
        """POST with no body to one of the runtime's own endpoints (vLLM's /reset_prefix_cache):
        the status and the start of the reply; ClientError when the runtime does not answer, and
        when it takes longer than the client's `timeout_s` or the stage's time budget left (a reset
        that hangs ends with the budget, as every other request does)."""
        where = f"POST {self.base_url}{path}"
        window, late = request_window(where, self.timeout_s)
        if window <= 0:
            raise ClientError(late)
        deadline = time.perf_counter() + window
        try:
            with self._http.stream("POST", path, timeout=httpx.Timeout(window)) as r:
                pieces, size = [], 0
                for piece in r.iter_bytes():
                    size += len(piece)
                    if time.perf_counter() > deadline:
                        raise ClientError(late)
                    if size <= 4096:
                        pieces.append(piece)
        except httpx.TimeoutException:
            raise ClientError(late) from None
        except httpx.HTTPError as exc:
            raise ClientError(f"{where}: {type(exc).__name__}: {exc}") from None
        return r.status_code, _text(b"".join(pieces))[:300]

    def models(self) -> list[dict[str, Any]]:
        data = self.get_json("/v1/models")
        listed = data.get("data") if isinstance(data, dict) else None
        return [m for m in listed if isinstance(m, dict)] if isinstance(listed, list) else []

    # -- generation -----------------------------------------------------------------------------
    def complete(self, prompt: str, *, max_tokens: int, logprobs: int | None = None, stream: bool = False,
                 extra: dict[str, Any] | None = None) -> Completion:
        """/v1/completions with the client's params; `extra`: this request's own fields."""
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens}
        if logprobs is not None:
            body["logprobs"] = logprobs
        return self._generate("/v1/completions", body, stream, extra, chat=False)

    def chat(self, messages: list[dict[str, str]], *, max_tokens: int, logprobs: int | None = None,
             stream: bool = False, response_format: dict[str, Any] | None = None,
             extra: dict[str, Any] | None = None) -> Completion:
        """/v1/chat/completions with the client's params; `extra`: this request's own fields."""
        body: dict[str, Any] = {"model": self.model, "messages": messages, "max_tokens": max_tokens}
        if logprobs is not None:
            body["logprobs"] = True
            body["top_logprobs"] = logprobs
        if response_format is not None:
            body["response_format"] = response_format
        return self._generate("/v1/chat/completions", body, stream, extra, chat=True)

    def _generate(self, path: str, body: dict[str, Any], stream: bool,
                  extra: dict[str, Any] | None, chat: bool) -> Completion:
        t_enter = time.perf_counter()
        body = {**body, **self.params.fields(), **(extra or {})}
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
            return self._stream(path, body, chat, t_enter)
        where = f"POST {self.base_url}{path}"
        reply = _Body(where)
        response, t_send = self._exchange(path, body, reply, stream=False)
        t_recv = response.done_at
        assert t_recv is not None
        content = reply.content()
        try:
            out = _completion_from_reply(content, chat)
        except _MALFORMED as exc:
            raise _malformed(where, exc, content) from None
        out.e2e_s = t_recv - t_send
        out.overhead_s = (t_send - t_enter) + (time.perf_counter() - t_recv)
        return out

    def _stream(self, path: str, body: dict[str, Any], chat: bool, t_enter: float) -> Completion:
        """A streamed request, its response read by `_Response` (httptools) and a `StreamState`."""
        state = StreamState(f"POST {self.base_url}{path}", chat,
                            max_lines=StreamState.lines_for(body.get("max_tokens")))
        response, t_send = self._exchange(path, body, state, stream=True)
        assert response.done_at is not None
        try:
            return state.finish(response.done_at - t_send, t_enter, t_send)
        except _MALFORMED as exc:
            raise _malformed(state.where, exc, b"", "stream") from None

    def _exchange(self, path: str, body: dict[str, Any], state: StreamState | _Body,
                  stream: bool) -> tuple[_Response, float]:
        """One POST on a blocking socket, its response read by `_Response` (httptools) into `state`;
        (the response, when the request was sent).

        The whole request takes at most `timeout_s`, however the bytes come; a streamed one waits
        at most `stall_timeout_s` for its next bytes. A connection is kept for the next request
        when its response ended with keep-alive (one per thread that sends at once). No proxies
        on this path.
        """
        where = state.where
        request = _request(self._prefix, self._host_header, path, json.dumps(body).encode(), self._headers,
                           stream=stream)
        stall = min(self.stall_timeout_s, self.timeout_s) if stream else self.timeout_s
        for attempt in (0, 1):
            try:
                sock: socket.socket | None = self._idle_socks.pop()
            except IndexError:
                sock = None
            window, late = request_window(where, self.timeout_s)  # a stage's budget may end it sooner
            t_send = time.perf_counter()  # before connecting, as the concurrent path (and vllm bench) time it
            deadline = t_send + window
            reused = sock is not None  # a retry comes only before any byte of the reply: `state` is untouched
            response = _Response(state, t_send)
            if sock is None:
                try:
                    sock = self._connect_stream()
                except OSError as exc:
                    raise ClientError(f"{where}: cannot connect: {type(exc).__name__}: {exc}") from None
            try:
                sock.sendall(request)
                while response.done_at is None:
                    left = deadline - time.perf_counter()
                    if left <= 0:
                        raise ClientError(late)
                    sock.settimeout(min(stall, left))
                    try:
                        data = sock.recv(_READ_SIZE)
                    except TimeoutError:
                        if time.perf_counter() >= deadline:
                            raise ClientError(late) from None
                        raise
                    t = time.perf_counter()
                    if not data:
                        response.eof(t)
                        break
                    response.feed(data, t)
            except (ClientError, OSError) as exc:
                sock.close()
                timed_out = isinstance(exc, TimeoutError) or time.perf_counter() >= deadline
                if attempt == 0 and reused and not response.answered and not timed_out:
                    continue  # a kept-alive connection the server closed as the request went out: once more
                if isinstance(exc, ClientError):
                    raise
                if isinstance(exc, TimeoutError):
                    raise ClientError(f"{where}: no data for {stall:g} s (stall timeout)") from None
                raise ClientError(f"{where}: {type(exc).__name__}: {exc}") from None
            self._keep(sock, response)
            return response, t_send
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _connect_stream(self) -> socket.socket:
        sock = socket.create_connection((self._host, self._port), timeout=10.0)
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self._scheme == "https":
            sock = ssl.create_default_context().wrap_socket(sock, server_hostname=self._host)
        sock.settimeout(min(self.stall_timeout_s, self.timeout_s))
        return sock

    def _keep(self, sock: socket.socket, response: _Response) -> None:
        """Read the rest of an ended stream's response (as a rule, the chunked terminator) and keep its connection."""
        try:
            sock.settimeout(1.0)  # a server that holds the body open after [DONE]: not reused
            give_up = time.perf_counter() + 1.0  # nor one that trickles it
            while not response.ended and response.keep_alive and time.perf_counter() < give_up:
                data = sock.recv(_READ_SIZE)
                if not data:
                    break
                response.feed(data, time.perf_counter())
        except (ClientError, OSError):
            pass
        if response.ended and response.keep_alive:
            sock.settimeout(min(self.stall_timeout_s, self.timeout_s))
            self._idle_socks.append(sock)
        else:
            sock.close()

    def async_client(self, max_connections: int = 256,
                     backend: type[AsyncOpenAIClient] = AsyncOpenAIClient) -> AsyncOpenAIClient:
        """An asyncio twin of this client (same URL, model, headers, extra body) for many streams at once.

        `backend`: its class, that is its transport (the suite's own by default; the benchmarks
        pass the others of benchmarks/client_transports.py)."""
        return backend(self, max_connections=max_connections)

    def tokenize(self, text: str) -> list[int] | None:
        """Token ids of a prompt via the runtime's /tokenize endpoint (llama-server, vLLM), if any.

        None where there is none, or where its reply is not a list of token ids (logged)."""
        for path, body in (("/tokenize", {"content": text, "add_special": True}),
                           ("/tokenize", {"model": self.model, "prompt": text, "add_special_tokens": True})):
            try:
                r = self._http.post(path, json=body)
            except httpx.HTTPError:
                return None
            if r.status_code == 200:
                try:
                    tokens = r.json().get("tokens")
                    if not isinstance(tokens, list):
                        continue
                    ids = [t if isinstance(t, int) else t.get("id") for t in tokens]
                except (ValueError, RecursionError, AttributeError):
                    ids = None
                if ids is None or not all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
                    log.warning("POST %s%s: malformed /tokenize reply: %r", self.base_url, path, r.text[:200])
                    return None
                return ids
        return None


def split_credentials(url: str) -> tuple[str, str | None]:
    """(the URL without its `user:password@` part, the Basic authorization header it stood for or None).

    The client speaks to the public URL with the credentials in a header, so that no message,
    record or page that names the endpoint holds them."""
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url, None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"  # an IPv6 address
    if parts.port:
        host = f"{host}:{parts.port}"
    user, password = unquote(parts.username or ""), unquote(parts.password or "")
    token = base64.b64encode(f"{user}:{password}".encode()).decode()
    return urlunsplit((parts.scheme, host, parts.path, parts.query, parts.fragment)), f"Basic {token}"
