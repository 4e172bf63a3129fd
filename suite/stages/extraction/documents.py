"""The extraction's documents: their parts and the answers to them, below the extraction stage,
its reloads and the judge.

A `DocumentPart` is one part of an extraction document (its text and gold facts; the documents'
files, the records and the export call it a "section": their field names stay), an `Answer` one
answer to it; `JsonChat` asks a runtime (or the judge) for an answer as JSON, falling back
through the response_format modes; `changed_parts` says which parts' repeats differed.
The extraction stage (`suite.stages.extraction`), the reloads stage and the LLM judge
(`suite.stages.extraction.judge`) all build on these; none of them is imported here.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from suite.analysis.scoring import GoldFact, PartScore
from suite.client import ClientError, Completion, OpenAIClient

log = logging.getLogger(__name__)

Mode = Literal["json_schema", "json_object", "prompt-only"]


class DocumentPart(BaseModel):
    """One part of a document (a "section" of its file): its text and the facts it states."""

    model_config = ConfigDict(extra="forbid")

    id: str
    profiles: list[Literal["quick", "standard", "full"]]
    text: str = Field(min_length=1)
    facts: list[GoldFact] = Field(min_length=1)
    document: str = ""  # set by the loader
    kind: str = ""  # kind of document, set by the loader

    @property
    def uid(self) -> str:
        return f"{self.document}/{self.id}"


def response_format_for(mode: Mode, schema: dict[str, Any]) -> dict[str, Any] | None:
    if mode == "json_schema":
        return {"type": "json_schema", "json_schema": {"name": "facts", "strict": True, "schema": schema}}
    if mode == "json_object":
        return {"type": "json_object", "schema": schema}
    return None


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


class Answer(BaseModel):
    """One answer to one document part (kept in memory for scoring and the judge)."""

    section: str  # the document part's uid (named as the request lines' `section` field: a document section)
    repeat: int
    text: str
    extracted: dict[str, Any] | None
    json_status: str
    score: PartScore
    error: str | None = None  # the request failed (HTTP or protocol error)


def _answered_facts(part: DocumentPart, extracted: dict[str, Any] | None) -> str:
    """Canonical form of the asked facts' values, to compare repeats."""
    if extracted is None:
        return "<invalid>"
    lower = {str(k).strip().lower(): v for k, v in extracted.items()}
    values = {f.key: extracted.get(f.key, lower.get(f.key.lower())) for f in part.facts}
    return json.dumps(values, sort_keys=True, ensure_ascii=False, default=str)


def _repeat_key(part: DocumentPart, answer: Answer) -> str:
    """What two repeats must share to count as the same answer: the facts, or an invalid answer's text."""
    if answer.extracted is None:
        return "<invalid>" + answer.text
    return _answered_facts(part, answer.extracted)


def changed_parts(parts: list[DocumentPart], answers: dict[str, list[Answer]]) -> list[str]:
    """Uids of the document parts whose repeats differed: other facts, valid and invalid answers mixed,
    or two different invalid texts (pure; the judge grades every repeat when this is not empty)."""
    return [s.uid for s in parts if len({_repeat_key(s, a) for a in answers.get(s.uid, [])}) > 1]
