"""The stage registry: every stage named once, in the order a bench runs them.

Each stage module ends with its `STAGE = Stage(...)` (suite/stages/base.py). `STAGES` maps the
name to it; the run record's summary, the records reader, the site and the export derive their
stage lists from here. A bench runs the stages with `in_bench` in this order (the gate first: its
verdict reaches the later stages through `ctx.reproducible`; restarts last among them, since it
stops and starts the runtime); the others run on request, where each says (`Stage.when`, `after`,
`needs`, `on_verdict`): batch composition right after the gate where the profile or
`--batch-composition` asks for it, reloads right after extraction, the control matrix right after
the gate where `--controls` asks for it and at the end where the gate found more than one answer.
`place`, `schedule`, `added_on_verdict` and `may_run` read those fields for the bench and the
command line; no other module names a stage to place it.

A stage from another package joins with one line in that package's metadata, an entry point of
the group `suite.stages` naming its `Stage` (`probe = "mypackage.probe:STAGE"`; its `run` the
function, or "module:function" for one imported only when a bench runs it): its result in
the run record and summary, its request lines (`Stage.lines`), its export tables, its place in
the schedule, `--resume`, its section of the model page and of a run's page (`Stage.section`,
listed in the model page's table of contents in `page_sections` order) and its part of the first
screen (`Stage.first_screen`, as the built-in stages give theirs) all come from that record.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from suite.errors import SuiteError
from suite.stages import batch, controls, extraction, gate, latency, restarts, sessions
from suite.stages.base import FreshLaunch, LaunchFactory, SectionTemplate, Stage, StageContext
from suite.stages.extraction import reloads

if TYPE_CHECKING:
    from suite.profiles import Profile

BUILT_IN: tuple[Stage, ...] = (
    gate.STAGE, batch.STAGE, latency.STAGE, extraction.STAGE, reloads.STAGE, restarts.STAGE, controls.STAGE, sessions.STAGE,
)
ENTRY_POINT_GROUP = "suite.stages"
# Why an installed stage could not be added (one line each): the command line says them and exits
# 2 before anything runs (suite.cli.main).
LOAD_ERRORS: list[str] = []


def run_problem(stage: Stage) -> str | None:
    """What is wrong with a stage's `run` given as a name (not "module:function", or no such
    module), or None; the function itself is imported only when a bench runs the stage."""
    if not isinstance(stage.run, str):
        return None
    if not all(stage.run_parts):
        return f"its run {stage.run!r} is not \"module:function\""
    try:
        folder = stage.folder
    except SuiteError as exc:
        return str(exc)
    return None if folder.is_dir() else f"its run's module is not in a folder ({folder})"


def section_problem(stage: Stage) -> str | None:
    """What is wrong with a stage's own page section (its template is not in its folder, its view
    is not "module:function"), or None."""
    section = stage.section
    if not isinstance(section, SectionTemplate):
        return None
    if not (stage.folder / section.template).is_file():
        return f"its page section's template {section.template!r} is not in {stage.folder}"
    if not all(section.view_parts):
        return f"its page section's view {section.view!r} is not \"module:function\""
    return None


def screen_problem(stage: Stage) -> str | None:
    """What is wrong with a stage's first-screen part (its function is not "module:function"), or None."""
    part = stage.screen_part
    if part is not None and not all(part.part_parts):
        return f"its first-screen part {part.part!r} is not \"module:function\""
    return None


def _installed(taken: set[str]) -> list[Stage]:
    """Stages from installed packages: each entry point of the group `suite.stages` names a
    `Stage` ("package.module:STAGE"), added after the built-in ones in the order found."""
    from importlib.metadata import entry_points

    out: list[Stage] = []
    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        where = f"stage entry point {ep.name!r} ({ep.value})"
        try:
            obj = ep.load()
        except Exception as exc:  # noqa: BLE001 - a plugin's import error becomes one line
            LOAD_ERRORS.append(f"{where}: cannot load it: {type(exc).__name__}: {exc}")
            continue
        if not isinstance(obj, Stage):
            LOAD_ERRORS.append(f"{where}: not a suite.stages.base.Stage but a {type(obj).__name__}")
        elif obj.name in taken:
            LOAD_ERRORS.append(f"{where}: a stage named {obj.name!r} exists already")
        elif (problem := run_problem(obj) or section_problem(obj) or screen_problem(obj)) is not None:
            LOAD_ERRORS.append(f"{where}: {problem}")
        else:
            taken.add(obj.name)
            out.append(obj)
    return out


