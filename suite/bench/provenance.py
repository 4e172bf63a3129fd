"""What an arm's run record says about how it ran: its signature, settings, invocation, and resumes.

`make_signature` is the configuration signature of a launch (model, runtime and its stack,
command, env, sampling, hardware); `flat_settings`, `profile_overrides` and `invocation_of` what
the run was asked (the profile's settings and the command line's overrides); `configuration_differences`
and `carried_parts` decide whether an interrupted run may be continued and what of it is kept.
"""

from __future__ import annotations

import json
import logging
import os
import re
from typing import Any

from suite import gpu
from suite.bench.plan import ArmPlan
from suite.catalog import format_dir, prepared_checksum
from suite.definitions import RuntimeDefinition  # noqa: F401 - the signature's runtime fields
from suite.hashing import prompt_set_hash, resolve_revision
from suite.launchers.base import LaunchSpec, RunningRuntime
from suite.probes import cache_dirs, cache_state
from suite.profiles import PROFILES, Profile
from suite.records import Invocation, RunManifest, RunRecord, read_requests
from suite.secrets import REDACTED, SECRET_NAME, redact_args, redact_env
from suite.signature import Signature, current_node
from suite.stages import STAGES

log = logging.getLogger(__name__)


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
        hardware=launcher.hardware(), machine=launcher.machine(), compile_cache=caches, node=current_node(),
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
        part = stage.rebuild(lines, before, previous.log_dir) if lines else None
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

