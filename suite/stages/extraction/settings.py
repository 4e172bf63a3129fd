"""The extraction stage's settings: `ExtractionSettings` (how many document sections, the repeats of
each, the answer cap, the judge's own repeated grading, and the LLM judge named by `--judge-url` and
`--judge-model`, which the judge's preflight checks), resolved per profile by `settings(profile)`,
with the stage's options of `suite bench` and the profiles' own values. The package's `STAGE` is
built from them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from pydantic import BaseModel, ConfigDict, Field

from suite.stages.base import StageOption

if TYPE_CHECKING:
    from suite.profiles import Profile


class ExtractionSettings(BaseModel):
    """The stage's settings: its defaults here, a profile's own values in `STAGE.profiles`."""

    model_config = ConfigDict(extra="forbid")

    sections: int = Field(default=8, ge=1)  # how many sections of prompts/extraction
    repeats: int = Field(default=3, ge=1)  # each section asked this many times
    max_tokens: int = Field(default=256, ge=1)
    judge_repeats: int = Field(default=5, ge=0)  # the judge's own gate: one grading repeated
    # The LLM judge (`--judge-url`, `--judge-model`; else the card's): checked by the stage's
    # preflight; not a setting of the measurement, so not in the run record's settings.
    judge_url: str | None = Field(default=None, exclude=True)
    judge_model: str | None = Field(default=None, exclude=True)


def settings(profile: Profile) -> ExtractionSettings:
    """This stage's settings for a profile (its values, then the run's own)."""
    from suite.stages.extraction import STAGE  # the package's record, built from this module: read when called

    return cast(ExtractionSettings, STAGE.settings_for(profile))


# Its options of `suite bench` (`Stage.options`), each setting one of `ExtractionSettings`.
OPTIONS: tuple[StageOption, ...] = (
    StageOption("--judge-url", "judge_url", "LLM judge: any OpenAI-compatible URL "
                "(key from SUITE_JUDGE_API_KEY)."),
    StageOption("--judge-model", "judge_model", "The judge's model name at that URL."))
# Per profile, the values that differ from `ExtractionSettings`' defaults (`Stage.profiles`).
PROFILES: dict[str, dict[str, Any]] = {"quick": {"sections": 3, "repeats": 2, "max_tokens": 160, "judge_repeats": 3},
                                       "full": {"sections": 48, "max_tokens": 384, "judge_repeats": 10}}
# The profile fields these settings were before they moved into the package (`Stage.profile_keys`).
PROFILE_KEYS: dict[str, str] = {"extraction_sections": "sections", "extraction_repeats": "repeats",
                                "extraction_max_tokens": "max_tokens", "judge_repeats": "judge_repeats"}
