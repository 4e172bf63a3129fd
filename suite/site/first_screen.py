"""The first screen: for every arm, three short answers drawn from its claims (suite.claims).

- *Same answer twice?* Per gate prompt, distinct answers of those answered, the pattern as a word,
  and a request strip: one mark per request in order, coloured by which distinct answer it gave
  (failed requests marked as failed), so that a cold-start transient, random order and a switch
  look different at a glance.
- *What changes it?* The credited cause and its strength in one phrase (a control that restores one
  answer, with its Holm-adjusted p over the matrix), or "nothing tested changes it", or "not
  tested"; the batch composition and the launches where those ran.
- *What does the fix cost?* The crediting configuration's tokens/s and J/token against the default
  (a control row's, or a sibling arm's where that arm's mode removes a batch effect this one shows).

Each answer is a phrase and a colour; its reasoning (the claim's full sentence, test, family and
caveats) is one click away on the page (`<details>`).

The first answer is the verdict stage's (`suite.stages.VERDICT_STAGE`: its result's prompts and
claims). The other two are joined here from the stages' parts and name no stage: every stage with
a `Stage.first_screen` (built in or from a package) gives one arm its `FirstScreenPart`
(suite.stages.screen), and the parts are read by their `order` (the registry's among equals):
- *what changes it?* is the parts' causes in that order, "; "-joined (the control matrix, batch
  composition, a package's stages, restarts); none: "nothing varied" where the gate gave one
  answer, else "not tested". Its colour is the last part's that gave one (a `weak` colour only
  where none came before), and none where the gate gave one answer and no part `keeps_colour`.
- *what does the fix cost?* is the part's cost of the highest `cost_priority` (the first of
  equals); none: "nothing to fix" where the gate gave one answer and no part `keeps_cost_open`,
  else "—"; where the arm varies and its cost is "—" or a `cost_weak` one, the runtime's
  determinism mode refused for this model (the engine's line) is the cost.
- the recomputed notes: the current run's, the gate run's and each part's `notes_from`, once per
  run, stage and field, less each part's `quiet_notes`.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from suite.analysis.claims import Claim
from suite.claims import claims_of
from suite.stages import STAGES, VERDICT_STAGE
from suite.stages.base import Stage
from suite.stages.screen import Answer, FirstScreenInput, FirstScreenPart, Sibling

log = logging.getLogger(__name__)


@dataclass
class Strip:
    """One gate prompt's requests in order: per request the rank of its distinct answer (0 = the
    most common), or -1 where it failed."""

    prompt: str
    marks: list[int]
    phrase: str  # "1 distinct of 20", "2 distinct of 20, cold-start transient"
    good: bool | None
    word: str
    short: str = ""  # "2 of 20": the index's cell


@dataclass
class ThreeAnswers:
    same: list[Strip]
    same_answer: Answer
    changes: Answer
    cost: Answer
    # Verdict texts the shown runs printed when they ended that today's statistics say otherwise
    # (suite.claims): the card says so beside the answers.
    recomputed: list[Any] = field(default_factory=list)


def strips(summary: Any) -> list[Strip]:
    """Each gate prompt's request strip and phrase, from the run's gate claims and answers."""
    gate = getattr(summary, VERDICT_STAGE, None)
    if gate is None:
        return []
    claims = {c.prompt: c for c in claims_of(summary, only=VERDICT_STAGE)}
    out: list[Strip] = []
    for p in gate.prompts:
        rank = {i: a.rank for a in p.answers for i in a.indices}
        marks = [rank.get(i, -1) for i in range(max(p.requests, max(rank, default=-1) + 1))]
        c = claims.get(p.prompt_id)
        short = f"{p.distinct_answers} of {p.answered}" + (f" ({p.errors} failed)" if p.errors else "")
        out.append(Strip(prompt=p.prompt_id, marks=marks, phrase=c.phrase if c else short,
                         good=c.good if c else None, word=c.verdict if c else p.pattern, short=short))
    return out


def same_answer(gate_run: Any | None) -> tuple[list[Strip], Answer]:
    """"Same answer twice?": the gate run's strips, and the prompts that varied, or yes on every prompt."""
    same = strips(gate_run) if gate_run is not None else []
    if not same:
        return same, Answer("gate not run", None)
    varied = [s for s in same if s.good is False]
    unknown = [s for s in same if s.good is None]
    return same, Answer("no: " + "; ".join(f"{s.prompt} {s.phrase}" for s in varied) if varied else
                        ("undetermined" if unknown else "yes, on every prompt"),
                        False if varied else (None if unknown else True),
                        [c.text for c in claims_of(gate_run, only=VERDICT_STAGE)])


def screen_stages() -> list[Stage]:
    """The stages with a first-screen part, in the order their parts are read: by `order`, then
    in the registry's order."""
    return sorted((s for s in STAGES.values() if s.screen_part is not None),
                  key=lambda s: s.screen_part.order)  # type: ignore[union-attr]


