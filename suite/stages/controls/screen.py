"""The control matrix's part of a model page's first screen (suite.stages.screen): the process of
elimination in "what changes it?" (the controls that restore one answer, each with its strength,
or what was tested and ruled out) and the restoring control's cost in "what does the fix cost?".

The rows of every matrix run of the arm join: a matrix is often run a few rows at a time, and a run
cut by a time limit keeps the rows it finished, so the parts ruled out in one run are not forgotten
by the next (a configuration run in several keeps its newest run's verdict). Record half: no request.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from suite.analysis.claims import Claim
from suite.stages.screen import Answer, FirstScreenInput, FirstScreenPart, cost_text, fmt_p


def merged_controls(runs: list[Any], claims_of: Callable[[Any], list[Claim]]) -> list[Claim]:
    """The control claims of several matrix runs of one arm (`claims_of(run)`: the matrix's claims
    of a run), newest run first: a configuration run in several keeps its newest run's verdict."""
    seen: set[str] = set()
    out: list[Claim] = []
    for run in sorted((r for r in runs if r is not None), key=lambda r: getattr(r, "started_at", "") or "",
                      reverse=True):
        for c in claims_of(run):
            if c.kind != "control" or (c.configuration or "") in seen:
                continue
            seen.add(c.configuration or "")
            out.append(c)
    return out


def answers_of(c: Claim) -> str:
    """A credited control's answers in a phrase: 'one answer in 40 over 2 launches', or, where its
    launches answered differently, one answer inside each and the launches apart."""
    n, launches = c.counts.get("answered", 0), c.counts.get("launches", 1)
    if c.counts.get("launch_answers", 1) > 1:
        return (f"one answer inside each of {launches} launches ({n} requests); the launches differ, "
                "so what is left is chosen at start-up")
    return f"one answer in {n}" + (f" over {launches} launches" if launches > 1 else "")


def energy_gap(c: Claim) -> str:
    """Why a control row's cost has no J/token: requests with and without it alternate inside one
    launch (the meter reads the launch, not a request), or no energy reading came."""
    if "pair" in (c.evidence.unit or ""):
        return "not separable (with and without alternate inside one launch)"
    return "not measured (no energy reading)"


def part(ctx: FirstScreenInput) -> FirstScreenPart:
    """The matrix's causes and cost for one arm: from the run the page shows it from (else, where
    that one holds no elimination, the newest other run that does), its rows merged with the arm's
    other matrix runs'. No matrix where the gate varied: "not tested"."""
    run, others = ctx.run, list(ctx.others)
    elimination = next((c for c in ctx.claims if c.kind == "elimination"), None) if run is not None else None
    if elimination is None and others:
        # the page's matrix run holds none: the newest other run's stands in
        run, others = others[-1], others[:-1]
        elimination = next((c for c in ctx.claims_of(run) if c.kind == "elimination"), None)
    out = FirstScreenPart(notes_from=[run])
    if elimination is None or elimination.verdict == "nothing to eliminate":
        if ctx.same.good is False:
            out.causes.append("not tested (no control matrix ran)")
        return out
    controls = merged_controls([run, *others], ctx.claims_of)
    restoring = [c for c in controls if c.good is True]  # a control row is good only where it restores
    if restoring:
        out.causes.extend((f"{c.subject}: {answers_of(c)}" if c.subject else f"{c.configuration} {c.verdict}")
                          + fmt_p(c) for c in restoring)
        out.good = True
        text = cost_text(restoring[0].cost, energy_gap(restoring[0]))
        out.cost = Answer(f"{restoring[0].configuration}: {text}" if text else
                          f"{restoring[0].configuration}: not measured on the same requests", None,
                          [f"{c.configuration}: {cost_text(c.cost, energy_gap(c)) or 'no ratio'}" for c in restoring])
    else:
        near = [c for c in controls if c.verdict.startswith("passes alone")]
        # counts say what ran: a row refused, failed, skipped or unchanged tested nothing
        ran = [c for c in controls if c.verdict not in ("refused", "failed", "skipped", "unchanged")]
        out.causes.append(f"nothing of {len(ran)} control{'s' if len(ran) != 1 else ''} tested restores it"
                          + (f" ({', '.join(c.configuration or '' for c in near)} only without the correction)"
                             if near else ""))
        # the kernel parts whose switch still gave a second answer: that part alone does not do it
        ruled = [c for c in controls if c.subject and c.verdict == "still varies"]
        if ruled:
            out.causes.append("ruled out, a second answer came with it: " + "; ".join(
                f"{c.subject} ({c.counts.get('answered', 0)} answered)" for c in ruled))
        idle = [c for c in controls if c.verdict == "unchanged"]
        if idle:
            out.causes.append("not tested, the switch changed no kernel: "
                              + ", ".join(dict.fromkeys(c.configuration or "" for c in idle)))
        runs = len({c.run_id for c in controls if c.run_id})
        if runs > 1:
            out.causes.append(f"rows from {runs} runs of this arm")
        out.good = False
        would = (f"; {near[0].configuration} would cost {cost_text(near[0].cost, energy_gap(near[0]))}"
                 if near and cost_text(near[0].cost) else "")
        # with nothing it would cost, the refused determinism mode's line says more
        out.cost, out.cost_weak = Answer("no fix shown" + would, None), not would
    out.details.append(elimination.text)
    return out