STAGES: dict[str, Stage] = {s.name: s for s in BUILT_IN}
STAGES.update((s.name, s) for s in _installed(set(STAGES)))


def with_stage_settings(settings: dict[str, Any]) -> dict[str, Any]:
    """A profile's settings (as a dict) with each stage's former profile fields
    (`Stage.profile_keys`: `restarts`, `batch_trials`, ...) moved under `stage_settings`, as that
    stage's own settings; values already there win. How a record written before the move reads."""
    out = dict(settings)
    own = {k: dict(v or {}) for k, v in (out.get("stage_settings") or {}).items()}
    for name, stage in STAGES.items():
        moved = {new: out.pop(old) for old, new in stage.profile_keys.items() if old in out}
        if moved:
            own[name] = moved | own.get(name, {})
    if own:
        out["stage_settings"] = own
    return out
ORDER: list[str] = [name for name, s in STAGES.items() if s.in_bench]  # a bench's stages
# The stages a results page is framed by: the one that gives the reproducibility verdict (the
# first figure of every arm), the one that writes latency lines (its timings and charts), and the
# extraction (its scores); the site finds them here, not by name.
VERDICT_STAGE: str = next(s.name for s in BUILT_IN if s.verdict is not None)
LATENCY_STAGE: str = latency.STAGE.name
EXTRACTION_STAGE: str = extraction.STAGE.name


# The places of a page a stage's own section may take, in the page's order (`SectionTemplate.slot`).
SLOTS: tuple[str, ...] = ("answers", "causes", "measures")


def page_sections() -> list[Stage]:
    """The stages with a section of their own (`SectionTemplate`), in the order a page shows them:
    by slot, then by `order` inside it, then in the registry's order. The pages place their stage
    sections, and list them in their table of contents, in this order."""
    own = [s for s in STAGES.values() if isinstance(s.section, SectionTemplate)]
    return sorted(own, key=lambda s: (SLOTS.index(s.section.slot), s.section.order))  # type: ignore[union-attr]


def get_stage(name: str) -> Stage:
    if name not in STAGES:
        raise SuiteError(f"unknown stage {name!r}; known: {', '.join(STAGES)}")
    return STAGES[name]


def place(stages: list[str], name: str) -> list[str]:
    """`stages` with stage `name` in its place where it is not among them already: right after its
    `after` stage (first, where that one is not in the run)."""
    out = list(stages)
    if name not in out:
        after = get_stage(name).after
        out.insert(out.index(after) + 1 if after in out else 0, name)
    return out


def schedule(stages: list[str], profile: Profile) -> list[str]:
    """The stages a run asked for, with those its profile adds before it starts, each in its place
    (`place`), where its `needs` are in the run."""
    out = list(stages)
    for stage in STAGES.values():
        if stage.on_verdict is not None or stage.name in out or not stage.may_run(profile):
            continue
        if all(need in out for need in stage.needs):
            out = place(out, stage.name)
    return out


def verdict_of(name: str, result: Any) -> tuple[bool, bool | None]:
    """Whether stage `name` gives the reproducibility verdict, and the verdict its result gives."""
    stage = STAGES.get(name)
    if stage is None or stage.verdict is None:
        return False, None
    return True, stage.verdict(result)


def added_on_verdict(stages: list[str], profile: Profile, verdict: bool | None) -> list[str]:
    """The stages a verdict adds at the end of a run (the control matrix, where the gate found more
    than one answer and the profile asks for it), those the run has not already."""
    if verdict is None:
        return []
    return [s.name for s in STAGES.values()
            if s.on_verdict is not None and s.on_verdict == verdict and s.name not in stages and s.may_run(profile)]


def may_run(stages: list[str], profile: Profile) -> list[str]:
    """Every stage a run of `stages` with `profile` may run: those asked for, then every stage the
    profile may add (whether or not the verdict or the stages it needs come): the preflight's list."""
    return list(dict.fromkeys([*stages, *(s.name for s in STAGES.values() if s.may_run(profile))]))


__all__ = ["STAGES", "ORDER", "SLOTS", "page_sections", "VERDICT_STAGE", "LATENCY_STAGE", "EXTRACTION_STAGE", "LOAD_ERRORS", "Stage", "StageContext",
           "FreshLaunch", "LaunchFactory", "get_stage", "place", "schedule", "verdict_of", "added_on_verdict", "may_run"]
