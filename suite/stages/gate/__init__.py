"""The gate stage: the same request N times per gate prompt, and how many different answers came
back, on the arm's own runtime (`suite.stages.repeat` is the engine).

Verdict: more than one distinct answer on any prompt marks the arm unreproducible
(`ctx.reproducible = False`); later stages then judge every repeat and report the spread, and the
bench's process of elimination (the control matrix) runs where the profile asks for it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from suite.stages.base import ColumnType, ExportTable, Stage
from suite.stages.lines import AnswerLine
from suite.stages.repeat import (GateResult, concurrency_of, death_reason_of, logprobs_for, run_gate,
                                 select_prompts)

if TYPE_CHECKING:
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)


def run(ctx: "StageContext") -> GateResult:
    """The gate on the arm's running runtime."""
    prompts = select_prompts(ctx.profile.gate_prompts)
    result = run_gate(
        ctx.client, prompts, ctx.profile.gate_requests, max_tokens_cap=ctx.profile.gate_max_tokens,
        logprobs=logprobs_for(ctx), concurrency=concurrency_of(ctx, ctx.controls), record=ctx.record_request, alive=ctx.running.alive, death_reason=death_reason_of(ctx.running),
        label="+".join(ctx.controls) or "default", controls=list(ctx.controls),
    )
    ctx.reproducible = result.reproducible
    log.info("gate %s: %s", ctx.arm_name, result.verdict)
    return result


def export_rows(result: GateResult) -> list[dict[str, Any]]:
    """`suite export`'s gate table: one row per gate prompt: distinct answers, lengths, cold vs warm."""
    rows = []
    for p in result.prompts:
        cw = p.cold_warm
        rows.append({
            "prompt_id": p.prompt_id, "requests": p.requests, "answered": p.answered, "errors": p.errors,
            "distinct_answers": p.distinct_answers, "modal_share": p.modal_share,
            "answer_lengths_tokens": [lc.tokens for lc in p.lengths], "answer_length_counts": [lc.count for lc in p.lengths],
            "compared_by": p.compared_by,
            "truncated": p.truncated, "max_tokens": p.max_tokens, "modal_tied": p.modal_tied,
            "cold_is_modal": cw.cold_is_modal if cw else None, "warm_distinct": cw.warm_distinct if cw else None,
            "warm_count": cw.warm_count if cw else None,
        })
    return rows


COLUMNS: dict[str, ColumnType] = {
    "prompt_id": "str", "requests": "int", "answered": "int", "errors": "int", "distinct_answers": "int",
    "modal_share": "float", "answer_lengths_tokens": "list[int]", "answer_length_counts": "list[int]", "compared_by": "str",
    "truncated": "int", "max_tokens": "int", "modal_tied": "bool", "cold_is_modal": "bool", "warm_distinct": "int",
    "warm_count": "int"}


STAGE = Stage(name="gate", result=GateResult, run=run, lines=(AnswerLine,), fresh_runtimes=False, in_bench=True,
              summary="the same request N times per gate prompt: how many different answers came back",
              inputs=lambda p: select_prompts(p.gate_prompts),
              planned=lambda p: p.gate_requests * len(select_prompts(p.gate_prompts)),
              verdict=lambda result: getattr(result, "reproducible", None),
              tables=(ExportTable("gate", export_rows, COLUMNS),), exported_requests=("gate",),
              page_title="gate")
