"""A control tried inside one launch, as the record keeps it: the pairs' outcomes of one control on
one prompt (`InLaunchSeries`) and how the series ended (`Stop`), from which the sequential test and
its verdict are made again whenever a page is built. `suite.stages.controls.inlaunch` sends the
pairs and fills these records; nothing here sends a request."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from suite.analysis.sequential import EFFECT, MAX_PAIRS, Outcome, SequentialResult, decide

Stop = Literal["credit", "rule-out", "second-answer", "undecided", "failed"]


class InLaunchSeries(BaseModel):
    """One control on one prompt inside one launch: the pairs and how the series ended."""

    prompt_id: str
    seed: int  # the pairs' order was drawn from random.Random(seed)
    level: float  # the series' level (the matrix's alpha over its controls), its boundaries' level
    max_pairs: int = MAX_PAIRS
    effect: float = EFFECT
    outcomes: list[Outcome] = Field(default_factory=list)  # per pair: F, U or C (sequential's meaning)
    with_first: list[bool] = Field(default_factory=list)  # per pair: the request with the control went first
    with_answers: int = 0  # requests with the control answered (the first one included)
    with_distinct: int = 0  # distinct answers among them
    without_answers: int = 0
    without_distinct: int = 0
    stop: Stop = "undecided"
    reason: str | None = None  # a failed request's error
    cut: int = 0  # answers (with and without) cut at max_tokens

    def result(self, level: float | None = None) -> SequentialResult:
        """The sequential test over the kept pairs, at the series' level or another one."""
        return decide(list(self.outcomes), self.level if level is None else level, self.max_pairs, self.effect)

    @property
    def requests(self) -> int:
        """Requests the series sent, its opening request without the control included."""
        return self.with_answers + self.without_answers + 1
