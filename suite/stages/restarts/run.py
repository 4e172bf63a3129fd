"""The restarts stage's run: the arm's configuration stopped and started K times, a short gate on
each launch, with fresh compile caches and, where the runtime declares its caches, with kept ones.
Its records, verdicts and export are `suite.stages.restarts.result`'s, its settings
`suite.stages.restarts.settings`', its caches' environment and counts `suite.stages.restarts.caches`'.
The run half of the package: its `STAGE` names `run` here as "suite.stages.restarts.run:run",
imported only when a bench runs the stage."""

from __future__ import annotations

import logging
import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from suite.errors import EnvironmentUnavailable, RuntimeStartError
from suite.stages.gate_models import select_prompts
from suite.stages.repeat import concurrency_of, death_reason_of, logprobs_for, run_gate
from suite.stages.restarts.caches import cache_counts, cache_env, cache_not_loaded, files_in
from suite.stages.restarts.result import LaunchOutcome, RestartsResult, summarise
from suite.stages.restarts.settings import RestartsSettings, settings

if TYPE_CHECKING:
    from suite.stages.base import StageContext

log = logging.getLogger(__name__)


def run_launches(ctx: StageContext, mode: Literal["fresh", "kept"]) -> RestartsResult:
    """K launches of the arm's configuration, each with a short gate, under one cache mode."""
    own = ctx.own(RestartsSettings) or settings(ctx.profile)
    k, n = own.launches, own.requests
    prompts = select_prompts(ctx.profile.gate_prompts)
    outcomes: list[LaunchOutcome] = []
    # The caches live outside the run record (a compile cache is tens of MB) and go when the
    # stage ends; the record keeps which folder each launch had and what it found there.
    from suite.paths import cache_dir

    scratch = cache_dir() / "compile-caches"
    scratch.mkdir(parents=True, exist_ok=True)
    caches = Path(tempfile.mkdtemp(prefix=f"{ctx.arm_name}-{mode}-", dir=scratch))
    try:
        for i in range(k):
            outcomes.append(_one_launch(ctx, i, mode, caches, prompts, n))
    finally:
        shutil.rmtree(caches, ignore_errors=True)
    result = summarise(outcomes, [p.id for p in prompts], k, n)
    result.cache_mode = mode
    result.controls = list(ctx.controls)
    log.debug("restarts %s (%s caches): %s", ctx.arm_name, mode, result.verdict)
    return result


def _one_launch(ctx: StageContext, i: int, mode: Literal["fresh", "kept"], caches: Path,
                prompts: list, n: int) -> LaunchOutcome:
    """Launch i of the restarts: a fresh runtime, its short gate, stopped."""
    label = f"launch-{i}" if mode == "fresh" else "kept"
    root = caches / label
    declared = ctx.runtime.compile_cache
    outcome = LaunchOutcome(index=i, status="ok", cache_dir=f"{mode}/{label}", cache_files_before=files_in(root),
                            cache_files=cache_counts(root, declared), cache_settings=dict(declared.settings))
    try:
        with ctx.launch(env=cache_env(root, declared)) as (running, client):
            outcome.startup_s = running.startup_s
            gate = run_gate(
                client, prompts, n, max_tokens_cap=ctx.profile.gate_max_tokens, logprobs=logprobs_for(ctx),
                concurrency=concurrency_of(ctx, ctx.controls), record=ctx.record_request,
                alive=running.alive, death_reason=death_reason_of(running), label=f"launch-{i}-{mode}",
                controls=list(ctx.controls), kind="restarts")
            outcome.gate = gate
            if gate.stopped_reason:
                outcome.status, outcome.reason = "failed", gate.stopped_reason
            outcome.cache_not_loaded = cache_not_loaded(getattr(running, "log_path", None), declared.not_loaded_patterns)
    except (RuntimeStartError, EnvironmentUnavailable) as exc:
        outcome.did_not_start(exc, refused=isinstance(exc, RuntimeStartError))
        log.warning("restart %d of %s failed to start: %s", i, ctx.arm_name, outcome.reason)
    return outcome


def run(ctx: StageContext) -> RestartsResult:
    mode = settings(ctx.profile).caches
    if mode == "both":
        result = run_launches(ctx, "fresh")
        result.with_kept_caches = run_launches(ctx, "kept")
        return result
    return run_launches(ctx, mode)
