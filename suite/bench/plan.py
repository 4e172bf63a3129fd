"""An arm's plan: one arm of a card resolved against the catalog, the runtime definitions and a launcher.

`plan(request)` gives the plans of a `BenchRequest` (the card's arms, or the one server given with
`--url`), each with the request's profile (its stage settings resolved) and its `retry_refused`.
`plan_arms` and `plan_external` do the same from plain values (`suite up`, `suite setup`, tests).
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import ValidationError

from suite.catalog import Arm, ModelCard, arm_runtime, format_path, get_card
from suite.client import GenerationParams, OpenAIClient
from suite.definitions import OVERRIDE_ENV, RuntimeDefinition, get_definition
from suite.errors import SuiteError
from suite.launchers import launcher_for
from suite.launchers.base import Launcher, LaunchSpec, LoraAdapter, RunningRuntime
from suite.profiles import Profile, get_profile
from suite.stages import STAGES

if TYPE_CHECKING:
    from suite.bench.request import BenchRequest

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
        overrides: list[str] = []
        for name in [part for n in [*self.arm.controls, *controls] for part in self.runtime.parts(n)]:
            control = self.runtime.control(name)
            env.update(control.env)
            args.extend(control.args)
            refused.extend(control.refused_patterns)
            if control.override:
                overrides.append(control.override)
        env.update(self.arm.env)
        if overrides:  # the kernel overrides the suite's plugin applies at start-up, every one named
            env[OVERRIDE_ENV] = ",".join(dict.fromkeys([*filter(None, env.get(OVERRIDE_ENV, "").split(",")),
                                                        *overrides]))
        args.extend(self.arm.args)
        return LaunchSpec(runtime=self.runtime, model_path=self.model_path, served_name=self.card.served_name,
                          seed=self.card.sampling.seed, context_length=self.card.context_length,
                          controls=[*self.arm.controls, *controls], env=env, args=args, lora=self.lora,
                          log_path=log_path, startup_timeout_s=self.runtime.server.startup_timeout_s,
                          refused_patterns=refused)

    def extra_body(self, controls: list[str]) -> dict[str, Any]:
        body = dict(self.runtime.request.extra_body)
        for name in [part for n in [*self.arm.controls, *controls] for part in self.runtime.parts(n)]:
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


def plan(request: BenchRequest) -> list[ArmPlan]:
    """The plans of a request: the card's arms (or the one server at `request.url`), each with the
    request's profile and its `retry_refused`; bad input is one line."""
    if request.url is not None:
        if len(request.arms or ()) > 1:
            raise SuiteError("--url benchmarks one server: give at most one name with --arms")
        plans = [_external(request.url, request.served_model, request.model, (request.arms or (None,))[0],
                           request.profile, request.tokenizer)]
    elif request.served_model is not None:
        raise SuiteError("--served-model names a model of a server given with --url; without --url the card's "
                         "served name is used")
    else:
        plans = _card_arms(request.model or "tiny", request.arm_list, request.launcher, request.profile)
    for p in plans:
        p.retry_refused = request.retry_refused
    return plans


def plan_arms(model: str, arms: list[str] | None, launcher_name: str, profile_name: str,
              gate_requests: int | None = None, overrides: dict[str, Any] | None = None) -> list[ArmPlan]:
    """The plans of a card's arms (all of them, or `arms`) from plain values."""
    return _card_arms(model, arms, launcher_name, plan_arms_profile(profile_name, gate_requests, overrides))


def _card_arms(model: str, arms: list[str] | None, launcher_name: str, profile: Profile) -> list[ArmPlan]:
    card = get_card(model)
    if card.role == "judge" and not arms:
        log.info("model %s is a judge model; benchmarking it like any other", model)
    wanted = arms or list(card.arms)
    unknown = [a for a in wanted if a not in card.arms]
    if unknown:
        raise SuiteError(f"model {model!r} has no arm {unknown[0]!r}; known: {', '.join(card.arms)}")
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
    """One arm for a server the suite did not start, from plain values (see `_external`)."""
    return _external(url, served_model, model, arm_name, plan_arms_profile(profile_name, gate_requests, overrides),
                     tokenizer)


def _external(url: str, served_model: str | None, model: str | None, arm_name: str | None, profile: Profile,
              tokenizer: str | None = None) -> ArmPlan:
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
    fmt_kind: Literal["gguf", "hf"] = "gguf" if info.kind == "llamacpp" else "hf"
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
        resolved = {name: s.model_dump(mode="json") for name, stage in own.items()
                    if (s := stage.settings_for(profile)) is not None}
        profile = profile.model_copy(update={"stage_settings": resolved})
    return profile


# -- an arm's signature ---------------------------------------------------------------------------
