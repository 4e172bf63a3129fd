"""Batch composition's part of a model page's first screen (suite.stages.screen): its verdict in
"what changes it?", and, where the arm's answer depends on its batch and a sibling arm's does not
(a mode that removes the batch effect), that arm's cost against this one's in "what does the fix
cost?" (the gate's figures of both: the same requests, one at a time). Record half: no request.
"""

from __future__ import annotations

from suite.stages.screen import Answer, FirstScreenInput, FirstScreenPart, cost_text


def part(ctx: FirstScreenInput) -> FirstScreenPart:
    """The batch's cause, colour and sibling cost for one arm (nothing where the batch did not run)."""
    out = FirstScreenPart(notes_from=[ctx.run])
    batch = next(iter(ctx.claims), None) if ctx.run is not None else None
    if batch is None:
        return out
    # a batch that ran tested the answer beyond the gate's requests, whatever it found
    out.keeps_colour = out.keeps_cost_open = True
    out.causes.append(f"its batch: {batch.verdict} ({batch.phrase})")
    out.details.append(batch.text)
    if batch.good is False:
        out.good, out.weak = False, True  # a restoring control found before it keeps its colour
        own = ctx.figures
        for name, sibling in ctx.siblings.items():
            theirs, figures = next(iter(sibling.claims), None), sibling.figures
            if theirs is not None and theirs.good is True and own:
                ratio = {k: v / o for k in ("tokens_per_s", "j_per_token")
                         if (v := figures.get(k)) and (o := own.get(k))}
                gap = ("not measured" if not figures.get("j_per_token") and not own.get("j_per_token")
                       else f"not measured for {name}'s gate" if not figures.get("j_per_token")
                       else "not measured for this arm's gate")
                text = cost_text(ratio, gap) + (" (the gate's requests, one at a time)" if ratio else "")
                # a mode that removes the effect is the fix to name, before a control's
                out.cost = Answer(f"{name}: {text}" if text else f"{name}: figures not measured", None,
                                  [f"{name} gives the same answer in every batch ({theirs.phrase})"])
                out.cost_priority = 1
                break
    return out
