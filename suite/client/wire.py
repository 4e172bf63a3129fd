"""HTTP/1.1 on raw bytes, both clients' transport: a request built (`_request`), a response read by httptools.

The synchronous client (a blocking socket) and the asyncio client (the event loop's own
transports) send the same request bytes and read every reply through `_Response`, which hands
a streamed body to a `StreamState` and a plain one to a `_Body`. A reply is bounded here: its
status line and headers at `MAX_HEAD_BYTES`, its body at `MAX_BODY_BYTES`, and its pace: once a
piece of it has begun (the head, one line of an event stream, a plain body), the rest of that
piece must come at `MIN_BYTE_RATE` bytes per second after `TRICKLE_GRACE_S` (a server writes
each in one go; one that trickles it a byte at a time, each within the stall timeout, is cut off
in seconds instead of holding the request to its deadline). Between pieces a stream may pause
(a long prefill): the stall timeout and the stage's budget bound that.
"""

from __future__ import annotations

import httptools

from suite.client.replies import ClientError
from suite.client.stream import StreamState

MAX_HEAD_BYTES = 64 * 1024  # a reply's status line and headers
MAX_BODY_BYTES = 64 * 1024 * 1024  # a reply's body, streamed or not
MIN_BYTE_RATE = 1024  # bytes per second, within a begun head, stream line or plain body,
TRICKLE_GRACE_S = 10.0  # after this long (the slack for one piece split over reads)
_SSE_HEADERS = {"Accept": "text/event-stream", "Accept-Encoding": "identity"}


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
                 "done_at", "answered", "error_body", "head_bytes", "body_bytes", "piece_at", "piece_bytes",
                 "piece_mark")

    def __init__(self, state: StreamState | _Body, t_send: float):
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
        self.piece_at = 0.0  # when the piece not yet complete (head, stream line, plain body) began
        self.piece_bytes = 0  # its bytes so far
        self.piece_mark: tuple[bool, int] = (False, 0)  # (in the body, stream lines ended) as it began

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
        self._pace(len(data), t)

    def _pace(self, n: int, t: float) -> None:
        """The minimum byte rate within a piece begun and not complete (see the module docstring)."""
        state = self.state
        if self.ended or self.done_at is not None:
            return
        stream = state if isinstance(state, StreamState) else None
        if self.in_body and stream is not None and not stream.pending_len:
            self.piece_bytes = 0  # between two lines: nothing begun
            self.piece_mark = (True, -1)
            return
        mark = (self.in_body, stream.lines if stream is not None else 0)
        if mark != self.piece_mark or not self.piece_bytes:  # a new piece began in this read
            self.piece_mark, self.piece_at, self.piece_bytes = mark, t, n
            return
        self.piece_bytes += n
        took = t - self.piece_at
        if took > TRICKLE_GRACE_S + self.piece_bytes / MIN_BYTE_RATE:
            what = "its head" if not self.in_body else "one stream line" if stream is not None else "its body"
            raise ClientError(f"{state.where}: a reply that trickles: {self.piece_bytes} bytes of {what} in "
                              f"{took:.0f} s (less than {MIN_BYTE_RATE} bytes/s)")

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


def _request(prefix: str, host: str, path: str, payload: bytes, headers: dict[str, str], stream: bool = True) -> bytes:
    """A POST of a JSON body that asks for an event stream (or, `stream=False`, for JSON), as HTTP/1.1 bytes."""
    head = [f"POST {prefix}{path} HTTP/1.1", f"Host: {host}", "Content-Type: application/json",
            f"Content-Length: {len(payload)}"]
    accept = _SSE_HEADERS if stream else {"Accept": "application/json", "Accept-Encoding": "identity"}
    head += [f"{k}: {v}" for k, v in {**accept, **headers}.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload
