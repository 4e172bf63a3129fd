"""The sessions x replicates stage's run (study 2): K independent server processes, R runs of the
prompt set in each, base and adapter requests sharing each process where an adapter is given. Its
records, summaries and export are `suite.stages.sessions.result`'s, its settings
`suite.stages.sessions.settings`'. The run half of the package: its `STAGE` names `run` here as
"suite.stages.sessions.run:run", imported only when a bench runs the stage."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Literal

from suite.analysis.repro import Sample
from suite.errors import EnvironmentUnavailable, RuntimeStartError
from suite.launchers.base import LoraAdapter
from suite.stages.gate_models import GateResult, samples_of, select_prompts
from suite.stages.repeat import death_reason_of, logprobs_for, run_gate
from suite.stages.sessions.result import SessionOutcome, SessionsConfiguration, SessionsResult, summarise_configuration, table_lines
from suite.stages.sessions.settings import SessionsSettings, settings

if TYPE_CHECKING:
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)


def _replicate_sample(gate: GateResult, prompt_id: str, replicate: int) -> Sample | None:
    samples = samples_of(gate, prompt_id)
    return samples[0].model_copy(update={"index": replicate}) if samples else None


def run(ctx: StageContext) -> SessionsResult:
    from suite.stages.controls import ADAPTER_NAME
    from suite.stages.controls.run import ensure_adapter

    own = ctx.own(SessionsSettings) or settings(ctx.profile)
    k, r = own.sessions, own.replicates
    prompts = select_prompts(ctx.profile.gate_prompts)
    caps = ctx.runtime.capabilities
    labels: list[Literal["base", "adapter"]] = ["base"]
    configs = {"base": SessionsConfiguration(label="base")}
    lora: list[LoraAdapter] | None = None
    if own.lora:
        adapter = SessionsConfiguration(label="adapter")
        configs["adapter"] = adapter
        if not caps.lora:
            adapter.status, adapter.reason = "skipped", f"{ctx.runtime.name} does not serve LoRA adapters"
        elif caps.lora_select == "process":
            adapter.status, adapter.reason = "skipped", (
                f"{ctx.runtime.name} applies an adapter to every request of its process: base and adapter "
                "cannot share one process")
        else:
            try:
                path = ensure_adapter(ctx.card, ctx.card.formats[ctx.arm.format].kind)
                lora = [LoraAdapter(ADAPTER_NAME, path)]
                labels.append("adapter")
            except EnvironmentUnavailable as exc:
                adapter.status, adapter.reason = "skipped", str(exc)
    # per_session[label] = one dict per session: prompt id -> its samples in replicate order
    per_session: dict[str, list[dict[str, list[Sample]]]] = {lb: [] for lb in labels}
    outcomes: list[SessionOutcome] = []
    for i in range(k):
        session: dict[str, dict[str, list[Sample]]] = {lb: {p.id: [] for p in prompts} for lb in labels}
        outcome = _run_session(ctx, i, r, labels, prompts, lora, session)
        outcomes.append(outcome)
        for lb in labels:
            if any(session[lb].values()):
                per_session[lb].append(session[lb])
    for lb in labels:
        configs[lb] = summarise_configuration(lb, [p.id for p in prompts], per_session[lb])
    result = SessionsResult(sessions=k, replicates=r, launched=sum(1 for o in outcomes if o.status == "ok"),
                            lora=own.lora, lora_select=caps.lora_select,
                            configurations=list(configs.values()), outcomes=outcomes, verdict="",
                            controls=list(ctx.controls))
    result.table = table_lines(result)
    result.verdict = "; ".join(result.table) or "no session answered"
    log.debug("sessions %s: %s", ctx.arm_name, result.verdict)
    return result


def _run_session(ctx: StageContext, i: int, r: int, labels: list[Literal["base", "adapter"]], prompts: list,
                 lora: list[LoraAdapter] | None, session: dict[str, dict[str, list[Sample]]]) -> SessionOutcome:
    """Session i: a fresh process, R runs of each prompt per configuration (into `session`)."""
    from suite.stages.controls import lora_request_fields

    caps = ctx.runtime.capabilities
    outcome = SessionOutcome(index=i, status="ok")
    try:
        with ctx.launch(lora=lora) as (running, client):
            outcome.startup_s = running.startup_s
            # base and adapter share the process: each request says which (its own fields)
            bodies = {lb: (lora_request_fields(caps.lora_select or "", ctx.card.served_name, lb == "adapter") or {})
                      if lora is not None else {} for lb in labels}
            for rep in range(r):
                for lb in labels:
                    gate = run_gate(
                        client, prompts, 1, max_tokens_cap=ctx.profile.gate_max_tokens, logprobs=logprobs_for(ctx),
                        extra=bodies[lb],
                        record=ctx.record_request, alive=running.alive, death_reason=death_reason_of(running),
                        label=f"session-{i}-run-{rep}-{lb}", controls=list(ctx.controls), kind="sessions",
                        process_cold=rep == 0 and lb == labels[0])
                    for p in prompts:
                        sample = _replicate_sample(gate, p.id, rep)
                        session[lb][p.id].append(sample or Sample(index=rep, error="no answer"))
                    if gate.stopped_reason:  # the runtime died or kept failing: this session ends here
                        outcome.status, outcome.reason = "failed", gate.stopped_reason
                        log.warning("session %d of %s: %s", i, ctx.arm_name, outcome.reason)
                        return outcome
    except (RuntimeStartError, EnvironmentUnavailable) as exc:
        outcome.did_not_start(exc, refused=isinstance(exc, RuntimeStartError))
        log.warning("session %d of %s: %s", i, ctx.arm_name, outcome.reason)
    return outcome
