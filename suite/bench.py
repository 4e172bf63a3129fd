"""The bench: for every arm of a model, prepare, launch under the watchdog, run the stages, stop.

Per arm: the runtime is installed (or its image built) and the model format prepared; the
runtime is started in its determinism mode first (vLLM: batch-invariant) and, if it refuses or
dies before it is ready, started again in its default mode with the refusal recorded; the run
record is created with the configuration signature; the stages run in order (gate, latency,
extraction, restarts) with the watchdog sampling memory the whole time; a watchdog trip stops the
arm (a result, not a crash) and the bench goes on with the next arm. Nothing already measured is
lost: each stage's result is written as soon as it finishes, and an interrupted run is resumable.
Before any arm takes the GPU, what a suite killed with -9 left behind (a container, a runtime's
workers) is ended (`launchers.reap_orphans`): the GPU check would otherwise refuse and the
orphan stay.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from memwatch.report import WatchdogReport
from pydantic import ValidationError

from suite import gpu, progress
from suite.catalog import (Arm, ModelCard, arm_runtime, format_dir, format_path, get_card, prepare_format,
                           prepared_checksum, prepared_model)
from suite.client import GenerationParams, OpenAIClient
from suite.client.budget import budget as client_budget, stage_budget_s
from suite.contention import ContentionMeter
from suite.definitions import RuntimeDefinition, get_definition
from suite.errors import EnvironmentUnavailable, RuntimeStartError, SuiteError
from suite.launchers import launcher_for, reap_orphans
from suite.launchers.base import LaunchSpec, Launcher, LoraAdapter, RunningRuntime
from suite.profiles import PROFILES, Profile, get_profile
from suite.records import (RESULT_MODELS, DeterminismOutcome, Invocation, LaunchWatchdog, RunInUse, RunManifest,
                           RunRecord, RuntimeFailure, Summary, find_incomplete, new_run_id, read_requests, utcnow)
from suite.secrets import REDACTED, SECRET_NAME, redact_args, redact_env
from suite.provenance import suite_build
from suite.signature import Signature, current_node
from suite.probes import cache_dirs, cache_state, detect_hardware
from suite.hashing import prompt_set_hash, resolve_revision
from suite.stages import ORDER, STAGES, StageContext, added_on_verdict, get_stage, may_run, schedule, verdict_of
from suite.stages.repeat import death_reason_of, died_text

log = logging.getLogger(__name__)


@dataclass
class ArmPlan:
    """One arm resolved against the catalog and the runtime definitions."""

    card: ModelCard
    arm_name: str
    arm: Arm
    runtime: RuntimeDefinition
    launcher: Launcher
    model_path: Path
    profile: Profile
    lora: list[LoraAdapter] = field(default_factory=list)
    retry_refused: bool = False  # start the determinism mode even where this machine saw it refused (suite.refusals)

    def spec(self, controls: list[str], log_path: Path) -> LaunchSpec:
        env: dict[str, str] = {}
        args: list[str] = []
        refused: list[str] = []
        for name in [*self.arm.controls, *controls]:
            control = self.runtime.control(name)
            env.update(control.env)
            args.extend(control.args)
            refused.extend(control.refused_patterns)
        env.update(self.arm.env)
        args.extend(self.arm.args)
        return LaunchSpec(runtime=self.runtime, model_path=self.model_path, served_name=self.card.served_name,
                          seed=self.card.sampling.seed, context_length=self.card.context_length,
                          controls=[*self.arm.controls, *controls], env=env, args=args, lora=self.lora,
                          log_path=log_path, startup_timeout_s=self.runtime.server.startup_timeout_s,
                          refused_patterns=refused)

    def extra_body(self, controls: list[str]) -> dict[str, Any]:
        body = dict(self.runtime.request.extra_body)
        for name in [*self.arm.controls, *controls]:
            body.update(self.runtime.control(name).extra_body)
        return body

    def params(self, controls: list[str]) -> GenerationParams:
        """The card's sampling and the request fields of the runtime and these controls."""
        sampling = self.card.sampling
        return GenerationParams(seed=sampling.seed, temperature=sampling.temperature, top_p=sampling.top_p,
                                extra_body=self.extra_body(controls))

    def client(self, rt: RunningRuntime, controls: list[str]) -> OpenAIClient:
        return self.launcher.client(rt.base_url, self.card.served_name, params=self.params(controls),
                                    api_key=rt.api_key)


