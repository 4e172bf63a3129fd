"""The latency stage's settings: `LatencySettings` (measured requests per concurrency level, the
warm-up, the answer cap and the concurrency levels, each at most `MAX_CONCURRENCY`), resolved per
profile by `settings(profile)`, with the stage's options of `suite bench` (`--concurrency`,
`--latency-max-tokens`) and the profiles' own values. The package's `STAGE` is built from them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any, cast

from pydantic import BaseModel, ConfigDict, Field

from suite.stages.base import StageOption

if TYPE_CHECKING:
    from suite.profiles import Profile

MAX_CONCURRENCY = 256


class LatencySettings(BaseModel):
    """The stage's settings: its defaults here, a profile's own values in `STAGE.profiles`, a run's
    levels from `--concurrency`."""

    model_config = ConfigDict(extra="forbid")

    requests: int = Field(default=10, ge=1)  # measured requests per concurrency level (x the level)
    warmup: int = Field(default=2, ge=0)  # requests before them, not counted
    max_tokens: int = Field(default=64, ge=1)
    concurrency: list[Annotated[int, Field(ge=1, le=MAX_CONCURRENCY)]] = Field(default_factory=lambda: [1], min_length=1)


def settings(profile: Profile) -> LatencySettings:
    """This stage's settings for a profile (its values, then the run's own)."""
    from suite.stages.latency import STAGE  # the package's record, built from this module: read when called

    return cast(LatencySettings, STAGE.settings_for(profile))


# Its options of `suite bench` (`Stage.options`), each setting one of `LatencySettings`.
OPTIONS: tuple[StageOption, ...] = (
    StageOption("--concurrency", "concurrency", "Latency concurrency sweep, e.g. 1,2,4 "
                "(default: the profile's).", kind="ints"),
    StageOption("--latency-max-tokens", "max_tokens", "The latency stage's answer cap "
                "(default: the profile's).", kind="int", min=1))
# Per profile, the values that differ from `LatencySettings`' defaults (`Stage.profiles`).
PROFILES: dict[str, dict[str, Any]] = {"quick": {"requests": 4, "warmup": 1, "max_tokens": 32},
                                       "full": {"requests": 50, "warmup": 3, "max_tokens": 256, "concurrency": [1, 2, 4]}}
# The profile fields these settings were before they moved into the package (`Stage.profile_keys`).
PROFILE_KEYS: dict[str, str] = {"latency_requests": "requests", "latency_warmup": "warmup", "latency_max_tokens": "max_tokens",
                                "concurrency": "concurrency"}


def level_requests(requests: int, concurrency: int) -> int:
    """Measured requests of a level: the profile's count, and at least one per stream in flight."""
    return max(requests, concurrency)


def planned(profile: Profile) -> int:
    """Its requests for a profile: the warm-up, then each level's."""
    own = settings(profile)
    return own.warmup + sum(level_requests(own.requests, c) for c in own.concurrency)
