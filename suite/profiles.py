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

A profile is a name, the settings every repeated-request stage shares (the gate's prompts,
requests and cap: the control matrix, the restarts, the sessions and batch composition send the
gate's prompts) and, under `stage_settings`, each stage's own: every stage keeps its settings in
its package (`Stage.settings`, with its values per profile name in `Stage.profiles`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from suite.errors import SuiteError


class Profile(BaseModel):
    name: str
    gate_requests: int  # N identical requests per gate prompt
    gate_max_tokens: int | None  # a cap on every gate prompt's max_tokens; None: each prompt file's own
    gate_prompts: list[str] | None  # gate prompt ids; None: all of them
    # The settings of the stages, which keep their own (`Stage.settings`, with their values per
    # profile in `Stage.profiles`), by stage name: the run's resolved values, recorded with the
    # rest of the profile; on the command line, the values the run gives, before they are resolved.
    stage_settings: dict[str, dict[str, Any]] = Field(default_factory=dict)


PROFILES: dict[str, Profile] = {
    "quick": Profile(name="quick", gate_requests=5, gate_max_tokens=48, gate_prompts=["short-open"]),
    "standard": Profile(name="standard", gate_requests=20, gate_max_tokens=64, gate_prompts=None),
    "full": Profile(name="full", gate_requests=20, gate_max_tokens=None, gate_prompts=None),
}


def get_profile(name: str) -> Profile:
    if name not in PROFILES:
        raise SuiteError(f"unknown profile {name!r}; known: {', '.join(PROFILES)}")
    return PROFILES[name]