def plan_arms(model: str, arms: list[str] | None, launcher_name: str, profile_name: str,
              gate_requests: int | None = None, overrides: dict[str, Any] | None = None) -> list[ArmPlan]:
    card = get_card(model)
    if card.role == "judge" and not arms:
        log.info("model %s is a judge model; benchmarking it like any other", model)
    wanted = arms or list(card.arms)
    unknown = [a for a in wanted if a not in card.arms]
    if unknown:
        raise SuiteError(f"model {model!r} has no arm {unknown[0]!r}; known: {', '.join(card.arms)}")
    profile = plan_arms_profile(profile_name, gate_requests, overrides)
    # One launcher per arm (`auto`: local where the runtime has a local recipe for this platform,
    # else Docker where an engine answers); an arm that cannot run here gets an
    # UnavailableLauncher that says what it needs and what this machine lacks.
    launchers: dict[str, Launcher] = {}
    plans = []
    for name in wanted:
        arm = card.arms[name]
        runtime = arm_runtime(card, name)  # pinned to the arm's version; bad input: one line naming the card
        launcher = launcher_for(runtime, launcher_name, card.gpu_memory_gb, launchers,
                                gpus=arm.gpus(runtime))
        plans.append(ArmPlan(card, name, arm, runtime, launcher, format_path(card, arm.format), profile))
    return plans


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def plan_external(url: str, served_model: str | None, model: str | None, arm_name: str | None,
                  profile_name: str, gate_requests: int | None = None, tokenizer: str | None = None,
                  overrides: dict[str, Any] | None = None) -> ArmPlan:
    """One arm for a server the suite did not start (`suite bench --url`), checked before anything is written.

    The card is synthetic: named after `model` (a catalog card's sampling, context length and
    watchdog thresholds are taken over when `model` names one), else "external"; its one format
    is the server's. The runtime definition is synthetic too: the capabilities, request fields and
    reported timings (`[metrics]`, `[timings]`) of the runtime the server looks like (llama-server,
    vLLM), else an OpenAI-compatible server's safe defaults (no logprobs asked for, no JSON schema,
    no runtime timings read). Unreachable URLs, servers that are not an OpenAI API
    and served models the server does not list are one-line SuiteErrors.
    """
    from suite.catalog import ModelFormat, load_catalog
    from suite.definitions import Capabilities, MetricsSpec, RequestSpec, ServerSpec, TimingsSpec
    from suite.launchers.external import ExternalLauncher, load_tokenizer, probe_server

    for what, value in (("--model", model), ("--arms", arm_name)):
        if value is not None and not _NAME.match(value):
            raise SuiteError(f"{what} {value!r}: use letters, digits, '.', '_' or '-' (it names a results folder)")
    profile = plan_arms_profile(profile_name, gate_requests, overrides)
    info = probe_server(url, served_model)
    counter = load_tokenizer(tokenizer) if tokenizer else None
    name = model or "external"
    base = load_catalog().get(name)
    known = get_definition(info.kind) if info.kind else None
    runtime = RuntimeDefinition(
        name=known.name if known else "external", platforms=["cpu", "gpu"],
        description=f"{known.name if known else 'an OpenAI-compatible server'} at {info.url}, started outside the suite",
        server=ServerSpec(ready_path="/v1/models", startup_timeout_s=30),
        capabilities=(known.capabilities.model_copy(update={"lora": False}) if known
                      else Capabilities(logprobs="none", token_ids=False, json_schema=False)),
        request=known.request.model_copy() if known else RequestSpec(),
        metrics=known.metrics.model_copy() if known else MetricsSpec(),
        timings=known.timings.model_copy() if known else TimingsSpec())
    fmt_kind = "gguf" if info.kind == "llamacpp" else "hf"
    fmt = ModelFormat.model_construct(kind=fmt_kind, source=f"external:{info.url}", file=None, sha256=None,
                                      revision=None, quantization=None)
    arm_key = arm_name or "external"
    fields: dict[str, Any] = {"name": name, "title": base.title if base else f"{info.served_model} at {info.url}",
                              "served_name": info.served_model, "formats": {"external": fmt},
                              "arms": {arm_key: Arm(runtime=runtime.name, format="external")}}
    if base is not None:
        fields.update(description=base.description, context_length=base.context_length,
                      sampling=base.sampling, watchdog=base.watchdog)
    else:
        fields["description"] = f"the model {info.served_model!r} served at {info.url} (a server the suite did not start)"
    # Constructed, not validated: its one format's source is the server, no source a card may name.
    card = ModelCard.model_construct(**{**ModelCard(**{**fields, "formats": {}, "arms": {}}).__dict__,
                                        "formats": fields["formats"], "arms": fields["arms"]})
    return ArmPlan(card, arm_key, card.arms[arm_key], runtime, ExternalLauncher(info, counter), Path("external"),
                   profile)


