"""The extraction's documents: their parts and the answers to them, below the extraction stage,
its reloads and the judge.

A `DocumentPart` is one part of an extraction document (its text and gold facts; the documents'
files, the records and the export call it a "section": their field names stay), an `Answer` one
answer to it; `response_format_for` is the request field of each JSON mode, and `changed_parts`
says which parts' repeats differed. Nothing here sends a request: `JsonChat`, which asks a runtime
(or the judge) for an answer as JSON, is `suite.stages.extraction.chat`'s.
The extraction stage (`suite.stages.extraction`), the reloads stage and the LLM judge
(`suite.stages.extraction.judge`) all build on these; none of them is imported here.
"""

from __future__ import annotations

import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from suite.analysis.scoring import GoldFact, PartScore

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
