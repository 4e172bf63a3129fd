"""Client for the OpenAI-compatible HTTP API that every runtime speaks (httpx; streams read by httptools).

`OpenAIClient.complete` (/v1/completions) and `.chat` (/v1/chat/completions), streamed or not,
with a per-request seed, max tokens, logprobs where the runtime offers them cheaply, and the
runtime's own extra request fields (token ids, cache flags). A `Completion` carries the text, the
generated token ids where the runtime returns them, the chosen-token logprobs, the finish reason,
token counts, timings (TTFT, end to end, a timestamp per streamed chunk) and the suite's own
overhead outside the HTTP exchange. HTTP and protocol errors raise `ClientError` with a clear
message; `Completion.error` is never set by the client itself (stages use it to record failures).

Every reply is untrusted: whatever its shape (valid JSON of the wrong types, a non-object, nesting
too deep to parse), reading it ends in a `ClientError` that names the endpoint and the field, never
another exception. A reply is bounded: its status line and headers at `MAX_HEAD_BYTES`, one line of
an event stream at `MAX_LINE_BYTES`, its body at `MAX_BODY_BYTES`, and every generation request,
streamed or not, at `timeout_s` in all (a server that trickles a byte at a time gets no longer).
The URL's `user:password@` part, if any, becomes a Basic authorization header: the client's
`base_url`, and so every message it raises, holds only the public URL.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import socket
import ssl
import time
from typing import Any, Callable
from urllib.parse import unquote, urlsplit, urlunsplit

import httptools
import httpx
from pydantic import BaseModel, ConfigDict, Field

from suite.analysis.tokens import token_count
from suite.errors import SuiteError

log = logging.getLogger(__name__)

_READ_SIZE = 1 << 16
MAX_HEAD_BYTES = 64 * 1024  # a reply's status line and headers
MAX_LINE_BYTES = 8 * 1024 * 1024  # one line of an event stream (one chunk's JSON)
MAX_BODY_BYTES = 64 * 1024 * 1024  # a reply's body, streamed or not
_SSE_HEADERS = {"Accept": "text/event-stream", "Accept-Encoding": "identity"}
BACKENDS = ("httptools", "aiohttp", "httpx")  # AsyncOpenAIClient's transports, the default first


class ClientError(SuiteError):
    """The runtime answered with an HTTP error, a malformed reply, or not at all. Its message is one
    line (a transport's own multi-line words are joined), as a request record holds it."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(" ".join(line.strip() for line in str(message).splitlines() if line.strip()))
        self.status = status  # the HTTP status of a reply that was not 200; None for every other fault


class _Stalled(ClientError):
    """No bytes for the stall timeout: never sent again."""


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
    error_status: int | None = None  # the HTTP status where the runtime answered the request with an error

    @property
    def n_tokens(self) -> int | None:
        """Tokens generated, by the suite's one rule (suite.analysis.tokens)."""
        return token_count(self.token_ids, self.completion_tokens, self.server_timings, self.logprobs,
                           len(self.chunk_times_s))


class _Shape(Exception):
    """A reply field of the wrong shape: its place in the reply and what it holds."""


_MALFORMED = (_Shape, ValueError, TypeError, AttributeError, KeyError, IndexError, RecursionError)
_JSON_KIND = {dict: "an object", list: "an array", str: "a string", bool: "a boolean", int: "a number",
              float: "a number", type(None): "null"}


def _kind(value: Any) -> str:
    return _JSON_KIND.get(type(value), type(value).__name__)


def _field(obj: dict[str, Any], key: str, types: tuple[type, ...], where: str) -> Any:
    """`obj[key]` when it is absent, null or of `types` (a boolean is no number); else `_Shape`."""
    value = obj.get(key)
    if value is None or type(value) in types:  # the common case, at one lookup
        return value
    if isinstance(value, types) and not (isinstance(value, bool) and bool not in types):
        return value
    raise _Shape(f"{where}.{key} is {_kind(value)}")


def _number(value: Any, where: str, null_ok: bool = False) -> float:
    if value is None and null_ok:
        return float("nan")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    raise _Shape(f"{where} is {_kind(value)}, not a number")


def _malformed(where: str, exc: BaseException, payload: bytes | str, what: str = "reply") -> "ClientError":
    """The per-request error for a reply that cannot be read: its endpoint, the reason, its start."""
    if isinstance(exc, _Shape):
        reason = str(exc)
    elif isinstance(exc, RecursionError):
        reason = "nested too deep to read"
    else:
        reason = f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0]}"
    return ClientError(f"{where}: malformed {what}: {reason[:200]}: {_text(payload)[:200]!r}")