def plan_arms_profile(profile_name: str, gate_requests: int | None = None,
                      overrides: dict[str, Any] | None = None) -> Profile:
    """The profile with the command line's overrides, checked (a bad value is one line): its own
    settings by name, a stage's under `stage_settings` (resolved here with the stage's values for
    the profile, as the run record keeps them)."""
    profile = get_profile(profile_name)
    if gate_requests is not None:
        if gate_requests < 2:
            raise SuiteError(f"--gate-requests {gate_requests}: the gate needs at least 2 requests per prompt")
        profile = profile.model_copy(update={"gate_requests": gate_requests})
    if overrides:
        unknown = [k for k in overrides if k not in Profile.model_fields]
        if unknown:
            raise SuiteError(f"unknown profile setting {unknown[0]!r}")
        try:
            profile = Profile.model_validate({**profile.model_dump(), **overrides})
        except ValidationError as exc:
            err = exc.errors()[0]
            key = str(err["loc"][0])  # the setting (a list's item: its list)
            raise SuiteError(f"--{key.replace('_', '-')} {overrides.get(key)!r}: {err['msg']}") from None
    # the settings of stages that keep their own, resolved for this profile: the run record keeps them
    own = {name: stage for name, stage in STAGES.items() if stage.settings is not None}
    if own:
        resolved = {name: stage.settings_for(profile).model_dump(mode="json") for name, stage in own.items()}
        profile = profile.model_copy(update={"stage_settings": resolved})
    return profile


# -- an arm's signature ---------------------------------------------------------------------------

def _request_extra(plan: ArmPlan, controls: list[str]) -> dict[str, Any]:
    """Fields sent with every request (token ids, cache flags): they can change answers. String
    values under secret-looking names are redacted (flags such as return_token_ids kept)."""
    return {k: (REDACTED if isinstance(v, str) and SECRET_NAME.search(k) else v)
            for k, v in sorted(plan.extra_body(controls).items())}


