"""The restarts stage: the same configuration launched K times, a short gate on each launch.

The bench stops the arm's runtime first; then K fresh processes (or containers) of the same
configuration are started one after another (`ctx.launch()`), each answers a short gate (the
profile's `restart_requests` identical requests per gate prompt), and is stopped. Within-launch
stability (distinct answers inside each launch) and across-launch consistency (distinct answers
over all launches, the share of answer pairs from two different launches that agree, with a
bootstrap 95% interval) are reported separately: a runtime can be stable inside a process and
still change its answer from one start to the next. A launch that fails to start is recorded
with its error line and the stage goes on with the next one.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, Field

from suite.errors import EnvironmentUnavailable, RuntimeStartError
from suite.repro import Sample, analyse_launches
from suite.stages.gate import GateResult, concurrency_of, death_reason_of, logprobs_for, run_gate, select_prompts

if TYPE_CHECKING:
    from suite.stages import StageContext

log = logging.getLogger(__name__)


class LaunchOutcome(BaseModel):
    index: int
    status: Literal["ok", "refused", "failed"]
    reason: str | None = None
    startup_s: float | None = None
    gate: GateResult | None = None


class RestartPromptResult(BaseModel):
    prompt_id: str
    compared_by: str
    within_distinct: list[int]  # per launch that answered
    across_distinct: int
    modal_per_launch_distinct: int
    agreement: float | None  # share of cross-launch answer pairs that are identical
    agreement_ci95: tuple[float, float] | None
    lengths_text: str
    errors: int
    # Every launch gave the same answer at the same request position (request i of one launch
    # equals request i of every other): a cold/warm split that repeats identically in each
    # launch lowers `agreement` but keeps this true.
    same_sequence: bool | None = None


class RestartsResult(BaseModel):
    launches: int  # K requested
    launched: int  # started and answered
    requests_per_launch: int
    prompts: list[RestartPromptResult]
    launch_outcomes: list[LaunchOutcome] = Field(default_factory=list)
    stable_within: bool | None  # every launch gave one answer per prompt
    consistent_across: bool | None  # all launches gave the same single answer per prompt
    verdict: str


def _samples(gate: GateResult, prompt_id: str) -> list[Sample]:
    """Rebuild the per-request samples of one prompt from the gate's distinct answers."""
    p = next((p for p in gate.prompts if p.prompt_id == prompt_id), None)
    if p is None:
        return []
    out: list[Sample] = []
    for ans in p.answers:
        for i in ans.indices:
            out.append(Sample(index=i, text=ans.text, token_ids=ans.token_ids,
                              completion_tokens=ans.n_tokens))
    for k in range(p.errors):
        out.append(Sample(index=10_000 + k, error="failed"))
    return out


def summarise(outcomes: list[LaunchOutcome], prompt_ids: list[str], k: int, n: int) -> RestartsResult:
    answered = [o for o in outcomes if o.gate is not None]
    prompts: list[RestartPromptResult] = []
    for pid in prompt_ids:
        launches = [_samples(o.gate, pid) for o in answered if o.gate is not None]
        launches = [l for l in launches if l]
        if not launches:
            continue
        a = analyse_launches(launches)
        sequences = [[(s.error is None, s.token_ids if a.compared_by == "token_ids" else s.text)
                      for s in sorted(l, key=lambda s: s.index)] for l in launches]
        prompts.append(RestartPromptResult(
            prompt_id=pid, compared_by=a.compared_by, within_distinct=a.within_distinct,
            across_distinct=a.across_distinct, modal_per_launch_distinct=a.modal_per_launch_distinct,
            agreement=a.agreement, agreement_ci95=a.agreement_ci95, lengths_text=a.lengths_text, errors=a.errors,
            same_sequence=all(seq == sequences[0] for seq in sequences) if len(sequences) >= 2 else None))
    enough = len(answered) >= 2 and prompts
    stable = all(max(p.within_distinct, default=0) <= 1 for p in prompts) if prompts else None
    consistent = all(p.across_distinct == 1 for p in prompts) if enough else None
    if not enough:
        verdict = f"undetermined: {len(answered)} of {k} launches answered"
    else:
        parts = ", ".join(
            f"{p.prompt_id}: within {'/'.join(map(str, p.within_distinct))}, across {p.across_distinct}, "
            f"agreement {p.agreement:.2f}" + (f" [{p.agreement_ci95[0]:.2f}, {p.agreement_ci95[1]:.2f}]"
                                               if p.agreement_ci95 else "")
            + (", the same answer sequence in every launch" if p.same_sequence else "")
            for p in prompts if p.agreement is not None)
        verdict = ("consistent across launches" if consistent else "NOT consistent across launches") + f" ({parts})"
    return RestartsResult(launches=k, launched=len(answered), requests_per_launch=n, prompts=prompts,
                          launch_outcomes=outcomes, stable_within=stable, consistent_across=consistent,
                          verdict=verdict)


def run(ctx: "StageContext") -> RestartsResult:
    k, n = ctx.profile.restarts, ctx.profile.restart_requests
    prompts = select_prompts(ctx.profile.gate_prompts)
    outcomes: list[LaunchOutcome] = []
    for i in range(k):
        outcome = LaunchOutcome(index=i, status="ok")
        try:
            with ctx.launch() as (running, client):
                outcome.startup_s = running.startup_s
                body = dict(client.extra_body)
                if ctx.sampling.top_p is not None:
                    body.setdefault("top_p", ctx.sampling.top_p)
                gate = run_gate(
                    client, prompts, n, seed=ctx.sampling.seed, temperature=ctx.sampling.temperature,
                    max_tokens_cap=ctx.profile.gate_max_tokens, logprobs=logprobs_for(ctx),
                    concurrency=concurrency_of(ctx, ctx.controls), extra=body, record=ctx.record_request,
                    alive=running.alive, death_reason=death_reason_of(running), label=f"launch-{i}",
                    controls=list(ctx.controls), kind="restarts")
                outcome.gate = gate
                if gate.stopped_reason:
                    outcome.status, outcome.reason = "failed", gate.stopped_reason
        except (RuntimeStartError, EnvironmentUnavailable) as exc:
            outcome.status = "refused" if isinstance(exc, RuntimeStartError) else "failed"
            outcome.reason = getattr(exc, "error_line", None) or str(exc)
            log.warning("restart %d of %s failed to start: %s", i, ctx.arm_name, outcome.reason)
        outcomes.append(outcome)
    result = summarise(outcomes, [p.id for p in prompts], k, n)
    log.info("restarts %s: %s", ctx.arm_name, result.verdict)
    return result
