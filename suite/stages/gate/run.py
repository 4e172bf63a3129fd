"""The gate's run: the same request N times per gate prompt on the arm's own running runtime
(`suite.stages.repeat.run_gate`), its verdict passed on to the later stages through
`ctx.reproducible`. The run half of the package: its `STAGE` names `run` here as
"suite.stages.gate.run:run", imported only when a bench runs the gate."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from suite.stages.gate_models import GateResult, select_prompts
from suite.stages.repeat import concurrency_of, death_reason_of, logprobs_for, run_gate

if TYPE_CHECKING:
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)


def run(ctx: StageContext) -> GateResult:
    """The gate on the arm's running runtime."""
    prompts = select_prompts(ctx.profile.gate_prompts)
    result = run_gate(
        ctx.client, prompts, ctx.profile.gate_requests, max_tokens_cap=ctx.profile.gate_max_tokens,
        logprobs=logprobs_for(ctx), concurrency=concurrency_of(ctx, ctx.controls), record=ctx.record_request,
        alive=ctx.running.alive, death_reason=death_reason_of(ctx.running),
        label="+".join(ctx.controls) or "default", controls=list(ctx.controls),
    )
    ctx.reproducible = result.reproducible
    log.debug("gate %s: %s", ctx.arm_name, result.verdict)
    return result