def make_signature(plan: ArmPlan, rt: RunningRuntime, spec: LaunchSpec) -> Signature:
    """The arm's configuration signature: model, runtime and its stack, command, env, sampling, hardware.

    What depends on how the runtime was launched comes from the arm's launcher: the version
    (`launcher.version`: a local install's version command, else the server's report), the env
    (`launcher.env`), torch / Triton / CUDA of a local Python runtime (`launcher.stack`, with the
    state of the compile caches its definition declares then), the hardware (`launcher.hardware`:
    unknown for a remote server) and
    the launcher's own fields (`launcher.reports`: an external server's URL and self-reports).
    A branch revision of an `hf:` format is resolved to its commit where it can be (see
    `resolve_revision`); else it is recorded as given, marked unresolved.
    """
    launcher, runtime = plan.launcher, plan.runtime
    fmt = plan.card.formats[plan.arm.format]
    env = launcher.env(runtime, spec)
    commit, resolved = resolve_revision(fmt.source, fmt.revision, format_dir(plan.card, plan.arm.format))
    if resolved is False:
        log.warning("model %s format %s: revision %r of %s recorded as given, not resolved to a commit",
                    plan.card.name, plan.arm.format, fmt.revision, fmt.source)
    sampling: dict[str, Any] = plan.card.sampling.model_dump(mode="json")
    # The profile's cap on every gate prompt's max_tokens (None: each prompt file's own): an answer
    # cut at another cap is another answer, so two runs compared must say which they had.
    sampling["gate_max_tokens"] = plan.profile.gate_max_tokens
    request_extra = _request_extra(plan, spec.controls)
    if request_extra:
        sampling["request_extra"] = request_extra
    stack = launcher.stack(runtime, env)
    # The compile caches the definition declares, probed where the launcher knows the runtime's stack.
    declared = runtime.compile_cache
    caches = cache_state(cache_dirs(declared, {**os.environ, **env})) if stack is not None and declared.dirs else None
    parallel = parallel_fields(rt.command, env)
    return Signature(
        model=plan.card.name, model_format=plan.arm.format,
        model_sha256=prepared_checksum(plan.card, plan.arm.format) or fmt.sha256,
        model_revision=fmt.revision, model_commit=commit, model_revision_resolved=resolved,
        runtime=runtime.name, runtime_pin=runtime.pinned_version, runtime_version=launcher.version(runtime, rt),
        runtime_features=launcher.features(runtime, rt), kernel_path=launcher.kernel_path(runtime, rt),
        runtime_stack=stack, image_digest=rt.image_digest, launcher=launcher.name, command=redact_args(rt.command),
        env=redact_env(env), controls=list(spec.controls), sampling=sampling, prompt_set_hash=prompt_set_hash(),
        hardware=launcher.hardware(), compile_cache=caches, node=current_node(),
        model_random_weights=True if getattr(plan.card, "random_weights", False) else None, **launcher.reports(),
        **parallel,
    ).with_digest()


def parallel_fields(command: list[str], env: dict[str, str]) -> dict[str, Any]:
    """The signature's tensor- and pipeline-parallel degree and the GPUs used, where the server
    spreads over more than one GPU (nothing otherwise, so one-GPU records keep their digests): the
    first N GPUs, or the first N that CUDA_VISIBLE_DEVICES names, as the server sees them."""
    tp, pp = gpu.parallel_degree(command)
    if tp * pp <= 1:
        return {}
    names = gpu.device_names()
    visible = env.get("CUDA_VISIBLE_DEVICES") or os.environ.get("CUDA_VISIBLE_DEVICES")
    indices = [int(x) for x in visible.split(",") if x.strip().isdigit()] if visible else list(range(len(names)))
    used = [f"{i}: {names[i]}" if i < len(names) else f"{i}: not found" for i in indices[:tp * pp]]
    return {"tensor_parallel": tp, "pipeline_parallel": pp, "gpus": used}


def flat_settings(profile: Profile) -> dict[str, Any]:
    """Every setting a run with `profile` uses, one key each: the profile's own fields, then each
    stage's own settings as `stage.setting` (resolved for the profile), as JSON values."""
    out = profile.model_dump(mode="json", exclude={"stage_settings"})
    for name, stage in STAGES.items():
        own = stage.settings_for(profile)
        if own is not None:
            out.update({f"{name}.{k}": v for k, v in own.model_dump(mode="json").items()})
    return out


def profile_overrides(profile: Profile) -> dict[str, Any]:
    """Every setting of `profile` that differs from the profile of its name (the command line's
    --restarts, --reloads, --gate-requests ...), the profile's fields first, then the stages'."""
    base = PROFILES.get(profile.name)
    if base is None:
        return {}
    then = flat_settings(base)
    return {k: v for k, v in flat_settings(profile).items() if k != "name" and then.get(k) != v}


