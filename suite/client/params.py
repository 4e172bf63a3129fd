"""The fields every generation request of one configuration carries besides its prompt.

`GenerationParams` holds the card's sampling (seed, temperature, top_p) and the request fields of
the runtime and its active controls; a client is bound to one (`OpenAIClient(params=...)`), and
both the synchronous and the asyncio client put its `fields()` into every request body.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from suite.definitions import ExtraBody


class GenerationParams(BaseModel):
    """What every generation request of one configuration carries besides its prompt, its length
    and its logprobs: the card's sampling (seed, temperature, top_p) and the request fields of the
    runtime and its active controls (`extra_body`). Bound into a client once; the request lines and
    the stage results record it from there."""

    model_config = ConfigDict(frozen=True)

    seed: int | None = 42
    temperature: float = 0.0
    top_p: float | None = None
    extra_body: ExtraBody = Field(default_factory=dict)  # never one of the suite's own fields

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
