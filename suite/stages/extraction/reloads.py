"""The reloads stage (study 1's reload): the extraction asked again in a fresh launch.

After the extraction stage, with its setting `launches` (a profile's, or `suite bench --reloads N`) above 0,
the arm's runtime is stopped and started again N times; each fresh launch answers every section
of the extraction once more. The page reads like the study, "43 of 48 within, 43 of 43 after the
reload": first the sections whose facts were identical across the repeats of the first launch,
of those with valid JSON in every repeat; then, over those stable sections only (a section that
already varied within the launch cannot say what the reload changed), the sections whose facts
after the reload equal every repeat's, of those answered with valid JSON after it. An answer that
gives no fact (all null) is never "identical" nor "the same after the reload".

Here: the stage's record half (its settings, records, the comparison and `STAGE`); its run half,
the launches that ask the sections again, is `suite.stages.extraction.reloads_run`'s, named by
`STAGE` as "suite.stages.extraction.reloads_run:run" and imported only when a bench runs it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, cast

from pydantic import BaseModel, ConfigDict, Field

from suite.stages.base import FreshLaunch, Stage, StageOption
from suite.stages.extraction import load_prompt, no_facts, select_parts
from suite.stages.extraction import settings as extraction_settings
from suite.stages.extraction.documents import Answer, DocumentPart, _answered_facts

if TYPE_CHECKING:
    from suite.profiles import Profile

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


STAGE = Stage(name="reloads", result=ReloadsResult, run="suite.stages.extraction.reloads_run:run", fresh_runtimes=True, in_bench=False,
              summary="the extraction asked again in a fresh launch (the profile's or --reloads N)",
              inputs=lambda p: (select_parts(extraction_settings(p).sections), load_prompt()),
              planned=lambda p: settings(p).launches * len(select_parts(extraction_settings(p).sections)),
              when=lambda p: settings(p).launches > 0, after="extraction", needs=("extraction",),
              settings=ReloadsSettings, profile_keys={"reloads": "launches"},
              options=(StageOption("--reloads", "launches", "Repeat the extraction in N fresh launches.",
                                   kind="int", min=0),))
