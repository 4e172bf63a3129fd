"""The restarts stage's settings: `RestartsSettings` (how many launches, the short gate's requests
per prompt on each, and whether the launches' compile caches start fresh, are kept, or both),
resolved per profile by `settings(profile)`, with the stage's options of `suite bench`
(`--restarts`, `--restart-caches`) and the profiles' own values. The package's `STAGE` is built
from them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from suite.stages.base import StageOption
from suite.stages.gate_models import select_prompts

if TYPE_CHECKING:
    from suite.profiles import Profile


class RestartsSettings(BaseModel):
    """The stage's settings: its defaults here, a profile's own values in `STAGE.profiles`, a run's
    from `--restarts` and `--restart-caches`."""

    model_config = ConfigDict(extra="forbid")

    launches: int = Field(default=3, ge=2)  # K launches of the same configuration (6 or more: an interval)
    requests: int = Field(default=5, ge=1)  # the short gate per launch, per prompt
    caches: Literal["fresh", "kept", "both"] = "fresh"  # compile/autotune caches per launch


def settings(profile: Profile) -> RestartsSettings:
    """This stage's settings for a profile (its values, then the run's own)."""
    from suite.stages.restarts import STAGE  # the package's record, built from this module: read when called

    return cast(RestartsSettings, STAGE.settings_for(profile))


# Its options of `suite bench` (`Stage.options`), each setting one of `RestartsSettings`.
OPTIONS: tuple[StageOption, ...] = (
    StageOption("--restarts", "launches", "Launches of the restarts stage (default: the "
                "profile's; 6 or more give an interval).", kind="int", min=2),
    StageOption("--restart-caches", "caches", "fresh (every launch starts with empty compile "
                "caches), kept, or both.", kind="choice"))
# Per profile, the values that differ from `RestartsSettings`' defaults (`Stage.profiles`).
PROFILES: dict[str, dict[str, Any]] = {"quick": {"launches": 2, "requests": 3}, "standard": {"caches": "kept"}, "full": {"caches": "both"}}
# The profile fields these settings were before they moved into the package (`Stage.profile_keys`).
PROFILE_KEYS: dict[str, str] = {"restarts": "launches", "restart_requests": "requests", "restart_caches": "caches"}


def planned(profile: Profile) -> int:
    """Its requests for a profile: K launches x the short gate, twice where both cache modes run."""
    own = settings(profile)
    return own.launches * own.requests * len(select_prompts(profile.gate_prompts)) * (2 if own.caches == "both" else 1)
