"""Requests that ask a runtime (or the judge) for an answer as JSON (`JsonChat`), falling back
through the response_format modes and endpoints: the extraction's run half, beside
`suite.stages.extraction.run`, the reloads' run and the judge's grading (`judge_run`), which send
their requests through it. The documents, their parts and the answers are
`suite.stages.extraction.documents`'."""

from __future__ import annotations

import logging
from typing import Any, Literal

from suite.client import ClientError, Completion, OpenAIClient
from suite.stages.extraction.documents import Mode, response_format_for

log = logging.getLogger(__name__)


class JsonChat:
    """Requests that ask for JSON, falling back through the response_format modes and endpoints.

    Starts with `json_schema` where the runtime says it honours a schema (else prompt-only), on
    the chat endpoint where the runtime offers chat. When the runtime rejects a response_format
    (an HTTP error naming the field or JSON/schema), the next mode is tried and kept for later
    requests; when it cannot apply a chat template (a checkpoint without one), the request goes
    to /v1/completions with the same text and response_format. Other errors are raised.
    """

    def __init__(self, client: OpenAIClient, supports_schema: bool, chat: bool = True):
        self.client = client
        self.modes: list[Mode] = ["json_schema", "json_object", "prompt-only"] if supports_schema else ["prompt-only"]
        self.endpoint: Literal["chat", "completions"] = "chat" if chat else "completions"
        self.rejections: list[str] = []

    @property
    def mode(self) -> Mode:
        return self.modes[0]

    def _send(self, content: str, schema: dict[str, Any], max_tokens: int) -> Completion:
        response_format = response_format_for(self.mode, schema)
        if self.endpoint == "chat":
            return self.client.chat([{"role": "user", "content": content}], max_tokens=max_tokens,
                                    response_format=response_format)
        body = {"response_format": response_format} if response_format is not None else None
        return self.client.complete(content + "\n\n", max_tokens=max_tokens, extra=body)

    def ask(self, content: str, schema: dict[str, Any], *, max_tokens: int) -> Completion:
        """One answer as JSON, with the client's sampling; a rejected JSON mode falls back to the next."""
        while True:
            try:
                return self._send(content, schema, max_tokens)
            except ClientError as exc:
                message = str(exc)
                lowered = message.lower()
                if self.endpoint == "chat" and ("chat template" in lowered or "chat_template" in lowered):
                    log.warning("chat endpoint refused (no chat template): using /v1/completions")
                    self.rejections.append(f"chat: {message[:200]}")
                    self.endpoint = "completions"
                    continue
                # A rejected response_format: an HTTP error naming it (llama-cpp-python reports
                # its validation error as a 500 that names the field).
                if self.mode != "prompt-only" and any(
                        w in lowered for w in ("response_format", "json", "schema", "grammar", "structured")):
                    log.warning("response_format %s rejected: %s", self.mode, message[:200])
                    self.rejections.append(f"{self.mode}: {message[:200]}")
                    self.modes.pop(0)
                    continue
                raise
