"""What a runtime's reply means to the suite: `ClientError`, `Completion`, and the reading of a reply's shape.

Every reply is untrusted: whatever its shape (valid JSON of the wrong types, a non-object, nesting
too deep to parse), reading it ends in a `ClientError` that names the endpoint and the field, never
another exception. The helpers here read one reply or one streamed chunk's fields (`_field`,
`_choices`, `_parse_token_ids`, `_parse_logprobs`, ...) and raise `_Shape` on a field of the wrong
shape; `_malformed` turns that (or any of `_MALFORMED`) into the request's `ClientError`.
`is_token_choice` is the one rule for which streamed chunks carry a generated token.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, Field

from suite.analysis.tokens import token_count
from suite.errors import SuiteError


class ClientError(SuiteError):
    """The runtime answered with an HTTP error, a malformed reply, or not at all. Its message is one
    line (a transport's own multi-line words are joined), as a request record holds it."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(" ".join(line.strip() for line in str(message).splitlines() if line.strip()))
        self.status = status  # the HTTP status of a reply that was not 200; None for every other fault


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


def _malformed(where: str, exc: BaseException, payload: bytes | str, what: str = "reply") -> ClientError:
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