def invocation_of(plan: ArmPlan, stages: list[str], controls: list[str] | None,
                  command: list[str] | None, tags: dict[str, str] | None = None) -> Invocation:
    """What this arm's run was asked to do: the command line, the profile's overrides, the tags."""
    return Invocation(command=list(command) if command else None, overrides=profile_overrides(plan.profile),
                      stages=list(stages), controls=list(controls) if controls else None, tags=dict(tags or {}))


TAIL_LINES = 20


def _relative(path: Path | str | None, run_dir: Path) -> str | None:
    if path is None:
        return None
    try:
        return Path(path).resolve().relative_to(run_dir.resolve()).as_posix()
    except ValueError:
        return None


def _secrets_of(rt: RunningRuntime) -> tuple[str, ...]:
    return (rt.api_key,) if rt.api_key else ()


def failure_at_start(exc: RuntimeStartError, log_path: Path | None, run_dir: Path) -> RuntimeFailure:
    """A runtime that never got ready: how it failed, its error line and its log's tail."""
    from suite.launchers.base import exit_signal, log_tail

    after = exc.after_s
    signal_name = exit_signal(exc.returncode) if exc.returncode is not None else (
        (re.search(r"\bSIG[A-Z0-9]+\b", exc.ended or "") or [None])[0])
    if exc.refused:
        cause, what = "refused", "refused to start"
    elif exc.timed_out:
        cause, what = "timeout", f"not ready after {after or 0:.0f} s"
    elif exc.ended:
        cause = "signal" if signal_name else ("exit" if "exited with status" in exc.ended else "gone")
        what = exc.ended + (f" {after:.1f} s after start" if after is not None else " at start")
    else:
        cause, what = "gone", str(exc)
    status = exc.returncode if exc.returncode is not None and exc.returncode >= 0 else None
    return RuntimeFailure(what=what, cause=cause, signal=signal_name, exit_status=status,
                          after_s=None if after is None else round(after, 2), error_line=exc.error_line,
                          log_tail=log_tail(log_path, TAIL_LINES), log_file=_relative(log_path, run_dir))


def failure_in_stage(rt: RunningRuntime, where: str, stage: str, done: int | None, planned: int | None,
                     run_dir: Path) -> RuntimeFailure:
    """The arm's runtime ended on its own during (or before) a stage."""
    from suite.launchers.base import exit_signal, find_error_line, log_tail

    code = rt.exit_code()
    ended = rt.ended()
    signal_name = exit_signal(code) if code is not None else (
        (re.search(r"\bSIG[A-Z0-9]+\b", ended or "") or [None])[0])
    try:
        line = find_error_line(Path(rt.log_path).read_text(errors="replace"))
    except (OSError, TypeError):
        line = None
    cause = "signal" if signal_name else ("exit" if ended and "exited with status" in ended else "gone")
    return RuntimeFailure(what=f"{ended or 'stopped'} {where}", cause=cause, signal=signal_name,
                          exit_status=code if code is not None and code >= 0 else None, stage=stage,
                          requests_done=done, requests_planned=planned, error_line=line,
                          log_tail=log_tail(getattr(rt, "log_path", None), TAIL_LINES, _secrets_of(rt)),
                          log_file=_relative(getattr(rt, "log_path", None), run_dir))


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


@dataclass
class JudgeChoice:
    """The LLM judge of the extraction stage: any OpenAI-compatible endpoint and its model name."""

    url: str
    model: str


def resolve_judge(card: ModelCard, url: str | None, model: str | None) -> JudgeChoice | None:
    """The judge named on the command line, else the card's; None: gold scoring stands alone."""
    if url:
        if not url.startswith(("http://", "https://")):
            raise SuiteError(f"judge url {url!r}: must start with http:// or https://")
        return JudgeChoice(url, model or "judge")
    ref = card.judge
    if ref is None:
        return None
    if ref.url:
        return JudgeChoice(ref.url, model or ref.served_name or "judge")  # --judge-model first
    if ref.model:
        judge_card = get_card(ref.model)
        raise SuiteError(
            f"the judge {ref.model!r} is a model of the catalog: serve it first (`suite up "
            f"{ref.arm or next(iter(judge_card.arms))} --model {ref.model}`) and pass its address "
            "with --judge-url")
    return None


