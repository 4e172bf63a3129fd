"""Starting an arm's runtime: its determinism mode first, remembered refusals, and its watchdog.

`start_with_determinism` starts the runtime in its determinism mode and, where it refuses or dies
before it is ready, in its default mode with the outcome recorded (a refusal is remembered per
configuration on this machine, `suite.refusals`; `ArmPlan.retry_refused` tries it again);
`_watchdog_for` makes the memory watchdog of one launch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from pathlib import Path

from suite.bench.plan import ArmPlan
from suite.errors import RuntimeStartError
from suite.launchers.base import LaunchSpec, RunningRuntime
from suite.probes import detect_hardware
from suite.records import DeterminismOutcome, utcnow

log = logging.getLogger(__name__)


def start_with_determinism(plan: ArmPlan, log_dir: Path, extra_controls: list[str]) -> tuple[RunningRuntime, LaunchSpec, DeterminismOutcome]:
    """Start in the runtime's determinism mode; on refusal, record it and start in default mode.

    A refusal of the same configuration on this machine is remembered (suite.refusals): the mode is
    then not started again unless `plan.retry_refused`; the outcome says when it was seen."""
    from suite import refusals

    control = plan.runtime.determinism_control
    if control and not plan.arm.determinism_mode:  # the arm measures the default mode
        spec = plan.spec(extra_controls, log_dir / "runtime.log")
        return plan.launcher.start(spec), spec, DeterminismOutcome(control=control, outcome="off")
    if control and control not in extra_controls:
        spec = plan.spec([control, *extra_controls], log_dir / f"runtime-{control}.log")
        key = refusals.refusal_key(plan.launcher, spec, control)
        seen = None if plan.retry_refused else refusals.known(key)
        if seen is not None:
            log.info("%s: its determinism mode %s was %s on this machine at %s%s; not started again "
                     "(--retry-refused tries it)", plan.runtime.name, control, seen.outcome, seen.seen_at,
                     f" (run {seen.run_id})" if seen.run_id else "")
            outcome = DeterminismOutcome(control=control, outcome="refused" if seen.outcome == "refused" else "failed",
                                         error_line=seen.error_line, known_from=seen.run_id or seen.seen_at)
        else:
            try:
                rt = plan.launcher.start(spec)
                refusals.forget(key)
                return rt, spec, DeterminismOutcome(control=control, outcome="on")
            except RuntimeStartError as exc:
                word = "refused" if exc.refused else "failed to start in"
                log.warning("%s %s its determinism mode %s: %s", plan.runtime.name, word, control,
                            exc.error_line or (f"{exc.ended} {exc.after_s or 0:.1f} s after start" if exc.ended else exc))
                outcome = DeterminismOutcome(control=control, outcome="refused" if exc.refused else "failed",
                                             error_line=exc.error_line)
                if exc.refused:  # a crash or a time-out may not come again: only a refusal is remembered
                    refusals.remember(key, refusals.KnownRefusal(runtime=plan.runtime.name, control=control,
                                                                 outcome=outcome.outcome, error_line=exc.error_line,
                                                                 seen_at=utcnow()))
                    outcome.memo_key = key
    else:
        outcome = DeterminismOutcome(control=control, outcome="on" if control else "not-offered")
    spec = plan.spec(extra_controls, log_dir / "runtime.log")
    return plan.launcher.start(spec), spec, outcome


def runtime_pids(runtimes: list[RunningRuntime]) -> set[int]:
    """The pids of these runtimes' process trees (a local runtime's leader and its descendants)."""
    import psutil

    out: set[int] = set()
    for r in runtimes:
        pid = getattr(r, "pid", None)
        if not pid:
            continue
        try:
            leader = psutil.Process(pid)
            out.add(pid)
            out.update(c.pid for c in leader.children(recursive=True))
        except psutil.Error:
            continue
    return out


def _watchdog_for(plan: ArmPlan, rt: RunningRuntime, own: Callable[[], set[int]] | None = None):
    """The memory watchdog of one launch; `own`: the pids of the bench's other runtimes of this arm
    (its later launches), which the GPU probe counts as the suite's own, never as other processes."""
    import memwatch

    t = plan.card.watchdog
    # Growth of host memory means a spill only for a runtime that serves from a GPU; a CPU
    # runtime's memory is host memory, held to the host ceiling alone.
    on_gpu = detect_hardware().gpu is not None and "gpu" in plan.runtime.platforms
    policy = memwatch.Policy(spill_gb=t.spill_gb if on_gpu else None, device_max_gb=t.device_max_gb,
                             host_max_gb=t.host_max_gb)
    probes = memwatch.default_probes(pid=rt.pid, container_id=rt.container_id, own=own)
    return memwatch.Watchdog(policy, probes=probes, stop=rt.kill)

