"""The bench's runners: one arm (`run_arm`, `bench_arm`) and every arm of a request on this machine (`run_bench`).

Per arm: the runtime is installed (or its image built) and the model format prepared; the
runtime is started in its determinism mode first (vLLM: batch-invariant) and, if it refuses or
dies before it is ready, started again in its default mode with the refusal recorded; the run
record is created with the configuration signature; the stages run in order (gate, latency,
extraction, restarts) with the watchdog sampling memory the whole time; a watchdog trip stops the
arm (a result, not a crash) and the bench goes on with the next arm. Nothing already measured is
lost: each stage's result is written as soon as it finishes, and an interrupted run is resumable.

`bench_arm(request, plan, results)` is the one per-arm runner of both drivers: the local bench
calls it for each arm in turn, a Ray node for the arm its task names. It holds the GPU alone for
the arm (a machine-wide lock; afterwards it waits for device memory to return to its baseline).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from suite import gpu
from suite.bench.plan import ArmPlan
from suite.bench.provenance import invocation_of
from suite.bench.request import BenchRequest
from suite.bench.session import BenchSession
from suite.bench.startup import prepare
from suite.catalog import prepare_format, prepared_model
from suite.errors import EnvironmentUnavailable, RuntimeStartError
from suite.records import RunInUse, Summary, utcnow
from suite.stages import EXTRACTION_STAGE
from suite.stages.controls import STAGE as CONTROLS_STAGE
from suite.stages.extraction.judge import JudgeChoice, judge_of

log = logging.getLogger(__name__)


def run_arm(plan: ArmPlan, results: Path, stages: list[str], controls_request: list[str] | None = None,
            resume: bool = False, judge: JudgeChoice | None = None,
            on_stage: Callable[[str], None] | None = None, command: list[str] | None = None,
            on_result: Callable[[str], None] | None = None, tags: dict[str, str] | None = None,
            settings: dict[str, BaseModel] | None = None) -> Summary:
    """Run one arm end to end and write its run record; a failure is recorded, not raised.

    `on_stage` is called with each stage's name as it starts (progress of a Ray task), `on_result`
    once its result is written (the CLI rebuilds the site); `command` is the command line that
    asked for it (recorded with the profile's overrides)."""
    started = utcnow()
    invocation = invocation_of(plan, stages, controls_request, command, tags)
    try:
        plan.launcher.check_available()
        plan.launcher.prepare(plan.runtime, prepared_model)
        if plan.launcher.starts_runtimes:  # an external server has its model loaded already
            prepare_format(plan.card, plan.arm.format)
    except EnvironmentUnavailable as exc:
        # An arm that cannot run here: the CLI prints its one line (what it needs, what is missing).
        log.log(logging.DEBUG if not plan.launcher.can_run else logging.WARNING, "arm %s skipped: %s",
                plan.arm_name, exc)
        return Summary(run_id="-", model=plan.card.name, arm=plan.arm_name, runtime=plan.runtime.name,
                       launcher=plan.launcher.name, profile=plan.profile.name, started_at=started,
                       status="skipped", reason=str(exc), invocation=invocation)
    try:
        session = BenchSession(plan, results, resume=resume, judge=judge, controls_request=controls_request,
                               invocation=invocation, settings=settings)
    except RunInUse as exc:  # a live run is never taken over; the other arms go on
        log.error("arm %s not run: %s", plan.arm_name, exc)
        return Summary(run_id="-", model=plan.card.name, arm=plan.arm_name, runtime=plan.runtime.name,
                       launcher=plan.launcher.name, profile=plan.profile.name, started_at=started,
                       status="skipped", reason=str(exc), invocation=invocation)
    try:
        session.start()
    except RuntimeStartError as exc:
        return session.failed_start(exc)
    with session:
        session.run(stages, on_stage, on_result)
    return session.summary



def controls_of(request: BenchRequest) -> list[str] | None:
    """The control matrix's rows the request asks for (--controls), or None."""
    names = getattr(request.settings_of(CONTROLS_STAGE.name), "names", None)
    return list(names) if names else None


def bench_arm(request: BenchRequest, plan: ArmPlan, results: Path, on_stage: Callable[[str], None] | None = None,
              on_result: Callable[[str], None] | None = None) -> Summary:
    """One arm of a checked request (`prepare`), alone on this machine's GPU; a failure is recorded.

    A server the suite did not start holds its GPU already, and an arm that cannot run here
    starts nothing: no lease for either."""
    starts = plan.launcher.starts_runtimes and plan.launcher.can_run
    device = gpu.exclusive_device() if starts else contextlib.nullcontext(
        gpu.DeviceLease(locked=False, reason=f"launcher {plan.launcher.name}"))
    with device as lease:
        summary = run_arm(plan, results, request.stage_list, controls_of(request), request.resume,
                          judge_of(request.settings_of(EXTRACTION_STAGE)), on_stage=on_stage,
                          command=list(request.command) if request.command else None, on_result=on_result,
                          tags=dict(request.tags), settings=dict(request.settings))
        if lease.locked:
            waited = gpu.wait_for_baseline(lease.baseline_bytes)
            if not waited.reached:
                log.warning("arm %s: %s", plan.arm_name, waited.reason)
    return summary


def run_bench(request: BenchRequest, on_arm: Callable[[Summary], None] | None = None,
              on_result: Callable[[str, str], None] | None = None) -> list[Summary]:
    """Every arm of the request (or, with `request.url`, the one server at that URL) on this machine.

    The start-up (`prepare`) checks everything before any runtime starts: bad input is one
    SuiteError and nothing written. Each arm is prepared (runtime installed, model format made)
    just before it runs, never while another is measured; `on_arm(summary)` is called after each
    arm and `on_result(model, stage)` after each stage's result is written (the CLI rebuilds the
    site, so the first gate's page can be read while the rest runs)."""
    ready = prepare(request)
    summaries = []
    for plan in ready.plans:
        done = (lambda stage, model=plan.card.name: on_result(model, stage)) if on_result is not None else None
        summaries.append(bench_arm(ready.request, plan, ready.request.results, on_result=done))
        if on_arm is not None:
            on_arm(summaries[-1])
    return summaries
