"""Restarts' part of a model page's first screen (suite.stages.screen): where the launches of one
configuration answered differently, "a restart" is a cause in "what changes it?", with the prompts
and the test's p. Record half: no request.
"""

from __future__ import annotations

from suite.stages.screen import FirstScreenInput, FirstScreenPart, fmt_p


def part(ctx: FirstScreenInput) -> FirstScreenPart:
    """The across-launch verdicts that say the launches differ, as one cause; the stage's own
    `verdict` note is left to its within and across texts, which the card lists on their own."""
    out = FirstScreenPart(notes_from=[ctx.run], quiet_notes=("verdict",))
    across = [c for c in ctx.claims if c.kind == "across-launches"] if ctx.run is not None else []
    differ = [c for c in across if c.verdict in ("differ", "differ or persist")]
    if differ:
        either = any(c.verdict == "differ or persist" for c in differ)
        out.causes.append(f"a restart: launches differ on {', '.join(c.prompt or '' for c in differ)}"
                          + (" (or answers persist inside them)" if either else "") + fmt_p(differ[0]))
        out.details.extend(c.text for c in differ)
        out.good, out.keeps_colour = False, True
    return out
