"""The start-up both drivers share: `prepare(request)`, before any runtime starts.

In order: the arms are planned (a card, arm or launcher that does not exist is one line); every
file the stages may read is loaded and checked (`preflight`: prompts, documents; a broken one is
one line now, not an hour into the bench); each stage's own `preflight` hook checks what it can
against the plans (control names against each arm's runtime, the judge's endpoint asked for its
models) and completes its settings (the judge resolved); then, where this process starts runtimes
itself, what a suite killed with -9 left behind (a container, a runtime's workers) is ended
(`launchers.reap_orphans`): the GPU check would otherwise refuse and the orphan stay. The local
bench runs all of it; the Ray driver all but the reaping, which each node does before its arm.
"""

from __future__ import annotations

from dataclasses import dataclass

from suite.bench.plan import ArmPlan, plan
from suite.bench.request import BenchRequest
from suite.launchers import reap_orphans
from suite.profiles import Profile
from suite.stages import STAGES, get_stage, may_run


@dataclass(frozen=True)
class Prepared:
    """A request after its start-up: the request as checked (stage settings completed) and its arms' plans."""

    request: BenchRequest
    plans: list[ArmPlan]


def preflight(stages: list[str], profile: Profile) -> None:
    """Every file the stages will read, loaded and checked before any runtime starts: a broken
    prompt file or document is one line now, not an hour into the bench."""
    for name in may_run(stages, profile):
        stage = get_stage(name)
        stage.settings_for(profile)  # a stage's own settings, checked (one line naming the key)
        if stage.inputs is not None:
            stage.inputs(profile)


def check_stages(request: BenchRequest, plans: list[ArmPlan]) -> BenchRequest:
    """Each stage's own preflight hook, for every stage with settings (in the run or not): the
    request with the settings they completed."""
    for name, stage in STAGES.items():
        own = request.settings_of(name)
        if stage.preflight is not None and own is not None:
            checked = stage.preflight(own, plans)
            if checked is not own:
                request = request.with_settings(name, checked)
    return request


def prepare(request: BenchRequest, *, reap: bool = True, checked: bool = False) -> Prepared:
    """Plan, check files and stage settings, and (with `reap`, where an arm starts runtimes here)
    end a killed suite's orphans: one line and nothing started when anything is wrong. `checked`:
    the stages' preflight hooks ran already (a Ray node, given the driver's checked request)."""
    plans = plan(request)
    for profile in {p.profile.model_dump_json(): p.profile for p in plans}.values():  # the arms share one
        preflight(request.stage_list, profile)
    if not checked:
        request = check_stages(request, plans)
    if reap and any(p.launcher.starts_runtimes and p.launcher.can_run for p in plans):
        # What a suite killed with -9 left (a container, a runtime's workers) may hold the GPU:
        # end it before the GPU is checked, or the check refuses and the orphan stays.
        reap_orphans()
    return Prepared(request, plans)


def check_controls(plans: list[ArmPlan], controls: list[str] | None) -> None:
    """Control names checked against every arm's runtime (`suite up --controls`): the controls
    stage's own preflight."""
    from suite.stages import controls as controls_stage

    if controls:
        controls_stage.preflight(controls_stage.ControlMatrixSettings(names=controls), plans)