def _choices(data: dict[str, Any]) -> list[dict[str, Any]]:
    """The reply's choices, each an object (else `_Shape`)."""
    choices = _field(data, "choices", (list,), "reply") or []
    for i, choice in enumerate(choices):
        if not isinstance(choice, dict):
            raise _Shape(f"choices[{i}] is {_kind(choice)}")
    return choices


def _reply_extras(data: dict[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any] | None, str | None]:
    """(usage, timings, system_fingerprint) of a reply or chunk, each checked."""
    usage = _field(data, "usage", (dict,), "reply")
    if usage is not None:
        for key in ("prompt_tokens", "completion_tokens"):
            _field(usage, key, (int,), "usage")
    return usage, _field(data, "timings", (dict,), "reply"), _field(data, "system_fingerprint", (str,), "reply")


def _piece(choice: dict[str, Any], chat: bool, key: str) -> str | None:
    """A choice's text: `text` (completions), `message.content` or `delta.content` (chat)."""
    if not chat:
        return _field(choice, "text", (str,), "choice")
    holder = _field(choice, key, (dict,), "choice") or {}
    return _field(holder, "content", (str,), f"choice.{key}")


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
    """The chosen-token logprobs; `_Shape` when they are there in the wrong shape."""
    lp = _field(choice, "logprobs", (dict,), "choice")
    if lp is None:
        return None
    rows = _field(lp, "token_logprobs", (list,), "choice.logprobs")
    if rows is not None:  # completions format (a null: a token without one, as OpenAI's echo)
        return [_number(x, f"choice.logprobs.token_logprobs[{i}]", null_ok=True) for i, x in enumerate(rows)]
    content = _field(lp, "content", (list,), "choice.logprobs")
    if content is not None:  # chat format (and llama-server completions)
        out = []
        for i, c in enumerate(content):
            if not isinstance(c, dict):
                raise _Shape(f"choice.logprobs.content[{i}] is {_kind(c)}")
            out.append(_number(c.get("logprob"), f"choice.logprobs.content[{i}].logprob"))
        return out
    return None


def is_token_choice(choice: dict[str, Any], chat: bool) -> bool:
    """Whether a streamed choice carries a generated token (the chunks TTFT, ITL and e2e are timed on).

    As `vllm bench serve` does, a chunk counts when it carries a choice with generated output,
    even output that decodes to an empty string (a special token, half of a UTF-8 character).
    It does not count when it has no choice (a usage-only or timings-only chunk), when its only
    content is the role announcement of a chat stream (`{"role": "assistant", "content": ""}`),
    or when it is the closing chunk that carries a finish reason and no text.
    """
    return _is_token(choice, chat, bool(_parse_token_ids(choice) or _parse_logprobs(choice)))


def _is_token(choice: dict[str, Any], chat: bool, has_ids_or_logprobs: bool) -> bool:
    """`is_token_choice`, given whether the choice has token ids or logprobs."""
    if has_ids_or_logprobs:
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
    lp = _field(choice, "logprobs", (dict,), "choice")
    if lp is None:
        return None
    rows: list[Any] | None = None
    if isinstance(lp.get("top_logprobs"), list):  # completions format: [{token: logprob}, ...]
        rows = [list(r.values()) if isinstance(r, dict) else [] for r in lp["top_logprobs"]]
    elif isinstance(lp.get("content"), list):  # chat format: content[i].top_logprobs[j].logprob
        rows = [[t.get("logprob") for t in c["top_logprobs"] if isinstance(t, dict)]
                if isinstance(c.get("top_logprobs"), list) else []
                for c in lp["content"] if isinstance(c, dict)]
    if rows is None or not any(rows):
        return None
    return [sorted((float(x) for x in r if isinstance(x, (int, float)) and not isinstance(x, bool)), reverse=True)
            for r in rows]


