"""Benchmark profiles: how many requests each stage makes.

`quick` is for tests and CI (few requests, short answers), `standard` is the default of
`make bench`, `full` is the study's own numbers (20-request gate at each prompt's own length,
48 sections, 3 repeats).

`standard` keeps the design (20 identical requests per gate prompt, every prompt, 3 launches)
and shortens what costs time on a small CPU machine: every gate, restart and control answer is
capped at 64 tokens (a capped answer is counted as cut, so its verdict says it covers the first 64
tokens; every place where two answers parted in the example records, CPU and H200 alike, lies at
token 0-52), latency answers at 64 tokens, 10 latency requests, 8 extraction sections, and the
restarts keep their compile caches (study 3's other half, fresh caches, is in `full`). Measured on
a 2-core machine, 2026-12-02: the three CPU arms' standard bench took 40 minutes at a 128-token
cap with fresh caches (vLLM's CPU build alone 20, of which about 2 minutes per start-up and 48 s
of each compiling again); `full` restores the studies' numbers and runs both cache modes.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from suite.errors import SuiteError


class Profile(BaseModel):
    name: str
    gate_requests: int  # N identical requests per gate prompt
    gate_max_tokens: int | None  # a cap on every gate prompt's max_tokens; None: each prompt file's own
    gate_prompts: list[str] | None  # gate prompt ids; None: all of them
    restarts: int  # K launches of the same configuration
    restart_requests: int  # short gate per launch
    latency_requests: int
    latency_warmup: int
    latency_max_tokens: int
    concurrency: list[int]
    extraction_sections: int  # how many sections of prompts/extraction
    extraction_repeats: int
    extraction_max_tokens: int
    judge_repeats: int  # the judge's own gate: one grading repeated
    # When the gate finds more than one answer, run the arm's control matrix one control at a
    # time (the process of elimination) after the other stages.
    auto_controls: bool = True
    sessions: int = 8  # `suite study sessions`: independent server processes ...
    replicates: int = 3  # ... and runs of each gate prompt in each
    sessions_lora: bool = False  # ... to the base model and, in the same processes, to the test adapter
    restart_caches: Literal["fresh", "kept", "both"] = "fresh"  # compile/autotune caches per launch
    reloads: int = 0  # extraction repeated in this many fresh launches
    # The batch-composition stage (suite.stages.batch): run in the bench after the gate when True
    # (`--batch-composition`); trials per mode, the batch sizes they cycle through, the target prompt
    # (None: the first gate prompt).
    batch_composition: bool = False
    batch_trials: int = Field(default=5, ge=1)
    batch_sizes: list[Annotated[int, Field(ge=2)]] = Field(default_factory=lambda: [4, 8, 16], min_length=1)
    batch_prompt: str | None = None
    # The settings of stages that keep their own (`Stage.settings`, a stage added as a package), by
    # stage name: the run's resolved values, recorded with the rest of the profile.
    stage_settings: dict[str, dict[str, Any]] = Field(default_factory=dict)


PROFILES: dict[str, Profile] = {
    "quick": Profile(name="quick", gate_requests=5, gate_max_tokens=48, gate_prompts=["short-open"],
                     restarts=2, restart_requests=3, latency_requests=4, latency_warmup=1,
                     latency_max_tokens=32, concurrency=[1], extraction_sections=3,
                     extraction_repeats=2, extraction_max_tokens=160, judge_repeats=3,
                     auto_controls=False, sessions=2, replicates=3, batch_trials=2, batch_sizes=[3, 4]),
    "standard": Profile(name="standard", gate_requests=20, gate_max_tokens=64, gate_prompts=None,
                        restarts=3, restart_requests=5, latency_requests=10, latency_warmup=2,
                        latency_max_tokens=64, concurrency=[1], extraction_sections=8,
                        extraction_repeats=3, extraction_max_tokens=256, judge_repeats=5,
                        restart_caches="kept"),
    "full": Profile(name="full", gate_requests=20, gate_max_tokens=None, gate_prompts=None,
                    restarts=3, restart_requests=5, latency_requests=50, latency_warmup=3,
                    latency_max_tokens=256, concurrency=[1, 2, 4], extraction_sections=48,
                    extraction_repeats=3, extraction_max_tokens=384, judge_repeats=10,
                    batch_composition=True, batch_trials=8, batch_sizes=[8, 16, 32], restart_caches="both"),
}


def get_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise SuiteError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}")
    return PROFILES[name]
