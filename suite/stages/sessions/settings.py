"""The sessions stage's settings: `SessionsSettings` (K server processes, R replicates of the prompt
set in each, and whether every replicate also asks the test adapter), resolved per profile by
`settings(profile)` from `suite study sessions --sessions K --replicates R [--lora]` and the
profiles' own values. The package's `STAGE` is built from them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict, Field

from suite.stages.gate_models import select_prompts

if TYPE_CHECKING:
    from suite.profiles import Profile


class SessionsSettings(BaseModel):
    """The stage's settings (`suite study sessions --sessions K --replicates R [--lora]`)."""

    model_config = ConfigDict(extra="forbid")

    sessions: int = Field(default=8, ge=1)  # independent server processes ...
    replicates: int = Field(default=3, ge=1)  # ... and runs of each gate prompt in each
    lora: bool = False  # ... to the base model and, in the same processes, to the test adapter


def settings(profile: Profile) -> SessionsSettings:
    """This stage's settings for a profile (its values, then the run's own)."""
    from suite.stages.sessions import STAGE  # the package's record, built from this module: read when called

    return cast(SessionsSettings, STAGE.settings_for(profile))


# Per profile, the values that differ from `SessionsSettings`' defaults (`Stage.profiles`).
PROFILES: dict[str, dict[str, Any]] = {"quick": {"sessions": 2}}
# The profile fields these settings were before they moved into the package (`Stage.profile_keys`).
PROFILE_KEYS: dict[str, str] = {"sessions": "sessions", "replicates": "replicates", "sessions_lora": "lora"}


def planned(profile: Profile) -> int:
    """Its requests for a profile: K x R passes over the gate prompts; with an adapter not known
    (0: the runtime may not serve one)."""
    own = settings(profile)
    return 0 if own.lora else own.sessions * own.replicates * len(select_prompts(profile.gate_prompts))