def _completion_from_reply(content: bytes, chat: bool) -> Completion:
    """A non-streamed reply's completion (timings left for the caller); `_Shape` or another
    `_MALFORMED` error when the reply is not what the API says."""
    data = json.loads(content)
    if not isinstance(data, dict):
        raise _Shape(f"the reply is {_kind(data)}, not an object")
    choices = _choices(data)
    if not choices:
        raise _Shape("the reply has no choices")
    choice = choices[0]
    usage, timings, fingerprint = _reply_extras(data)
    return Completion(
        text=_piece(choice, chat, "message") or "",
        token_ids=_parse_token_ids(choice),
        logprobs=_parse_logprobs(choice),
        top_logprobs=_parse_top_logprobs(choice),
        finish_reason=_field(choice, "finish_reason", (str,), "choice"),
        prompt_tokens=(usage or {}).get("prompt_tokens"),
        completion_tokens=(usage or {}).get("completion_tokens"),
        server_timings=timings,
        system_fingerprint=fingerprint,
    )


def _text(payload: bytes | str) -> str:
    return payload.decode("utf-8", "replace") if isinstance(payload, bytes) else payload


class StreamState:
    """What a streamed completion has said so far: one SSE line at a time, the sync and async paths alike.

    `feed(data, t)` takes bytes of the event stream as they came and the offset `t` (seconds
    since the request was sent) at which the client received them; it returns True at `[DONE]`.
    `event` takes one line's payload (what follows its `data:`). A chunk that
    carries a generated token (`is_token_choice`) is timed at `t`: the first one is TTFT, the
    last one end-to-end. `finish` builds the `Completion`.
    """

    __slots__ = ("where", "chat", "pending", "pending_len", "parts", "token_ids", "logprobs", "top_logprobs",
                 "chunk_times",
                 "finish_reason", "usage", "timings", "fingerprint", "parse_s")

    def __init__(self, where: str, chat: bool):
        self.where = where
        self.chat = chat
        self.pending: list[bytes] = []  # the stream's bytes after its last newline, as they came
        self.pending_len = 0
        self.parts: list[str] = []
        self.token_ids: list[int] = []
        self.logprobs: list[float] = []
        self.top_logprobs: list[list[float]] = []
        self.chunk_times: list[float] = []
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] = {}
        self.timings: dict[str, Any] | None = None
        self.fingerprint: str | None = None
        self.parse_s = 0.0

    def feed(self, data: bytes, t: float) -> bool:
        """Bytes of the event stream as they came, cut anywhere, received at offset `t`; True at `[DONE]`.

        A line is joined once, when its newline comes (not on every read); one longer than
        `MAX_LINE_BYTES` is an error."""
        if b"\n" not in data:
            self._hold(data)
            return False
        if self.pending:
            data = b"".join(self.pending) + data
            self.pending, self.pending_len = [], 0
        *lines, rest = data.split(b"\n")
        for line in lines:
            if len(line) > MAX_LINE_BYTES:
                raise ClientError(f"{self.where}: a stream line longer than {MAX_LINE_BYTES >> 20} MiB")
            if line[:5] == b"data:" and self.event(line[5:], t):
                return True
        if rest:
            self._hold(rest)
        return False

    def _hold(self, data: bytes) -> None:
        self.pending.append(data)
        self.pending_len += len(data)
        if self.pending_len > MAX_LINE_BYTES:
            raise ClientError(f"{self.where}: a stream line longer than {MAX_LINE_BYTES >> 20} MiB")

    def end(self, t: float) -> None:
        """The body ended without `[DONE]`: its last line may lack its newline."""
        rest = b"".join(self.pending)
        self.pending, self.pending_len = [], 0
        if rest[:5] == b"data:":
            self.event(rest[5:], t)

    def event(self, payload: bytes | str, t: float) -> bool:
        """One `data:` line's payload (what follows `data:`), received at offset `t`; True at `[DONE]`.

        A chunk of any other shape than the API's is a `ClientError` naming the field."""
        t0 = time.perf_counter()
        payload = payload.strip()
        if payload == b"[DONE]" or payload == "[DONE]":
            return True
        try:
            data = json.loads(payload)
        except (ValueError, RecursionError):
            raise ClientError(f"{self.where}: malformed stream chunk: {_text(payload)[:200]!r}") from None
        if not isinstance(data, dict):
            raise ClientError(f"{self.where}: malformed stream chunk: {_text(payload)[:200]!r}")
        if "error" in data and not data.get("choices"):
            raise ClientError(f"{self.where}: error in stream: {str(data['error'])[:200]}")
        try:
            token_chunk = self._chunk(data)
        except _MALFORMED as exc:
            raise _malformed(self.where, exc, payload, "stream chunk") from None
        if token_chunk:
            self.chunk_times.append(t)
        self.parse_s += time.perf_counter() - t0
        return False

    def _chunk(self, data: dict[str, Any]) -> bool:
        """Take one chunk's fields; whether it carried a generated token."""
        get = data.get
        usage, timings, fingerprint = get("usage"), get("timings"), get("system_fingerprint")
        if usage is not None or timings is not None or fingerprint is not None:  # most chunks have none
            usage, timings, fingerprint = _reply_extras(data)
        self.usage = usage or self.usage
        self.timings = timings or self.timings
        self.fingerprint = fingerprint or self.fingerprint
        token_chunk = False
        chat = self.chat
        for choice in _choices(data):
            piece = _piece(choice, chat, "delta")
            if piece:
                self.parts.append(piece)
            ids = _parse_token_ids(choice)
            if ids:
                self.token_ids.extend(ids)
            lps = _parse_logprobs(choice)
            if lps:
                self.logprobs.extend(lps)
                tops = _parse_top_logprobs(choice)
                if tops:
                    self.top_logprobs.extend(tops)
            token_chunk = token_chunk or _is_token(choice, chat, bool(ids or lps))
            self.finish_reason = _field(choice, "finish_reason", (str,), "choice") or self.finish_reason
        return token_chunk

    def finish(self, t_close: float, t_enter: float, t_send: float) -> Completion:
        """The completion; `t_close` is the stream's end as an offset from the send."""
        chunk_times = self.chunk_times
        t_recv = t_send + t_close
        out = Completion(
            text="".join(self.parts),
            token_ids=self.token_ids or None,
            logprobs=self.logprobs or None,
            # only where every token came with its top-k (else the rows would not line up)
            top_logprobs=self.top_logprobs if self.top_logprobs and len(self.top_logprobs) == len(self.logprobs) else None,
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


class GenerationParams(BaseModel):
    """What every generation request of one configuration carries besides its prompt, its length
    and its logprobs: the card's sampling (seed, temperature, top_p) and the request fields of the
    runtime and its active controls (`extra_body`). Bound into a client once; the request lines and
    the stage results record it from there."""

    model_config = ConfigDict(frozen=True)

    seed: int | None = 42
    temperature: float = 0.0
    top_p: float | None = None
    extra_body: dict[str, Any] = Field(default_factory=dict)

    @property
    def request_extra(self) -> dict[str, Any]:
        """The fields besides seed and temperature (top_p, the runtime's and controls' fields)."""
        return ({"top_p": self.top_p} if self.top_p is not None else {}) | dict(self.extra_body)

    def fields(self) -> dict[str, Any]:
        """The request body's sampling fields."""
        body: dict[str, Any] = {"temperature": self.temperature}
        if self.seed is not None:
            body["seed"] = self.seed
        return body | self.request_extra


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

    def __enter__(self) -> "OpenAIClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- plain GETs -----------------------------------------------------------------------------
    def get_json(self, path: str) -> Any:
        """A GET's JSON reply (its body bounded by `MAX_BODY_BYTES`, the request by `timeout_s`)."""
        where = f"GET {self.base_url}{path}"
        deadline = time.perf_counter() + self.timeout_s
        try:
            with self._http.stream("GET", path) as r:
                pieces, size = [], 0
                for piece in r.iter_bytes():
                    size += len(piece)
                    if size > MAX_BODY_BYTES:
                        raise ClientError(f"{where}: a reply body longer than {MAX_BODY_BYTES >> 20} MiB")
                    if time.perf_counter() > deadline:
                        raise ClientError(f"{where}: no end of the reply after {self.timeout_s:g} s")
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
        the status and the start of the reply; ClientError when the runtime does not answer."""
        try:
            r = self._http.post(path)
        except httpx.HTTPError as exc:
            raise ClientError(f"POST {self.base_url}{path}: {type(exc).__name__}: {exc}") from None
        return r.status_code, r.text[:300]

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
        state = StreamState(f"POST {self.base_url}{path}", chat)
        response, t_send = self._exchange(path, body, state, stream=True)
        assert response.done_at is not None
        try:
            return state.finish(response.done_at - t_send, t_enter, t_send)
        except _MALFORMED as exc:
            raise _malformed(state.where, exc, b"", "stream") from None

    def _exchange(self, path: str, body: dict[str, Any], state: "StreamState | _Body",
                  stream: bool) -> tuple["_Response", float]:
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
            t_send = time.perf_counter()  # before connecting, as the concurrent path (and vllm bench) time it
            deadline = t_send + self.timeout_s
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
                        raise ClientError(f"{where}: no end of the reply after {self.timeout_s:g} s")
                    sock.settimeout(min(stall, left))
                    try:
                        data = sock.recv(_READ_SIZE)
                    except TimeoutError:
                        if time.perf_counter() >= deadline:
                            raise ClientError(f"{where}: no end of the reply after {self.timeout_s:g} s") from None
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
            break
        self._keep(sock, response)
        return response, t_send

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

    def async_client(self, max_connections: int = 256, backend: str = "httptools") -> "AsyncOpenAIClient":
        """An asyncio twin of this client (same URL, model, headers, extra body) for many streams at once."""
        return AsyncOpenAIClient(self, max_connections=max_connections, backend=backend)

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

class _Response:
    """One HTTP/1.1 response, read by httptools, whose body is an event stream for a `StreamState`.

    httptools (llhttp, the C parser uvicorn uses) reads the status line, the headers and the
    body's framing (Content-Length, chunked, or the connection's close); this class hands the
    body to the state as it comes. `feed(data, t)` takes bytes read at `t` (perf_counter) and
    raises `ClientError` on an HTTP error status or a malformed reply; `done_at` is set when the
    stream ended (`[DONE]`, or the body's end), `ended` when the whole response was read (after
    `[DONE]` the rest of the body is drained), `keep_alive` whether the connection can serve the
    next request then. Both streaming paths use it: the blocking socket of `OpenAIClient` and the
    asyncio protocol of `AsyncOpenAIClient`.
    """

    __slots__ = ("parser", "state", "t_send", "t_read", "status", "framed", "in_body", "keep_alive", "ended",
                 "done_at", "answered", "error_body", "head_bytes", "body_bytes")

    def __init__(self, state: "StreamState | _Body", t_send: float):
        self.parser = httptools.HttpResponseParser(self)
        self.state = state
        self.t_send = t_send
        self.t_read = 0.0  # when the bytes being parsed arrived
        self.status = 0
        self.framed = False  # Content-Length or chunked: else the body ends when the connection closes
        self.in_body = False
        self.keep_alive = False
        self.ended = False
        self.done_at: float | None = None
        self.answered = False  # any byte of the response came
        self.error_body = b""
        self.head_bytes = 0  # bytes read before the head ended
        self.body_bytes = 0

    def feed(self, data: bytes, t: float) -> None:
        self.answered = True
        self.t_read = t
        if not self.in_body:
            if self.head_bytes > MAX_HEAD_BYTES:  # what came before this read was all head
                raise ClientError(f"{self.state.where}: a reply head (status line and headers) longer than "
                                  f"{MAX_HEAD_BYTES >> 10} KiB")
            self.head_bytes += len(data)
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserCallbackError as exc:  # raised in one of the callbacks below
            cause = exc.__context__
            if isinstance(cause, ClientError):
                raise cause from None
            raise ClientError(f"{self.state.where}: {type(cause).__name__}: {cause}") from None
        except httptools.HttpParserError as exc:
            raise ClientError(f"{self.state.where}: malformed HTTP response: {exc}") from None

    def eof(self, t: float, exc: BaseException | None = None) -> None:
        """The connection closed at `t`: the end of a body that had no other framing, else an error."""
        if self.ended:
            return
        if self.in_body and not self.framed and self.status == 200:
            self.keep_alive = False
            self._end(t)
            return
        raise ClientError(f"{self.state.where}: the connection closed before the response ended"
                          f"{f': {exc}' if exc else ''}")

    # httptools' callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self.framed = True

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        if self.status >= 200:  # 1xx: a real head follows
            self.in_body = True
            self.keep_alive = self.parser.should_keep_alive()

    def on_body(self, body: bytes) -> None:
        self.body_bytes += len(body)
        if self.body_bytes > MAX_BODY_BYTES:
            raise ClientError(f"{self.state.where}: a reply body longer than {MAX_BODY_BYTES >> 20} MiB")
        if self.done_at is not None:
            return  # after [DONE]: drain the rest of the body
        if self.status != 200:
            if len(self.error_body) < 4096:
                self.error_body += body[:4096]
        elif self.state.feed(body, self.t_read - self.t_send):
            self.done_at = self.t_read

    def on_message_complete(self) -> None:
        if self.in_body:  # not the end of a 1xx head
            self._end(self.t_read)

    def _end(self, t: float) -> None:
        self.ended = True
        if self.done_at is None:
            if self.status != 200:
                raise ClientError(f"{self.state.where}: HTTP {self.status}: {self.error_body[:300]!r}", status=self.status)
            self.state.end(t - self.t_send)
            self.done_at = t


class _Body:
    """A non-streamed reply's body, gathered as it comes (`_Response` hands it over; bounded there)."""

    __slots__ = ("where", "pieces")

    def __init__(self, where: str):
        self.where = where
        self.pieces: list[bytes] = []

    def feed(self, data: bytes, t: float) -> bool:
        self.pieces.append(data)
        return False

    def end(self, t: float) -> None:
        pass

    def content(self) -> bytes:
        return b"".join(self.pieces)


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