def run_arm(plan: ArmPlan, results: Path, stages: list[str], controls_request: list[str] | None = None,
            resume: bool = False, judge: JudgeChoice | None = None,
            on_stage: Callable[[str], None] | None = None, command: list[str] | None = None,
            on_result: Callable[[str], None] | None = None, tags: dict[str, str] | None = None) -> Summary:
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
                               invocation=invocation)
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
                 controls_request: list[str] | None = None, invocation: Invocation | None = None):
        self.plan, self.results, self.judge = plan, results, judge
        self.invocation = invocation or invocation_of(plan, [], controls_request, None)
        self.failure: RuntimeFailure | None = None  # how the runtime failed, when it did
        self.controls_request = list(controls_request or ["all"])
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
                               suite=self.record.manifest.suite or suite_build(), runtime=plan.runtime.name, launcher=plan.launcher.name, profile=plan.profile.name,
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
                                controls_request=self.controls_request, carried=self.carried)
        self._stack.callback(self.ctx.client.close)
        if self.judge is not None:
            from suite.stages.extraction.judge import client_for_url

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

    def _died(self, name: str, before: bool = False) -> "RuntimeDied":
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

    def __enter__(self) -> "BenchSession":
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
                    result = stage.run(ctx)
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
                log.info("arm %s: stage %s done in %.1f s", plan.arm_name, name, time.monotonic() - t0)
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


_PORT_FLAG = re.compile(r"port", re.IGNORECASE)


def _without_ports(command: list[str]) -> list[str]:
    """A command line with the port it listened on replaced (a free port is picked per launch)."""
    out: list[str] = []
    for i, arg in enumerate(command):
        flag, eq, _ = arg.partition("=")
        if eq and flag.startswith("-") and _PORT_FLAG.search(flag):
            out.append(f"{flag}=<port>")
        elif i and command[i - 1].startswith("-") and _PORT_FLAG.search(command[i - 1]) and arg.isdigit():
            out.append("<port>")
        else:
            out.append(arg)
    return out


def carried_parts(previous: RunRecord, done: set[str]) -> dict[str, Any]:
    """Per stage the interrupted run did not finish, what it had finished of it, rebuilt from its
    request lines where the stage can take its parts up (`Stage.rebuild` and `carries_line`)."""
    from types import SimpleNamespace

    before = SimpleNamespace(runtime=previous.manifest.runtime, arm=previous.manifest.arm,
                             **{n: previous.read_stage(n) for n in done})
    out: dict[str, Any] = {}
    for name, stage in STAGES.items():
        if name in done or stage.rebuild is None or stage.carries_line is None:
            continue
        lines = [q for q in read_requests(previous.dir, stage.exported_requests or (name,))
                 if getattr(q, "stage", None) == name]
        part = stage.rebuild(lines, before) if lines else None
        if part is not None:
            out[name] = part
    return out


