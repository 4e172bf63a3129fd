"""How many tokens an answer has: one rule, used by the client, the analysis and every stage.

The token ids, when the runtime returned them (exact); else the runtime's own count (`usage`'s
completion_tokens, else llama-server's `timings.predicted_n`); else one logprob per token; else,
for a streamed answer, its token chunks (llama-server and vLLM send one token per chunk); None
when nothing says.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def token_count(token_ids: Sequence[int] | None = None, completion_tokens: int | None = None,
                server_timings: dict[str, Any] | None = None, logprobs: Sequence[float] | None = None,
                chunks: int | None = None) -> int | None:
    if token_ids is not None:
        return len(token_ids)
    if completion_tokens is not None:
        return int(completion_tokens)
    predicted = (server_timings or {}).get("predicted_n")
    if isinstance(predicted, (int, float)) and not isinstance(predicted, bool):
        return int(predicted)
    if logprobs is not None:
        return len(logprobs)
    return chunks or None
