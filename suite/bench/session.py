"""One arm's run from its first start to its summary: `BenchSession`.

It starts the runtime (`suite.bench.launch`), makes the signature and the run record (or continues
an interrupted one, `suite.bench.provenance`), watches memory, gives the stages fresh launches,
runs the stages in order writing each result as soon as it exists, and records how a runtime
failed (`suite.bench.failures`).
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from memwatch.report import WatchdogReport
from suite import gpu, progress
from suite.bench.failures import RuntimeDied, WatchdogTripped, failure_at_start, failure_in_stage
from suite.bench.launch import _watchdog_for, runtime_pids, start_with_determinism
from suite.bench.plan import ArmPlan
from suite.bench.provenance import carried_parts, configuration_differences, invocation_of, make_signature
from suite.claims import stage_line
from suite.client import GenerationParams, OpenAIClient
from suite.client.budget import budget as client_budget
from suite.client.budget import stage_budget_s
from suite.contention import ContentionMeter
from suite.errors import RuntimeStartError, SuiteError
from suite.launchers.base import LaunchSpec, LoraAdapter, RunningRuntime
from suite.provenance import suite_build
from suite.records import (
    RESULT_MODELS,
    DeterminismOutcome,
    Invocation,
    LaunchWatchdog,
    RunManifest,
    RunRecord,
    RuntimeFailure,
    Summary,
    find_incomplete,
    new_run_id,
    utcnow,
)
from suite.secrets import redact_args, redact_env
from suite.signature import Signature
from suite.stages import STAGES, StageContext, added_on_verdict, get_stage, schedule, verdict_of
from suite.stages.repeat import death_reason_of, died_text

if TYPE_CHECKING:
    from suite.stages.extraction.judge import JudgeChoice

log = logging.getLogger(__name__)


class BenchSession:
    """One arm's run, from its first start to its summary; a context manager.

    `start()` starts the runtime (its determinism mode first, then its default mode if refused),
    makes the configuration signature, creates the run record (or, with `resume`, continues the
    interrupted one: never one a live process holds, RunInUse, and only when this launch's
    configuration is the one it recorded, else a new run starts and a warning says what
    differs) and starts the memory watchdog. `launch()` gives the stages that need them
    fresh runtimes of the same configuration, each under a watchdog of its own. `run()` runs the
    stages in order; a failure ends the arm with its status and reason in the summary. Leaving the
    block stops the clients, the watchdog and the runtime (Ctrl-C included: the run then stays
    incomplete and resumable) and, after a normal exit, writes the watchdog report and the summary.
    """

    def __init__(self, plan: ArmPlan, results: Path, *, resume: bool = False, judge: JudgeChoice | None = None,
                 controls_request: list[str] | None = None, invocation: Invocation | None = None,
                 settings: dict[str, BaseModel] | None = None):
        self.plan, self.results, self.judge = plan, results, judge
        self.invocation = invocation or invocation_of(plan, [], controls_request, None)
        self.failure: RuntimeFailure | None = None  # how the runtime failed, when it did
        self.controls_request = list(controls_request or ["all"])
        self.settings = dict(settings or {})  # every stage's typed settings (the request's)
        self.started = utcnow()
        self._t0 = time.monotonic()
        self.record: RunRecord | None = None
        self.carried: dict[str, Any] = {}  # a resumed run's finished parts of the stage it was cut in
        self.status: str = "complete"
        self.reason: str | None = None
        self.not_run: list[str] = []  # stages that need a runtime the suite started
        self._stack = contextlib.ExitStack()
        # The run to continue, if any: its owner lock is held from here (RunInUse: a live process
        # writes it); it is continued only if this launch's configuration is the one it recorded.
        previous = find_incomplete(results, plan.card.name, plan.arm_name) if resume else None
        self.previous: RunRecord | None = RunRecord.open_incomplete(previous) if previous is not None else None
        self.log_dir = results / ".logs" / f"{plan.card.name}-{plan.arm_name}-{int(time.time() * 1000)}"
        self.log_dir.mkdir(parents=True, exist_ok=True)

    # -- start and stop ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the runtime and everything that watches and records it; RuntimeStartError if it never got ready."""
        plan = self.plan
        rt, spec, determinism = start_with_determinism(plan, self.log_dir, [])
        self.runtime = self._stack.enter_context(rt)
        try:
            self._started(rt, spec, determinism)
        except BaseException:
            self._stack.close()  # never a runtime left behind by a start that went wrong later
            raise

    def _started(self, rt: RunningRuntime, spec: LaunchSpec, determinism: DeterminismOutcome) -> None:
        plan = self.plan
        signature = make_signature(plan, rt, spec)
        if self.previous is not None:
            self._resume_or_not(self.previous, signature)
            self.previous = None
        if self.record is None:
            manifest = RunManifest(run_id=new_run_id(signature.digest), model=plan.card.name, arm=plan.arm_name,
                                   suite=suite_build(), runtime=plan.runtime.name, launcher=plan.launcher.name,
                                   profile=plan.profile.name, started_at=self.started, signature=signature,
                                   profile_settings=plan.profile.model_dump(mode="json"),
                                   invocation=self.invocation)
            self.record = RunRecord.create(self.results, manifest)
        if determinism.memo_key is not None:  # a refusal seen in this run: later benches name it
            from suite import refusals

            seen = refusals.known(determinism.memo_key)
            if seen is not None:
                refusals.remember(determinism.memo_key, seen.model_copy(update={"run_id": self.record.manifest.run_id}))
        self._move_logs()
        self.summary = Summary(run_id=self.record.manifest.run_id, model=plan.card.name, arm=plan.arm_name,
                               suite=self.record.manifest.suite or suite_build(), runtime=plan.runtime.name,
                               launcher=plan.launcher.name, profile=plan.profile.name,
                               started_at=self.record.manifest.started_at, determinism=determinism,
                               signature=signature, startup_s=rt.startup_s,
                               invocation=self.record.manifest.invocation or self.invocation)
        # the fresh launches of this arm (restarts, control rows, sessions) running now: the suite's own
        self.launched: list[RunningRuntime] = []
        self.watchdog = _watchdog_for(plan, rt, own=lambda: runtime_pids(self.launched))
        self.watchdog.start()
        self.base_controls = list(spec.controls)
        self.ctx = StageContext(card=plan.card, arm_name=plan.arm_name, arm=plan.arm, runtime=plan.runtime,
                                profile=plan.profile, sampling=plan.card.sampling, signature=signature,
                                record=self.record, client=plan.client(rt, self.base_controls), running=rt,
                                controls=self.base_controls, launch=self.launch,
                                controls_request=self.controls_request, carried=self.carried,
                                settings=self.settings)
        self._stack.callback(self.ctx.client.close)
        if self.judge is not None:
            from suite.stages.extraction.judge_run import client_for_url

            sampling = plan.card.sampling
            self.ctx.judge = client_for_url(self.judge.url, self.judge.model, GenerationParams(
                seed=sampling.seed, temperature=sampling.temperature))
            self._stack.callback(self.ctx.judge.close)

    def _resume_or_not(self, previous: RunRecord, signature: Signature) -> None:
        """Continue `previous` if this launch has its configuration; else say why and leave it."""
        differs = configuration_differences(previous.manifest, signature, self.plan.profile)
        if differs:
            log.warning("arm %s: %s not resumed: this launch's configuration differs from the run's (%s); "
                        "a new run starts and the old one stays incomplete", self.plan.arm_name, previous.dir,
                        "; ".join(differs))
            previous.release()
            return
        self.record = previous
        done = {n for n in RESULT_MODELS if previous.stage_done(n)}
        self.carried = carried_parts(previous, done)
        moved = previous.set_aside_unfinished(done, lambda line: any(
            line.get("stage") == name and STAGES[name].carries_line(part, line)  # type: ignore[misc]
            for name, part in self.carried.items()))
        log.info("resuming %s%s%s", previous.dir, f" ({moved} request lines of the interrupted stage set aside in "
                 "requests-interrupted.jsonl)" if moved else "",
                 "".join(f"; {name}: its finished parts are taken up" for name in self.carried))

    def _move_logs(self) -> None:
        """Logs written before the record existed (or was reopened) move into it, never over a file."""
        assert self.record is not None
        if self.log_dir != self.record.log_dir:
            stamp = int(time.time() * 1000)
            moved: dict[Path, Path] = {}
            for p in self.log_dir.iterdir():
                target = self.record.log_dir / p.name
                if target.exists():  # a resumed run's first launch wrote a log of this name
                    target = target.with_name(f"{p.stem}-resumed-{stamp}{p.suffix}")
                p.rename(target)
                moved[p] = target
            self.log_dir.rmdir()
            # the running runtime writes on into the moved file: its log is read from there
            rt = getattr(self, "runtime", None)
            if rt is not None and Path(rt.log_path).parent == self.log_dir:
                rt.log_path = self.record.log_dir / Path(rt.log_path).name
            self.log_dir = self.record.log_dir
            rt = getattr(self, "runtime", None)
            if rt is not None and getattr(rt, "log_path", None) in moved:  # its death reason is read there
                rt.log_path = moved[rt.log_path]

    def failed_start(self, exc: RuntimeStartError) -> Summary:
        """A runtime that never got ready: the record says how it failed (a crash by its signal, an
        exit status, a refusal, a time-out), with its error line, its log's tail and its log file;
        the console says so at once."""
        plan = self.plan
        self._stack.close()
        if self.previous is not None:  # never launched: the interrupted run stays as it was
            self.previous.release()
            self.previous = None
        if self.record is None:
            self.record = RunRecord.create(self.results, RunManifest(
                run_id=new_run_id(None), model=plan.card.name, arm=plan.arm_name, runtime=plan.runtime.name,
                suite=suite_build(),
                launcher=plan.launcher.name, profile=plan.profile.name, started_at=self.started,
                invocation=self.invocation))
            self._move_logs()
        log_path = Path(exc.log_path) if exc.log_path else None
        if log_path is not None and not log_path.exists() and (self.record.log_dir / log_path.name).exists():
            log_path = self.record.log_dir / log_path.name  # moved into the run folder
        failure = failure_at_start(exc, log_path, self.record.dir)
        reason = failure.what + (f"; its log: {failure.error_line}" if failure.error_line
                                 else "; no error line in its log")
        log.error("arm %s: %s (log: %s)", plan.arm_name, reason, log_path or "none")
        m = self.record.manifest
        summary = Summary(run_id=m.run_id, model=m.model, arm=m.arm, runtime=m.runtime, launcher=m.launcher,
                          suite=m.suite or suite_build(), profile=m.profile, started_at=m.started_at, signature=m.signature, finished_at=utcnow(),
                          status="failed", reason=reason, failure=failure, invocation=m.invocation or self.invocation)
        self.record.finish(summary)
        return summary

    def _died(self, name: str, before: bool = False) -> RuntimeDied:
        """The arm's runtime ended on its own before or during stage `name`: the failure, typed,
        and the error that ends the arm ("the runtime crashed: SIGSEGV (segmentation fault) during
        stage gate after 3 of 20 requests; its log: ...")."""
        assert self.record is not None
        rt = self.runtime
        if before:
            where, done, planned = f"before stage {name}", None, None
        else:
            planned = get_stage(name).requests_for(self.plan.profile)
            done = self._answered(name)
            where = f"during stage {name} after {done} of {planned or '?'} requests"
        self.failure = failure_in_stage(rt, where, name, done, planned, self.record.dir)
        return RuntimeDied(died_text(death_reason_of(rt)(), where))

    def _answered(self, stage: str) -> int:
        """Requests of this stage the record holds an answer to."""
        assert self.record is not None
        import json

        n = 0
        marker = f'"stage": "{stage}"'.encode()
        try:
            with self.record.requests_path.open("rb") as fh:
                for line in fh:
                    if marker not in line:
                        continue
                    try:
                        data = json.loads(line)
                    except (ValueError, RecursionError):  # torn, not UTF-8, nested too deep: not an answer
                        continue
                    if isinstance(data, dict) and data.get("stage") == stage and not data.get("error") \
                            and data.get("kind") != "extraction-fact":
                        n += 1
        except OSError:
            return 0
        return n

    def __enter__(self) -> BenchSession:
        assert self.record is not None, "start() first"
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> None:
        try:
            report = self.watchdog.stop()
            if exc_type is not None:  # Ctrl-C or a bug: everything stops; the run stays resumable
                assert self.record is not None
                self.record.release()
                return
            if self.watchdog.tripped:
                self.status, self.reason = "stopped-by-watchdog", self.reason or "stopped by the memory watchdog"
            assert self.record is not None
            if not self.record.stage_done("watchdog"):
                self.record.write_stage("watchdog", report)
        finally:
            self._stack.close()  # clients, then the runtime
        self._finish()

    def _finish(self) -> None:
        s = self.summary
        s.status = self.status  # type: ignore[assignment]
        s.reason = self.reason
        if self.status == "failed" and self.failure is not None:
            s.failure = self.failure
        if self.not_run and self.reason is None:
            from suite.launchers.external import NOT_STARTED

            s.reason = f"{' and '.join(self.not_run)} not run: {NOT_STARTED}"
        s.finished_at = utcnow()
        s.wall_s = round(time.monotonic() - self._t0, 2)
        assert self.record is not None
        self.record.finish(s)

    # -- fresh launches -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def launch(self, controls: list[str] | None = None, inherit: bool = True, lora: list[LoraAdapter] | None = None,
               env: dict[str, str] | None = None) -> Iterator[tuple[RunningRuntime, OpenAIClient]]:
        """A fresh runtime under its own watchdog: the arm's controls, plus `controls`.

        `inherit` (restarts): also the controls the arm's main launch ran with (its accepted
        determinism mode), so the same configuration starts again. Without it (a control matrix
        row) the launch has the arm's own controls and the row's, nothing else. `env`: more
        environment for this launch (compile-cache folders). A trip of its watchdog ends the
        block with WatchdogTripped (chained to what the body raised when the runtime was stopped).
        """
        plan, record = self.plan, self.record
        assert record is not None
        inherited = [c for c in self.base_controls if c not in plan.arm.controls] if inherit else []
        wanted = inherited + [c for c in (controls or []) if c not in inherited]
        sub_spec = plan.spec(wanted, record.log_dir / f"runtime-{'-'.join(wanted) or 'default'}-{int(time.time()*1000)}.log")
        if lora is not None:
            sub_spec.lora = list(lora)
        if env:
            sub_spec.env.update(env)
        sub_rt = plan.launcher.start(sub_spec)
        sub_rt.launch_controls = list(sub_spec.controls)
        sub_rt.launch_env = redact_env(sub_spec.env)
        sub_rt.launch_args = redact_args(list(sub_spec.args))
        sub_wd = _watchdog_for(plan, sub_rt, own=lambda: runtime_pids(
            [r for r in [self.runtime, *self.launched] if r is not sub_rt]))
        sub_wd.start()
        self.launched.append(sub_rt)
        label = f"{self.ctx.stage or 'launch'}: {'+'.join(wanted) or 'default'}"

        def stopped() -> WatchdogReport:
            if sub_rt in self.launched:
                self.launched.remove(sub_rt)
            report = sub_wd.stop()
            self.summary.launch_watchdogs.append(LaunchWatchdog(label=label, report=report))
            return report

        try:
            with sub_rt, plan.client(sub_rt, wanted) as client:
                yield sub_rt, client
        except Exception as exc:
            report = stopped()
            if sub_wd.tripped:
                raise WatchdogTripped(report) from exc
            raise
        except BaseException:
            stopped()
            raise
        report = stopped()
        if sub_wd.tripped:
            raise WatchdogTripped(report)

    # -- the stages ---------------------------------------------------------------------------------

    def run(self, stages: list[str], on_stage: Callable[[str], None] | None = None,
            on_result: Callable[[str], None] | None = None) -> None:
        """The stages in order, each result written as soon as it exists (then `on_result(name)`,
        between stages, while nothing is measured); a failure ends the arm."""
        plan, ctx, record, rt, watchdog = self.plan, self.ctx, self.record, self.runtime, self.watchdog
        assert record is not None
        stages = schedule(stages, plan.profile)
        name = ""
        try:
            for name in stages:
                if record.stage_done(name):
                    ctx.results[name] = record.read_stage(name)
                    gives, verdict = verdict_of(name, ctx.results[name])
                    if gives:
                        ctx.reproducible = verdict
                    continue
                if watchdog.tripped:
                    break
                stage = get_stage(name)
                if stage.fresh_runtimes and not plan.launcher.starts_runtimes:
                    from suite.launchers.external import NOT_STARTED

                    log.info("arm %s: stage %s not run: %s", plan.arm_name, name, NOT_STARTED)
                    self.not_run.append(name)
                    continue
                if stage.fresh_runtimes:
                    rt.stop()  # these stop and start the runtime: free the machine first
                elif not rt.alive():
                    raise self._died(name, before=True)
                log.info("arm %s: stage %s", plan.arm_name, name)
                if on_stage is not None:
                    on_stage(name)
                t0 = time.monotonic()
                ctx.stage = name
                # a bar with the stage's requests (count, rate, time left) or plain lines in a log
                # every request of the stage, of any client, ends by the stage's time budget
                planned = stage.requests_for(ctx.profile)
                with progress.stage(f"{name} {plan.arm_name}", total=planned), \
                        gpu.EnergyMeter() as meter, ContentionMeter(own_runtime=plan.launcher.runs_children) as cpu, \
                        client_budget(stage_budget_s(planned), f"stage {name}"):
                    result = stage.runner()(ctx)
                contention = cpu.result()
                if contention is not None:
                    self.summary.contention[name] = contention
                    if contention.busy:
                        log.warning("arm %s: stage %s: %s", plan.arm_name, name, contention.text())
                energy = meter.result(ctx.output_tokens.get(name))
                if energy is not None:
                    self.summary.energy[name] = energy
                    log.info("arm %s: stage %s used %.1f J (%s J/token)", plan.arm_name, name, energy.joules,
                             energy.j_per_token)
                self.summary.stage_s[name] = round(time.monotonic() - t0, 1)
                said = stage_line(self.summary, name, result)
                log.info("arm %s: stage %s done in %.1f s%s", plan.arm_name, name, time.monotonic() - t0,
                         f": {said}" if said else "")
                record.write_stage(name, result)
                if on_result is not None:
                    on_result(name)
                ctx.results[name] = result
                if not stage.fresh_runtimes and not rt.alive():
                    # What the stage measured before the runtime died is kept (its result and
                    # every request line); the arm stops here and the bench goes on.
                    raise self._died(name)
                gives, verdict = verdict_of(name, result)
                if gives:
                    ctx.reproducible = verdict
                    added = added_on_verdict(stages, plan.profile, verdict)
                    if added:
                        # The process of elimination (the control matrix): one control at a time, after the rest.
                        log.info("arm %s: stage %s found %s; %s run%s last", plan.arm_name, name,
                                 "more than one answer" if verdict is False else "one answer", ", ".join(added),
                                 "" if len(added) > 1 else "s")
                        stages.extend(added)
                        ctx.automatic_controls = True
        except WatchdogTripped:
            self.status, self.reason = "stopped-by-watchdog", "a restarted runtime was stopped by the memory watchdog"
        except RuntimeDied as exc:
            self.status, self.reason = ("stopped-by-watchdog", "stopped by the memory watchdog") if watchdog.tripped \
                else ("failed", str(exc))
            log.error("arm %s: %s (log: %s)", plan.arm_name, self.reason, rt.log_path)
        except SuiteError as exc:
            if watchdog.tripped:
                self.status, self.reason = "stopped-by-watchdog", "stopped by the memory watchdog"
            elif name in STAGES and not STAGES[name].fresh_runtimes and not rt.alive():
                # the stage gave up because its runtime had ended: that is the cause
                self.status, self.reason = "failed", str(self._died(name))
                log.error("arm %s: %s (log: %s)", plan.arm_name, self.reason, rt.log_path)
            else:
                self.status, self.reason = "failed", f"stage {name}: {exc}"
                log.error("arm %s: %s", plan.arm_name, self.reason)

