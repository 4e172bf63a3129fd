"""The stage registry and the context every stage runs with.

A stage is a module with `run(ctx: StageContext) -> pydantic.BaseModel` and `FRESH_RUNTIMES`
(True: it stops the arm's runtime and starts its own); its result is written to
`stages/<name>.json` of the run record and, at the end, under its key in `summary.json`. The
bench runs the stages in `ORDER` for every arm: the gate first (its verdict reaches the later
stages through `ctx.reproducible`), restarts last (it stops and starts the runtime again).
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, Callable, ContextManager

from suite.errors import SuiteError

if TYPE_CHECKING:
    from suite.catalog import Arm, ModelCard, Sampling
    from suite.client import OpenAIClient
    from suite.definitions import RuntimeDefinition
    from suite.launchers.base import RunningRuntime
    from suite.profiles import Profile
    from suite.records import RunRecord
    from suite.signature import Signature

log = logging.getLogger(__name__)

STAGES: dict[str, str] = {
    "gate": "suite.stages.gate",
    "latency": "suite.stages.latency",
    "extraction": "suite.stages.extraction",
    "restarts": "suite.stages.restarts",
    "controls": "suite.stages.controls",
    "sessions": "suite.stages.sessions",
    "reloads": "suite.stages.reloads",
}
ORDER = ["gate", "latency", "extraction", "restarts"]  # a bench's stages; controls and sessions on request


def get_stage(name: str) -> ModuleType:
    if name not in STAGES:
        raise SuiteError(f"unknown stage {name!r}; known: {', '.join(STAGES)}")
    return importlib.import_module(STAGES[name])


# A factory that starts a fresh runtime of the same configuration (optionally with extra
# controls) and yields it with a client; it is stopped when the block ends.
LaunchFactory = Callable[..., ContextManager[tuple["RunningRuntime", "OpenAIClient"]]]


@dataclass
class StageContext:
    card: "ModelCard"
    arm_name: str
    arm: "Arm"
    runtime: "RuntimeDefinition"
    profile: "Profile"
    sampling: "Sampling"
    signature: "Signature"
    record: "RunRecord"
    client: "OpenAIClient"
    running: "RunningRuntime"
    controls: list[str]  # controls active on the running runtime
    launch: LaunchFactory  # launch(controls=[...]) -> (runtime, client), fresh process/container
    extra_body: dict[str, Any] = field(default_factory=dict)  # per-request fields of the controls
    reproducible: bool | None = None  # the gate's verdict, once known
    results: dict[str, Any] = field(default_factory=dict)  # earlier stages' results, by name
    judge: "OpenAIClient | None" = None
    stage: str = ""  # the stage now running: every request line says which stage sent it

    @property
    def run_dir(self) -> Path:
        return self.record.dir

    @property
    def base_url(self) -> str:
        return self.client.base_url

    def record_request(self, kind: str, **fields: Any) -> None:
        self.record.record_request(kind, stage=self.stage, signature_digest=self.signature.digest, **fields)