def configuration_differences(manifest: RunManifest, signature: Signature, profile: Profile) -> list[str]:
    """What differs between a run's recorded configuration and a new launch's, one phrase each
    (empty: the run may be continued). Compared: the profile (name and settings) and every field
    of the signature (the suite version, runtime, model, command, env, controls, sampling,
    hardware...) but its digest, the compile-cache state, an external server's self-reports and
    the port."""
    out: list[str] = []
    if manifest.profile != profile.name:
        out.append(f"profile {manifest.profile} then, {profile.name} now")
    elif manifest.profile_settings is not None:
        now = flat_settings(profile)
        then = {k: v.get_default(call_default_factory=True) for k, v in Profile.model_fields.items()
                if not v.is_required()} | manifest.profile_settings  # a field added since: its default then
        then = json.loads(json.dumps(then, default=str))
        # a stage's own settings, one key each ("batch.trials"); a stage added since: its defaults then
        then_own = dict(then.pop("stage_settings", None) or {})
        then.update({k: v for k, v in flat_settings(profile.model_copy(update={"stage_settings": {}})).items()
                     if "." in k and k.split(".", 1)[0] not in then_own})
        then.update({f"{name}.{k}": v for name, values in then_own.items() for k, v in (values or {}).items()})
        keys = sorted(k for k in {*then, *now} if then.get(k) != now.get(k))
        if keys:
            out.append(f"profile settings {', '.join(keys)}")
    if manifest.signature is None:
        out.append("the run recorded no signature")
        return out
    volatile = {"digest", "compile_cache", "server_reports"}  # server_reports: an external server's
    # self-reports, which hold the time of the request (/v1/models "created") and its load
    then = manifest.signature.model_dump(mode="json", exclude=volatile)
    now_sig = signature.model_dump(mode="json", exclude=volatile)
    then["command"], now_sig["command"] = _without_ports(then["command"]), _without_ports(now_sig["command"])
    for key in sorted({*then, *now_sig}):
        if then.get(key) != now_sig.get(key):
            if key == "suite_version":
                out.append(f"suite version {then.get(key)} then, {now_sig.get(key)} now")
            else:
                out.append(f"signature field {key}")
    return out


class RuntimeDied(SuiteError):
    """The arm's runtime stopped on its own during a stage that needed it."""


class WatchdogTripped(SuiteError):
    def __init__(self, report: Any):
        super().__init__("stopped by the memory watchdog")
        self.report = report


def preflight(stages: list[str], profile: Profile, judge: JudgeChoice | None) -> None:
    """Every file the stages will read, loaded and checked before any runtime starts: a broken
    prompt file, document or judge rubric is one line now, not an hour into the bench."""
    for name in may_run(stages, profile):
        stage = get_stage(name)
        stage.settings_for(profile)  # a stage's own settings, checked (one line naming the key)
        if stage.inputs is not None:
            stage.inputs(profile)
    if judge is not None:
        from suite.stages.extraction.judge import load_rubric

        load_rubric()


def check_controls(plans: list[ArmPlan], controls: list[str] | None) -> None:
    """`--controls` names checked against every arm's runtime before anything starts: an unknown
    one is one line naming the option, the runtime and the controls it has."""
    from suite.stages.controls import LORA

    for name in controls or []:
        if name == "all":
            continue
        for plan in plans:
            runtime = plan.runtime
            try:
                if name == LORA:
                    if not runtime.capabilities.lora:
                        raise SuiteError(f"runtime {runtime.name!r} does not serve LoRA adapters")
                else:
                    runtime.control(name)
            except SuiteError as exc:
                raise SuiteError(f"--controls {name}: {exc} (arm {plan.arm_name})") from None


def probe_judge(judge: JudgeChoice, explicit_model: bool = True, timeout_s: float = 10.0) -> JudgeChoice:
    """The judge's endpoint asked for its models before any runtime starts: one that does not answer,
    refuses the key, is not an OpenAI-compatible API or does not serve the named model is one line.
    Without a model name, a judge serving exactly one model is asked for that one."""
    import httpx

    from suite.stages.extraction.judge import JUDGE_API_KEY_ENV
    from suite.launchers.external import model_list
    from suite.secrets import scrub

    shown = scrub(judge.url)
    root = judge.url.rstrip("/").removesuffix("/v1")
    key = os.environ.get(JUDGE_API_KEY_ENV)
    with httpx.Client(base_url=root, timeout=httpx.Timeout(timeout_s, connect=min(timeout_s, 5.0)),
                      follow_redirects=False, headers={"Authorization": f"Bearer {key}"} if key else {}) as http:
        _, listed = model_list(http, "--judge-url", shown, JUDGE_API_KEY_ENV, who="the judge")
    models = [m["id"] for m in listed]
    if explicit_model:
        if judge.model not in models:
            raise SuiteError(f"--judge-model {judge.model!r}: not served at {shown}; it lists: "
                             f"{', '.join(models) or 'no model'}")
        return judge
    if judge.model in models:
        return judge
    if len(models) == 1:
        return JudgeChoice(judge.url, models[0])
    raise SuiteError(f"--judge-url {shown} serves {len(models)} models ({', '.join(models) or 'none'}): "
                     "name one with --judge-model")


