"""Finding the JSON object in a model's answer.

Model output is untrusted text: it may wrap the object in a ```json fence, put prose before or
after it, stop half-way (max_tokens), or not contain JSON at all. `extract_json_object` never
raises: it returns a typed result whose `status` is `ok` (with the object and how it was found),
`invalid` (with the reason) or `empty`. Nothing is repaired: a stage counts an invalid answer as
invalid rather than guessing what the model meant.
"""

from __future__ import annotations

import json
import logging
import re
from typing import Any, Literal

from pydantic import BaseModel, Field

log = logging.getLogger(__name__)

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_-]*)[ \t]*\r?\n?(.*?)```", re.DOTALL)


class JsonExtraction(BaseModel):
    """The outcome of looking for one JSON object in a model's answer."""

    status: Literal["ok", "invalid", "empty"] = Field(description="ok: an object was found")
    value: dict[str, Any] | None = Field(default=None, description="the object, when status is ok")
    method: Literal["whole", "fenced", "embedded"] | None = Field(
        default=None, description="whole: the answer is the object; fenced: inside ``` fences; embedded: within prose"
    )
    error: str | None = Field(default=None, description="why no object was found")

    @property
    def ok(self) -> bool:
        return self.status == "ok"


def _loads_object(text: str) -> tuple[dict[str, Any] | None, str | None]:
    try:
        value = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:
        return None, f"not valid JSON: {exc}"
    if not isinstance(value, dict):
        return None, f"JSON is a {type(value).__name__}, not an object"
    return value, None


def _first_embedded_object(text: str) -> dict[str, Any] | None:
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _end = decoder.raw_decode(text, start)
        except (json.JSONDecodeError, RecursionError):
            value = None
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None


def extract_json_object(text: str | None) -> JsonExtraction:
    """The first JSON object in `text`: the whole answer, a fenced block, or embedded in prose."""
    if text is None or not text.strip():
        return JsonExtraction(status="empty", error="empty answer")
    stripped = text.strip()
    value, whole_error = _loads_object(stripped)
    if value is not None:
        return JsonExtraction(status="ok", value=value, method="whole")

    fenced_error: str | None = None
    for match in _FENCE.finditer(stripped):
        lang, body = match.group(1).lower(), match.group(2).strip()
        if lang and lang not in ("json", "json5", "javascript", "js"):
            continue
        value, fenced_error = _loads_object(body)
        if value is not None:
            return JsonExtraction(status="ok", value=value, method="fenced")
        embedded = _first_embedded_object(body)
        if embedded is not None:
            return JsonExtraction(status="ok", value=embedded, method="fenced")

    embedded = _first_embedded_object(stripped)
    if embedded is not None:
        return JsonExtraction(status="ok", value=embedded, method="embedded")

    if whole_error and "not an object" in whole_error:
        reason = whole_error
    elif "{" not in stripped:
        reason = "no JSON object in the answer"
    elif fenced_error is not None:
        reason = f"fenced block: {fenced_error}"
    else:
        reason = whole_error or "no complete JSON object"
        if stripped.count("{") > stripped.count("}"):
            reason = "unterminated JSON object (answer cut short?)"
    return JsonExtraction(status="invalid", error=reason[:300])
