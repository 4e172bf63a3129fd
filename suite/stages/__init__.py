"""The stage registry: every stage named once, in the order a bench runs them.

Each stage module ends with its `STAGE = Stage(...)` (suite/stages/base.py). `STAGES` maps the
name to it; the run record's summary, the records reader, the site and the export derive their
stage lists from here. A bench runs the stages with `in_bench` in this order (the gate first: its
verdict reaches the later stages through `ctx.reproducible`; restarts last among them, since it
stops and starts the runtime); the others run on request (batch composition, after the gate, where
the profile or `--batch-composition` asks for it).
"""

from __future__ import annotations

from suite.errors import SuiteError
from suite.stages import batch, controls, extraction, gate, latency, reloads, restarts, sessions
from suite.stages.base import FreshLaunch, LaunchFactory, Stage, StageContext

STAGES: dict[str, Stage] = {s.name: s for s in (
    gate.STAGE, batch.STAGE, latency.STAGE, extraction.STAGE, reloads.STAGE, restarts.STAGE, controls.STAGE, sessions.STAGE,
)}
ORDER: list[str] = [name for name, s in STAGES.items() if s.in_bench]  # a bench's stages


def get_stage(name: str) -> Stage:
    if name not in STAGES:
        raise SuiteError(f"unknown stage {name!r}; known: {', '.join(STAGES)}")
    return STAGES[name]


__all__ = ["STAGES", "ORDER", "Stage", "StageContext", "FreshLaunch", "LaunchFactory", "get_stage"]
