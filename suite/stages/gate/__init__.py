"""The gate stage: the same request N times per gate prompt, and how many different answers came
back, on the arm's own runtime (`suite.stages.repeat` is the engine).

The package in two halves: the record half, imported here (its result, `GateResult`, and its
prompts are `suite.stages.gate_models`'s; its verdicts, claims and export rows `result`'s; its page
section `view`'s), and the run half, `run`, which sends the requests and is named by `STAGE` as
"suite.stages.gate.run:run", imported only when a bench runs the gate.

Verdict: more than one distinct answer on any prompt marks the arm unreproducible
(`ctx.reproducible = False`); later stages then judge every repeat and report the spread, and the
bench's process of elimination (the control matrix) runs where the profile asks for it.
"""

from __future__ import annotations

from suite.stages.base import ExportTable, SectionTemplate, Stage
from suite.stages.gate.result import COLUMNS, VERDICTS, claims, export_rows, from_lines, recompute
from suite.stages.gate_models import GatePromptResult, GateResult, select_prompts
from suite.stages.lines import AnswerLine

# The names other code imports from the package (each defined in the module that imports it here).
__all__ = ["COLUMNS", "STAGE", "GatePromptResult", "GateResult", "claims", "export_rows", "recompute"]

STAGE = Stage(name="gate", result=GateResult, run="suite.stages.gate.run:run", lines=(AnswerLine,), fresh_runtimes=False, in_bench=True,
              summary="the same request N times per gate prompt: how many different answers came back",
              inputs=lambda p: select_prompts(p.gate_prompts),
              planned=lambda p: p.gate_requests * len(select_prompts(p.gate_prompts)),
              verdict=lambda result: getattr(result, "reproducible", None),
              tables=(ExportTable("gate", export_rows, COLUMNS),), exported_requests=("gate",),
              page_title="gate", recompute=recompute, claims=claims, verdicts=VERDICTS, from_lines=from_lines,
              section=SectionTemplate("section.html", "suite.stages.gate.view:page", slot="answers", order=0))