def stage_part(stage: Stage, ctx: FirstScreenInput) -> FirstScreenPart | None:
    """One stage's part for one arm; a part that cannot be made is left out, and said in the log."""
    declared = stage.screen_part
    if declared is None:
        return None
    try:
        made = declared.function()(ctx)
    except Exception as exc:  # noqa: BLE001 - one stage's part never hides the first screen
        log.warning("stage %r: its first-screen part could not be made: %s: %s", stage.name, type(exc).__name__, exc)
        return None
    if made is not None and not isinstance(made, FirstScreenPart):
        log.warning("stage %r: its first-screen part gave a %s, not a FirstScreenPart", stage.name, type(made).__name__)
        return None
    return made


def three_answers(gate_run: Any | None, parts: list[tuple[str, FirstScreenPart]], current: Any | None = None,
                  refused: tuple[str, str] | None = None,
                  first: tuple[list[Strip], Answer] | None = None) -> ThreeAnswers:
    """The three answers of one arm: the gate run's strips, and the stages' `parts` (stage name,
    part), in the order they are read, joined as the module's notes say. `current`: the arm's
    current run (its recomputed notes first); `refused`: the runtime's determinism mode that a
    start of this model refused, with the engine's line; `first`: `same_answer(gate_run)` where
    already made."""
    same, answer = first if first is not None else same_answer(gate_run)
    causes: list[str] = []
    details: list[str] = []
    good: bool | None = None
    cost: FirstScreenPart | None = None
    for _, part in parts:
        causes.extend(part.causes)
        details.extend(part.details)
        if part.good is not None and not (part.weak and good is not None):
            good = part.good
        if part.cost is not None and (cost is None or part.cost_priority > cost.cost_priority):
            cost = part
    if not causes:
        causes.append("nothing varied" if answer.good else "not tested")
    if answer.good and not any(p.keeps_colour for _, p in parts):
        good = None
    # `open_`: a cost the refused determinism mode's line replaces ("—", or a part's weak one)
    if cost is not None and cost.cost is not None:
        fix, open_ = cost.cost, cost.cost_weak
    elif answer.good and not any(p.keeps_cost_open for _, p in parts):
        fix, open_ = Answer("nothing to fix", None), False
    else:
        fix, open_ = Answer("—", None), True
    if open_ and (good is False or answer.good is False) and refused is not None:
        # the fix a user would reach for first is the runtime's determinism mode: where its start
        # refused it for this model, the cost is that there is none, in the engine's own words
        mode, line = refused
        said = re.sub(r"^(\([^)]*\)\s*)?(ERROR|CRITICAL)\s+[\d-]+\s+[\d:.]+\s+\[[^\]]*\]\s*", "", line)
        fix = Answer(f"no {mode} mode for this model: {said}", None, [f"the {mode} arm's start-up refused it: {line}"])
    quiet = {(stage, q) for stage, p in parts for q in p.quiet_notes}
    seen: set[tuple[str, str, str]] = set()
    notes = []
    for run in (current, gate_run, *(r for _, p in parts for r in p.notes_from)):
        for r in getattr(run, "recomputed", None) or []:
            key = (getattr(run, "run_id", ""), r.stage, r.field)
            if key not in seen and (r.stage, r.field.rpartition(": ")[2]) not in quiet:
                seen.add(key)
                notes.append(r)
    return ThreeAnswers(same=same, same_answer=answer, changes=Answer("; ".join(causes), good, details), cost=fix,
                        recomputed=notes)


def model_answers(arms: dict[str, Any], figures: dict[str, dict[str, float | None]],
                  refused: tuple[str, str] | None = None) -> dict[str, ThreeAnswers]:
    """Per arm of a model page (name -> `suite.site.figures.ArmRuns`, in the page's order), its three
    answers, each stage's part from the run the page shows that stage from. `figures`: per arm, its
    gate figures (tokens/s, J/token); `refused`: see `three_answers`."""
    stages = screen_stages()
    # per arm and stage: the run the page shows the stage from (None where none holds it), its claims
    shown: dict[str, dict[str, tuple[Any | None, list[Claim]]]] = {}
    for name, a in arms.items():
        shown[name] = {}
        for stage in stages:
            s = a.for_stage(stage.name).s
            run = s if getattr(s, stage.name, None) is not None else None
            shown[name][stage.name] = (run, claims_of(run, only=stage.name) if run is not None else [])
    out: dict[str, ThreeAnswers] = {}
    for name, a in arms.items():
        parts: list[tuple[str, FirstScreenPart]] = []
        first = same_answer(a.gate_run.s)
        for stage in stages:
            run, claims = shown[name][stage.name]
            ctx = FirstScreenInput(
                stage=stage.name, run=run, claims=claims,
                others=[r.s for r in a.runs if getattr(r.s, stage.name, None) is not None and r.s is not run],
                claims_of=partial(claims_of, only=stage.name), same=first[1], figures=figures[name],
                siblings={other: Sibling(shown[other][stage.name][1], figures[other]) for other in arms if other != name})
            part = stage_part(stage, ctx)
            if part is not None:
                parts.append((stage.name, part))
        out[name] = three_answers(a.gate_run.s, parts, current=a.current.s, refused=refused, first=first)
    return out
