"""The gate stage: the same request N times per gate prompt, and how many different answers came
back, on the arm's own runtime (`suite.stages.repeat` is the engine).

Verdict: more than one distinct answer on any prompt marks the arm unreproducible
(`ctx.reproducible = False`); later stages then judge every repeat and report the spread, and the
bench's process of elimination (the control matrix) runs where the profile asks for it.
"""

from __future__ import annotations

from suite.stages.base import ExportTable, SectionTemplate, Stage
from suite.stages.gate.result import COLUMNS, claims, export_rows, from_lines, recompute
from suite.stages.gate.run import run
from suite.stages.lines import AnswerLine
from suite.stages.repeat import GatePromptResult, GateResult, select_prompts

# The names other code imports from the package (each defined in the module that imports it here).
__all__ = ["COLUMNS", "STAGE", "GatePromptResult", "GateResult", "claims", "export_rows", "recompute", "run"]

STAGE = Stage(name="gate", result=GateResult, run=run, lines=(AnswerLine,), fresh_runtimes=False, in_bench=True,
              summary="the same request N times per gate prompt: how many different answers came back",
              inputs=lambda p: select_prompts(p.gate_prompts),
              planned=lambda p: p.gate_requests * len(select_prompts(p.gate_prompts)),
              verdict=lambda result: getattr(result, "reproducible", None),
              tables=(ExportTable("gate", export_rows, COLUMNS),), exported_requests=("gate",),
              page_title="gate", recompute=recompute, claims=claims, from_lines=from_lines,
              section=SectionTemplate("section.html", "suite.stages.gate.view:page", slot="answers", order=0))
