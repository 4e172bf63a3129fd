"""A stage's part of a model page's first screen: what it adds to "what changes it?" and "what does
the fix cost?" for one arm (suite.site.first_screen joins the parts).

A stage declares its part as `Stage.first_screen = FirstScreen("module:function", order=...)`
(suite.stages.base), a built-in stage and a stage from another package alike. The function gets a
`FirstScreenInput` (the stage's runs of the arm, its claims, the arm's "same answer twice?" answer,
the arm's gate figures and the sibling arms' claims of the stage) and returns a `FirstScreenPart`
(or None: nothing to add). Record half: nothing here sends a request or imports the client.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from suite.analysis.claims import Claim


@dataclass
class Answer:
    """One of the three answers: a short phrase, its colour, and what is behind it."""

    phrase: str
    good: bool | None = None
    details: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Sibling:
    """Another arm of the same model, as a stage's part sees it: its claims of the stage (from the
    run its page shows the stage from) and its gate figures (tokens/s, J/token of the gate's
    requests, one at a time)."""

    claims: list[Claim]
    figures: dict[str, float | None]


@dataclass(frozen=True)
class FirstScreenInput:
    """What a stage's first-screen part gets for one arm.

    `run`: the run the page shows the stage from (None where no run of the arm holds its result);
    `claims`: the stage's claims of that run; `others`: the arm's other runs that hold the stage's
    result, oldest first; `claims_of(run)`: the stage's claims of any run; `same`: the arm's
    "same answer twice?" answer; `figures`: the arm's gate figures; `siblings`: the model's other
    arms by name, in the page's order."""

    stage: str
    run: Any | None
    claims: list[Claim]
    others: list[Any]
    claims_of: Callable[[Any], list[Claim]]
    same: Answer
    figures: dict[str, float | None]
    siblings: dict[str, Sibling] = field(default_factory=dict)


@dataclass
class FirstScreenPart:
    """One stage's contribution to an arm's first screen.

    `causes`: phrases of "what changes it?", `details` the sentences behind them (one click away).
    `good`: its colour for "what changes it?" (None: none); the parts are read in order and a later
    colour replaces an earlier one, except a `weak` one, which applies only where no part before it
    gave one. `cost`: its answer to "what does the fix cost?", where it has one; of the parts' costs
    the highest `cost_priority` wins (the first of equals); a `cost_weak` one ("no fix shown") gives
    way to the refused determinism mode's line. Where the gate gave one answer on every prompt, the
    changes answer has no colour and the cost is "nothing to fix", unless a part `keeps_colour` (its
    test found or looked beyond the gate's requests: the colour stands) or `keeps_cost_open` (its
    test looked beyond the gate's requests: no "nothing to fix"). `notes_from`: the runs whose
    recomputed-verdict notes the card shows; `quiet_notes`: the stage's result fields (under any
    nested pass's prefix) whose notes it does not show."""

    causes: list[str] = field(default_factory=list)
    details: list[str] = field(default_factory=list)
    good: bool | None = None
    weak: bool = False
    cost: Answer | None = None
    cost_priority: int = 0
    cost_weak: bool = False
    keeps_colour: bool = False
    keeps_cost_open: bool = False
    notes_from: list[Any] = field(default_factory=list)
    quiet_notes: tuple[str, ...] = ()


def fmt_p(c: Claim) -> str:
    """' (p = 0.012, of 3 controls tested, Holm)': a claim's (adjusted) p with its family; "" without one."""
    p = c.evidence.p_adjusted if c.evidence.p_adjusted is not None else c.evidence.p
    if p is None:
        return ""
    family = f", {c.family.text}" if c.family and c.family.text else ""
    return f" (p = {p:.2g}{family})"


def cost_text(cost: dict[str, float], energy_gap: str = "not measured") -> str:
    """The one phrase of a fix's cost, wherever the first screen gives one: its tokens/s and its
    J/token against the configuration it fixes, each a ratio, and the one that is missing named as
    missing (`energy_gap`: why the J/token is not there), never left out in silence. Empty where
    neither was measured."""
    if not cost:
        return ""
    speed = (f"{cost['tokens_per_s']:.2f}x the tokens/s" if "tokens_per_s" in cost else "tokens/s not measured")
    energy = (f"{cost['j_per_token']:.2f}x the J/token" if "j_per_token" in cost else f"J/token {energy_gap}")
    return f"{speed}, {energy}"


def failing_claims(ctx: FirstScreenInput) -> FirstScreenPart | None:
    """The plainest part, for a stage whose claims speak for themselves (`Stage.first_screen =
    "changes"` names it): each claim that says the answer varies (good False) is a cause, named by
    its stage, its full text one click away."""
    failing = [c for c in ctx.claims if c.good is False]
    if not failing:
        return None
    return FirstScreenPart(causes=[f"{c.stage}: {c.phrase or c.verdict}" for c in failing],
                           details=[c.text or c.verdict for c in failing], good=False)