def _request(prefix: str, host: str, path: str, payload: bytes, headers: dict[str, str], stream: bool = True) -> bytes:
    """A POST of a JSON body that asks for an event stream (or, `stream=False`, for JSON), as HTTP/1.1 bytes."""
    head = [f"POST {prefix}{path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json",
            f"Content-Length: {len(payload)}"]
    accept = _SSE_HEADERS if stream else {"Accept": "application/json", "Accept-Encoding": "identity"}
    head += [f"{k}: {v}" for k, v in {**accept, **headers}.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload


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

    def __init__(self, owner: "AsyncOpenAIClient"):
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.closed = False
        self.last_read = 0.0  # when bytes last came (perf_counter), for the client's stall watchdog
        self.response: _Response | None = None
        self.future: asyncio.Future[float] | None = None
        self.reads: list[tuple[bytes, float]] = []  # reads not parsed yet, with their arrival times

    def start(self, request: bytes, state: StreamState, t_send: float) -> "asyncio.Future[float]":
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
        self.transport = transport  # type: ignore[assignment]

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

    Three transports, timed alike: `"httptools"` (the default): HTTP/1.1 on the event loop's own
    transports (`_SSEProtocol`): each read is timestamped when the loop hands it over, and parsed
    (`_Response`: httptools, then `StreamState`, as on the synchronous path) once the loop has
    handed over every read that was ready; `"aiohttp"`, aiohttp's
    ClientSession (the library `vllm bench serve` uses), each line timestamped as
    `resp.content.readline()` hands it over, then parsed; and `"httpx"`, httpx's async client
    (h11 and anyio: several times the httptools transport's CPU per read).
    benchmarks/bench_client_concurrency.py compares them with `vllm bench serve`. Each stream waits
    at most the parent's `stall_timeout_s` for its next bytes ("no data for N s") and `timeout_s`
    for the whole stream. No proxies on the httptools and aiohttp transports. Create and use it
    inside one running event loop (`event_loop_factory` makes one: uvloop's where it is installed).
    """

    def __init__(self, parent: OpenAIClient, max_connections: int = 256, backend: str = "httptools"):
        if backend not in BACKENDS:
            raise SuiteError(f"AsyncOpenAIClient: unknown backend {backend!r} ({', '.join(BACKENDS)})")
        self.base_url = parent.base_url
        self.model = parent.model
        self.params = parent.params
        self.timeout_s = parent.timeout_s
        self.stall_timeout_s = parent.stall_timeout_s
        self.backend = backend
        self._headers = dict(parent._headers)
        self._scheme, self._host, self._port = parent._scheme, parent._host, parent._port
        self._prefix, self._host_header = parent._prefix, parent._host_header
        self._loop = asyncio.get_running_loop()
        self._idle: list[_SSEProtocol] = []
        self._open: set[_SSEProtocol] = set()
        self._unparsed: list[_SSEProtocol] = []  # connections with reads not parsed yet
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

    def _body(self, prompt: str, max_tokens: int, extra: dict[str, Any] | None) -> dict[str, Any]:
        body: dict[str, Any] = {"model": self.model, "prompt": prompt, "max_tokens": max_tokens}
        return {**body, **self.params.fields(), **(extra or {}), "stream": True,
                "stream_options": {"include_usage": True}}

    async def complete_stream(self, prompt: str, *, max_tokens: int, extra: dict[str, Any] | None = None) -> Completion:
        """A streamed /v1/completions request, timed as `OpenAIClient.complete(..., stream=True)` times it."""
        t_enter = time.perf_counter()
        body = self._body(prompt, max_tokens, extra)
        if self.backend == "aiohttp":
            return await self._stream_aiohttp("/v1/completions", body, t_enter)
        if self.backend == "httpx":
            return await self._stream_httpx("/v1/completions", body, t_enter)
        return await self._stream_httptools("/v1/completions", body, t_enter)

    def _parse_reads(self) -> None:
        """Parse every connection's reads since the last call (scheduled by the first read after it)."""
        protos, self._unparsed = self._unparsed, []
        for proto in protos:
            proto.parse()

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
        except (OSError, asyncio.TimeoutError) as exc:
            raise ClientError(f"{where}: cannot connect: {type(exc).__name__}: {exc}") from None
        self._open.add(proto)
        return proto

    async def _stream_httptools(self, path: str, body: dict[str, Any], t_enter: float) -> Completion:
        where = f"POST {self.base_url}{path}"
        request = _request(self._prefix, self._host_header, path, json.dumps(body).encode(), self._headers)
        for attempt in (0, 1):
            state = StreamState(where, chat=False)
            reused = bool(self._idle)
            t_send = time.perf_counter()  # before connecting, as the synchronous path (and vllm bench) time it
            proto = await self._connect(where)
            future = proto.start(request, state, t_send)
            try:
                t_end = await asyncio.wait_for(future, self.timeout_s)
                break
            except ClientError as exc:
                # a kept-alive connection the server closed as the request went out: once more, on a
                # new one (not a stall: that one waited its time already)
                if attempt == 0 and reused and proto.closed and not proto.answered and not isinstance(exc, _Stalled):
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
        try:
            return state.finish(t_end - t_send, t_enter, t_send)
        except _MALFORMED as exc:
            raise _malformed(where, exc, b"", "stream") from None

    async def _stream_httpx(self, path: str, body: dict[str, Any], t_enter: float) -> Completion:
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
