"""A streamed completion's event stream (SSE), read one line at a time: `StreamState`.

Every streaming transport, the synchronous client's and the asyncio client's alike, hands the
stream's bytes (or its `data:` lines) to a `StreamState` with the time it received them; the
state times the chunks that carry a generated token (`is_token_choice`) and builds the
`Completion`. One line of the stream is bounded at `MAX_LINE_BYTES`, and the number of its lines
by what the request's `max_tokens` allows (`StreamState.lines_for`: a few lines per token and a
margin), so a stream that never ends (never `[DONE]`, never closed) is an error as soon as it has
said more than any answer could, not a loop that spins until the request's deadline.
"""

from __future__ import annotations

import json
import time
from typing import Any

from suite.client.replies import (
    _MALFORMED,
    ClientError,
    Completion,
    _choices,
    _field,
    _is_token,
    _malformed,
    _parse_logprobs,
    _parse_token_ids,
    _parse_top_logprobs,
    _piece,
    _reply_extras,
    _text,
)

MAX_LINE_BYTES = 8 * 1024 * 1024  # one line of an event stream (one chunk's JSON)
LINES_PER_TOKEN = 4  # `event:`, `data:`, `id:` and the blank line that ends an event
LINES_MARGIN = 256  # a role chunk, usage, timings, keep-alive comments during a long prefill


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
                 "finish_reason", "usage", "timings", "fingerprint", "parse_s", "lines", "max_lines")

    def __init__(self, where: str, chat: bool, max_lines: int | None = None):
        """`max_lines`: the most lines the stream may have (`lines_for` its request's `max_tokens`)."""
        self.where = where
        self.lines = 0
        self.max_lines = max_lines
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

    @staticmethod
    def lines_for(max_tokens: object) -> int | None:
        """The most lines a stream of at most `max_tokens` tokens can need (None: no bound known)."""
        if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 0:
            return None
        return LINES_PER_TOKEN * max_tokens + LINES_MARGIN

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
        self.lines += len(lines)
        if self.max_lines is not None and self.lines > self.max_lines:
            raise ClientError(f"{self.where}: a stream of more than {self.max_lines} lines, more than its "
                              f"max_tokens allows (a stream that does not end)")
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