def run_bench(model: str | None, arms: list[str] | None = None, launcher: str = "auto", profile: str = "standard",
              stages: list[str] | None = None, results: Path | None = None, controls: list[str] | None = None,
              resume: bool = False, judge_url: str | None = None, judge_model: str | None = None,
              gate_requests: int | None = None, overrides: dict[str, Any] | None = None, url: str | None = None, served_model: str | None = None, tokenizer: str | None = None,
              on_arm: Callable[[Summary], None] | None = None, command: list[str] | None = None,
              retry_refused: bool = False, on_result: Callable[[str, str], None] | None = None,
              tags: dict[str, str] | None = None) -> list[Summary]:
    """Every arm of `model` (or, with `url`, the one server at that URL) through the stages.

    Each arm is prepared (runtime installed, model format made) just before it runs, never while
    another is measured; `on_arm(summary)` is called after each arm and `on_result(model, stage)`
    after each stage's result is written (the CLI rebuilds the site, so the first gate's page can be
    read while the rest runs).

    With `url` the server is checked first (it answers, speaks the OpenAI API, lists
    `served_model`): bad input is a SuiteError before anything is written. `model` then only
    names the synthetic card (None: "external").
    """
    from suite.paths import results_dir

    out = results or results_dir()
    if url is not None:
        if len(arms or []) > 1:
            raise SuiteError("--url benchmarks one server: give at most one name with --arms")
        plans = [plan_external(url, served_model, model, (arms or [None])[0], profile, gate_requests, tokenizer,
                               overrides)]
    elif served_model is not None:
        raise SuiteError("--served-model names a model of a server given with --url; without --url the card's "
                         "served name is used")
    else:
        plans = plan_arms(model or "tiny", arms, launcher, profile, gate_requests, overrides)
    judge = resolve_judge(plans[0].card, judge_url, judge_model) if plans else None
    for plan in plans:
        plan.retry_refused = retry_refused
    for profile in {plan.profile.model_dump_json(): plan.profile for plan in plans}.values():  # the arms share one
        preflight(stages or list(ORDER), profile, judge)
    check_controls(plans, controls)
    if judge is not None:
        judge = probe_judge(judge, explicit_model=judge_model is not None)
    if any(plan.launcher.starts_runtimes and plan.launcher.can_run for plan in plans):
        # What a suite killed with -9 left (a container, a runtime's workers) may hold the GPU:
        # end it before the GPU is checked, or the check refuses and the orphan stays.
        reap_orphans()
    summaries = []
    for plan in plans:
        # One runtime on the GPU at a time: a machine-wide lock and no other compute process;
        # after the arm, wait until device memory is back to its baseline (no-ops without a GPU).
        # A server the suite did not start holds its GPU already, and an arm that cannot run
        # here starts nothing: no lease for either.
        device = gpu.exclusive_device() if plan.launcher.starts_runtimes and plan.launcher.can_run else contextlib.nullcontext(
            gpu.DeviceLease(locked=False, reason=f"launcher {plan.launcher.name}"))
        with device as lease:
            done = (lambda stage, model=plan.card.name: on_result(model, stage)) if on_result is not None else None
            summaries.append(run_arm(plan, out, stages or list(ORDER), controls, resume, judge, command=command, tags=tags,
                                     on_result=done))
            if lease.locked:
                waited = gpu.wait_for_baseline(lease.baseline_bytes)
                if not waited.reached:
                    log.warning("arm %s: %s", plan.arm_name, waited.reason)
        if on_arm is not None:
            on_arm(summaries[-1])
    return summaries
