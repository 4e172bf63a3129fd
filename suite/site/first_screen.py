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
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from suite.analysis.claims import Claim
from suite.claims import claims_of


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
class Answer:
    """One of the three answers: a short phrase, its colour, and what is behind it."""

    phrase: str
    good: bool | None = None
    details: list[str] = field(default_factory=list)


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
    gate = getattr(summary, "gate", None)
    if gate is None:
        return []
    claims = {c.prompt: c for c in claims_of_stage(summary, "gate")}
    out: list[Strip] = []
    for p in gate.prompts:
        rank = {i: a.rank for a in p.answers for i in a.indices}
        marks = [rank.get(i, -1) for i in range(max(p.requests, max(rank, default=-1) + 1))]
        c = claims.get(p.prompt_id)
        short = f"{p.distinct_answers} of {p.answered}" + (f" ({p.errors} failed)" if p.errors else "")
        out.append(Strip(prompt=p.prompt_id, marks=marks, phrase=c.phrase if c else short,
                         good=c.good if c else None, word=c.verdict if c else p.pattern, short=short))
    return out


def claims_of_stage(summary: Any, stage: str) -> list[Claim]:
    """One stage's claims of a run (not every stage's, filtered)."""
    return claims_of(summary, only=stage)


def _fmt_p(c: Claim) -> str:
    p = c.evidence.p_adjusted if c.evidence.p_adjusted is not None else c.evidence.p
    if p is None:
        return ""
    family = f", {c.family.text}" if c.family and c.family.text else ""
    return f" (p = {p:.2g}{family})"


def _answers_of(c: Claim) -> str:
    """A credited control's answers in a phrase: 'one answer in 40 over 2 launches', or, where its
    launches answered differently, one answer inside each and the launches apart."""
    n, launches = c.counts.get("answered", 0), c.counts.get("launches", 1)
    if c.counts.get("launch_answers", 1) > 1:
        return (f"one answer inside each of {launches} launches ({n} requests); the launches differ, "
                "so what is left is chosen at start-up")
    return f"one answer in {n}" + (f" over {launches} launches" if launches > 1 else "")


def _cost_text(cost: dict[str, float], energy_gap: str = "not measured") -> str:
    """The one phrase of a fix's cost, wherever the first screen gives one: its tokens/s and its
    J/token against the configuration it fixes, each a ratio, and the one that is missing named as
    missing (`energy_gap`: why the J/token is not there), never left out in silence. Empty where
    neither was measured."""
    if not cost:
        return ""
    speed = (f"{cost['tokens_per_s']:.2f}x the tokens/s" if "tokens_per_s" in cost else "tokens/s not measured")
    energy = (f"{cost['j_per_token']:.2f}x the J/token" if "j_per_token" in cost else f"J/token {energy_gap}")
    return f"{speed}, {energy}"


def merged_controls(runs: list[Any]) -> list[Claim]:
    """The control claims of several matrix runs of one arm, newest run first: a configuration run
    in several keeps its newest run's verdict."""
    seen: set[str] = set()
    out: list[Claim] = []
    for run in sorted((r for r in runs if r is not None), key=lambda r: getattr(r, "started_at", "") or "",
                      reverse=True):
        for c in claims_of_stage(run, "controls"):
            if c.kind != "control" or (c.configuration or "") in seen:
                continue
            seen.add(c.configuration or "")
            out.append(c)
    return out


def _energy_gap(c: Claim) -> str:
    """Why a control row's cost has no J/token: requests with and without it alternate inside one
    launch (the meter reads the launch, not a request), or no energy reading came."""
    if "pair" in (c.evidence.unit or ""):
        return "not separable (with and without alternate inside one launch)"
    return "not measured (no energy reading)"


