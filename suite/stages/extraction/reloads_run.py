"""The reloads stage's run: the arm's runtime stopped and started N times, every section of the
extraction asked once more in each fresh launch and the stable ones compared with the first
launch's repeats. Its settings, records and comparison are `suite.stages.extraction.reloads`', whose
`STAGE` names `run` here as "suite.stages.extraction.reloads_run:run", imported only when a bench
runs the stage."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from suite.errors import EnvironmentUnavailable, RuntimeStartError, SuiteError
from suite.stages.extraction.chat import JsonChat
from suite.stages.extraction.inputs import ANSWERS_KEY, _fact_signature, load_prompt, select_parts
from suite.stages.extraction.reloads import (
    ReloadOutcome,
    ReloadsResult,
    ReloadsSettings,
    compare_after,
    reloads_line,
    settings,
    stable_sections,
)
from suite.stages.extraction.result import no_facts
from suite.stages.extraction.run import ask_part
from suite.stages.extraction.settings import settings as extraction_settings

if TYPE_CHECKING:
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)


def run(ctx: StageContext) -> ReloadsResult:
    answers = ctx.results.get(ANSWERS_KEY)
    if answers is None:
        raise SuiteError("the reloads stage compares with the extraction stage's answers: run extraction first, "
                         "in the same bench (not resumed past it)")
    sections = [s for s in select_parts(extraction_settings(ctx.profile).sections) if s.uid in answers]
    prompt = load_prompt()
    signature = _fact_signature(ctx)
    comparable, identical = stable_sections(sections, answers)
    outcomes: list[ReloadOutcome] = []
    launches = (ctx.own(ReloadsSettings) or settings(ctx.profile)).launches
    for i in range(launches):
        outcome = ReloadOutcome(index=i, status="ok")
        try:
            with ctx.launch() as (running, client):
                outcome.startup_s = running.startup_s
                caps = ctx.runtime.capabilities
                chat = JsonChat(client, supports_schema=bool(caps.json_schema), chat=bool(caps.chat))
                stable = {s.uid for s in identical}
                for section in sections:  # every section is asked again (the record keeps them all) ...
                    after = ask_part(ctx, chat, section, prompt, 0, signature, reload=i)
                    if section.uid in stable:  # ... and the stable ones are compared
                        compare_after(outcome, section, answers[section.uid], after)
        except (RuntimeStartError, EnvironmentUnavailable) as exc:
            outcome.did_not_start(exc, refused=isinstance(exc, RuntimeStartError))
        outcomes.append(outcome)
    line = reloads_line(len(identical), len(comparable), outcomes)
    log.info("reloads %s: %s", ctx.arm_name, line)
    return ReloadsResult(reloads=launches, sections=len(sections), within_identical=len(identical),
                         within_comparable=len(comparable), outcomes=outcomes, line=line,
                         within_no_facts=sum(1 for s in comparable if all(no_facts(s, a.extracted)
                                                                          for a in answers[s.uid])))
