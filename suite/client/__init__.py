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
an event stream at `MAX_LINE_BYTES`, its body at `MAX_BODY_BYTES`, its lines at a number its
`max_tokens` allows (an endless event stream ends at once), its pace at `MIN_BYTE_RATE` bytes per
second once a head, a line or a body has begun (a server that trickles a byte at a time is cut off
within seconds), and every generation request, streamed or not, at `timeout_s` in all, or less
where the stage's time budget (`suite.client.budget`) ends sooner.
The URL's `user:password@` part, if any, becomes a Basic authorization header: the client's
`base_url`, and so every message it raises, holds only the public URL.

The package is split by job; each module imports only those listed above it:

- `params`: `GenerationParams`, what every request of one configuration carries besides its prompt.
- `replies`: `ClientError`, `Completion`, and the reading of a reply's shape (`is_token_choice`).
- `budget`: a time budget above every request's deadline (one stage's, set by the bench).
- `stream`: `StreamState`, a streamed completion's event stream read one line at a time.
- `wire`: HTTP/1.1 on raw bytes, both clients' transport (a request built, a response read by httptools).
- `aio`: `AsyncOpenAIClient`, many streams at once on one event loop (`event_loop_factory`).
- `sync`: `OpenAIClient`, one request at a time per thread, and `split_credentials`.

The names below are the ones the rest of the suite imports from `suite.client`. The asyncio
client's other transports, which only the benchmarks compare with its own, live with them in
benchmarks/client_transports.py.
"""

from suite.client.aio import AsyncOpenAIClient, event_loop_factory
from suite.client.params import GenerationParams
from suite.client.replies import ClientError, Completion, is_token_choice
from suite.client.stream import MAX_LINE_BYTES, StreamState
from suite.client.sync import OpenAIClient, split_credentials
from suite.client.wire import MAX_BODY_BYTES, MAX_HEAD_BYTES, MIN_BYTE_RATE

__all__ = [
    "MAX_BODY_BYTES",
    "MAX_HEAD_BYTES",
    "MAX_LINE_BYTES",
    "MIN_BYTE_RATE",
    "AsyncOpenAIClient",
    "ClientError",
    "Completion",
    "GenerationParams",
    "OpenAIClient",
    "StreamState",
    "event_loop_factory",
    "is_token_choice",
    "split_credentials",
]
