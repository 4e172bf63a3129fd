"""The sessions stage (study 2's design): K independent server processes x R replicates each.

`suite study sessions --model M --arms A --sessions K --replicates R [--lora]` runs it. The arm's
runtime is stopped; K fresh processes of the same configuration are started one after another;
in each, every gate prompt is sent R times (a replicate is one run of each prompt), one request at
a time. With `--lora` each process also serves the suite's test adapter and every replicate sends
each prompt twice, to the base model and to the adapter, so base and adapter share the process
(where the runtime cannot select the adapter per request, the adapter configuration is skipped
with that reason).

The unit is the study's: a run is one pass over the prompt set, and its output hash covers every
answer of that pass. Per configuration (base, adapter) the result gives distinct output hashes
over the K*R runs and, between runs of different sessions, three agreements, each named on the
page and each with a 95% interval over sessions (the unit the study resampled): identical runs (same output
hash), item-level (share of prompts answered identically) and token-level (share of token
positions before the first difference). The same three within sessions go beside them. The
first run of each session is set apart (the caching transient) only where it is the only
difference: leaving it out leaves one output hash. Per prompt the same figures follow, with
answers cut at max_tokens counted. The three mechanisms the study separates show as three
figures: a transient confined to the first run, disagreement within sessions, disagreement
between sessions.

The package in two halves: the record half, imported here (`result`: its records, summaries and
export; `settings`: its settings and planned requests; `view`: its page section), and the run
half, `run`, which starts the processes and is named by `STAGE` as "suite.stages.sessions.run:run",
imported only when a bench runs the stage.
"""

from __future__ import annotations

from suite.stages.base import ExportTable, SectionTemplate, Stage
from suite.stages.gate_models import select_prompts
from suite.stages.lines import AnswerLine
from suite.stages.sessions.result import (
    COLUMNS,
    VERDICTS,
    SessionOutcome,
    SessionsConfiguration,
    SessionsPromptResult,
    SessionsResult,
    claims,
    export_rows,
    from_lines,
    summarise_configuration,
    summarise_prompt,
    table_lines,
)
from suite.stages.sessions.settings import PROFILE_KEYS, PROFILES, SessionsSettings, planned, settings

# The names other code imports from the package (each defined in the module that imports it here).
__all__ = ["COLUMNS", "STAGE", "SessionOutcome", "SessionsConfiguration", "SessionsPromptResult", "SessionsResult", "SessionsSettings", "claims",
           "export_rows", "from_lines", "planned", "settings", "summarise_configuration", "summarise_prompt", "table_lines"]

STAGE = Stage(name="sessions", result=SessionsResult, run="suite.stages.sessions.run:run", lines=(AnswerLine,), fresh_runtimes=True, in_bench=False,
              summary="K server processes x R replicates (study 2), base and adapter",
              inputs=lambda p: select_prompts(p.gate_prompts),
              planned=planned,
              settings=SessionsSettings, profiles=PROFILES, profile_keys=PROFILE_KEYS,
              # its request lines are many (K x R passes over the prompt set): not in the requests table
              tables=(ExportTable("sessions", export_rows, COLUMNS),),
              page_title="sessions", claims=claims, verdicts=VERDICTS, from_lines=from_lines,
              section=SectionTemplate("section.html", "suite.stages.sessions.view:page", slot="causes", order=3))
