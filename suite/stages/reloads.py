"""The reloads stage (study 1's reload): the extraction asked again in a fresh launch.

After the extraction stage, with the profile's `reloads` (or `suite bench --reloads N`) above 0,
the arm's runtime is stopped and started again N times; each fresh launch answers every section
of the extraction once more. A section's facts are compared with the extraction's own answer to
it: the page reads like the study, "43 of 48 within, 46 of 46 after the reload" (sections whose
facts were identical across the repeats of the first launch, of those with valid JSON in every
repeat; then sections whose facts after the reload were the same as before, of those with valid
JSON on both sides).
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from pydantic import BaseModel, Field

from suite.stages.base import FreshLaunch, Stage
from suite.errors import EnvironmentUnavailable, RuntimeStartError, SuiteError
from suite.stages.extraction import (ANSWERS_KEY, JsonChat, _answered_facts, _fact_signature, ask_section,
                                     load_prompt, select_sections)

if TYPE_CHECKING:
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)



class ReloadOutcome(FreshLaunch):
    compared: int = 0  # sections with valid JSON before (first repeat) and after the reload
    same: int = 0  # of those, the same facts
    changed: list[str] = Field(default_factory=list)  # section ids whose facts changed


class ReloadsResult(BaseModel):
    reloads: int
    sections: int
    within_identical: int  # sections identical across the first launch's repeats ...
    within_comparable: int  # ... of those with valid JSON in every repeat
    outcomes: list[ReloadOutcome]
    line: str  # "43 of 48 within, 46 of 46 after the reload"


def run(ctx: "StageContext") -> ReloadsResult:
    answers = ctx.results.get(ANSWERS_KEY)
    if answers is None:
        raise SuiteError("the reloads stage compares with the extraction stage's answers: run extraction first, "
                         "in the same bench (not resumed past it)")
    sections = [s for s in select_sections(ctx.profile.extraction_sections) if s.uid in answers]
    prompt = load_prompt()
    signature = _fact_signature(ctx)
    comparable = [s for s in sections if answers[s.uid] and all(a.extracted is not None for a in answers[s.uid])]
    identical = [s for s in comparable if len({_answered_facts(s, a.extracted) for a in answers[s.uid]}) == 1]
    outcomes: list[ReloadOutcome] = []
    for i in range(ctx.profile.reloads):
        outcome = ReloadOutcome(index=i, status="ok")
        try:
            with ctx.launch() as (running, client):
                outcome.startup_s = running.startup_s
                caps = ctx.runtime.capabilities
                chat = JsonChat(client, supports_schema=bool(caps.json_schema), chat=bool(caps.chat))
                for section in sections:
                    after = ask_section(ctx, chat, section, prompt, 0, signature, reload=i)
                    before = answers[section.uid][0]
                    if after.extracted is None or before.extracted is None:
                        continue
                    outcome.compared += 1
                    if _answered_facts(section, after.extracted) == _answered_facts(section, before.extracted):
                        outcome.same += 1
                    else:
                        outcome.changed.append(section.uid)
        except (RuntimeStartError, EnvironmentUnavailable) as exc:
            outcome.did_not_start(exc, refused=isinstance(exc, RuntimeStartError))
        outcomes.append(outcome)
    after = "; ".join(f"{o.same} of {o.compared} after reload {o.index + 1}" if o.status == "ok"
                      else f"reload {o.index + 1} {o.status}: {o.reason}" for o in outcomes)
    line = f"{len(identical)} of {len(comparable)} within, {after}" if outcomes else f"{len(identical)} of {len(comparable)} within"
    log.info("reloads %s: %s", ctx.arm_name, line)
    return ReloadsResult(reloads=ctx.profile.reloads, sections=len(sections), within_identical=len(identical),
                         within_comparable=len(comparable), outcomes=outcomes, line=line)


STAGE = Stage(name="reloads", result=ReloadsResult, run=run, fresh_runtimes=True, in_bench=False,
              summary="the extraction asked again in a fresh launch (the profile's or --reloads N)",
              inputs=lambda p: (select_sections(p.extraction_sections), load_prompt()),
              planned=lambda p: p.reloads * len(select_sections(p.extraction_sections)))
