"""The controls stage: the gate once per determinism control, each on a fresh runtime.

`suite gate --controls all` (or a comma-separated list of control names) runs it after the gate.
For every requested configuration (`default`, then each control set the runtime's `runtime.toml`
declares: prompt cache on or off, prefix caching off, eager mode, concurrency 4, ...) the runtime
is started fresh with that control (`ctx.launch`), the gate runs on it, and the runtime stops.
A runtime that refuses a control at start-up is a row of the table (`refused`, with the error
line), not a failure of the stage. Where the runtime serves adapters and `lora` is asked for (or
`all`), the gate runs twice in one process started with the suite's test adapter, base and
adapter, as two rows. Run automatically by the bench after a gate that varied, the matrix sends
only the prompts that varied, and its process of elimination is a test corrected over the
matrix's controls (Holm), not a glance.

The package in two halves. The record half, imported here: `settings` (the stage's settings, its
options and `preflight`), `result` (the records), `series` (a control's pairs inside one launch, as
kept), `elimination` (the statistics: each control row against the default row, the correction
over the matrix, the stage's claims), `rows` (the configurations asked for, a row from its gate,
the test adapter's place, a cut run rebuilt from its request lines) and `view` (its page section,
drawn by `section.html`, the table the CLI prints and the export's rows). The run half, imported
only when a bench runs the matrix (`STAGE` names it as "suite.stages.controls.run:run"): `run`
(the matrix run: rows on fresh runtimes, launches of a cold-start transient, LoRA's rows, the test
adapter made where missing) and `inlaunch` (a control tried inside one launch, in pairs of
requests with and without it).
"""

from __future__ import annotations

from suite.stages.base import ExportTable, FirstScreen, SectionTemplate, Stage
from suite.stages.controls.elimination import (
    TRANSIENT_LAUNCHES,
    TRANSIENT_REQUESTS,
    claims,
    eliminate,
    from_lines,
    launches_for,
    recompute,
)
from suite.stages.controls.result import ELIMINATION_ALPHA, VERDICTS, ControlMatrixResult, LoraOutcome, MatrixRow, RowTest
from suite.stages.controls.rows import (
    ADAPTER_NAME,
    CONTROL_STOP_AFTER_DISTINCT,
    adapter_path,
    carries_line,
    cold_odd_of,
    lora_request_fields,
    pool_launches,
    rebuild,
    resolve_requested,
    row_from_gate,
)
from suite.stages.controls.series import InLaunchSeries
from suite.stages.controls.settings import OPTIONS, PROFILE_KEYS, PROFILES, ControlMatrixSettings, preflight, settings
from suite.stages.controls.view import COLUMNS, export_rows, format_controls_table
from suite.stages.gate_models import select_prompts
from suite.stages.lines import AnswerLine

# The names other code imports from the package (each defined in the module that imports it here).
# The run half (`run`, `ensure_adapter`, the launches and the pairs inside one launch) is
# `suite.stages.controls.run`'s and `suite.stages.controls.inlaunch`'s, imported from there.
__all__ = ["ADAPTER_NAME", "CONTROL_STOP_AFTER_DISTINCT", "ELIMINATION_ALPHA", "STAGE", "TRANSIENT_LAUNCHES", "TRANSIENT_REQUESTS",
           "InLaunchSeries", "MatrixRow", "ControlMatrixResult", "ControlMatrixSettings", "LoraOutcome", "RowTest", "adapter_path", "carries_line",
           "claims", "cold_odd_of", "eliminate", "format_controls_table", "launches_for", "lora_request_fields", "pool_launches", "preflight",
           "rebuild", "resolve_requested", "row_from_gate", "settings"]


STAGE = Stage(name="controls", result=ControlMatrixResult, run="suite.stages.controls.run:run", lines=(AnswerLine,), fresh_runtimes=True, in_bench=False,
              summary="the gate once per determinism control, each on a fresh runtime",
              inputs=lambda p: select_prompts(p.gate_prompts),
              planned=None,  # its rows depend on the runtime's controls: a count and a rate, no total
              # the process of elimination: where the gate found more than one answer, one control
              # at a time, after the rest (its setting `auto`); asked for (--controls), right
              # after the gate
              when=lambda p: settings(p).auto, on_verdict=False, after="gate",
              settings=ControlMatrixSettings, profiles=PROFILES, profile_keys=PROFILE_KEYS, options=OPTIONS, preflight=preflight,
              tables=(ExportTable("controls", export_rows, COLUMNS),), exported_requests=("controls",),
              rebuild=rebuild, carries_line=carries_line, from_lines=from_lines,
              page_title="control matrix", recompute=recompute, claims=claims, verdicts=VERDICTS,
              first_screen=FirstScreen("suite.stages.controls.screen:part", order=-2),
              section=SectionTemplate("section.html", "suite.stages.controls.view:page", slot="causes", order=1))
