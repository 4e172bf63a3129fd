"""The reloads stage (study 1's reload): the extraction asked again in a fresh launch.

After the extraction stage, with its setting `launches` (a profile's, or `suite bench --reloads N`) above 0,
the arm's runtime is stopped and started again N times; each fresh launch answers every section
of the extraction once more. The page reads like the study, "43 of 48 within, 43 of 43 after the
reload": first the sections whose facts were identical across the repeats of the first launch,
of those with valid JSON in every repeat; then, over those stable sections only (a section that
already varied within the launch cannot say what the reload changed), the sections whose facts
after the reload equal every repeat's, of those answered with valid JSON after it. An answer that
gives no fact (all null) is never "identical" nor "the same after the reload".
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from pydantic import BaseModel, ConfigDict, Field

from suite.errors import EnvironmentUnavailable, RuntimeStartError, SuiteError
from suite.stages.base import FreshLaunch, Stage, StageOption
from suite.stages.extraction import ANSWERS_KEY, _fact_signature, ask_part, load_prompt, no_facts, select_parts
from suite.stages.extraction import settings as extraction_settings
from suite.stages.extraction.documents import Answer, DocumentPart, JsonChat, _answered_facts

if TYPE_CHECKING:
    from suite.profiles import Profile
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)


class ReloadsSettings(BaseModel):
    """The stage's settings (`--reloads N`): how many fresh launches ask the extraction again (0: none)."""

    model_config = ConfigDict(extra="forbid")

    launches: int = Field(default=0, ge=0)


def settings(profile: Profile) -> ReloadsSettings:
    """This stage's settings for a profile (its values, then the run's own)."""
    return cast(ReloadsSettings, STAGE.settings_for(profile))



class ReloadOutcome(FreshLaunch):
    compared: int = 0  # sections stable within the first launch, answered with valid JSON after the reload
    same: int = 0  # of those, the facts of every repeat before
    changed: list[str] = Field(default_factory=list)  # section ids whose facts changed
    no_facts: int = 0  # of `compared`, answered with no fact after the reload (not "same")
    invalid: int = 0  # stable sections answered without valid JSON after the reload (left out of `compared`)


class ReloadsResult(BaseModel):
    reloads: int
    sections: int
    within_identical: int  # sections identical across the first launch's repeats ...
    within_comparable: int  # ... of those with valid JSON in every repeat
    outcomes: list[ReloadOutcome]
    line: str  # "43 of 48 within, 43 of 43 after reload 1"
    within_no_facts: int = 0  # comparable sections whose every repeat gave no fact (not identical)


def stable_sections(sections: list[DocumentPart], answers: dict[str, list[Answer]]) -> tuple[list[DocumentPart], list[DocumentPart]]:
    """(comparable, stable): sections with valid JSON in every repeat, and of those the ones whose
    repeats gave the same facts, at least one of them not null."""
    comparable = [s for s in sections if answers.get(s.uid) and all(a.extracted is not None for a in answers[s.uid])]
    stable = [s for s in comparable
              if len({_answered_facts(s, a.extracted) for a in answers[s.uid]}) == 1
              and not no_facts(s, answers[s.uid][0].extracted)]
    return comparable, stable


def compare_after(outcome: ReloadOutcome, section: DocumentPart, before: list[Answer], after: Answer) -> None:
    """One stable section's answer after the reload against every repeat before it."""
    if after.extracted is None:
        outcome.invalid += 1
        return
    outcome.compared += 1
    if no_facts(section, after.extracted):
        outcome.no_facts += 1
        outcome.changed.append(section.uid)
        return
    facts = _answered_facts(section, after.extracted)
    if all(_answered_facts(section, b.extracted) == facts for b in before):
        outcome.same += 1
    else:
        outcome.changed.append(section.uid)


def reloads_line(within_identical: int, within_comparable: int, outcomes: list[ReloadOutcome]) -> str:
    within = f"{within_identical} of {within_comparable} within"
    parts = []
    for o in outcomes:
        if o.status != "ok":
            parts.append(f"reload {o.index + 1} {o.status}: {o.reason}")
            continue
        extra = []
        if o.no_facts:
            extra.append(f"{o.no_facts} with no fact")
        if o.invalid:
            extra.append(f"{o.invalid} without JSON, left out")
        parts.append(f"{o.same} of {o.compared} after reload {o.index + 1}" + (f" ({'; '.join(extra)})" if extra else ""))
    return f"{within}, {'; '.join(parts)}" if parts else within


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


STAGE = Stage(name="reloads", result=ReloadsResult, run=run, fresh_runtimes=True, in_bench=False,
              summary="the extraction asked again in a fresh launch (the profile's or --reloads N)",
              inputs=lambda p: (select_parts(extraction_settings(p).sections), load_prompt()),
              planned=lambda p: settings(p).launches * len(select_parts(extraction_settings(p).sections)),
              when=lambda p: settings(p).launches > 0, after="extraction", needs=("extraction",),
              settings=ReloadsSettings, profile_keys={"reloads": "launches"},
              options=(StageOption("--reloads", "launches", "Repeat the extraction in N fresh launches.",
                                   kind="int", min=0),))