def three_answers(gate_run: Any, controls_run: Any | None, batch_run: Any | None, restarts_run: Any | None,
                  siblings: dict[str, Any] | None = None, own_figures: dict[str, float | None] | None = None,
                  current: Any | None = None, refused: tuple[str, str] | None = None,
                  more_controls: list[Any] | None = None, more_causes: list[Claim] | None = None) -> ThreeAnswers:
    """The three answers of one arm, each from the run the page shows that stage from.

    `siblings`: other arms of the model (name -> (their batch claim, their figures)), for the cost of
    a mode that removes a batch effect; `own_figures`: this arm's tokens/s and J/token;
    `more_controls`: the arm's other runs that hold a control matrix (a matrix is often run a few
    rows at a time, and a run cut by a time limit keeps the rows it finished): their kernel-part
    rows join "what changes it?" (each credit with its own matrix's family, each rule-out with its
    own count), so that the parts ruled out in one run are not forgotten by the next.
    `more_causes`: the claims of the stages that join the first screen through the registry
    (`Stage.first_screen`): each that says the answer varies is a cause, named by its stage."""
    same = strips(gate_run) if gate_run is not None else []
    if not same:
        same_answer = Answer("gate not run", None)
    else:
        varied = [s for s in same if s.good is False]
        unknown = [s for s in same if s.good is None]
        same_answer = Answer("no: " + "; ".join(f"{s.prompt} {s.phrase}" for s in varied) if varied else
                             ("undetermined" if unknown else "yes, on every prompt"),
                             False if varied else (None if unknown else True),
                             [c.text for c in claims_of_stage(gate_run, "gate")])
    causes: list[str] = []
    details: list[str] = []
    good: bool | None = None
    cost = Answer("—", None)
    elimination = next((c for c in claims_of_stage(controls_run, "controls") if c.kind == "elimination"), None) \
        if controls_run is not None else None
    batch = next(iter(claims_of_stage(batch_run, "batch")), None) if batch_run is not None else None
    across = [c for c in claims_of_stage(restarts_run, "restarts") if c.kind == "across-launches"] \
        if restarts_run is not None else []
    if elimination is None and more_controls:
        # the page's matrix run holds none: the newest other run's stands in
        controls_run, more_controls = more_controls[-1], more_controls[:-1]
        elimination = next((c for c in claims_of_stage(controls_run, "controls") if c.kind == "elimination"), None)
    if elimination is not None and elimination.verdict != "nothing to eliminate":
        controls = merged_controls([controls_run, *(more_controls or [])])
        restoring = [c for c in controls if c.good is True]  # a control row is good only where it restores
        if restoring:
            causes.extend((f"{c.subject}: {_answers_of(c)}" if c.subject else f"{c.configuration} {c.verdict}")
                          + _fmt_p(c) for c in restoring)
            good = True
            text = _cost_text(restoring[0].cost, _energy_gap(restoring[0]))
            cost = Answer(f"{restoring[0].configuration}: {text}" if text else
                          f"{restoring[0].configuration}: not measured on the same requests", None,
                          [f"{c.configuration}: {_cost_text(c.cost, _energy_gap(c)) or 'no ratio'}" for c in restoring])
        else:
            near = [c for c in controls if c.verdict.startswith("passes alone")]
            # counts say what ran: a row refused, failed, skipped or unchanged tested nothing
            ran = [c for c in controls if c.verdict not in ("refused", "failed", "skipped", "unchanged")]
            causes.append(f"nothing of {len(ran)} control{'s' if len(ran) != 1 else ''} tested restores it"
                          + (f" ({', '.join(c.configuration or '' for c in near)} only without the correction)" if near else ""))
            # the kernel parts whose switch still gave a second answer: that part alone does not do it
            ruled = [c for c in controls if c.subject and c.verdict == "still varies"]
            if ruled:
                causes.append("ruled out, a second answer came with it: " + "; ".join(
                    f"{c.subject} ({c.counts.get('answered', 0)} answered)" for c in ruled))
            idle = [c for c in controls if c.verdict == "unchanged"]
            if idle:
                causes.append("not tested, the switch changed no kernel: "
                              + ", ".join(dict.fromkeys(c.configuration or "" for c in idle)))
            runs = len({c.run_id for c in controls if c.run_id})
            if runs > 1:
                causes.append(f"rows from {runs} runs of this arm")
            good = False
            cost = Answer("no fix shown" + (f"; {near[0].configuration} would cost {_cost_text(near[0].cost, _energy_gap(near[0]))}"
                                            if near and _cost_text(near[0].cost) else ""), None)
        details.append(elimination.text)
    elif same_answer.good is False:
        causes.append("not tested (no control matrix ran)")
    if batch is not None:
        causes.append(f"its batch: {batch.verdict} ({batch.phrase})")
        details.append(batch.text)
        if batch.good is False:
            good = False if good is None else good
            for name, (their_batch, figures) in (siblings or {}).items():
                if their_batch is not None and their_batch.good is True and own_figures:
                    ratio = {k: figures[k] / own_figures[k] for k in ("tokens_per_s", "j_per_token")
                             if figures.get(k) and own_figures.get(k)}
                    gap = ("not measured" if not figures.get("j_per_token") and not own_figures.get("j_per_token")
                           else f"not measured for {name}'s gate" if not figures.get("j_per_token")
                           else "not measured for this arm's gate")
                    text = _cost_text(ratio, gap) + (" (the gate's requests, one at a time)" if ratio else "")
                    cost = Answer(f"{name}: {text}" if text else f"{name}: figures not measured", None,
                                  [f"{name} gives the same answer in every batch ({their_batch.phrase})"])
                    break
    for c in more_causes or []:
        if c.good is False:
            causes.append(f"{c.stage}: {c.phrase or c.verdict}")
            details.append(c.text or c.verdict)
            good = False
    differ = [c for c in across if c.verdict in ("differ", "differ or persist")]
    if differ:
        either = any(c.verdict == "differ or persist" for c in differ)
        causes.append(f"a restart: launches differ on {', '.join(c.prompt or '' for c in differ)}"
                      + (" (or answers persist inside them)" if either else "") + _fmt_p(differ[0]))
        details.extend(c.text for c in differ)
        good = False
    if not causes:
        causes.append("nothing varied" if same_answer.good else "not tested")
    if same_answer.good and batch is None and not differ:
        good = None
    if cost.phrase == "—" and same_answer.good and batch is None:
        cost = Answer("nothing to fix", None)
    if cost.phrase in ("—", "no fix shown") and (good is False or same_answer.good is False) and refused is not None:
        # the fix a user would reach for first is the runtime's determinism mode: where its start
        # refused it for this model, the cost is that there is none, in the engine's own words
        mode, line = refused
        said = re.sub(r"^(\([^)]*\)\s*)?(ERROR|CRITICAL)\s+[\d-]+\s+[\d:.]+\s+\[[^\]]*\]\s*", "", line)
        cost = Answer(f"no {mode} mode for this model: {said}", None,
                      [f"the {mode} arm's start-up refused it: {line}"])
    seen: set[tuple[str, str, str]] = set()
    notes = []
    for run in (current, gate_run, controls_run, batch_run, restarts_run):
        for r in getattr(run, "recomputed", None) or []:
            key = (getattr(run, "run_id", ""), r.stage, r.field)
            # restarts' own "verdict" joins its within and across texts, listed on their own
            if key not in seen and not (r.stage == "restarts" and r.field.endswith("verdict") and
                                        not r.field.endswith(("within_verdict", "across_verdict"))):
                seen.add(key)
                notes.append(r)
    return ThreeAnswers(same=same, same_answer=same_answer, changes=Answer("; ".join(causes), good, details), cost=cost,
                        recomputed=notes)
