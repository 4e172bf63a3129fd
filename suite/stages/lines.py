"""The request lines of a run record (`requests.jsonl`): what every line has, and the line of a
repeated request, the unit the gate, the control matrix, the restarts and the sessions share.

One JSON line per request, `kind` first. A stage declares the line models it writes
(`Stage.lines`); the record store (`suite.records`) joins every stage's into one union that picks
the model by `kind`, checks each line before it is written and reads them back. A line model keeps
any field a stage writes beyond those its readers use.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict

from suite.analysis.repro import Sample


class LineBase(BaseModel):
    """What every line has."""

    model_config = ConfigDict(extra="allow")

    at: str
    stage: str | None = None  # the stage that sent it (lines from before stages said so: None)
    signature_digest: str | None = None


class RequestLineBase(LineBase):
    """A line of one request to a runtime (or the judge)."""

    error: str | None = None  # the request failed (HTTP or protocol error)
    text: str | None = None
    finish_reason: str | None = None
    completion_tokens: int | None = None
    e2e_s: float | None = None


class AnswerLine(RequestLineBase):
    """One request of a repeated series: the gate, a control row, a restart, a session."""

    kind: Literal["gate", "controls", "restarts", "sessions"]
    label: str = "default"
    prompt_id: str
    index: int
    seed: int | None = None
    temperature: float | None = None
    max_tokens: int | None = None
    token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    ttft_s: float | None = None

    def sample(self) -> Sample:
        """The request as the analysis reads it (its answer, logprobs, how it ended), at its index."""
        return Sample(index=self.index, text=self.text or "", token_ids=self.token_ids, logprobs=self.logprobs,
                      top_logprobs=getattr(self, "top_logprobs", None), completion_tokens=self.completion_tokens,
                      finish_reason=self.finish_reason, error=self.error)
